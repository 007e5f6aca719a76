"""The sidebar's Export report (zip) as a job (issue 36 item 4): the button queues the "report" job, the sidebar
shows its bar with Cancel while it runs (a second click attaches to it), Cancel ends it with nothing kept, and a
finished job's zip is offered as a download. The app tier's worker builds it from the synthetic runs."""

from __future__ import annotations

import io
import time
import zipfile

import pytest
from app_helpers import no_exception, run_clicked

from core.entry import jobs
from core.views import report


def _report_jobs() -> list[jobs.Job]:
    return [j for j in jobs.list_jobs() if j.kind == "report"]


def _wait(jid: str, pred, timeout: float = 300) -> jobs.Job:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        job = jobs.status(jid)
        if pred(job):
            return job
        time.sleep(0.2)
    raise AssertionError(f"{jid}: {jobs.status(jid).describe()}")


@pytest.fixture(scope="module")
def computed_one(cache_dir):
    from app_helpers import app_factory

    at = app_factory()()
    run_clicked(at)
    no_exception(at)
    return True


def test_export_is_a_job_with_cancel_and_a_second_click_attaches(app, computed_one):
    at = app()
    no_exception(at)
    before = {j.id for j in _report_jobs()}
    at.sidebar.button(key="report_export").click().run()
    no_exception(at)
    new = [j for j in _report_jobs() if j.id not in before or j.active]
    assert len(new) == 1 and new[0].active, [j.describe() for j in _report_jobs()]
    jid = new[0].id
    assert at.sidebar.button(key=f"cancel_{jid}")  # its bar, with Cancel, in the sidebar
    assert not [b for b in at.sidebar.button if b.key == "report_export"]  # no second button while it runs
    other = app()  # another tab of the same selection: the same job, shown running
    assert other.sidebar.button(key=f"cancel_{jid}")
    assert {j.id for j in _report_jobs() if j.active} == {jid}
    at.sidebar.button(key=f"cancel_{jid}").click().run()
    job = _wait(jid, lambda j: not j.active)
    assert job.status == jobs.CANCELLED, (job.status, job.error)
    at.run()
    no_exception(at)
    assert any("The report was cancelled" in c.value for c in at.sidebar.caption)
    assert at.sidebar.button(key="report_export")  # and it can be asked again


@pytest.mark.slow  # builds every figure of a run (PNG, SVG, PDF) in the worker
def test_a_finished_report_is_offered_as_a_download(app, computed_one):
    at = app()
    at.sidebar.button(key="report_export").click().run()
    jid = next(j.id for j in _report_jobs() if j.active)
    job = _wait(jid, lambda j: not j.active)
    assert job.status == jobs.DONE, job.error
    at.run()
    no_exception(at)
    assert any("Report ready" in c.value for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
    assert [e for e in at.sidebar.get("download_button")], "no download button"
    z = zipfile.ZipFile(io.BytesIO(report.report_blob(job.result)))
    assert "report.html" in z.namelist() and any(n.endswith(".png") for n in z.namelist())
