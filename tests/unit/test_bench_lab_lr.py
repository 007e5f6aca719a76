"""`python -m bench lab-lr`'s markdown (bench/lab_lr.py) and its place in BENCHMARKS.md (numpy only: no training)."""

from __future__ import annotations

from bench import common
from bench.__main__ import KEPT
from bench.lab_lr import END, START, render


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
    assert md.startswith(START) and md.endswith(END)
    assert "| gpt2 | adamw | 0.0003, 0.001, 0.003 | 6.390 / **5.700** / 5.940 | 0.001 | 6.250 | 70 |" in md
    assert "| gpt2 | sgd | 0.1, 0.3, 1, 3 | 6.900 / diverged / 6.100 / **5.950** | 3 (edge of the range) |" in md
    assert "after 300 steps at 2 layers x d=128, batch 16 x 64 tokens of wiki-en" in md


def test_the_section_survives_a_full_bench_rewrite(tmp_path):
    assert (START, END) in KEPT
    doc = tmp_path / "B.md"
    doc.write_text("# Benchmarks\n\nbody\n")
    common.write_section(render(_doc()), doc, START, END)
    rewritten = common.keep_section(doc.read_text(), "# Benchmarks\n\nnew body\n", START, END)
    assert "new body" in rewritten and rewritten.count(END) == 1 and "**5.700**" in rewritten
