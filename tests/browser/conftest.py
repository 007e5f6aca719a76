"""Browser tests: one `streamlit run app.py` (own cache, own worker) and one Debian chromium for the whole
browser tier, shared by its modules (a server and its worker cost ~10 CPU-seconds to start, Chromium ~2);
modules that need other settings start their own server (test_hostile_input, test_shared_server).

Sharing means that a test sees the runs and jobs of the modules before it: select your own jobs by their
label (budgets differ between modules), never assume an empty queue or cache. The one test that must see
the server's very first visit (test_default_flow's deep link) is moved to the front of the tier below.
"""

from __future__ import annotations

import pytest
from browser_helpers import ARGS, CHROMIUM

from bench.appserver import app_server

FIRST = "test_deep_link_on_a_fresh_server_goes_through_the_app"


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("browser-cache")
    try:
        with app_server(cache, tmp_path_factory.mktemp("log") / "streamlit.log") as (url, _):
            yield url, cache
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def pytest_collection_modifyitems(config, items):
    """After the repository's ordering (conftest.py, tryfirst): the first-visit test leads the browser tier."""
    first = [i for i, it in enumerate(items) if it.name == FIRST]
    browser = [i for i, it in enumerate(items) if it.get_closest_marker("browser")]
    if first and browser and first[0] != browser[0]:
        items.insert(browser[0], items.pop(first[0]))


from tests.hub_fixtures import hub_server, hub_work  # noqa: E402,F401 - the loopback hub (test_hub_flow)
