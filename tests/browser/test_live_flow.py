"""Live curves in a real browser (issue 26): Run draws a partial curve, then the final one, without a reload.

MiniLM on Wikipedia with a small budget in small batches (several batches: the first partial result comes
after the first one). Screenshots of both states go to a temporary folder, or to $ANISO_SCREENSHOT_DIR.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM

from bench.live import FIRST_CURVE_JS

# Long enough that the page polls (every 1 s) while the forward pass runs on a quiet machine too: the tier's
# worker is warm and may hold the corpus already (conftest.py), and 1,500 tokens took under a second there.
QUERY = "tokens=24000&sample=300&batch=2"

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}")]


def test_run_draws_a_partial_curve_then_the_final_one(server, browser, tmp_path):
    url, _ = server
    shots = Path(os.environ.get("ANISO_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/?{QUERY}")
        run = page.get_by_role("button", name="Run")
        run.wait_for(timeout=120_000)
        page.evaluate("() => { window.__no_reload = true; }")  # gone if the page reloads
        run.click()
        seen: list[str] = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 600:
            titles = page.evaluate(FIRST_CURVE_JS)
            if titles and not seen:
                page.screenshot(path=str(shots / "live-partial.png"))
            seen += [t for t in titles if t not in seen]
            if any("partial" not in t for t in titles):
                break
            page.wait_for_timeout(200)
        partial = [t for t in seen if "partial result, still computing" in t]
        final = [t for t in seen if t.startswith("Mean cosine similarity by layer") and "partial" not in t]
        assert partial, seen
        assert final and seen.index(final[0]) > seen.index(partial[0]), seen
        assert page.evaluate("() => window.__no_reload === true")  # replaced in place: no reload
        page.get_by_text("computed in").first.wait_for(timeout=60_000)
        assert not page.get_by_text("Partial results", exact=False).count()  # the partial panel is gone
        page.screenshot(path=str(shots / "live-final.png"))
    finally:
        page.close()
