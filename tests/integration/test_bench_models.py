"""The benchmark's helpers that run a tiny random model (no timing assertions; the numpy-only ones
are in tests/unit/test_bench_smoke.py): the naive peer against the tool's exact mean cosine on a tiny
random BERT, the bare forward, and the GPU section's code path run on the CPU with tiny configs.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.common import bare_forward, machine_info, subset_windows
from bench.peers import run_peer

DOCS = ["The cat sat on the mat. It was a sunny day and the cat was happy.",
        "Transformers produce anisotropic hidden states; the mean cosine is high.",
        "Paris is the capital of France. It lies on the Seine.",
        "A short one.",
        "Numbers like 3.14 and 2.71 appear in mathematics, physics and engineering texts alike."] * 3


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir):
    from core.inputs.corpora import tokenize_budget
    from core.inputs.models import load_model

    lm = load_model(str(tiny_bert_dir), device="cpu", dtype="float32")
    w = tokenize_budget(DOCS, lm.tokenizer, 200, 32, 0, "test")
    return lm, w


def test_peer_matches_the_tools_exact_mean_cosine(tiny):
    from core.compute.extract import analysed_masks, extract_stats
    from core.stats import kernels as M

    lm, w = tiny
    analysed = analysed_masks(w, "exclude")
    arrays, _ = extract_stats(lm.base, w, batch_size=4, sample_size=50, pad_id=int(lm.tokenizer.pad_token_id or 0))
    exact = [M.mean_cosine(arrays["group_sum_u"][l].sum(0), int(arrays["n"])) for l in range(arrays["sum_abs"].shape[0])]
    allp = run_peer(lm.base, w, analysed, "allpairs")
    samp = run_peer(lm.base, w, analysed, "sampled", n_pairs=500)
    assert allp["n_tokens"] == int(arrays["n"]) == samp["n_tokens"]
    np.testing.assert_allclose(allp["mean_cosine"], exact, atol=1e-5)
    assert len(samp["mean_cosine"]) == len(exact)
    with pytest.raises(ValueError):
        run_peer(lm.base, w, analysed, "bogus")


def test_bare_forward_and_window_helpers(tiny):
    from core.compute.extract import plan_batches
    from core.stats.batching import pad_batch

    lm, w = tiny
    sub = subset_windows(w, 40)
    assert 40 <= sub.n_content_tokens <= w.n_content_tokens and len(sub.ids) <= len(w.ids)
    b = plan_batches(sub, 4)
    ids, att = pad_batch([sub.ids[i] for i in b[0]], 0)
    assert ids.shape == att.shape and att.sum() == sum(len(sub.ids[i]) for i in b[0])
    assert bare_forward(lm.base, sub, b, 0) > 0


def test_gpu_section_code_path_on_cpu(tiny_bert_dir):
    import transformers as tf

    from bench.gpu import cuda_refusal, peak_tflops, section_gpu

    cfg = tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128)
    g = section_gpu("cpu", "float32", tokens=100, batch_size=4, reps=1, configs={"tiny BERT": ("bert", cfg)})
    row = g["models"][0]
    assert row["status"] == "ok" and row["ratio"] > 0 and row["tflops"] > 0
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0 and peak_tflops("NVIDIA H200") == 989.0
    import torch

    if not torch.cuda.is_available():
        assert "CUDA" in cuda_refusal()
        from bench.__main__ import main

        assert main(["--device", "cuda", "--out", "/nonexistent/never-written.md"]) == 2


def test_quick_sizes_are_small_and_machine_info():
    from bench.sections import make_sizes

    (q, _), (f, _) = make_sizes(quick=True), make_sizes()
    assert max(q.peer_tokens) < min(f.peer_tokens) and q.smollm_tokens < f.smollm_tokens
    info = machine_info()
    assert info["logical_cores"] >= 1 and "torch" in info["versions"]


@pytest.mark.slow
def test_quick_sections_measure_and_format_their_own_figures(tmp_path):
    """Since each section formats its figures where it measures them (bench.report.blocks renders them), a section's
    formatting runs only in a benchmark run: two cheap sections at --quick sizes, through the real command."""
    import json
    import subprocess
    import sys

    from bench import common

    out = tmp_path / "q.json"
    p = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "batching,memory", "--json", str(out)],
                       cwd=common.ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    for name in ("run", "batching", "memory"):
        start, end = common.markers(name)
        assert p.stdout.count(start) == p.stdout.count(end) == 1, name
    assert "Peak RSS" in p.stdout and "| Figure | Goal | Measured | Status |" in p.stdout
    sections = json.loads(out.read_text())["sections"]
    assert set(sections) == {"batching", "memory"} and not any("section_error" in s for s in sections.values())
