"""Helpers of the AppTest tests: the app's path, the small selection, figure decoding."""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
# Fast runs (one seed per untrained control); the URL carries them like a shared link would.
SMALL = {"tokens": "2000", "sample": "500", "seeds": "1"}
TIMEOUT = 120


@contextlib.contextmanager
def entrypoint_runs_every_time():
    """Make AppTest run app.py on every rerun, as `streamlit run` does.

    AppTest 1.67 treats a folder named pages/ next to the script as an old-style pages directory
    and, from the second run on, executes the page file alone (no sidebar, no navigation). A real
    server always runs the entrypoint when it calls st.navigation (checked by the browser test).
    """
    import pytest
    from streamlit.runtime.pages_manager import PagesManager

    orig = PagesManager.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        PagesManager.uses_pages_directory = False

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PagesManager, "__init__", init)
        yield


def app_factory(timeout: float = TIMEOUT):
    """make(models=[...], page=None, **query) -> an AppTest after its first run (and the page's)."""
    from streamlit.testing.v1 import AppTest

    def make(models=("minilm-l6",), page: str | None = None, **query):
        at = AppTest.from_file(APP, default_timeout=timeout)
        for k, v in {**SMALL, **query}.items():
            at.query_params[k] = v
        if tuple(models) != ("minilm-l6",):
            at.query_params["models"] = list(models)
        at.run()
        if page:
            at.switch_page(page).run()
        return at

    return make


def run_clicked(at, timeout: float = 900):
    """Press Run (it queues jobs), wait for the worker to finish every job, then rerun the page."""
    at.sidebar.button(key="run").click().run()
    wait_for_jobs(timeout)
    at.run()
    return at


def wait_for_jobs(timeout: float = 900) -> None:
    """Wait until the worker has finished every queued or running job."""
    import time

    from core.entry import jobs

    t0 = time.monotonic()
    while any(j.active for j in jobs.list_jobs()):
        assert time.monotonic() - t0 < timeout, [j.describe() for j in jobs.list_jobs()]
        time.sleep(0.5)


def stop_worker(cache_dir, timeout: float = 60) -> None:
    """Stop the worker of `cache_dir` and wait until its process is gone: ensure_worker does not start
    another while the last one it spawned (under a minute ago) is still alive, even while exiting."""
    import time

    from core.entry import jobs, worker

    pid = worker.worker_pid(cache_dir)
    worker.stop_worker(cache_dir)
    t0 = time.monotonic()
    while pid and pid > 0 and jobs.pid_alive(pid):
        assert time.monotonic() - t0 < timeout, f"the worker {pid} did not exit"
        time.sleep(0.1)


def no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def decode(v):
    """Plotly 7 figure JSON stores arrays as {"dtype", "bdata" (base64), "shape"}: back to numpy."""
    if isinstance(v, dict) and "bdata" in v:
        arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        if "shape" in v:
            arr = arr.reshape([int(s) for s in str(v["shape"]).split(",")])
        return arr
    if isinstance(v, list):
        return np.asarray([np.nan if x is None else x for x in v], dtype=float) \
            if all(isinstance(x, (int, float)) or x is None for x in v) else v
    return v


def figures(at) -> list[dict]:
    """Every st.plotly_chart of the page as a figure dict with decoded arrays."""
    out = []
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        for tr in spec["data"]:
            for k in ("x", "y", "z"):
                if k in tr:
                    tr[k] = decode(tr[k])
            if isinstance(tr.get("marker"), dict) and "color" in tr["marker"]:
                tr["marker"]["color"] = decode(tr["marker"]["color"])
        out.append(spec)
    return out


def title(fig: dict) -> str:
    t = fig["layout"].get("title", {})
    return t.get("text", "") if isinstance(t, dict) else str(t)


def by_title(at, text: str) -> dict:
    figs = [f for f in figures(at) if text in title(f)]
    assert figs, f"no figure titled {text!r}: {[title(f) for f in figures(at)]}"
    return figs[0]
