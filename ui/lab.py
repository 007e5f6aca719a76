"""The Lab page's work: the stored labs (cached reads of <cache_dir>/labs/), the "lab" job queued from its form
(one job trains the whole grid; core/studies/lab.py), and that job's live progress, Cancel and Retry (the same
panel widgets as every job's)."""

from __future__ import annotations

import dataclasses
import time

import streamlit as st

from core.base.errors import InputError
from core.base.escape import markdown_text as md
from core.entry import jobs
from core.studies.lab import FACTORS, QUICK_FAMILIES
from core.studies.train_spec import ARCHS, TrainSpec
from core.views import lab as LV

from . import state
from .jobs_panel import failed, job_error, progress, start_worker

KIND = "lab"
POLL_S = 1.0
REDRAW_S = 10.0  # while a lab runs, its page redraws the grid (its record rewritten) at most this often
STAMP_KEY = "_lab_stamp"
THRESHOLDS = (0.2, 0.5)  # the mean cosines whose first crossing over training each run reports
# The factors the form offers: core.studies.lab.FACTORS (name -> level -> the TrainSpec fields that level sets). A
# factor is offered when TrainSpec has every field its levels set, a level when its arch is one TrainSpec trains.
FACTOR_TITLES = {"arch": "Architecture family", "optimizer": "Optimizer", "tied": "Tied input/output embeddings",
                 "gate": "Attention output gate (LLaMA-style)", "norm": "Norm placement (pre: GPT-2, post: causal BERT)",
                 "tokenizer": "Tokenisation", "data": "Data (natural text or uniform tokens)",
                 "objective": "Objective (causal GPT-2 or masked BERT)"}
# Issue 41's quick lab: 4 families x 1 seed, 500 steps, 2 layers, d = 128 (under 10 minutes on 2 CPU cores).
QUICK = {"seeds": 1, "steps": 500, "n_layers": 2, "d_model": 128}
DEFAULT = {"seeds": 3, "steps": 2000, "n_layers": 2, "d_model": 128}


def _trainable(over: dict) -> bool:
    fields = {f.name for f in dataclasses.fields(TrainSpec)}
    return all(k in fields for k in over) and over.get("arch", "gpt2") in ARCHS


def factors_offered() -> dict[str, tuple]:
    """factor -> the levels this workbench's TrainSpec trains (a factor with fewer than two is not offered)."""
    out = {}
    for name, levels in FACTORS.items():
        ok = tuple(lv for lv, over in levels.items() if _trainable(over))
        if len(ok) > 1:
            out[name] = ok
    return out


def level_text(v) -> str:
    return str(v)


def quick_levels() -> dict[str, list]:
    """The quick lab's factors: the families this workbench trains."""
    return {"arch": [a for a in QUICK_FAMILIES if a in ARCHS]}


def lab_params(factors: dict[str, list], seeds: int, steps: int, n_layers: int, d_model: int) -> dict:
    """The "lab" job's params ({"lab": the lab's spec}) from the form: a factor needs two levels (one level is a
    setting of the base run, not a factor). InputError: no factor, or a base setting TrainSpec refuses."""
    grid = {k: [str(x) for x in v] for k, v in factors.items() if len(v) > 1}
    fixed = {f: val for k, v in factors.items() if len(v) == 1 for f, val in FACTORS[k][str(v[0])].items()}
    if not grid:
        raise InputError("Choose two or more levels of at least one factor: a lab compares levels.")
    if not 1 <= int(seeds) <= 10:
        raise InputError(f"Seeds must be 1 to 10, got {seeds}.")
    base = TrainSpec(steps=int(steps), n_layers=int(n_layers), d_model=int(d_model), **fixed)
    return {"lab": {"factors": grid, "seeds": list(range(int(seeds))), "base": base.to_dict(),
                    "thresholds": list(THRESHOLDS)}}


def describe(params: dict) -> str:
    spec = params["lab"]
    f = " × ".join(f"{k}: {', '.join(map(level_text, v))}" for k, v in spec["factors"].items())
    n = len(spec["seeds"])
    return f"lab {f}, {n} seed{'s' if n != 1 else ''}, {spec['base']['steps']:,} steps"


def submit(params: dict) -> str:
    """Queue the lab (one job for the whole grid; the same params join the same job)."""
    jid = jobs.submit(KIND, params, label=describe(params), owner=state.browser_token())
    start_worker()
    return jid


def lab_jobs() -> list:
    """The lab jobs: every active one (on a shared server only this browser's), then the last ended one."""
    try:
        got = jobs.list_jobs(kinds=(KIND,))
    except InputError:
        return []
    active = [j for j in got if j.active and jobs.visible_while_active(j, state.browser_token())]
    ended = [j for j in got if not j.active][:1]
    return active + ended


def panel() -> None:
    """The lab jobs' rows: live progress while one runs (polling; the page reruns when it ends), failure with Retry."""
    got = lab_jobs()
    if any(j.active for j in got):
        _live()
        return
    for job in got:
        _row(job)


def _row(job) -> None:
    name = md(job.label or "lab")
    if job.active:
        progress(job, f"**{name}**")
        if job.progress.message:
            st.caption(md(job.progress.message))
    elif job.status == jobs.FAILED:
        failed(job, f"{name} failed: {job_error(job)}")
    elif job.status == jobs.CANCELLED:
        st.caption(f":material/stop_circle: {name}: cancelled (its finished runs are kept; queued again, it goes on "
                   "from there)")
    elif job.status == jobs.DONE:
        st.caption(f":material/check_circle: {name}: done")


@st.fragment(run_every=POLL_S)
def _live() -> None:
    got = lab_jobs()
    if not any(j.active for j in got):
        st.rerun(scope="app")  # it ended: the page reads the finished lab
    # a run of the lab finished (its record was rewritten): the page draws the grid again, at most every REDRAW_S
    seen = st.session_state.get(STAMP_KEY)
    if seen is not None and seen[0] != _stamp() and time.monotonic() - seen[1] > REDRAW_S:
        st.rerun(scope="app")
    for job in got:
        if job.active:
            _row(job)


# ----------------------------------------------------------------------------- the stored labs
def _stamp() -> tuple:
    """The labs folder's files and their times: a listing older than a change is read again."""
    try:
        return tuple(sorted((p.name, p.stat().st_mtime_ns) for p in LV.labs_dir().glob("*.json")))
    except OSError:
        return ()


def labs() -> tuple[list[dict], list[str]]:
    """(the stored labs, newest first; a note per record that could not be read)."""
    stamp = _stamp()
    st.session_state[STAMP_KEY] = (stamp, time.monotonic())  # what this run drew (the live panel compares)
    return _labs_in(str(LV.labs_dir()), stamp)


@st.cache_data(max_entries=4, show_spinner=False)
def _labs_in(folder: str, stamp: tuple) -> tuple[list[dict], list[str]]:
    return LV.list_labs()
