"""The report zip as a job (issue 36 item 4): it runs through the job machinery (`core.entry.jobs.run_here`: the
record, its progress in views, Cancel), keeps the zip in the results cache, names uploads as the browser that
queued it does (issue 37: not as the bytes' first uploader), stops within 5 s on Cancel keeping nothing, and
fails with a message that says why (nothing computed; the time bound ANISO_REPORT_TIMEOUT_S).
Tiny model, 2,000 tokens, no static images (data files and report.html only)."""

from __future__ import annotations

import io
import json
import time
import zipfile

import jobkinds  # noqa: F401 - registers cancel-at
import pytest
from job_helpers import wait_done

from core.base.cache import get_store
from core.compute.pipeline import analyze
from core.entry import jobs
from core.inputs import uploads
from core.studies.selection import Selection
from core.views import report

CANCEL_BOUND_S = 5.0
TEXT = "\n\n".join(
    f"Document {i}: the quick brown fox jumps over the lazy dog near river bank {i}." * 6 for i in range(40)
).encode()


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    monkeypatch.setenv("ANISO_ALLOW_SERVER_PATHS", "1")  # the tiny model is a temporary folder
    monkeypatch.setenv("ANISO_SHARED", "1")  # names belong to a browser
    monkeypatch.setenv("ANISO_ALLOW_MODEL_FOLDERS", "1")
    return tmp_path


def _computed(tiny_bert_dir) -> tuple[Selection, str]:
    """A selection of one computed run on an upload that browser A named first and browser B names its own way;
    the upload's id."""
    uploads.save_upload(TEXT, "first-name.txt", owner="browser-a")
    path = uploads.save_upload(TEXT, "mine-b.txt", owner="browser-b")
    uid = uploads.upload_id(path)
    sel = Selection(models=(str(tiny_bert_dir),), corpus=uid, max_tokens=2000, max_seq_len=64, batch_size=2, sample=200)
    analyze(sel.spec(str(tiny_bert_dir)))
    return sel, uid


def _names_of(sel: Selection, viewer: str) -> dict:
    """What the sidebar of `viewer`'s browser puts in the job: its names of the selection's corpora."""
    uploads.viewing_as(viewer)
    try:
        return {(s.corpus, s.text_column or ""): uploads.display_name(s.corpus, s.text_column) for s in sel.specs()}
    finally:
        uploads.viewing_as(None)


@pytest.mark.fast
def test_the_report_job_keeps_a_zip_that_names_this_browsers_uploads(here, tiny_bert_dir):
    sel, uid = _computed(tiny_bert_dir)
    names = _names_of(sel, "browser-b")
    assert set(names.values()) == {"mine-b.txt"}  # B's own name, not the first upload's
    params = report.report_params(sel, names, image_formats=(), runs=["one"])
    jid = jobs.run_here("report", params)
    assert jobs.run_here("report", params) == jid  # a second click while it runs: the same job
    job = wait_done(jid)
    assert job.status == jobs.DONE, job.error
    assert job.progress.stage.value == "report" and job.progress.done == job.progress.total == job.result["views"]
    assert job.result["views"] >= 10 and job.result["key"] == report.report_key(params)
    assert job.result["key"] in get_store()  # kept: the download reads it, no second build
    blob = report.report_blob(job.result)
    assert len(blob) == job.result["bytes"]
    z = zipfile.ZipFile(io.BytesIO(blob))
    files = z.namelist()
    assert any("mine-b.txt" in f for f in files), files
    assert not any("first-name" in f for f in files), files
    html = z.read("report.html").decode()
    assert "mine-b.txt" in html and "first-name" not in html
    assert json.loads(z.read("manifest.json"))["selection"]["corpus"] == uid
    # the worker's own view of the names (no browser): the first upload's, so the job's names did the work
    assert uploads.display_name(uid) == "first-name.txt"


@pytest.mark.fast
def test_the_report_cancelled_while_writing_its_views_keeps_nothing(here, tiny_bert_dir):
    sel, _ = _computed(tiny_bert_dir)
    params = report.report_params(sel, _names_of(sel, "browser-b"), image_formats=(), runs=["two"])
    marker = here / "cancel-report.txt"
    jid = jobs.run_here(
        "cancel-at", {"kind": "report", "params": params, "stage": "report", "done": 2, "message": "", "marker": str(marker)}
    )
    job = wait_done(jid)
    assert job.status == jobs.CANCELLED, (job.status, job.error)
    took = job.finished - float(marker.read_text())
    assert took < CANCEL_BOUND_S, f"cancelled {took:.1f} s after the press"
    assert report.report_key(params) not in get_store()


@pytest.mark.fast
def test_a_report_of_nothing_computed_fails_with_a_message(here, tiny_bert_dir):
    sel = Selection(models=(str(tiny_bert_dir),), corpus="wiki-en", max_tokens=2000, max_seq_len=64, batch_size=2, sample=200)
    job = wait_done(jobs.run_here("report", report.report_params(sel, image_formats=())))
    assert job.status == jobs.FAILED
    assert job.error == "Nothing computed yet for this selection: press Run first."


@pytest.mark.fast
def test_a_report_past_its_time_bound_fails_saying_which_setting(here, tiny_bert_dir, monkeypatch):
    sel, _ = _computed(tiny_bert_dir)
    monkeypatch.setenv("ANISO_REPORT_TIMEOUT_S", "1")
    real = report.report_views

    def slow_views(*a, **kw):  # the views take longer than the bound (as a big selection would)
        time.sleep(1.2)
        return real(*a, **kw)

    monkeypatch.setattr(report, "report_views", slow_views)
    params = report.report_params(sel, image_formats=(), runs=["three"])
    job = wait_done(jobs.run_here("report", params))
    assert job.status == jobs.FAILED
    assert "longer than 1 s" in job.error and "ANISO_REPORT_TIMEOUT_S" in job.error, job.error
    assert report.report_key(params) not in get_store()


@pytest.mark.fast
def test_a_forged_report_selection_is_refused_by_the_worker(here, monkeypatch):
    monkeypatch.setenv("ANISO_ALLOW_SERVER_PATHS", "0")
    params = {"selection": {"models": ["/etc"]}, "names": [], "formats": [], "runs": []}
    job = wait_done(jobs.run_here("report", params))
    assert job.status == jobs.FAILED and job.error.startswith("The report's selection was refused"), job.error


@pytest.mark.fast
def test_forged_report_names_fail_with_a_message(here):
    params = {"selection": {}, "names": [["only-two", "items"]], "formats": [], "runs": []}
    job = wait_done(jobs.run_here("report", params))
    assert job.status == jobs.FAILED and "names or image formats" in job.error, job.error
