"""The Papers page's state and jobs: which paper is open, its stored record, the "reproduce" job with live
progress, Cancel and Retry (the same panel widgets as every run's)."""

from __future__ import annotations

import streamlit as st

from core import jobs
from core.escape import markdown_text as md
from core.papers import run as R

from . import state
from .jobs_panel import failed, progress, start_worker

PAPER_NAMES = R.NAMES
DEFAULT = "godey"
POLL_S = 1.0
_LABELS = {"ethayarajh": "Ethayarajh 2019", "godey": "Godey et al. 2023", "puccetti": "Puccetti et al. 2022"}


def paper(name: str) -> R.Paper:
    return R.paper(name)


def paper_label(name: str) -> str:
    return _LABELS.get(name, name)


def current() -> str:
    got = st.session_state.get("paper_pick")
    return got if got in PAPER_NAMES else DEFAULT


def remember(name: str) -> None:
    st.session_state["_paper_open"] = name


def record(name: str) -> dict | None:
    """The stored reproduction at the default settings (one small JSON read: instant), or None."""
    return R.cached(name)


def _job(name: str):
    return jobs.status(jobs.job_id("reproduce", R.job_params(name)))


def active(name: str) -> bool:
    job = _job(name)
    return job is not None and job.active


def submit(name: str) -> str:
    jid = jobs.submit("reproduce", R.job_params(name), label=paper_label(name), here=True, owner=state.browser_token())
    start_worker()
    return jid


def panel(name: str) -> None:
    """The reproduction's job: live progress while it runs (polling), its error when it failed."""
    job = _job(name)
    if job is None:
        return
    if job.active:
        _live(name)
    elif job.status == jobs.FAILED:
        failed(job, f"{paper_label(name)}: the reproduction failed: {md(job.error)}")
    elif job.status == jobs.CANCELLED:
        st.caption(":material/stop_circle: The last reproduction was cancelled; its record was not stored (runs that "
                   "had finished stay cached).")


@st.fragment(run_every=POLL_S)
def _live(name: str) -> None:
    job = _job(name)
    if job is None or not job.active:
        st.rerun(scope="app")  # it ended: the page draws the record (or the error)
    progress(job, f"**Reproducing {md(paper_label(name))}**")
    if job.progress.message:
        st.caption(md(job.progress.message))
