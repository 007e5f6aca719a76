"""torchrun with two gloo processes gives the single-process run: same sums, same sample, same results.

Each case launches `core.compute.distributed.torchrun_command` (what the job queue launches) on a tiny
BERT and compares with `pipeline.analyze` in this process, on the same spec.
"""

import json
import subprocess
import textwrap

import numpy as np
import pytest
from foundation_helpers import ROOT, cli_env, make_documents, write_txt

from core.base.cache import CacheStore
from core.base.errors import Cancelled, InputError
from core.base.spec import RunSpec
from core.compute.analysis_jobs import job_analyze
from core.compute.distributed import job_torchrun, torchrun_command
from core.compute.extract import MAX_KEYS, SUM_KEYS
from core.compute.pipeline import analyze, run_key

pytestmark = pytest.mark.slow

TIMEOUT_S = 240  # a torchrun job of the tiny model takes ~10-40 s on a busy 2-core machine
SAMPLE_KEYS = ("n_sample", "sample_mean_cosine", "pc1_variance_ratio", "effective_rank", "isoscore",
               "partition_isotropy")


def _env():
    import torch

    # The same intra-op threads as this process: each batch's forward is then bitwise the same.
    return cli_env(OMP_NUM_THREADS=str(torch.get_num_threads()))


def _torchrun(spec, out, cache, script=None, nproc=2):
    cmd = torchrun_command(spec, nproc, out, cache_dir=cache)
    if script is not None:  # run a wrapper script instead of `-m core` (to inject a failure)
        i = cmd.index("-m", cmd.index(f"--nproc-per-node={nproc}"))
        cmd[i:i + 2] = [str(script)]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("dist")
    lengths = [int(n) for n in np.random.default_rng(3).integers(2, 80, size=25)]
    return write_txt(d / "docs.txt", make_documents(lengths, seed=3))


def _spec(model_dir, corpus, batch_size):
    return RunSpec(model=str(model_dir), corpus=str(corpus), max_seq_len=24, batch_size=batch_size, sample=100,
                   device="cpu", dtype="float32")


def _close(a, b, path=""):
    """Every float to 1e-9 relative, everything else equal (results.json trees)."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path


def _assert_two_ranks_equal_one(spec, one: dict, two: dict, cache_one, cache_two, extra_kinds=()) -> None:
    """The results.json of two gloo ranks equal one process's, and so do the stored statistics: sums to 1e-9,
    maxima and the sample bit for bit; rank 0 stored exactly one entry of each kind."""
    assert two["manifest"]["distributed"] == {"world_size": 2, "backend": "gloo"}
    assert two["manifest"]["cache_key"] == one["manifest"]["cache_key"]  # the same entry as a 1-process run
    _close(one["layers"], two["layers"])
    for a, b in zip(one["layers"], two["layers"]):
        assert [a[k] for k in SAMPLE_KEYS] == [b[k] for k in SAMPLE_KEYS]  # identical sample metrics
    for k in ("outliers", "frequency", "frequency_bins"):
        _close(one[k], two[k], k)
    key = run_key(spec, cache_two)
    got = CacheStore(cache_two).get(key)
    ref = CacheStore(cache_one).get(key)
    assert got is not None and ref is not None
    assert sorted(k.split(":")[0] for k in CacheStore(cache_two).keys()) == sorted(["results", "stats", *extra_kinds])
    A, B = ref[1], got[1]
    assert set(A) == set(B)
    for k in A:
        if k in SUM_KEYS:
            np.testing.assert_allclose(B[k], A[k], rtol=1e-9, atol=1e-12, err_msg=k)
        else:  # maxima, the sample, its metadata, norm parameters
            np.testing.assert_array_equal(B[k], A[k], err_msg=k)
    assert set(MAX_KEYS) <= set(A)
    assert got[0]["meta"]["sample_tokens"] == ref[0]["meta"]["sample_tokens"]
    assert got[0]["meta"]["sample_context"] == ref[0]["meta"]["sample_context"]


FAIL_WRAPPER = """
    import os, sys
    sys.path.insert(0, {root!r})
    import transformers.models.bert.modeling_bert as mb

    forward = mb.BertModel.forward

    def failing(self, *a, **kw):
        if os.environ["RANK"] == "1":
            raise RuntimeError("injected failure on rank 1")
        return forward(self, *a, **kw)

    mb.BertModel.forward = failing
    from core.entry.cli import main

    sys.exit(main())
