"""AppTest fixtures: run app.py in-process with a selection from the URL."""

from __future__ import annotations

import pytest
from app_helpers import app_factory


@pytest.fixture(autouse=True, scope="session")
def _entrypoint_runs_every_time():
    """Make AppTest run app.py on every rerun, as `streamlit run` does.

    AppTest 1.67 treats a folder named pages/ next to the script as an old-style pages directory
    and, from the second run on, executes the page file alone (no sidebar, no navigation). A real
    server always runs the entrypoint when it calls st.navigation (checked by the browser test).
    """
    from streamlit.runtime.pages_manager import PagesManager

    orig = PagesManager.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        PagesManager.uses_pages_directory = False

    with pytest.MonkeyPatch.context() as mp:  # session-wide: module fixtures run apps too
        mp.setattr(PagesManager, "__init__", init)
        yield


@pytest.fixture(autouse=True, scope="session")
def _job_worker(cache_dir):
    """The app starts a worker process for the session's cache on its first Run: stop it at the end."""
    yield
    from core import jobs

    jobs.stop_worker(cache_dir)


@pytest.fixture
def app(cache_dir):
    """A factory: app(models=[...], **query) -> AppTest after its first run."""
    return app_factory()
