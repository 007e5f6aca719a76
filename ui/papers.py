"""The Papers page's jobs: its stored record, the "reproduce" job with live
progress, Cancel and Retry (the same panel widgets as every run's)."""

from __future__ import annotations

import streamlit as st

from core.base.escape import markdown_text as md
from core.entry import jobs
from core.studies.papers import run as R
from core.studies.selection import PAPER_BUDGETS

from . import state
from .jobs_panel import failed, job_error, progress, start_worker

PAPER_NAMES = R.NAMES
POLL_S = 1.0
# Positions per run: the findings' setting (runs shared with docs/findings.md and the CLI's default), or a quick look
BUDGETS = dict(zip(PAPER_BUDGETS, (f"{PAPER_BUDGETS[0]:,} (as in the paper tables here)",
                                   f"{PAPER_BUDGETS[1]:,} (a quick look)")))
_LABELS = {"ethayarajh": "Ethayarajh 2019", "godey": "Godey et al. 2023", "puccetti": "Puccetti et al. 2022",
           "chain": "The outlier chain"}


def paper(name: str) -> R.Paper:
    return R.paper(name)


def paper_label(name: str) -> str:
    return _LABELS.get(name, name)


def settings(tokens: int, models: tuple[str, ...] | None = None) -> R.Settings:
    """The reproduction's settings for a budget of `tokens` positions per run (sample: the CLI's, capped by it)
    and a subset of the paper's runs (None: all of them, the CLI's default)."""
    return R.Settings(max_tokens=int(tokens), sample=min(R.DEFAULT_SAMPLE, int(tokens) // 2),
                      models=tuple(models) if models is not None else None)


def record(name: str, s: R.Settings) -> dict | None:
    """The stored reproduction (one small JSON read: instant), or None."""
    return R.cached(name, s)


def _job(name: str, s: R.Settings):
    return jobs.status(jobs.job_id("reproduce", R.job_params(name, s)))


def active(name: str, s: R.Settings) -> bool:
    job = _job(name, s)
    return job is not None and job.active


def submit(name: str, s: R.Settings) -> str:
    what = f"{paper_label(name)}, {s.max_tokens:,} positions" + (f", {len(s.models)} runs" if s.models else "")
    jid = jobs.submit("reproduce", R.job_params(name, s), label=what, here=True, owner=state.browser_token())
    start_worker()
    return jid


def panel(name: str, s: R.Settings) -> None:
    """The reproduction's job: live progress while it runs (polling), its error when it failed."""
    job = _job(name, s)
    if job is None:
        return
    if job.active:
        _live(name, s)
    elif job.status == jobs.FAILED:
        failed(job, f"{paper_label(name)}: the reproduction failed: {job_error(job)}")
    elif job.status == jobs.CANCELLED:
        st.caption(":material/stop_circle: The last reproduction was cancelled; its record was not stored (runs that "
                   "had finished stay cached).")


@st.fragment(run_every=POLL_S)
def _live(name: str, s: R.Settings) -> None:
    job = _job(name, s)
    if job is None or not job.active:
        st.rerun(scope="app")  # it ended: the page draws the record (or the error)
    progress(job, f"**Reproducing {md(paper_label(name))}**")
    if job.progress.message:
        st.caption(md(job.progress.message))