"""


def test_a_failing_rank_fails_the_run_and_nothing_is_cached(tiny_bert_dir, corpus, tmp_path):
    script = tmp_path / "fail_rank1.py"
    script.write_text(textwrap.dedent(FAIL_WRAPPER.format(root=str(ROOT))))
    out = tmp_path / "results.json"
    p = _torchrun(_spec(tiny_bert_dir, corpus, 4), out, tmp_path / "cache", script=script)
    assert p.returncode != 0
    assert "error: rank 1 of 2 failed: RuntimeError: injected failure on rank 1" in p.stderr
    assert p.stderr.count("error: rank 1 of 2 failed") == 1  # said once, by rank 0
    assert not out.exists()
    assert CacheStore(tmp_path / "cache").keys() == []


def test_torchrun_jobs_run_and_cancel(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    """core.entry.jobs' torchrun path: a cancel stores nothing; the setting makes "analyze" and "attention" jobs
    torchrun jobs, and two gloo ranks store what one process computes."""
    for k, v in _env().items():
        monkeypatch.setenv(k, v)
    spec = _spec(tiny_bert_dir, corpus, 64)
    seen = []
    with pytest.raises(Cancelled):
        job_torchrun({"spec": spec.to_dict(), "nproc": 2, "cache_dir": str(tmp_path / "c1")}, seen.append, lambda: True)
    assert CacheStore(tmp_path / "c1").keys() == []
    assert seen[0].message == "torchrun: 2 processes"
    # The queue's "analyze" job under the setting ANISO_TORCHRUN_NPROC runs as a torchrun job.
    monkeypatch.setenv("ANISO_TORCHRUN_NPROC", "2")
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "c2"))
    got = job_analyze({"spec": spec.to_dict()}, lambda *a, **k: None, lambda: False)
    assert got["cache_key"] == run_key(spec, tmp_path / "c2") and got["cache_hit"]  # rank 0 stored it
    res = analyze(spec, cache_dir=tmp_path / "c2")
    assert res["manifest"]["cache_hit"] and res["manifest"]["distributed"]["world_size"] == 2
    # ... and it is one process's run: one padded batch, so rank 1 had no documents. (Uneven shards of many
    # padded batches: the attention test below, whose one launch checks the analysis and the attention
    # statistics of a causal model.)
    one = analyze(spec, cache_dir=tmp_path / "one")
    assert one["manifest"]["timing"]["n_batches"] <= 2 and one["manifest"]["timing"]["padding_fraction"] > 0
    _assert_two_ranks_equal_one(spec, one, res, tmp_path / "one", tmp_path / "c2")
    # The "attention" job under the setting: a torchrun job of `attention` computes and stores the section.
    from core.studies.attention import job_attention, run_attention

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "c3"))
    assert job_attention({"spec": spec.to_dict()}, lambda *a, **k: None, lambda: False)["blocks"] == 2
    sec = run_attention(spec, cache_dir=tmp_path / "c3")
    assert sec["cache_hit"] and sec["distributed"]["world_size"] == 2
    monkeypatch.setenv("ANISO_TORCHRUN_NPROC", "two")
    with pytest.raises(InputError, match="ANISO_TORCHRUN_NPROC must be a whole number of processes"):
        job_analyze({"spec": spec.to_dict()}, lambda *a, **k: None, lambda: False)


def _strip(section: dict) -> dict:
    """An attention section without what depends on how it was run (timing, cache hit, ranks)."""
    return {k: v for k, v in section.items() if k not in ("timing", "cache_hit", "distributed")}


def test_attention_two_gloo_ranks_equal_one_process(tiny_llama_dir, corpus, tmp_path):
    """The statistics and the attention sums of two ranks (uneven shards of many padded batches, a causal model)
    add up to one process's: `analyze --attention` under torchrun (`attention` runs the same two calls)."""
    from core.studies.attention import run_attention

    spec = _spec(tiny_llama_dir, corpus, 4)
    ref = analyze(spec, cache_dir=tmp_path / "one")
    assert ref["manifest"]["timing"]["n_batches"] > 2 and ref["manifest"]["timing"]["padding_fraction"] > 0
    one = run_attention(spec, cache_dir=tmp_path / "one")
    assert not one["cache_hit"] and one["layers"][0]["n_queries"] > 0

    out = tmp_path / "out.json"
    cmd = torchrun_command(spec, 2, out, cache_dir=tmp_path / "two")
    cmd.append("--attention")
    p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(out.read_text())
    _assert_two_ranks_equal_one(spec, ref, got, tmp_path / "one", tmp_path / "two", extra_kinds=("attention",))
    two = got["attention"]
    assert two["distributed"] == {"world_size": 2, "backend": "gloo"} and not two["cache_hit"]
    _close(_strip(one), _strip(two))
    # Rank 0 alone stored: one statistics, one results and one attention entry (above); rank 1 said nothing.
    assert p.stderr.count(f" -> {out}") == 1


