"""The job panel's pieces shared by every page that queues jobs (ui/run.py: analyses, ablations,
attention statistics; ui/training.py: trainings and series): start the worker, one job's live
progress bar with Cancel, a failed job's message with Retry."""

from __future__ import annotations

import time

import streamlit as st

from core import jobs
from core.errors import InputError
from core.escape import markdown_text


def start_worker() -> None:
    try:
        jobs.ensure_worker()
    except OSError as e:  # a read-only cache directory, no fork allowed...
        st.error(f"Could not start the job worker ({markdown_text(str(e))}). Start one with `python -m core worker`.")
    st.session_state["_jobs_worker_check"] = time.monotonic()



def progress(job, name: str) -> None:
    """One job's progress bar: stage, tokens done / total, tokens/s, ETA; Cancel."""
    with st.container(border=True, key=f"job_{job.id}"):
        head, btn = st.columns([6, 1], vertical_alignment="center")
        if job.cancel_requested:
            text = "cancelling: stops after the current batch…"
        elif job.status == jobs.QUEUED:
            text = "queued: waiting for the worker…"
        elif job.stage == "forward" and job.total and job.done == 0:
            text = f"starting the forward pass ({job.total:,} tokens)…"
        elif job.stage == "forward" and job.total:
            text = (f"{job.done:,} / {job.total:,} tokens · {job.tokens_per_s:,.0f} tokens/s · "
                    f"ETA {jobs.fmt_seconds(job.eta_s)}")
        elif job.stage == "ablation" and job.total:
            text = f"{job.message} · ETA {jobs.fmt_seconds(eta(job))}"
        elif job.stage == "train" and job.total:
            text = (f"step {job.done:,} / {job.total:,} · {job.tokens_per_s:,.0f} tokens/s · "
                    f"ETA {jobs.fmt_seconds(job.eta_s)}")
        elif job.stage == "series" and job.total:
            text = job.message or f"checkpoint {job.done + 1} / {job.total}"
        elif job.stage == "metrics":
            text = "per-layer metrics…"
        else:
            text = f"{job.message or job.stage or 'starting'}…"
        head.markdown(f"{name} · job `{job.id}`")
        counted = job.stage in ("forward", "ablation", "train", "series")
        head.progress(job.fraction if counted else (1.0 if job.stage == "metrics" else 0.0), text=text)
        btn.button("Cancel", key=f"cancel_{job.id}", icon=":material/stop_circle:", disabled=job.cancel_requested,
                   help="Stop this job between batches; nothing partial is stored. Navigating, reloading or "
                        "closing the tab does not stop it.", on_click=_cancel, args=(job.id,))


# The panel's buttons act in on_click callbacks: Streamlit runs a callback before whichever run the
# click starts. Read as a return value instead, a click could be consumed by a run that does not
# draw the button (a polling fragment's run at that instant) and be lost: Retry then did nothing.
def _cancel(jid: str) -> None:
    try:
        jobs.cancel(jid)
    except InputError:
        pass  # it ended meanwhile


def _retry(jid: str) -> None:
    try:
        jobs.retry(jid)
    except InputError as e:  # it was queued again meanwhile (another tab, the CLI): say so
        st.toast(markdown_text(str(e)), icon=":material/info:")
    start_worker()


def eta(job) -> float | None:
    """ETA of a job that counts steps (ablation passes): time per finished step times steps left."""
    if not job.started or not job.done:
        return None
    return (time.time() - job.started) / job.done * (job.total - job.done)


def failed(job, message: str) -> None:
    c1, c2 = st.columns([6, 1], vertical_alignment="center")
    c1.error(message, icon=":material/error:")
    c2.button("Retry", key=f"retry_{job.id}", icon=":material/refresh:",
              help="Queue this job again with the same settings.", on_click=_retry, args=(job.id,))
