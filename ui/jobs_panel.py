"""The job panel's pieces shared by every page that queues jobs (ui/run.py: analyses, ablations,
attention statistics; ui/training.py: trainings and series): start the worker, one job's live
progress bar with Cancel, a failed job's message with Retry."""

from __future__ import annotations

import time

import streamlit as st

from core.base import settings
from core.base.errors import InputError
from core.base.escape import markdown_text
from core.base.progress import Stage
from core.entry import job_records, jobs, worker
from core.inputs.hub_fetch import fmt_bytes

from . import state


def start_worker() -> None:
    try:
        worker.ensure_worker()
    except OSError as e:  # a read-only cache directory, no fork allowed...
        st.error(f"Could not start the job worker ({markdown_text(str(e))}). Start one with `python -m core worker`.")
    st.session_state["_jobs_worker_check"] = time.monotonic()


PRESTART_S = 10.0  # a page run starts a missing worker at most this often per app process
_prestarted = [0.0]  # when this process last did


def prestart_worker() -> None:
    """On every page run (at most every PRESTART_S): start the worker when none runs, so that it imports
    torch and transformers and loads the default model (`core.entry.worker.run_worker(warm=True)`) while the page
    is read, not after the click on Run. A worker that cannot start is said by Run (`start_worker`).
    ANISO_WORKER_WARM=0: nothing here (the worker starts on Run)."""
    now = time.monotonic()
    if not settings.worker_warm() or now - _prestarted[0] < PRESTART_S:
        return
    _prestarted[0] = now
    try:
        worker.ensure_worker()
    except (OSError, InputError):  # a read-only cache, a bad queue URL: Run says so where it matters
        pass


def progress_text(job, queued: str | None = None) -> str:
    """The bar's line for any job kind, from its typed progress: stage, done / total in the stage's
    unit, rate, ETA (core.base.progress.Progress). `queued`: a queued job's place (`core.entry.jobs.queue_line`)."""
    p = job.progress
    if job.cancel_requested:
        return "cancelling: stops within seconds…"
    if job.status == jobs.QUEUED:
        return f"queued: {queued or 'waiting for the worker…'}"
    step = f"{p.step.capitalize()} · " if p.step else ""  # a run's computation: read, load, tokenize, pass
    if p.stage == Stage.READ:
        return f"{step}{p.message or 'reading the corpus'}" + ("…" if not p.counted else "")
    if p.stage == Stage.METRICS:  # "per-layer metrics: layer 3 of 7" says the count
        eta = f" · ETA {job_records.fmt_seconds(p.eta_s)}" if p.counted and p.eta_s is not None and p.done else ""
        return f"{step}{p.message or 'per-layer metrics'}{eta}" + ("" if eta else "…")
    if p.counted and p.done == 0:
        return f"{step}starting the {p.title} ({p.total:,} {p.unit})…"
    if p.stage == Stage.DOWNLOAD and p.counted:  # bytes as MB/GB; the message names the file in hand and its bytes
        rate = f" · {fmt_bytes(p.rate)}/s" if p.rate else ""
        return (f"{step}{p.title}: {fmt_bytes(p.done)} of {fmt_bytes(p.total)}{rate} · ETA {job_records.fmt_seconds(p.eta_s)}"
                + (f" · {p.message.split(' · ')[0]}" if p.message else ""))
    if p.counted:
        rate = f" · {p.rate:,.0f} {p.rate_unit}/s" if p.rate else ""
        # what the ablation's pass zeroes, which checkpoint of the series: the others' notes repeat the count
        note = f" ({p.message})" if p.message and p.stage in (Stage.ABLATION, Stage.SERIES) else ""
        return f"{step}{p.title}: {p.done:,} / {p.total:,} {p.unit}{note}{rate} · ETA {job_records.fmt_seconds(p.eta_s)}"
    return f"{step}{p.message or job.message or p.stage}…"


def progress(job, name: str) -> None:
    """One job's progress bar (every kind: its stage, done / total, rate, ETA) and its Cancel button."""
    with st.container(border=True, key=f"job_{job.id}"):
        head, btn = st.columns([6, 1], vertical_alignment="center")
        head.markdown(f"{name} · job `{job.id}`")
        queued = jobs.queue_line(job, state.browser_token()) if job.status == jobs.QUEUED else None
        head.progress(job.progress.fraction, text=progress_text(job, queued))
        slow = jobs.late(job)  # its record is older than a few heartbeats: said, not a frozen bar
        if slow:
            head.warning(markdown_text(slow), icon=":material/hourglass_disabled:")
        mine = jobs.may_cancel(job, state.browser_token())
        btn.button("Cancel", key=f"cancel_{job.id}", icon=":material/stop_circle:",
                   disabled=job.cancel_requested or not mine,
                   help="Stop this job within seconds, in any stage; nothing partial is stored. Navigating, reloading or "
                        "closing the tab does not stop it." if mine else
                        "Started by another user of this shared server: only they can cancel it.",
                   on_click=_cancel, args=(job.id,))


# The panel's buttons act in on_click callbacks: Streamlit runs a callback before whichever run the
# click starts. Read as a return value instead, a click could be consumed by a run that does not
# draw the button (a polling fragment's run at that instant) and be lost: Retry then did nothing.
def _cancel(jid: str) -> None:
    try:
        jobs.cancel(jid, owner=state.browser_token())
    except InputError:
        pass  # it ended meanwhile


def _retry(jid: str) -> None:
    try:
        jobs.retry(jid, here=True, owner=state.browser_token())
    except InputError as e:  # it was queued again meanwhile (another tab, the CLI): say so
        st.toast(markdown_text(str(e)), icon=":material/info:")
    start_worker()


def job_error(job) -> str:
    """A failed job's error for the page: markdown-safe, the server's folders named in words (core.base.settings.
    without_server_paths: a hub-offline error named the server's hub cache by its path)."""
    return markdown_text(settings.without_server_paths(job.error or ""))


def failed(job, message: str) -> None:
    c1, c2 = st.columns([6, 1], vertical_alignment="center")
    c1.error(message, icon=":material/error:")
    c2.button("Retry", key=f"retry_{job.id}", icon=":material/refresh:",
              help="Queue this job again with the same settings.", on_click=_retry, args=(job.id,))
