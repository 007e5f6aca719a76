"""Partial results of a running extraction (issue 26, live curves), on a tiny random BERT.

- the partial sums handed out after any batch are the sums over the batches processed so far: what the
  extraction of those windows alone gives (with the corpus's frequencies, tracked ids and groups);
- the partial results drawn from them hold every streaming statistic and none of the sample's;
- a cancelled run stores nothing and keeps no partial result;
- a failed run keeps its last partial result beside its error (until a new attempt starts).
"""

from __future__ import annotations

import numpy as np
import pytest
from foundation_helpers import make_documents

from core.base.cache import get_store
from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute import extract
from core.compute.extract import MAX_KEYS, SUM_KEYS, extract_stats, plan_batches, stats_layout
from core.compute.pipeline import RunStats, analyze_params, is_cached, results_key
from core.entry import job_queue, job_run, jobs
from core.inputs.corpora import TokenWindows, tokenize_budget
from core.inputs.models import load_model
from core.stats import kernels as M
from core.stats.assemble import partial_results
from core.stats.registry import sample_based_keys

pytestmark = pytest.mark.fast
KW = dict(batch_size=1, sample_size=40, seed=0)  # batch 1: each window's hidden states are bitwise the same


def _subset(w: TokenWindows, idx) -> TokenWindows:
    ids = [w.ids[i] for i in idx]
    special = [w.special[i] for i in idx]
    return TokenWindows(ids, special, w.doc[idx], len(set(w.doc[idx].tolist())), sum(len(a) for a in ids),
                        sum(int((~s).sum()) for s in special))


@pytest.fixture(scope="module")
def snapshots(tiny_bert_dir):
    lm = load_model(str(tiny_bert_dir))
    docs = make_documents([int(n) for n in np.random.default_rng(3).integers(2, 60, size=12)], seed=3)
    w = tokenize_budget(docs, lm.tokenizer, 100_000, 24, seed=0)
    got: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(extract, "PARTIAL_EVERY_S", 0.0)  # a partial after every batch, whatever it costs
        mp.setattr(extract, "PARTIAL_MAX_SHARE", float("inf"))
        whole, _ = extract_stats(lm.base, w, **KW, partial=lambda a, n: got.append((a, n)))
    return lm, w, whole, got


def test_partial_sums_are_the_sums_over_the_batches_so_far(snapshots):
    lm, w, whole, got = snapshots
    batches = plan_batches(w, KW["batch_size"])
    assert len(got) == len(batches) - 1  # after every batch but the last (the final result follows it)
    layout = stats_layout(w, "exclude", seed=0)
    open_doc = 0
    for j, (arrays, n_total) in enumerate(got):
        assert n_total == int(whole["n"])
        idx = np.sort(np.concatenate(batches[:j + 1]))
        open_doc += int(w.doc[idx].tolist().count(w.doc[batches[j][-1]]) < int((w.doc == w.doc[batches[j][-1]]).sum()))
        sub, _ = extract_stats(lm.base, _subset(w, idx), **KW, layout={**layout, "group_of": layout["group_of"][idx]})
        assert "sample" not in arrays
        for k in SUM_KEYS:
            np.testing.assert_allclose(arrays[k], sub[k], rtol=1e-9, atol=1e-12, err_msg=f"{k} after batch {j}")
        for k in MAX_KEYS:
            np.testing.assert_array_equal(arrays[k], sub[k], err_msg=k)
    assert open_doc, "no partial was taken with a document half read: the open-document sums went untested"


