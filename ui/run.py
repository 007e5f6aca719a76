"""Run and the jobs panel: Run queues one job per selected run that is not computed; every page
shows the selection's jobs with live progress (tokens/s, ETA), Cancel and Retry.

Jobs run in the worker process (core.entry.jobs), never in a script run: navigating, any widget, a
reload or a closed tab leave them running. The panel is a fragment that polls the job records
every second while one of them is queued or running; when one ends, it reruns the whole app so
the pages draw the new results (no manual reload, no second Run).
"""

from __future__ import annotations

import time

import streamlit as st

from core import views
from core.base import settings
from core.base.errors import InputError
from core.base.escape import markdown_text as md
from core.compute import pipeline
from core.entry import job_queue, jobs
from core.inputs.models import describe_model
from core.studies.attention import maps_params

from . import data, state, training
from .jobs_panel import failed, job_error, progress, start_worker

POLL_S = 1.0  # how often an active panel reads the job records
ENSURE_WORKER_S = 5.0  # how often an active panel checks that a worker serves the queue
VIEWER_WAIT_S = 60.0  # how long the attention viewer's Show waits for its job (queued behind others: less)


def analyze_params(spec) -> dict:
    """The spec with its resolution (run key, fingerprints): the worker computes no key again."""
    return pipeline.analyze_params(data.resolved(spec))


def ablation_params(spec, dims: tuple[int, ...] | None = None) -> dict:
    """dims: the chosen set (None: the persistent outliers); default draws and held-out text."""
    return {**analyze_params(spec), "dims": None if dims is None else [int(d) for d in dims]}


@st.cache_data(ttl=60, max_entries=256, show_spinner=False)
def job_id(kind: str, spec, dims: tuple[int, ...] | None = None) -> str:
    """The id of the one job computing this (fingerprints the model and corpus: cached briefly)."""
    if kind == "ablation":
        return jobs.job_id(kind, ablation_params(spec, dims))
    params = {"chain-ablation": chain_ablation_params}.get(kind, analyze_params)(spec)
    return jobs.job_id(kind, params)


def _label(spec) -> str:
    return (f"{describe_model(spec.model)['label']} on {views.corpus_display(spec.corpus, spec.text_column)}, "
            f"{spec.max_tokens:,} tokens, seed {spec.seed}")


def run(sel) -> None:
    """Queue the selected runs that are not computed (the Run button). Returns at once."""
    lg = state.log()
    queued = 0
    for spec in sel.specs():
        rid = state.run_id(spec)
        try:
            if data.is_cached(spec):
                continue
            lg.errors.pop(rid, None)
            jobs.submit("analyze", analyze_params(spec), label=_label(spec), here=True,
                        owner=state.browser_token())
            queued += 1
        except InputError as e:
            lg.errors[rid] = str(e)
    if not queued:
        st.toast("Everything selected is already computed: loaded from cache.")
        return
    start_worker()


def submit_ablation(spec, dims: tuple[int, ...] | None = None) -> str:
    """Queue the ablation of a computed run's chosen dims (the Outliers page's button)."""
    what = f"ablation of {len(dims)} dims, " if dims is not None else ""
    jid = jobs.submit("ablation", ablation_params(spec, dims), label=what + _label(spec), here=True,
                      owner=state.browser_token())
    sets = state.log().ablations.setdefault(state.run_id(spec), [])
    if dims is not None and tuple(dims) not in sets:
        sets.append(tuple(dims))  # the jobs panel follows it
    start_worker()
    return jid


def submit_chain(spec) -> str:
    """Queue the chain statistics of a computed run (the Chain page's button)."""
    jid = jobs.submit("chain", analyze_params(spec), label=_label(spec), here=True, owner=state.browser_token())
    start_worker()
    return jid


def chain_ablation_params(spec) -> dict:
    """The run and what its chain ablations zero (`data.chain_targets`): the key `core chain --ablate` uses too."""
    return {**analyze_params(spec), "targets": data.chain_targets(spec)}


def submit_chain_ablation(spec) -> str:
    """Queue the chain ablations of a computed run (the Chain page's button)."""
    jid = jobs.submit("chain-ablation", chain_ablation_params(spec), label=_label(spec), here=True,
                      owner=state.browser_token())
    start_worker()
    return jid


