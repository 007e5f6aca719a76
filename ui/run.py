"""The Run button's work: extract every selected run that is not cached yet, with a progress bar
per model (tokens/s, ETA) and a Cancel button.

Cancelling: clicking Cancel (or any widget) makes Streamlit stop this script at its next
Streamlit call (each progress update is one), and `cancel` below also tells the extraction loop
to stop between batches; the pipeline writes a cache entry whole or not at all, so nothing
partial is stored. The run log remembers an unfinished run so the next rerun can say so.
"""

from __future__ import annotations

import math
import time

import streamlit as st

from core import pipeline, views
from core.errors import Cancelled, InputError
from core.extract import Progress
from core.models import describe_model

from . import data, state


def _stop_requested() -> bool:
    """True once the browser asked for a rerun or a stop (Cancel or another widget was used)."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        req = getattr(ctx, "script_requests", None)
        return req is not None and getattr(req, "_state", None) is not None and req._state.name != "CONTINUE"
    except Exception:  # noqa: BLE001 - internal API: never let the probe break a run
        return False


def _fmt_eta(s: float) -> str:
    if not math.isfinite(s):
        return "…"
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


class _Bar:
    """Progress callback drawing one st.progress bar, throttled to ~5 updates per second."""

    def __init__(self, label: str):
        self.label = label
        self.bar = st.progress(0.0, text=f"{label}: waiting")
        self.t = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.perf_counter()
        if p.stage == "forward" and 0 < p.done < p.total and now - self.t < 0.2:
            return
        self.t = now
        if p.stage == "forward" and p.total:
            frac = min(1.0, p.done / p.total)
            text = (f"{self.label}: {p.done:,} / {p.total:,} tokens · {p.tokens_per_s:,.0f} tokens/s · "
                    f"ETA {_fmt_eta(p.eta_s)}")
        elif p.stage == "metrics":
            frac, text = 1.0, f"{self.label}: per-layer metrics…"
        else:
            frac, text = 0.0, f"{self.label}: {p.message or p.stage}…"
        self.bar.progress(frac, text=text)


def report_interrupted() -> None:
    """Say so when the previous run did not finish (Cancel or another widget stopped it)."""
    lg = state.log()
    if lg.in_progress:
        lg.interrupted, lg.in_progress = list(lg.in_progress), []
    if lg.interrupted:  # shown once, on the rerun that followed the interruption
        st.warning("The last run was cancelled before it finished; nothing partial was stored. "
                   "Press Run to start it again.", icon=":material/stop_circle:")
        lg.interrupted = []


def run(sel) -> None:
    """Compute the selected runs that are not cached (called when Run was pressed)."""
    lg = state.log()
    lg.interrupted = []
    todo, seen = [], set()
    for spec in sel.specs():
        try:
            cached = pipeline.is_cached(spec)
        except InputError as e:
            lg.errors[state.run_id(spec)] = str(e)
            continue
        if not cached and state.run_id(spec) not in seen:
            todo.append(spec)
            seen.add(state.run_id(spec))
    if not todo:
        st.toast("Everything selected is already computed: loaded from cache.")
        return
    box = st.container(border=True)
    with box:
        head, btn = st.columns([5, 1])
        head.markdown(f"**Running {len(todo)} extraction{'s' if len(todo) > 1 else ''}** "
                      f"({views.corpus_display(sel.corpus)}, {sel.max_tokens:,} tokens each)")
        btn.button("Cancel", key="cancel_run", icon=":material/stop_circle:",
                   help="Stop the run; nothing partial is stored.")
        bars = [(spec, _Bar(describe_model(spec.model)["label"])) for spec in todo]
    lg.in_progress = [state.run_id(s) for s in todo]
    for spec, bar in bars:
        rid = state.run_id(spec)
        t0 = time.perf_counter()
        try:
            pipeline.analyze(spec, progress=bar, cancel=_stop_requested)
        except Cancelled:  # rid stays in lg.in_progress: the next rerun reports the cancellation
            bar.bar.progress(0.0, text=f"{bar.label}: cancelled, nothing stored")
            return
        except InputError as e:
            lg.errors[rid] = str(e)
        except MemoryError:
            lg.errors[rid] = ("Out of memory: lower the token budget, the sample size, the batch size or the "
                              "maximum sequence length, and run again.")
        except Exception as e:  # noqa: BLE001 - keep the app alive; the message is shown on the page
            lg.errors[rid] = f"Unexpected error: {type(e).__name__}: {e}"
        lg.in_progress.remove(rid)
        if rid in lg.errors:
            bar.bar.progress(0.0, text=f"{bar.label}: failed (see the message below)")
            continue
        lg.errors.pop(rid, None)
        lg.computed[rid] = time.perf_counter() - t0
        bar.bar.progress(1.0, text=f"{bar.label}: done in {lg.computed[rid]:.1f} s")
    lg.in_progress = []
    data.is_cached.clear()
    st.rerun()  # redraw everything (sidebar counts, pages) from the cache
