"""The Attention page in Debian's chromium: with the run and its attention statistics in the
server's cache, the heatmap, curve and outlier-link grid are drawn; one window's map beside its
ablated twin and the controlled experiment are drawn after their buttons. Screenshots go to
$ANISO_SCREENSHOT_DIR or a temporary folder."""

from __future__ import annotations

from test_default_flow import (
    _screenshot,
    _settle,
    _shots_dir,
    _wait_plots,
    pytestmark,  # noqa: F401 - the browser tests' marks (server/browser: conftest.py)
)

QUERY = "tokens=1500&sample=500"


def test_attention_page(server, browser, tmp_path):
    from core.attention import run_attention
    from core.pipeline import analyze
    from core.selection import Selection

    url, cache = server
    spec = Selection(models=("minilm-l6",), max_tokens=1500, sample=500).spec("minilm-l6")
    analyze(spec, cache)  # as after Run and "Compute attention statistics" (the app test presses them)
    run_attention(spec, cache)
    shots = _shots_dir(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/attention?{QUERY}")
        page.get_by_text("loaded from cache").first.wait_for(timeout=120_000)
        # heatmap, curve, outlier-link grid (two panels in one figure)
        got = _wait_plots(page, 3, timeout_s=300)
        assert sorted(got)[-1] >= 2, got
        _settle(page)
        page.get_by_role("button", name="Show attention map").click()
        _wait_plots(page, 4, timeout_s=600)
        _settle(page)
        page.get_by_role("button", name="Run experiment").click()
        _wait_plots(page, 6, timeout_s=300)
        _settle(page)
        assert not page.get_by_test_id("stException").count()
        _screenshot(page, shots / "attention.png")
    finally:
        page.close()