def submit_attention(spec) -> str:
    """Queue the attention statistics of a run (the Attention page's button)."""
    jid = jobs.submit("attention", analyze_params(spec), label=_label(spec), here=True,
                        owner=state.browser_token())
    start_worker()
    return jid


def attention_maps(spec, window: int) -> dict | None:
    """One window's attention maps for the viewer's Show: stored, or computed by an "attention-maps"
    job that Show waits for (at most VIEWER_WAIT_S: the model never runs in the page's script).
    None while that job is still queued or running; InputError when it failed."""
    got = data.attention_maps(spec, window)
    if got is not None:
        return got
    jid = jobs.submit("attention-maps", maps_params(data.resolved(spec), window),
                      label=f"window {window} of {_label(spec)}")
    start_worker()
    job = jobs.wait(jid, timeout=VIEWER_WAIT_S, poll_s=0.2)
    if job.status == jobs.FAILED:
        raise InputError(settings.without_server_paths(job.error or "the attention map's job failed"))
    return data.attention_maps(spec, window) if job.status == jobs.DONE else None


def job_active(kind: str, spec, dims: tuple[int, ...] | None = None) -> bool:
    """Whether the job computing `kind` ("analyze", "ablation" of `dims`, "attention") of `spec` is queued or
    running (a page then draws no second button that would queue it)."""
    try:
        job = jobs.status(job_id(kind, spec, dims))
    except InputError:
        return False
    return job is not None and job.active


def partials(specs) -> list[tuple[object, "jobs.Job", dict | None]]:
    """(spec, job, its last partial result or None) of the runs in `specs` whose extraction is running, or
    failed leaving a partial result (a failed run shows its last partial curve, marked as such)."""
    out = []
    for spec in specs:
        try:
            job = jobs.status(job_id("analyze", spec))
        except InputError:
            continue
        if job is None or job.status not in (jobs.QUEUED, jobs.RUNNING, jobs.FAILED):
            continue
        got = jobs.partial(job)
        if job.status == jobs.FAILED and got is None:
            continue
        out.append((spec, job, got))
    return out


def _jobs_of(sel, active_only: bool = False, trainings: bool = False) -> list[tuple[object, str, "jobs.Job | None"]]:
    """(spec, kind, job record or None) of the selection: its extractions, ablations and attention
    statistics. active_only: the queued or running jobs, and the runs whose Run failed to queue.
    trainings: then the training and series jobs (spec None), active and recently ended."""
    out = []
    for spec in sel.specs():
        try:
            job = jobs.status(job_id("analyze", spec))
            if jobs.cache_full(job) and not data.is_cached(spec):  # the worker could not store it: compute it
                jobs.run_here("analyze", analyze_params(spec), job.label)  # here, in memory, and show it
                job = jobs.status(job.id)
            out.append((spec, "analyze", job))
            sides = [("ablation", None)] + [("ablation", d) for d in state.log().ablations.get(state.run_id(spec), [])]
            for kind, dims in sides + [("attention", None)]:
                side = jobs.status(job_id(kind, spec, dims))
                if side is not None and all(side.id != j.id for _, _, j in out if j is not None):
                    out.append((spec, kind, side))
        except InputError:
            out.append((spec, "analyze", None))
    if active_only:
        errors = state.log().errors
        out = [(s, k, j) for s, k, j in out if (j is not None and j.active)
               or (k == "analyze" and state.run_id(s) in errors)]
    if trainings:
        out += [(None, j.kind, j) for j in training.recent_jobs()]
    return out


def panel(sel, active_only: bool = False, trainings: bool = False) -> None:
    """The job panel, the same on every page: the status of every selected run and its jobs, with
    live progress, Cancel and Retry. Polls while a job is queued or running.

    active_only: only the selection's jobs queued or running and Run's errors (the pages that show no
    run); trainings: the training and series jobs too (Train, Dynamics)."""
    damaged = job_queue.queue_notice()  # a damaged job queue was set aside: said once per page
    if damaged:
        st.warning(md(damaged), icon=":material/warning:")
    rows = _jobs_of(sel, active_only, trainings)  # read once per page run; the polling fragment reads them again
    active = any(j is not None and j.active for _, _, j in rows)
    state.log().jobs_active = active
    if active:
        _live_panel(sel, active_only, trainings)
    else:
        _panel_body(sel, polling=False, rows=rows)


