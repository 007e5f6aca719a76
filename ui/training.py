"""The Train and Dynamics pages' work: trainings and series analyses queued as jobs (their rows
of the job panel, ui/run.panel: progress, Cancel, Retry), and cached reads of what is on disk."""

from __future__ import annotations

import streamlit as st

from core.base.errors import InputError
from core.base.escape import markdown_text as md
from core.base.spec import RunSpec
from core.compute.pipeline import resolve
from core.entry import jobs
from core.inputs import checkpoints, hub_series
from core.inputs.access import check_model
from core.studies import series as S
from core.studies.chain.job import cached_chain_section
from core.studies.train_spec import TrainSpec

from . import jobs_panel, state

KINDS = ("train", "series")


def submit_training(runs: dict[str, TrainSpec], analyse: bool = True, **series_kw) -> list[str]:
    """Queue one "train" job per spec (then its series analysis when `analyse`). Returns run names.

    Trainings are jobs of the queue: navigating, using a widget or closing the tab never stops
    them; only their Cancel button does (a cancelled training resumes from its last checkpoint)."""
    for label, spec in runs.items():
        jobs.submit("train", {"spec": spec.to_dict(), "analyse": bool(analyse), "series": series_kw},
                    label=f"training {label}",
                    owner=state.browser_token())
    jobs_panel.start_worker()
    return [spec.run_name() for spec in runs.values()]


def submit_series(run: str, **series_kw) -> str:
    """Queue the analysis of every checkpoint of `run` (the Dynamics page's button)."""
    jid = jobs.submit("series", {"run": run, "kw": series_kw}, label=f"analysing {run}", owner=state.browser_token())
    jobs_panel.start_worker()
    return jid


def recent_jobs() -> list:
    """Training and series jobs: every active one (on a shared server, only this browser's: others'
    show once they are finished), and the last ended ones."""
    got = jobs.list_jobs(kinds=KINDS)
    active = [j for j in got if j.active and jobs.visible_while_active(j, state.browser_token())]
    ended = [j for j in got if not j.active][:3]
    return active + ended


def job_row(job) -> None:
    """One training or series job in the job panel (ui/run.panel): progress, failure with Retry, or its end."""
    name = md(job.label or job.kind)
    if job.active:
        jobs_panel.progress(job, f"**{name}**")
    elif job.status == jobs.FAILED:
        jobs_panel.failed(job, f"{name} failed: {jobs_panel.job_error(job)}")
    elif job.status == jobs.CANCELLED:
        st.caption(f":material/stop_circle: {name}: cancelled (a training resumes from its last checkpoint "
                   "when queued again)")
    elif job.status == jobs.DONE:
        st.caption(f":material/check_circle: {name}: done")


def forget_listings() -> None:
    """A training or series job ended: list the trained runs again."""
    _runs_in.clear()
    _record_in.clear()


def _last_end() -> float:
    """When the last training/series job ended: a listing older than that is stale."""
    return max((j.finished or 0.0 for j in jobs.list_jobs(kinds=KINDS) if not j.active), default=0.0)


def runs_on_disk() -> list[str]:
    """The trained runs of the current cache directory (cached a few seconds, keyed on the folder
    and on the end of the last training job, so a finished training shows in every session)."""
    return _runs_in(str(checkpoints.trained_dir()), _last_end())


def record(run: str) -> dict:
    return _record_in(str(checkpoints.trained_dir()), run, _last_end())


@st.cache_data(ttl=5, show_spinner=False)
def _runs_in(folder: str, stamp: float) -> list[str]:
    return checkpoints.list_runs()


def series_on_disk() -> list[str]:
    """What the Dynamics page can show: the trained runs, then the hub series (`hub:org/name`)."""
    return runs_on_disk() + hub_series.list_series()


def add_hub_series(name: str, revisions: str, **series_kw) -> str:
    """Keep a hub model's revisions as a series and queue its analysis (InputError: why not).

    The id takes the sidebar's rule first (`core.inputs.access.check_model`): no hub on a server that switched
    it off (ANISO_ALLOW_HUB=0, ANISO_SHARED=1), and no name that is a folder of the server."""
    check_model(str(name).strip())
    run = hub_series.register(name, revisions)
    submit_series(run, **series_kw)
    return run


@st.cache_data(ttl=5, show_spinner=False)
def _record_in(folder: str, run: str, stamp: float) -> dict:
    return checkpoints.read_run(run)


def cached_series(run: str, **series_kw) -> dict | None:
    """The analysed series when every checkpoint is cached (never computes); else None."""
    steps = [s for s, _ in S.series_specs(run, **series_kw)]
    if S.cached_steps(run, **series_kw) != steps:
        return None
    return _series(run, tuple(sorted(series_kw.items())))


@st.cache_data(max_entries=8, show_spinner=False)
def _series(run: str, kw: tuple) -> dict:
    return S.analyze_series(run, **dict(kw))


def with_chain(ser: dict) -> dict:
    """The series with each checkpoint's stored chain section (core chain: its super weights) where there is
    one, so that Dynamics draws the super weight's magnitude over training. Never computes."""
    got = []
    for sp, res in zip(ser.get("specs") or [], ser["results"]):
        try:
            sec = cached_chain_section(resolve(RunSpec.from_dict(sp)))
        except (InputError, ValueError, OSError):  # a checkpoint no longer on disk: its section is not read
            sec = None
        got.append({**res, "chain": sec} if sec else res)
    return {**ser, "results": got} if ser.get("specs") else ser
