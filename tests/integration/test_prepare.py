"""One run preparation (core/compute/prepare.py): every path that runs a model reads a Latin-1 corpus in the
spec's encoding and plans the same windows."""

import socket

import numpy as np
import pytest

import core.compute.prepare as P
from core.base.spec import RunSpec

DOCS = ["Café crème brûlée à la française, déjà vu. " * 6, "Straße, Maß und Fuß: größer, süßer. " * 5,
        "Noël à Zürich: façade, naïve, señor, Ærø. " * 4, "Garçon, où est l'hôtel? Très élégant. " * 5]


@pytest.fixture()
def latin1(tmp_path):
    p = tmp_path / "latin1.txt"
    p.write_bytes("\n\n".join(DOCS).encode("latin-1"))
    return p


@pytest.fixture()
def planned(monkeypatch):
    """Every (documents, windows) that prepare() planned, in order."""
    seen = []
    real = P.tokenize_budget

    def spy(documents, *a, **kw):
        w = real(documents, *a, **kw)
        seen.append((list(documents), w, kw.get("start")))
        return w

    monkeypatch.setattr(P, "tokenize_budget", spy)
    return seen


def _same(a, b) -> bool:
    return len(a.ids) == len(b.ids) and all(np.array_equal(x, y) for x, y in zip(a.ids, b.ids)) \
        and list(a.doc) == list(b.doc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_latin1_corpus_gives_the_same_windows_in_every_path(tiny_llama_dir, latin1, tmp_path, planned, monkeypatch):
    from core.compute import pipeline
    from core.studies import attention

    spec = RunSpec(model=str(tiny_llama_dir), corpus=str(latin1), encoding="latin-1", max_tokens=300,
                   max_seq_len=32, sample=64, device="cpu", dtype="float32")
    cache = tmp_path / "cache"
    paths = {}
    n = len(planned)
    res = pipeline.analyze(spec, cache)  # the analysis
    paths["analyze"] = planned[n:]
    n = len(planned)
    attention.run_attention(spec, cache, n_random=2)  # the attention pass
    paths["attention"] = planned[n:]
    n = len(planned)
    maps = attention.attention_maps(spec, 0, cache, max_tokens=16)  # the viewer
    paths["viewer"] = planned[n:]
    n = len(planned)
    abl = pipeline.run_ablation(spec, dims=[1, 2], n_random=1, held_out_tokens=64, cache_dir=cache)  # the ablation
    paths["ablation"] = [p for p in planned[n:] if p[2] is None]
    assert abl["held_out_tokens"] > 0
    n = len(planned)
    memo: dict = {}  # a series: the corpus read once, the windows planned once
    pipeline.analyze(spec, tmp_path / "cache2", memo=memo)
    attention.run_attention(spec, tmp_path / "cache2", n_random=2, memo=memo)
    paths["series"] = planned[n:]
    assert len(paths["series"]) == 1

    # the distributed path: a torchrun group of one process (gloo)
    from core.compute.ranks import init_group

    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(k, v)
    group = init_group("cpu")
    try:
        n = len(planned)
        pipeline.analyze(spec, tmp_path / "cache3", group=group)
        paths["distributed"] = planned[n:]
    finally:
        group.close()

    ref_docs, ref_windows, _ = paths["analyze"][0]
    assert ref_docs == [d.strip() for d in DOCS]  # decoded as Latin-1: é, ß, ü... intact
    for name, got in paths.items():
        assert got, f"{name} did not plan windows through prepare()"
        for docs, windows, _ in got:
            assert docs == ref_docs, name
            assert _same(windows, ref_windows), name
    assert res["manifest"]["corpus"]["n_windows"] == len(ref_windows.ids)
    assert "é" in maps["doc_start"] or "ß" in maps["doc_start"] or "ë" in maps["doc_start"]


def test_a_first_run_reports_each_step(tiny_llama_dir, latin1, tmp_path):
    """Issue 28 item 6: the documents read, the model loaded, the windows tokenized, then the tokens, each its
    own line of the job panel (the bar was empty while the corpus was read and the model loaded)."""
    from core.base.progress import Stage
    from core.compute import pipeline
    from ui.jobs_panel import progress_text

    spec = RunSpec(model=str(tiny_llama_dir), corpus=str(latin1), encoding="latin-1", max_tokens=300,
                   max_seq_len=32, sample=64, device="cpu", dtype="float32")
    seen = []
    pipeline.analyze(spec, tmp_path / "cache", progress=seen.append)
    stages = [p.stage for p in seen]
    firsts = [s for i, s in enumerate(stages) if s not in stages[:i]]
    assert firsts[:4] == [Stage.READ, Stage.LOAD, Stage.TOKENIZE, Stage.FORWARD], firsts
    read = [p for p in seen if p.stage is Stage.READ]
    assert read[-1].done == read[-1].total == len(DOCS) and read[-1].fraction == 1.0

    class Job:
        status, cancel_requested, message = "running", False, ""

    lines = []
    for p in seen:
        Job.progress = p
        lines.append(progress_text(Job))
    assert lines[0].startswith("Step 1 of 5 · reading the corpus")
    assert any(t.startswith("Step 1 of 5 · 4 documents read") for t in lines)
    assert any(t.startswith("Step 2 of 5 · ") for t in lines) and any(t.startswith("Step 3 of 5 · ") for t in lines)
    assert any(t.startswith("Step 4 of 5 · forward pass: ") for t in lines)
    # the metrics after the pass: a step of their own, a bar filling layer by layer (it stood full, unlabelled)
    metrics = [(p, t) for p, t in zip(seen, lines) if p.stage is Stage.METRICS]
    assert metrics and all(t.startswith("Step 5 of 5 · per-layer metrics: ") for _, t in metrics), metrics[:3]
    fill = [p.fraction for p, _ in metrics]
    assert fill[0] < 1.0 and fill == sorted(fill) and fill[-1] == 1.0, fill
