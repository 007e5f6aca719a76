"""The cache: hits without torch, corrupted entries recomputed and reported, one computation per spec."""

import io
import json
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from foundation_helpers import ROOT, cli_cmd, cli_env, run_cli

import core.compute.pipeline as pipeline
from core.base.cache import MAGIC, get_store
from core.base.errors import Cancelled
from core.base.spec import RunSpec
from core.compute.pipeline import analyze, get_stats, is_cached, results_key
from tests.internals import raw_set


def _spec(model_dir, corpus, **kw):
    return RunSpec(**{"model": str(model_dir), "corpus": str(corpus), "max_tokens": 500, "max_seq_len": 32,
                      "sample": 80, "device": "cpu", **kw})


def _cli_args(model_dir, corpus, cache, out):
    return ("analyze", "--model", model_dir, "--corpus", corpus, "--max-tokens", 500, "--max-seq-len", 32,
            "--sample", 80, "--device", "cpu", "--cache-dir", cache, "--out", out, "--quiet")


def test_second_cli_run_is_a_hit_without_torch(tmp_path, tiny_bert_dir, varied_txt):
    cache = tmp_path / "cache"
    first = run_cli(*_cli_args(tiny_bert_dir, varied_txt, cache, tmp_path / "a.json"))
    assert first.returncode == 0, first.stderr
    assert "(computed," in first.stderr
    second = run_cli(*_cli_args(tiny_bert_dir, varied_txt, cache, tmp_path / "b.json"))
    assert second.returncode == 0, second.stderr
    assert "(cache hit," in second.stderr
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["layers"] == b["layers"]
    assert a["manifest"]["cache_key"] == b["manifest"]["cache_key"]
    assert a["manifest"]["cache_hit"] is False and b["manifest"]["cache_hit"] is True

    code = textwrap.dedent(f"""
        import sys
        from core.compute.pipeline import analyze, get_stats
        from core.base.spec import RunSpec
        spec = RunSpec(model={str(tiny_bert_dir)!r}, corpus={str(varied_txt)!r}, max_tokens=500, max_seq_len=32,
                       sample=80, device="cpu")
        res = analyze(spec, cache_dir={str(cache)!r})
        stats = get_stats(spec, cache_dir={str(cache)!r})
        assert res["manifest"]["cache_hit"] is True and stats.cached
        assert stats.arrays["sample"].shape[1] == 80
        assert "torch" not in sys.modules, "a cache hit imported torch"
        assert "transformers" not in sys.modules, "a cache hit imported transformers"
        print("HIT-WITHOUT-TORCH", len(res["layers"]))
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["HIT-WITHOUT-TORCH", "3"]


def test_spec_key_follows_every_input(tmp_path, cache_dir, tiny_bert_dir, varied_txt):
    spec = _spec(tiny_bert_dir, varied_txt)
    get_stats(spec, cache_dir)
    assert is_cached(spec, cache_dir)
    for change in ({"seed": 1}, {"sample": 81}, {"max_tokens": 501}, {"special_tokens": "include"},
                   {"batch_size": 3}, {"max_seq_len": 33}):
        assert not is_cached(spec.replace(**change), cache_dir), change
    # the corpus fingerprint is part of the key: the same path with other content misses
    copy = tmp_path / "copy.txt"
    copy.write_text(varied_txt.read_text())
    get_stats(_spec(tiny_bert_dir, copy), cache_dir)
    copy.write_text(varied_txt.read_text() + "\n\none more document\n")
    assert not is_cached(_spec(tiny_bert_dir, copy), cache_dir)


def _arrays_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("damage", ["garbage", "flipped byte", "truncated"])
def test_corrupted_stats_entry_is_reported_and_recomputed(tmp_path, tiny_bert_dir, varied_txt, damage):
    cache = tmp_path / "cache"
    spec = _spec(tiny_bert_dir, varied_txt)
    before = analyze(spec, cache)
    stats0 = get_stats(spec, cache)
    assert stats0.cached
    store = get_store(cache)
    blob = store._dc.get(stats0.key)
    assert blob.startswith(MAGIC)
    if damage == "garbage":
        bad = b"this is not a cache entry"
    elif damage == "flipped byte":
        i = len(blob) // 2
        bad = blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1:]
    else:
        bad = blob[: len(blob) - 100]
    raw_set(store, stats0.key, bad)

    # The small results entry is intact: analyze serves it without reading the statistics.
    assert analyze(spec, cache)["layers"] == before["layers"]
    stats1 = get_stats(spec, cache)
    assert len(stats1.events) == 1 and "corrupted" in stats1.events[0] and stats0.key[:16] in stats1.events[0]
    assert stats1.cached is False  # recomputed
    _arrays_equal(stats1.arrays, stats0.arrays)
    stats2 = get_stats(spec, cache)
    assert stats2.cached and not stats2.events  # the recomputed entry is sound again
    # Both entries damaged: analyze reports it in the manifest and recomputes the same numbers.
    raw_set(store, stats0.key, bad)
    raw_set(store, results_key(spec, cache), bad)
    after = analyze(spec, cache)
    events = after["manifest"]["cache_events"]
    assert len(events) == 2 and all("corrupted" in e for e in events)
    assert after["manifest"]["cache_hit"] is False
    assert after["layers"] == before["layers"]


def test_corrupted_results_entry_is_reported_and_recomputed(tmp_path, tiny_bert_dir, varied_txt):
    cache = tmp_path / "cache"
    spec = _spec(tiny_bert_dir, varied_txt)
    before = analyze(spec, cache)
    store = get_store(cache)
    key = results_key(spec, cache)
    assert key.endswith(before["manifest"]["cache_key"])
    assert store.get_json(key) is not None
    raw_set(store, key, b"\x00garbage")
    after = analyze(spec, cache)
    assert after["manifest"]["cache_hit"] is True  # the statistics were fine
    assert any("corrupted" in e for e in after["manifest"]["cache_events"])
    assert after["layers"] == before["layers"]
    assert store.get_json(key) is not None  # rewritten
    assert "cache_events" not in analyze(spec, cache)["manifest"]


def test_entries_hold_no_pickle(cache_dir, tiny_bert_dir, varied_txt):
    stats = get_stats(_spec(tiny_bert_dir, varied_txt), cache_dir)
    blob = get_store(cache_dir)._dc.get(stats.key)
    payload = blob[len(MAGIC) + 32:]
    n = int.from_bytes(payload[:4], "little")
    with np.load(io.BytesIO(payload[4 + n:]), allow_pickle=False) as z:
        assert {k: z[k].dtype.kind for k in z.files if z[k].dtype.kind == "O"} == {}
        assert "sample" in z.files and "sum_abs" in z.files


def test_cancelled_run_stores_nothing(tmp_path, tiny_bert_dir, varied_txt):
    spec = _spec(tiny_bert_dir, varied_txt)
    with pytest.raises(Cancelled):
        get_stats(spec, tmp_path / "cache", cancel=lambda: True)
    assert not is_cached(spec, tmp_path / "cache")


def test_concurrent_requests_compute_once_threads(tmp_path, tiny_bert_dir, varied_txt, monkeypatch):
    """Two callers at once: the second waits on the per-key lock and gets the first one's entry."""
    calls = []
    real = pipeline._compute

    def slow_compute(*a, **kw):
        calls.append(threading.get_ident())
        time.sleep(1.0)  # long enough for the other caller to arrive and block
        return real(*a, **kw)

    monkeypatch.setattr(pipeline, "_compute", slow_compute)
    spec = _spec(tiny_bert_dir, varied_txt)
    cache = tmp_path / "cache"
    get_store(cache)  # one store object, as in a server process
    results = [None, None]

    def worker(i):
        results[i] = get_stats(spec, cache)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(calls) == 1
    assert sorted(r.cached for r in results) == [False, True]
    _arrays_equal(results[0].arrays, results[1].arrays)


def test_concurrent_cli_processes_compute_once(tmp_path, tiny_bert_dir, varied_txt):
    cache = tmp_path / "cache"
    procs = [subprocess.Popen(cli_cmd(*_cli_args(tiny_bert_dir, varied_txt, cache, tmp_path / f"{i}.json")),
                              cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    outcomes = sorted("computed" if "(computed," in e else "hit" if "(cache hit," in e else e for e in errs)
    assert outcomes == ["computed", "hit"]
    a, b = (json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2))
    assert a["layers"] == b["layers"]
