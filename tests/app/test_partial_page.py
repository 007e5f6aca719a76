"""Live curves (issue 26): the pages draw a running run's partial result, and a failed run's last one with
its error. The job records and partial results are planted in the app tier's queue (a synthetic partial:
the synthetic run's sums, counted as half of the budget); no worker runs them, no model is loaded."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time

import pytest
import synthetic_runs
from app_helpers import by_title, figures, no_exception

from core.compute.pipeline import RunStats, analyze_params, is_cached
from core.entry import job_queue, job_run, jobs
from core.stats.assemble import partial_results
from core.studies.selection import Selection

TOKENS = 2_350  # a budget no other app test computes (test_navigation plants runs at 2,300)


def _plant(spec, status: str, error: str = "") -> tuple[str, dict]:
    """A job record of `spec` running in this process (alive: never read as a dead worker), or failed,
    with a synthetic partial result."""
    manifest, _, arrays = synthetic_runs.synthetic_entry(spec)
    arrays = {k: v for k, v in arrays.items() if k != "sample"}
    part = partial_results(RunStats("stats:synthetic", manifest, {}, arrays), 2 * int(arrays["n"]))
    params = analyze_params(spec)
    jid = jobs.job_id("analyze", params)
    job = jobs.Job(jid, "analyze", params, "planted", status, created=time.time(), started=time.time(), error=error,
                   worker={"host": socket.gethostname(), "pid": os.getpid(), "start": job_run.proc_start(os.getpid())})
    job_queue.write(job)
    job_queue.store().put_data(job_queue.partial_key(jid, 1), json.dumps(part).encode())
    return jid, part


@contextlib.contextmanager
def planted(spec, status: str, error: str = ""):
    jid, part = _plant(spec, status, error)
    try:
        yield jid, part
    finally:  # a planted running job must never outlive the test (others wait for every job to end)
        job_queue.store().pop_data(f"job:{jid}")
        job_queue.store().pop_data(job_queue.partial_key(jid, 1))


@pytest.mark.parametrize("page, title", [
    (None, "Mean cosine similarity by layer"),
    ("pages/outliers.py", "Activation outlier dimensions per layer, as a share of the width")])
def test_a_running_run_draws_its_partial_curve(app, page, title):
    spec = Selection(max_tokens=TOKENS, sample=500).spec("minilm-l6")
    assert not is_cached(spec)
    with planted(spec, jobs.RUNNING) as (_, part):
        at = app(page=page, tokens=str(TOKENS))
        no_exception(at)
        fig = by_title(at, f"{title} (partial result, still computing)")
        n = part["partial"]["tokens"]
        assert f"partial: {n:,} of {2 * n:,} tokens (50%)" in fig["layout"]["title"]["subtitle"]["text"]
        if page != "pages/outliers.py":
            [line] = [t for t in fig["data"] if "all-MiniLM-L6-v2" in t.get("name", "") and t.get("fill") != "toself"]
            assert list(line["y"]) == pytest.approx([r["mean_cosine"] for r in part["layers"]])
            assert any(t.get("fill") == "toself" for t in fig["data"])  # the bootstrap band of the partial sums
        assert any("Partial results" in c.value for c in at.caption)
        if page is None:  # a sample statistic waits for the sample to fill: said, and not drawn
            at.session_state["selection"] = at.session_state["selection"].replace(metric="isoscore")
            at.run()
            no_exception(at)
            assert any("IsoScore is computed on the token sample" in i.value for i in at.info)
            assert by_title(at, "Mean cosine similarity by layer (partial result")
            assert not [f for f in figures(at) if "IsoScore" in f["layout"]["title"]["text"]]


def test_a_failed_run_shows_its_last_partial_and_the_error(app):
    spec = Selection(max_tokens=TOKENS, sample=500).spec("minilm-l6")
    with planted(spec, jobs.FAILED, error="out of memory: lower the token budget"):
        at = app(tokens=str(TOKENS))
        no_exception(at)
        assert by_title(at, "Mean cosine similarity by layer (last partial result of a failed run)")
        assert any("The run failed at partial:" in e.value and "out of memory" in e.value for e in at.error)


def test_a_run_stored_meanwhile_is_drawn_by_the_next_page_run(app):
    """A page that found the run not computed draws it on its next run once the worker has stored it: the
    look-up keeps no "not computed" (a memoised one left a second visitor on a shared server with nothing
    drawn, its own job panel never having seen the job run, so nothing reran it)."""
    tokens = TOKENS + 10  # a budget of its own: stored below, as the worker would store it
    spec = Selection(max_tokens=tokens, sample=500).spec("minilm-l6")
    assert not is_cached(spec)
    at = app(tokens=str(tokens))
    no_exception(at)
    assert not figures(at) and any("Nothing to show yet" in i.value for i in at.info)
    synthetic_runs.seed(spec)
    at.run()
    no_exception(at)
    assert by_title(at, "Mean cosine similarity by layer")