def test_series_under_torchrun_equals_one_process(corpus, tmp_path, monkeypatch):
    """Every checkpoint of a series analysed by two gloo ranks equals its one-process analysis."""
    import shutil

    from core.studies import series
    from core.studies.train_spec import TrainSpec
    from core.studies.training import train

    one, two = tmp_path / "one", tmp_path / "two"
    monkeypatch.setenv("ANISO_CACHE_DIR", str(one))
    train(TrainSpec(corpus=str(corpus), n_layers=1, d_model=16, n_heads=2, seq_len=16, batch_size=4, steps=2,
                    vocab_size=512, eval_tokens=256, device="cpu", name="dist-series"), cache_dir=one)
    shutil.copytree(one / "trained", two / "trained")  # the same checkpoints, a cache without results
    kw = dict(max_tokens=600, sample=100, batch_size=4, device="cpu", dtype="float32")
    ref = series.analyze_series("dist-series", cache_dir=one, **kw)
    assert ref["steps"] == [0, 1, 2]

    # The queue's "series" job under the setting runs `torchrun ... -m core series --training R ...`.
    for k, v in _env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("ANISO_CACHE_DIR", str(two))
    monkeypatch.setenv("ANISO_TORCHRUN_NPROC", "2")
    seen = []
    assert series.job_series({"run": "dist-series", "kw": kw}, seen.append, lambda: False)["steps"] == [0, 1, 2]
    assert seen[0].message == "torchrun: 2 processes"
    got = series.analyze_series("dist-series", cache_dir=two, **kw)  # read back: every checkpoint is a cache hit
    assert all(r["manifest"]["cache_hit"] for r in got["results"])
    for a, b in zip(ref["results"], got["results"]):
        assert b["manifest"]["distributed"] == {"world_size": 2, "backend": "gloo"}
        assert a["manifest"]["cache_key"] == b["manifest"]["cache_key"]
        _close(a["layers"], b["layers"])
        for k in ("outliers", "frequency", "frequency_bins"):
            _close(a[k], b[k], k)
    for a, b in zip(ref["attention"], got["attention"]):  # each checkpoint's query/key drift statistics too
        assert b["distributed"] == {"world_size": 2, "backend": "gloo"}
        for row_a, row_b in zip(a["layers"], b["layers"]):
            for k in ("q_drift", "k_drift", "cos_mu_qk", "entropy"):
                _close(row_a[k], row_b[k], k)
    # Rank 0 stored one statistics, one results and one attention entry per checkpoint.
    kinds = [k.split(":")[0] for k in CacheStore(two).keys()]
    assert sorted(kinds) == ["attention"] * 3 + ["results"] * 3 + ["stats"] * 3
