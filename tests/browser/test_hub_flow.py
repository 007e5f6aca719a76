"""A researcher's own hub model in the dashboard, as a person does it: type its id in the sidebar, read its size,
press Run, watch the download stage's progress, get the curve. The app (its own server: the tier's shared one is
offline) and its worker talk to the loopback hub (tests/hub_server.py) through the real huggingface_hub client;
the hub sends at 15 MB/s, so MiniLM's 92 MB take a few seconds to watch."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, settle, wait_plots

from bench.appserver import app_server

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Debian's chromium is not installed at "
                                 f"{CHROMIUM} (apt-get install chromium)")]
HUB_ID = "testorg/minilm@step0"


@pytest.fixture(scope="module")
def hub_app(hub_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("hub-app")
    env = {"HF_ENDPOINT": hub_server.url, "HF_HOME": str(d / "hf-home"), "HF_HUB_DISABLE_XET": "1",
           "ANISO_WORKER_WARM": "0"}
    try:
        with app_server(d / "cache", d / "streamlit.log", env=env, drop_env=("HF_HUB_OFFLINE",)) as (url, _):
            yield url, d
    except RuntimeError as e:
        pytest.fail(str(e))


def test_type_a_hub_id_see_its_size_run_watch_the_download_get_the_curve(hub_app, hub_server, browser):
    url, d = hub_app
    hub_server.throttle(15e6)
    shots = Path(os.environ.get("ANISO_SCREENSHOT_DIR") or d / "shots")
    shots.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(240_000)
    try:
        page.goto(f"{url}/?models=minilm-l6&tokens=1000&sample=200")
        side = page.get_by_test_id("stSidebar")
        box = side.get_by_test_id("stMultiSelect").first
        box.locator("input").wait_for()
        box.locator("input").click()
        box.locator("input").fill(HUB_ID)
        box.locator("input").press("Enter")
        page.keyboard.press("Escape")
        box.get_by_role("button", name="Remove [text] all-MiniLM-L6-v2").click()
        # its size, as soon as it is typed: from the hub's listing and the weights' header, nothing else fetched
        found = side.get_by_text("found: 23M parameters, 91 MB safetensors, needs ~0.1 GB at float32")
        found.wait_for(timeout=120_000)
        assert not [q for q in hub_server.downloads("testorg/minilm", "model.safetensors") if not q["range"]]
        settle(page)
        page.screenshot(path=str(shots / "hub-size.png"))
        side.get_by_role("button", name="Run").click()
        # the download stage: bytes of the whole download, rate, ETA, and the file in hand
        line = page.get_by_text(re.compile(r"downloading the model: \d+ MB of 92 MB · \d+ MB/s · ETA .*model\.safetensors"))
        line.first.wait_for(timeout=180_000)
        page.screenshot(path=str(shots / "hub-download.png"))
        text = line.first.inner_text()
        assert "Step 2 of 5" in text and "(9 of 9 files)" in text, text
        # the curve: the layer curve of the hub model, labelled with its id
        page.get_by_text("computed in").first.wait_for(timeout=300_000)
        traces = wait_plots(page, 1)
        settle(page)
        assert traces[0] >= 1, traces
        names = page.evaluate("() => document.querySelector('.js-plotly-plot').data.map(t => t.name || '')")
        assert any(HUB_ID in n for n in names), names
        page.screenshot(path=str(shots / "hub-curve.png"), full_page=True)
        full = [q for q in hub_server.downloads("testorg/minilm", "model.safetensors") if not q["range"]]
        size = hub_server.repos["testorg/minilm"].commits[full[0]["commit"]]["model.safetensors"].size
        assert len(full) == 1 and full[0]["sent"] == size  # fetched once, whole
    finally:
        page.close()
        hub_server.throttle(None)
