"""Runs are jobs, as an impatient person meets them in a real browser.

- Press Run, click through every page at once: every page shows its figures once the job ends,
  without pressing Run again; a second browser context on the same URL meanwhile shows the same
  job's progress, and no second computation happens.
- Two contexts pressing Run on the same selection: one job, identical figures.
- The worker killed halfway: the page says the job failed and why; Retry computes it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, goto_page, settle, wait_plots

from bench.load import PAGES as MIN_PLOTS  # page -> the figures of its first section for one computed run

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Debian's chromium is not installed at "
                                 f"{CHROMIUM} (apt-get install chromium)")]
PAGES = tuple(MIN_PLOTS)  # Layers, Outliers, Projection, Compare


def _jobs(cache):
    from core.entry import jobs

    return jobs.list_jobs(cache)


def _wait_job(cache, pred, timeout=600, what="job"):
    t0 = time.time()
    while time.time() - t0 < timeout:
        js = _jobs(cache)
        if js and pred(js):
            return js
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}: {[j.describe() for j in _jobs(cache)]}")


def _curve(page) -> list:
    """y values of the measured mean-cosine curve of the Layers page (its final figure, not a partial one)."""
    return page.evaluate("""() => { const d = Array.from(document.querySelectorAll('.js-plotly-plot')).find(
            el => !(((el.layout || {}).title || {}).text || '').includes('partial result')).data;
        const t = d.find(t => (t.name || '').includes('MiniLM') && t.fill !== 'toself');
        return Array.from(t.y); }""")


def test_run_then_browse_everything_while_the_job_runs(server, browser):
    from core.entry import jobs

    url, cache = server
    query = "tokens=5000&sample=600"
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(240_000)
    page.goto(f"{url}/?{query}")
    page.get_by_role("button", name="Run").click()
    page.get_by_role("button", name="Cancel").wait_for()  # the job's progress panel
    for title in PAGES[1:] + PAGES[:1]:  # click through every page at once, not waiting for the job
        goto_page(page, title, wait=False)
        page.wait_for_timeout(400)
    [job] = [j for j in _jobs(cache) if "5,000 tokens" in j.label]  # the server is the browser tier's (conftest.py)
    assert job.active and job.attempt == 1

    # A second person opens the same URL during the job: the same job's progress, no new job.
    other = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    other.set_default_timeout(240_000)
    other.goto(f"{url}/compare?{query}")
    t0 = time.time()  # the same job's progress panel, unless the job ends first (5k tokens can be quick)
    while jobs.status(job.id, cache).active and not other.get_by_text(job.id).count():
        assert time.time() - t0 < 240, "the second visitor never saw the running job"
        other.wait_for_timeout(300)

    # Nobody presses Run again: the figures come when the job ends, on every page.
    wait_plots(page, MIN_PLOTS["Layers"], timeout_s=600)
    wait_plots(other, MIN_PLOTS["Compare"], timeout_s=600)
    for title in PAGES[1:]:
        goto_page(page, title)
        wait_plots(page, MIN_PLOTS[title], timeout_s=300)
    # The worker stores the run, then writes "done": the pages can draw before that.
    [job] = [j for j in _jobs(cache) if "5,000 tokens" in j.label]
    job = jobs.wait(job.id, cache, timeout=120)
    assert job.status == jobs.DONE and job.attempt == 1  # one computation for both visitors
    assert not job.result["cache_hit"]
    ctx.close()
    other.context.close()


def test_two_contexts_start_the_same_spec_one_computation(server, browser):
    from core.entry import jobs

    url, cache = server
    query = "tokens=4500&sample=500"
    pages = []
    for _ in range(2):
        p = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        p.set_default_timeout(240_000)
        p.goto(f"{url}/?{query}")
        p.get_by_role("button", name="Run").wait_for()
        pages.append(p)
    for p in pages:  # both press Run, one right after the other
        p.get_by_role("button", name="Run").click()
    curves = []
    for p in pages:
        wait_plots(p, 1, timeout_s=600)
        settle(p)
        curves.append(_curve(p))
    mine = [j for j in _jobs(cache) if "4,500 tokens" in j.label]
    assert len(mine) == 1 and mine[0].attempt == 1
    assert jobs.wait(mine[0].id, cache, timeout=120).status == jobs.DONE  # stored first, "done" a moment later
    assert curves[0] == curves[1] and len(curves[0]) == 7
    for p in pages:
        p.context.close()


def test_worker_killed_halfway_then_retry(server, browser):
    from core.entry import jobs, worker

    url, cache = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(240_000)
    page.goto(f"{url}/?tokens=60000&sample=500")
    page.get_by_role("button", name="Run").click()
    _wait_job(cache, lambda js: any("60,000" in j.label and j.progress.stage == "forward" and j.progress.done > 0 for j in js),
              what="the 60k job's forward pass")
    job = [j for j in _jobs(cache) if "60,000" in j.label][0]
    os.kill(worker.worker_pid(cache), signal.SIGKILL)  # what the OOM killer does
    page.get_by_text("the extraction failed").wait_for(timeout=120_000)
    assert any("stopped while running" in a.inner_text() for a in page.get_by_test_id("stAlert").all())
    from core.base.spec import RunSpec
    from core.compute.pipeline import is_cached

    assert not is_cached(RunSpec(max_tokens=60000, sample=500), cache_dir=cache)
    # The failure ends the job: the panel reruns the whole app once. A click while that rerun replaces the
    # button can be dropped by Streamlit (as for a user clicking at that instant), so wait for the app to be idle.
    page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=120_000)
    page.get_by_role("button", name="Retry").click()  # the app starts a new worker
    t0 = time.time()
    while not (jobs.status(job.id, cache).attempt == 2 and jobs.status(job.id, cache).active):
        assert time.time() - t0 < 240, jobs.status(job.id, cache).describe()
        time.sleep(0.3)
    if not page.get_by_role("button", name="Cancel").count():
        page.reload()  # the retried job's panel (a reload never cancels it)
    page.get_by_role("button", name="Cancel").wait_for()
    page.get_by_role("button", name="Cancel").click()  # no need to wait for 60k tokens here
    page.get_by_text("the last run was cancelled").wait_for(timeout=300_000)
    page.close()
