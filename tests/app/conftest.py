"""AppTest fixtures: run app.py in-process with a selection from the URL, on synthetic runs (no model).

The app tier has its own cache directory (this `cache_dir` replaces the session one of tests/conftest.py),
and the worker the app starts there runs the "analyze" job on synthetic statistics written under the
run's real key (synthetic_runs.py; the worker imports synthetic_jobs.py through ANISO_JOB_MODULES). Loading a model
fails, in the worker and in this process. After the last app test of a stretch (the next test belongs to
another tier, or there is none), that worker is stopped and the environment and the model loader restored:
no other tier ever sees a synthetic run. Under pytest-xdist (`./dev.sh test`) a worker process may run app
test files between other tiers' files: each app module enters the app tier's environment again (`_enter`
is idempotent), and leaves it after its last test as above.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import synthetic_runs
from app_helpers import app_factory, entrypoint_runs_every_time, stop_worker

HERE = Path(__file__).resolve().parent
_SAVED: dict = {}  # while the app tier's environment is in force: the environment before it, and its cache directory


@pytest.fixture(autouse=True, scope="session")
def _entrypoint_runs_every_time():
    with entrypoint_runs_every_time():  # session-wide: module fixtures run apps too
        yield


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """The app tier's cache, served by a worker that runs synthetic extractions (see the module doc)."""
    d = tmp_path_factory.mktemp("app-cache")
    _enter(d)
    yield d
    _leave()


@pytest.fixture(autouse=True, scope="module")
def _app_module(cache_dir):
    """Every app module in the app tier's environment, before its own module fixtures run (autouse
    fixtures come first within a scope): it may follow another tier's tests in this process."""
    _enter(cache_dir)


@pytest.fixture(autouse=True)
def _app_cache(cache_dir):
    """Every app test in the app tier's cache, even one that asks for no fixture."""
    _enter(cache_dir)


@pytest.fixture
def fresh_worker(cache_dir):
    """For a test that sets ANISO_DATA_DIR (or another setting the worker checks jobs against): the
    worker is stopped before and after, so the one its Run starts has the test's settings."""
    stop_worker(cache_dir)
    yield
    stop_worker(cache_dir)


def _enter(d: Path) -> None:
    """Switch this process to the app tier's cache, job modules and synthetic runs (nothing if it is already)."""
    if "_dir" in _SAVED:
        return
    path = os.pathsep.join([str(HERE), str(HERE.parent), str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])
    # ANISO_WORKER_WARM=0: the worker starts on Run only (not when a page opens: tests with caches of their own
    # would each leave one), and it runs synthetic extractions: importing torch and loading MiniLM first (what
    # the app's worker does to draw a real run's first curve sooner) would only cost each start.
    for k, v in {"ANISO_CACHE_DIR": str(d), "ANISO_JOB_MODULES": "synthetic_jobs", "PYTHONPATH": path,
                 "ANISO_WORKER_WARM": "0"}.items():
        _SAVED[k] = os.environ.get(k)
        os.environ[k] = v
    _SAVED["_dir"] = d
    synthetic_runs.refuse_models()  # here as in the worker: a page that loads a model fails its test
    synthetic_runs.use_synthetic_analyze()  # a job the app runs in this process (read-only cache) too


def _leave() -> None:
    """Stop the app tier's worker and give the next tiers their environment back (once)."""
    if "_dir" not in _SAVED:
        return
    stop_worker(_SAVED.pop("_dir"))
    synthetic_runs.allow_models()
    for k, v in _SAVED.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _SAVED.clear()


def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or HERE not in Path(str(nextitem.path)).resolve().parents:
        _leave()  # the last app test of this stretch: the next test (if any) is another tier's


@pytest.fixture
def app(cache_dir):
    """A factory: app(models=[...], **query) -> AppTest after its first run."""
    return app_factory()
