"""Browser tests: one `streamlit run app.py` per test module (own cache, own worker), Debian's chromium."""

from __future__ import annotations

import pytest
from browser_helpers import ARGS, CHROMIUM

from bench.appserver import app_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("browser-cache")
    try:
        with app_server(cache, tmp_path_factory.mktemp("log") / "streamlit.log") as (url, _):
            yield url, cache
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


