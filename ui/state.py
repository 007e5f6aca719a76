"""The selection in st.session_state (one key) and in the URL query params.

`selection()` reads it (from the URL on a session's first run); `update(**fields)` replaces it
and writes the non-default fields back to the URL, so any view can be shared and reloaded.
The run log (errors of this session, whether a job of the selection is active) lives under a second key.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import streamlit as st

from core.base.errors import InputError
from core.base.escape import markdown_text
from core.inputs import uploads
from core.studies.selection import Selection, from_query_params, to_query_params

KEY = "selection"
LOG_KEY = "run_log"
PAGE_KEY = "url_page"  # the url_path of the page on show: its URL leaves out the other pages' keys


@dataclass
class RunLog:
    errors: dict[str, str] = field(default_factory=dict)  # run id -> message of the last failure
    url_problems: list[str] = field(default_factory=list)
    uploads: list[str] = field(default_factory=list)  # corpus entries uploaded/pasted in this session ("id#col")
    corpus_problem: str | None = None  # the chosen corpus failed (upload, paste), as plain text: the pages say
    # what they show (escaped where shown)
    jobs_active: bool = False  # a job of the selection is queued or running (set by the jobs panel)
    ablations: dict[str, list] = field(default_factory=dict)  # run id -> the dim sets this session asked to ablate
    dynamics_runs: list[str] = field(default_factory=list)  # the runs Dynamics opens with (a preset, a hub series)
    dynamics_labels: dict[str, str] = field(default_factory=dict)  # run -> the name a preset gave it ("BPE", "bytes")
    no_models: bool = False  # the sidebar's models box is empty: the pages show no run (the selection keeps the last)


def run_id(spec) -> str:
    return repr(spec)


def _url_params() -> dict[str, list[str]]:
    qp = st.query_params
    return {k: qp.get_all(k) for k in qp.keys()}


def log() -> RunLog:
    if LOG_KEY not in st.session_state:
        st.session_state[LOG_KEY] = RunLog()
    return st.session_state[LOG_KEY]


def selection() -> Selection:
    uploads.viewing_as(browser_token())  # every view of this run names uploads as this browser named them
    if KEY not in st.session_state:
        sel, problems = from_query_params(_url_params())
        st.session_state[KEY] = sel
        log().url_problems = problems
    return st.session_state[KEY]


def set_page(url_path: str) -> str:
    """The page on show (app.py, before anything writes the URL): its name."""
    name = "layers" if url_path in ("", "home") else url_path
    st.session_state[PAGE_KEY] = name
    return name


def page_name() -> str | None:
    """The page on show ("layers", "compare", ...; set by app.py)."""
    return st.session_state.get(PAGE_KEY)


def sync_url(sel: Selection | None = None) -> None:
    sel = sel or selection()
    want = to_query_params(sel, st.session_state.get(PAGE_KEY))
    if log().no_models:  # the models box is empty: a link of this view must not reopen the last models
        want.pop("models", None)
    have = _url_params()
    norm = {k: (v if isinstance(v, list) else [v]) for k, v in want.items()}
    if norm != have:
        st.query_params.from_dict(want)


def forget_widgets(keys) -> None:
    """Drop widget states so the widgets redraw from the selection (e.g. after a reset)."""
    for k in keys:
        st.session_state.pop(k, None)


def update(**fields) -> Selection:
    """Replace fields of the selection; on a bad value show the message and keep the old one."""
    old = selection()
    try:
        new = old.replace(**fields)
    except (InputError, ValueError) as e:
        st.error(markdown_text(str(e)))
        return old
    if new != old:
        st.session_state[KEY] = new
    sync_url(new)
    return new


def apply_preset(**fields) -> Selection:
    """Set fields from a preset button (its on_click callback: before any widget of the rerun exists), and the
    sidebar's widgets to the same values. A widget keeps its own value across reruns, in the browser too:
    dropping its state is not enough (the browser would send its old value back with the next click, e.g.
    Run's, and undo the preset), so the models box is given the preset's value through the session state,
    which Streamlit sends to the browser."""
    for k in ("w_image_corpus", "w_audio_corpus"):
        st.session_state.pop(k, None)
    new = update(**fields)
    st.session_state["w_models"] = list(new.models)
    return new


def browser_token() -> str:
    """A random token of this browser session: the jobs it queues carry it, and on a shared server
    (ANISO_SHARED=1) only it may cancel them (no accounts: a session is who started a job)."""
    return st.session_state.setdefault("_browser_token", secrets.token_hex(16))


def remember_upload(uid: str) -> str:
    """Note an upload of this browser session (on a shared server, Clear cache removes only these)."""
    st.session_state.setdefault("_my_uploads", set()).add(uid)
    return uid


def my_uploads() -> set[str]:
    return set(st.session_state.get("_my_uploads", ()))
