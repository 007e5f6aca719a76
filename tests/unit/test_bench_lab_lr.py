"""`python -m bench lab-lr`'s markdown (bench/lab_lr.py) and its place in BENCHMARKS.md (numpy only: no training)."""

from __future__ import annotations

from bench import common, report
from bench.lab_lr import TITLE, render


def _doc():
    at = {
        "steps": 300,
        "n_layers": 2,
        "d_model": 128,
        "batch_size": 16,
        "seq_len": 64,
        "corpus": "wiki-en",
        "date_utc": "2026-12-03T15:01:02+00:00",
        "machine": "test cpu, 2 cores, load 1.0",
        "unigram_entropy": 6.25,
    }
    return {
        "command": "python -m bench lab-lr",
        "entries": {
            "gpt2/adamw": {**at, "lr": 1e-3, "losses": {"0.0003": 6.39, "0.001": 5.70, "0.003": 5.94}, "seconds": 70.0},
            "gpt2/sgd": {**at, "lr": 3.0, "losses": {"0.1": 6.9, "1": 6.1, "3": 5.95, "0.3": None}, "seconds": 90.0},
        },
    }


def test_render_marks_the_pick_the_edge_and_a_diverged_rate():
    md = render(_doc())
    assert "| gpt2 | adamw | 0.0003, 0.001, 0.003 | 6.390 / **5.700** / 5.940 | 0.001 | 6.250 | 70 |" in md
    assert "| gpt2 | sgd | 0.1, 0.3, 1, 3 | 6.900 / diverged / 6.100 / **5.950** | 3 (edge of the range) |" in md
    assert "Each rate trained 300 steps at 2 layers x d=128, batch 16 x 64 tokens of wiki-en" in md


def test_the_section_survives_a_full_bench_rewrite(tmp_path):
    doc = tmp_path / "B.md"
    doc.write_text("# Benchmarks\n\nbody\n")
    common.publish(render(_doc()), "lab-lr", TITLE, doc)
    meta = {"command": "python -m bench", "machine": {}, "sizes": {}}
    rewritten = report.render_doc({"meta": meta, "sections": {}}, doc.read_text())
    assert "body" in rewritten and rewritten.count(common.markers("lab-lr")[1]) == 1 and "**5.700**" in rewritten