def test_partial_results_hold_the_streaming_statistics_only(snapshots):
    _, _, whole, got = snapshots
    arrays, n_total = got[len(got) // 2]
    manifest = {"model": {"label": "tiny", "hidden_size": 32}, "corpus": {"id": "c"}, "tokens": {}}
    res = partial_results(RunStats("stats:x", manifest, {}, arrays), n_total)
    assert res["partial"]["tokens"] == int(arrays["n"]) < res["partial"]["total_tokens"] == int(whole["n"])
    assert res["manifest"]["tokens"]["analysed"] == int(arrays["n"])
    for l, row in enumerate(res["layers"]):
        S = arrays["group_sum_u"][l].sum(0)
        assert row["mean_cosine"] == pytest.approx(M.mean_cosine(S, int(arrays["n"]), float(arrays["sum_u_sq"][l].sum())),
                                                   abs=1e-12)
        lo, hi = row["mean_cosine_ci"]
        assert lo <= row["mean_cosine"] <= hi
        assert all(row[k] is None for k in sample_based_keys())  # nothing from a partial sample
    assert {"isoscore", "effective_rank", "intrinsic_dim_twonn"} <= set(res["partial"]["sample_metrics"])


@pytest.fixture
def queue_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    monkeypatch.setenv("ANISO_ALLOW_SERVER_PATHS", "1")  # the tiny model is a folder in a temporary directory
    monkeypatch.setattr(extract, "PARTIAL_EVERY_S", 0.0)
    monkeypatch.setattr(extract, "PARTIAL_MAX_SHARE", float("inf"))
    return tmp_path


def _job(tiny_bert_dir, varied_txt) -> tuple[RunSpec, str]:
    """An analysis queued (no worker): the test runs it in this thread with job_run._run_job."""
    spec = RunSpec(model=str(tiny_bert_dir), corpus=str(varied_txt), max_tokens=10_000, max_seq_len=24, batch_size=1,
                   sample=20)
    return spec, jobs.submit("analyze", analyze_params(spec))


def test_a_cancelled_run_stores_nothing_and_keeps_no_partial(queue_cache, tiny_bert_dir, varied_txt, monkeypatch):
    spec, jid = _job(tiny_bert_dir, varied_txt)
    seen = []
    publish = job_run.Running.publish_partial

    def cancel_after_first(run, result):  # Cancel pressed once the first partial curve is drawn
        publish(run, result)
        seen.append(jobs.partial(jobs.status(jid)))
        jobs.cancel(jid)
        run.last_cancel_check = 0.0  # the next batch reads the request at once

    monkeypatch.setattr(job_run.Running, "publish_partial", cancel_after_first)
    job_run._run_job(jid, 1)
    job = jobs.status(jid)
    assert job.status == jobs.CANCELLED
    assert seen and seen[0]["partial"]["tokens"] > 0 and seen[0]["layers"][0]["mean_cosine"] is not None
    assert jobs.partial(job) is None
    assert not job_queue.store().has_data_for_key(job_queue.partial_key(jid, 1))
    assert not is_cached(spec) and get_store().get_json(results_key(spec)) is None


def test_a_failed_run_keeps_its_last_partial(queue_cache, tiny_bert_dir, varied_txt, monkeypatch):
    spec, jid = _job(tiny_bert_dir, varied_txt)
    published = []
    publish = job_run.Running.publish_partial

    def fail_on_second(run, result):
        publish(run, result)
        published.append(result)
        if len(published) == 2:
            raise InputError("the disk went away")

    monkeypatch.setattr(job_run.Running, "publish_partial", fail_on_second)
    job_run._run_job(jid, 1)
    job = jobs.status(jid)
    assert job.status == jobs.FAILED and "the disk went away" in job.error
    last = jobs.partial(job)
    assert last["partial"] == published[-1]["partial"] and last["layers"] == published[-1]["layers"]
    assert 0 < last["partial"]["tokens"] < last["partial"]["total_tokens"]
    assert not is_cached(spec)
    jobs.retry(jid)  # a new attempt starts without the failed one's partial
    assert not job_queue.store().has_data_for_key(job_queue.partial_key(jid, 1))


def test_partial_curves_keep_their_cadence_when_a_partial_is_slow(snapshots, monkeypatch):
    """Issue 36: on a starved worker one partial took seconds, the next was then due 100 times later (the 1%
    share rule) and the curve stood still for 10 minutes while the tokens counted on. The cadence now has a
    floor (PARTIAL_EVERY_S) and a ceiling (PARTIAL_MAX_GAP_S) whatever a partial costs."""
    assert extract.next_partial_due(100.0, 0.001) == 100.0 + extract.PARTIAL_EVERY_S  # cheap: every 2 s
    assert extract.next_partial_due(100.0, 5.0) == 100.0 + extract.PARTIAL_MAX_GAP_S  # slow: 30 s, not 500 s
    assert extract.PARTIAL_EVERY_S <= 2.0  # docs/pages.md: every 2 s at most
    # The loop itself: each partial costs 0.05 s, so the share rule alone would wait 5 s (the whole run has
    # none after the first); with a 0.1 s ceiling every batch that ends 0.1 s after the last one publishes.
    lm, w, _, _ = snapshots
    import time

    monkeypatch.setattr(extract, "PARTIAL_EVERY_S", 0.0)
    monkeypatch.setattr(extract, "PARTIAL_MAX_GAP_S", 0.1)
    at: list = []

    def slow(arrays, n):
        at.append(time.perf_counter())
        time.sleep(0.05)

    # each batch made to last 0.03 s (its progress call sleeps): the loop outlasts several 0.1 s gaps anywhere
    extract_stats(lm.base, w, **KW, partial=slow, progress=lambda p: time.sleep(0.03))
    n_batches = len(plan_batches(w, KW["batch_size"]))
    assert len(at) >= min(3, n_batches - 1), (len(at), n_batches)
    gaps = np.diff(at)
    assert (gaps >= 0.1).all()  # never more often than asked


def test_partial_results_are_built_on_one_blas_thread(monkeypatch):
    """While the forward pass runs, its threads own the cores: the hook builds and publishes the partial results on
    one BLAS thread (numpy's default threads spin after each call: BENCHMARKS.md, "what publishing partial results
    costs"), then gives BLAS its threads back."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from core.compute.pipeline import PartialHook

    def blas() -> set:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    seen = []
    hook = PartialHook(lambda res: seen.append((res, blas())), "key", RunSpec(), {})
    monkeypatch.setattr(hook, "partial_results", lambda stats, n: {"tokens": n})
    with threadpool_limits(limits=2, user_api="blas"):
        hook({"n": np.int64(3)}, 10)
        assert blas() == {2}
    assert seen == [({"tokens": 10}, {1})]