@st.fragment(run_every=POLL_S)
def _live_panel(sel, active_only: bool, trainings: bool) -> None:
    _panel_body(sel, polling=True, active_only=active_only, trainings=trainings)


def _panel_body(sel, polling: bool, rows=None, active_only: bool = False, trainings: bool = False) -> None:
    lg = state.log()
    rows = _jobs_of(sel, active_only, trainings) if rows is None else rows
    still_active = False
    seen = st.session_state.setdefault("_jobs_seen_active", set())
    ended = False
    for _, _, job in rows:
        if job is not None and job.active:
            still_active = True
            seen.add(job.id)
        elif job is not None and job.id in seen:
            seen.discard(job.id)
            st.session_state.setdefault("_jobs_watched", set()).add(job.id)
            ended = True
    if ended or (polling and not still_active):
        # Before drawing anything: a button drawn by this (fragment) run would be replaced by the app's
        # rerun at once, and a click on it (Retry on a failed job) would go to a fragment that no longer
        # exists and be lost.
        training.forget_listings()
        st.rerun(scope="app")
    if polling and still_active:
        t = st.session_state.get("_jobs_worker_check", 0.0)
        if time.monotonic() - t > ENSURE_WORKER_S and any(j is not None and j.status == jobs.QUEUED
                                                         for _, _, j in rows):
            start_worker()
    for spec, kind, job in rows:
        if kind in training.KINDS:
            training.job_row(job)
        elif kind == "analyze":
            _run_status(spec, job, lg, f" (control, seed {spec.seed})" if spec.seed != sel.seed else "")
        elif kind == "ablation":
            _ablation_status(spec, job)
        else:
            _attention_status(spec, job)


def _run_status(spec, job, lg, extra: str = "") -> None:
    rid = state.run_id(spec)
    info = describe_model(spec.model)
    name = f"**{md(info['label'])}** on {md(views.corpus_display(spec.corpus, spec.text_column))}{extra}"
    note = f" — :material/warning: {info['note']}" if info.get("note") else ""
    if rid in lg.errors:
        st.error(f"{md(info['label'])}: {md(lg.errors[rid])}", icon=":material/error:")
        return
    if job is not None and job.active:
        progress(job, name)
        return
    try:
        cached = data.is_cached(spec)
    except InputError as e:
        st.error(md(str(e)), icon=":material/error:")
        return
    if cached:
        res = data.results(spec)
        n = res["manifest"]["tokens"]["analysed"]
        how = "loaded from cache"
        if job is not None and job.status == jobs.DONE and job.started and job.finished \
                and job.id in st.session_state.get("_jobs_watched", ()):  # this session saw it run
            how = f"computed in {job.finished - job.started:.1f} s"
        st.caption(f":material/check_circle: {name}: {how} · {n:,} tokens · {len(res['layers'])} layers{note}")
    elif job is not None and job.status == jobs.FAILED:
        failed(job, f"{md(info['label'])}: the extraction failed: {job_error(job)}")
    elif job is not None and job.status == jobs.CANCELLED:
        st.caption(f":material/stop_circle: {name}: the last run was cancelled; nothing partial was stored. "
                   f"Press **Run** to start it again{note}")
    else:
        st.caption(f":material/hourglass_empty: {name}: not computed yet for these settings — press **Run** "
                   f"in the sidebar{note}")


def _ablation_status(spec, job) -> None:
    label = md(f"{describe_model(spec.model)['label']} · {views.corpus_display(spec.corpus, spec.text_column)}")
    if job.active:
        progress(job, f"**Ablation** of {label}")
    elif job.status == jobs.FAILED and data.cached_ablation(spec, _dims_of(job)) is None:
        failed(job, f"{label}: the ablation failed: {job_error(job)}")


def _dims_of(job) -> tuple[int, ...] | None:
    dims = (job.params or {}).get("dims")
    return None if dims is None else tuple(int(d) for d in dims)


def _attention_status(spec, job) -> None:
    label = md(f"{describe_model(spec.model)['label']} · {views.corpus_display(spec.corpus, spec.text_column)}")
    if job.active:
        progress(job, f"**Attention statistics** of {label}")
    elif job.status == jobs.FAILED and not data.attention_cached(spec):
        failed(job, f"{label}: the attention statistics failed: {job_error(job)}")
