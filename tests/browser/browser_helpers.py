"""Constants and helpers shared by the browser tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.appserver import CHROMIUM, ROOT  # noqa: F401 - shared with bench.load; re-exported for the tests
from bench.appserver import CHROMIUM_ARGS as ARGS  # noqa: F401


def plots_with_traces(page) -> list[int]:
    """Number of traces of every drawn Plotly figure on the page, except those of the last run still on
    screen while a new run replaces them (Streamlit marks them data-stale): after a click to another
    page, the last page's figures must not count as this page's; and except the partial curves of a run
    still computing (their title says "partial result"): a test waiting for a run's figures waits for its
    final ones."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
                                .filter(el => !el.closest('[data-stale="true"]'))
                                .filter(el => !(((el.layout || {}).title || {}).text || '').includes('partial result'))
                                .map(el => (el.data || []).length)""")


def wait_plots(page, n: int, timeout_s: float = 240) -> list[int]:
    t0 = time.time()
    got = []
    while time.time() - t0 < timeout_s:
        got = plots_with_traces(page)
        if len([g for g in got if g > 0]) >= n:
            return got
        page.wait_for_timeout(500)
    # what the page showed instead (a CI failure is read from the log alone): its text, shortened
    text = " ".join(page.evaluate("() => (document.querySelector('[data-testid=stMain]') || document.body).innerText")
                    .split())
    raise AssertionError(f"expected {n} drawn figures, got traces {got}; the page said: {text[:1500]}")


def settle(page) -> None:
    """Wait until Streamlit is idle (no 'Running...' status widget)."""
    page.wait_for_timeout(500)
    page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=240_000)
    page.wait_for_timeout(800)


def goto_page(page, title: str, wait: bool = True) -> None:
    page.get_by_test_id("stSidebarNav").get_by_text(title, exact=True).click()
    if wait:
        page.wait_for_timeout(500)
        settle(page)


def download(page, key: str, fmt: str, timeout_ms: float = 120_000):
    """Download a figure's `fmt` (PNG, CSV, ...) through its lazy "Download" popover (opened first when
    closed); returns Playwright's Download."""
    body = page.get_by_test_id("stPopoverBody")
    button = body.get_by_role("button", name=fmt, exact=True)
    if not button.count():
        page.locator(f".st-key-dl_{key}").get_by_role("button", name="Download").click()
        button.wait_for(timeout=60_000)
    with page.expect_download(timeout=timeout_ms) as dl:
        button.click()
    return dl.value


def user_page(browser, downloads: bool = False):
    """A browser of its own (a new context: its own Streamlit session and token), patient with a busy machine."""
    pg = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=downloads).new_page()
    pg.set_default_timeout(240_000)
    return pg


def shots_dir(tmp_path) -> Path:
    """Where screenshots go: $ANISO_SCREENSHOT_DIR when set (to look at them), else the test's tmp_path."""
    d = Path(os.environ.get("ANISO_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d
