"""The Train and Dynamics pages' work: train runs and analyse series with a progress bar and a
Cancel button (the same stop probe as the Run button), and cached reads of what is on disk."""

from __future__ import annotations

import math
import time

import streamlit as st

from core import series as S
from core import trained
from core.errors import Cancelled, InputError
from core.extract import Progress
from core.train import TrainSpec, train


def _stop_requested() -> bool:
    """True once the browser asked for a rerun or a stop (Cancel or another widget was used).

    Trainings still run inside the page's script run (not yet a job of the queue): any widget
    stops them between steps, and the next Train resumes from the last checkpoint."""
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
    def __init__(self, label: str):
        self.label = label
        self.bar = st.progress(0.0, text=f"{label}: starting")
        self.t = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.perf_counter()
        if 0 < p.done < p.total and now - self.t < 0.25:
            return
        self.t = now
        if p.stage == "train" and p.total:
            text = (f"{self.label}: step {p.done:,} / {p.total:,} · {p.tokens_per_s:,.0f} tokens/s · "
                    f"ETA {_fmt_eta(p.eta_s)}")
            self.bar.progress(min(1.0, p.done / p.total), text=text)
        elif p.stage == "series" and p.total:
            self.bar.progress(min(1.0, p.done / p.total), text=f"{self.label}: {p.message}")
        elif p.stage != "forward":
            self.bar.progress(0.0, text=f"{self.label}: {p.message or p.stage}…")


def _cancel_button(key: str) -> None:
    st.button("Cancel", key=key, icon=":material/stop_circle:",
              help="Stop; a training keeps its resumable state (train again to continue), an analysis stores "
                   "every checkpoint finished so far.")


def train_and_analyse(runs: dict[str, TrainSpec], analyse: bool = True, **series_kw) -> list[str]:
    """Train each spec (a finished one is reused), then analyse its series. Returns run names."""
    names = []
    with st.container(border=True):
        _cancel_button("cancel_train")
        for label, spec in runs.items():
            try:
                rec = train(spec, progress=_Bar(f"training {label}"), cancel=_stop_requested)
                names.append(rec["run"])
                if analyse:
                    S.analyze_series(rec["run"], progress=_Bar(f"analysing {label}"), cancel=_stop_requested,
                                     **series_kw)
            except Cancelled as e:
                st.warning(str(e), icon=":material/stop_circle:")
                return names
            except InputError as e:
                st.error(str(e), icon=":material/error:")
                return names
    runs_on_disk.clear()
    return names


def analyse(run: str, **series_kw) -> bool:
    with st.container(border=True):
        _cancel_button("cancel_series")
        try:
            S.analyze_series(run, progress=_Bar(f"analysing {run}"), cancel=_stop_requested, **series_kw)
            return True
        except Cancelled:
            st.warning("Analysis cancelled; the checkpoints finished so far are cached.", icon=":material/stop_circle:")
        except InputError as e:
            st.error(str(e), icon=":material/error:")
    return False


@st.cache_data(ttl=5, show_spinner=False)
def runs_on_disk() -> list[str]:
    return trained.list_runs()


@st.cache_data(ttl=5, show_spinner=False)
def record(run: str) -> dict:
    return trained.read_run(run)


def cached_series(run: str, **series_kw) -> dict | None:
    """The analysed series when every checkpoint is cached (never computes); else None."""
    steps = [s for s, _ in S.series_specs(run, **series_kw)]
    if S.cached_steps(run, **series_kw) != steps:
        return None
    return _series(run, tuple(sorted(series_kw.items())))


@st.cache_data(max_entries=8, show_spinner=False)
def _series(run: str, kw: tuple) -> dict:
    return S.analyze_series(run, **dict(kw))
