"""The sidebar's *Export report (zip)*: a job ("report", core.views.report.job_report), never a script run's work.

The button queues the job (the same selection, names and computed runs: the same job, so a second click, or
another tab, attaches to the one running); while it runs, a polling fragment shows its progress (views written
of the total) with Cancel; when it is done the zip it kept in the cache is offered as a download; a failure
shows its message with Retry. The job's parameters carry this browser's names of its uploads.
"""

from __future__ import annotations

from functools import partial

import streamlit as st

from core import views
from core.base import settings
from core.base.cache import get_store
from core.base.errors import InputError
from core.base.escape import markdown_text as md
from core.entry import jobs
from core.views import report

from . import data, state
from .jobs_panel import failed, job_error, progress, start_worker

POLL_S = 1.0  # how often the running report's bar is redrawn


def params(sel, cached_specs) -> dict:
    """The report job of `sel` as this browser sees it: its names of the corpora, the runs computed so far."""
    names = {}
    for spec in cached_specs:
        names[(spec.corpus, spec.text_column or "")] = views.corpus_display(spec.corpus, spec.text_column)
    runs = sorted(data.resolved(s).key for s in cached_specs)
    return report.report_params(sel, names, image_formats=settings.current().report_formats, runs=runs)


def _label(sel, n_runs: int) -> str:
    return f"{n_runs} run{'s' if n_runs != 1 else ''} of {', '.join(sel.models[:3])}{'…' if len(sel.models) > 3 else ''}"


def _submit(p: dict, label: str) -> None:
    try:
        jobs.submit("report", p, label=label, here=True, owner=state.browser_token())
    except InputError as e:
        st.session_state["_report_error"] = str(e)
        return
    start_worker()


def export(sel, cached_specs) -> None:
    """Draw the report's button, its running job's bar (Cancel) or its download (in the sidebar)."""
    p = params(sel, cached_specs)
    jid = jobs.job_id("report", p)
    try:
        job = jobs.status(jid)
    except InputError:
        job = None
    err = st.session_state.pop("_report_error", None)
    if err:
        st.error(md(err), icon=":material/error:")
    if job is not None and job.active:
        _running(jid)
        return
    label = _label(sel, len(cached_specs))
    if job is not None and job.status == jobs.DONE and (job.result or {}).get("key") in get_store():
        r = job.result
        st.download_button("Download report (zip)", data=partial(report.report_blob, r),
                           file_name=r.get("file_name") or report.FILE_NAME, mime="application/zip",
                           key="report_zip", on_click="ignore", width="stretch", icon=":material/download:",
                           type="primary")
        st.caption(f":material/check_circle: Report ready: {r.get('views', 0)} views, "
                   f"{r.get('bytes', 0) / 2**20:,.1f} MiB, built in {r.get('seconds', 0):.1f} s.")
        st.button("Build the report again", key="report_again", width="stretch", icon=":material/refresh:",
                  on_click=_submit, args=(p, label),
                  help="Build the zip again (e.g. after an ablation or a chain job of these runs).")
        return
    if job is not None and job.status == jobs.FAILED:
        failed(job, f"The report failed: {job_error(job)}")
    elif job is not None and job.status == jobs.CANCELLED:
        st.caption(":material/stop_circle: The report was cancelled; nothing was kept.")
    st.button("Export report (zip)", key="report_export", width="stretch", icon=":material/folder_zip:",
              on_click=_submit, args=(p, label),
              help=f"Every figure ({', '.join(settings.current().report_formats).upper() or 'in report.html only'}), "
                   "its data (CSV, JSON), report.html and results.json of each computed run, with manifests: built "
                   "by the job worker (its progress and Cancel show here), then offered as a download.")


@st.fragment(run_every=POLL_S)
def _running(jid: str) -> None:
    try:
        job = jobs.status(jid)
    except InputError:
        job = None
    if job is None or not job.active:
        st.rerun(scope="app")  # before drawing: the app's run draws the download or the failure
    progress(job, "**Report zip**")
