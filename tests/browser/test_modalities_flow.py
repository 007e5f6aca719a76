"""Every page with a text, an image and a speech Transformer and a CNN, in a real browser.

The four runs are computed first into the server's cache with the selection's own specs (the
flow of pressing Run is tested elsewhere); then each page is loaded from a URL, as a shared link
would be: figures must be drawn, no exception shown, token-id metrics must read "not applicable"
for the image and speech runs, and the projection's hover must name the image and patch, or the
clip and the time. The Compare page's Godey preset must select one model of every modality.
Screenshots go to $ANISO_SCREENSHOT_DIR when set, else to a temporary folder.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, goto_page, settle, wait_plots

from core.studies.selection import GODEY_PRESET, Selection, to_query_params

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Debian's chromium is not installed at "
                                 f"{CHROMIUM} (apt-get install chromium)")]

MODELS = ("minilm-l6", "untrained-vit-s14", "untrained-whisper-tiny", "untrained-mobilenet-v2")
SEL = Selection(models=MODELS, max_tokens=600, sample=300, control_seeds=1)
HOVER_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
                 .flatMap(el => (el.data || []).flatMap(t => Array.from(t.hovertext || t.text || [])))
                 .map(String)"""


@pytest.fixture(scope="module")
def site(server):
    from core.compute.pipeline import analyze

    url, cache = server
    for spec in SEL.specs():
        analyze(spec, cache)
    return url


@pytest.fixture
def page(browser, tmp_path):
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    yield pg
    pg.close()


def _open(page, site: str, path: str, **fields) -> str:
    params = to_query_params(SEL.replace(**fields))
    page.goto(f"{site}/{path}?" + urllib.parse.urlencode(params, doseq=True))
    page.get_by_test_id("stSidebarNav").wait_for(timeout=120_000)  # the app has run once
    settle(page)
    assert page.get_by_test_id("stException").count() == 0, page.inner_text("body")[:2000]
    return page.inner_text("body")


def _shot(page, tmp_path, name: str) -> None:
    d = Path(os.environ.get("ANISO_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(d / f"modalities-{name}.png"), full_page=True)


def test_layers_and_outliers_of_every_modality(site, page, tmp_path):
    _open(page, site, "layers")
    wait_plots(page, 1)
    text = page.inner_text("body")
    for label in ("all-MiniLM-L6-v2", "untrained ViT-S/14", "untrained Whisper tiny encoder", "untrained MobileNetV2"):
        assert label in text
    _shot(page, tmp_path, "layers")
    for focus in ("untrained-vit-s14", "untrained-whisper-tiny", "untrained-mobilenet-v2"):
        _open(page, site, "outliers", focus=focus)
        wait_plots(page, 1)
        page.get_by_role("tab", name="Frequency").click()  # one section at a time
        # the first visible one: a data frame keeps hidden copies of its cells (glide-cell) in the DOM, and
        # `.first` alone could wait on one of those for good
        page.get_by_text("not applicable", exact=False).filter(visible=True).first.wait_for()
        text = page.inner_text("body")
        assert "not applicable" in text.lower(), text[:1500]  # the frequency link needs token ids
        _shot(page, tmp_path, f"outliers-{focus}")


@pytest.mark.parametrize("focus,pattern", [("untrained-vit-s14", r"crop.* · patch row \d+, col \d+"),
                                           ("untrained-whisper-tiny", r" · \d+\.\d\d s"),
                                           ("untrained-mobilenet-v2", r" · cell row \d+, col \d+")])
def test_projection_hover_names_the_item_and_position(site, page, tmp_path, focus, pattern):
    _open(page, site, "projection", focus=focus)
    wait_plots(page, 1)
    hovers = page.evaluate(HOVER_JS)
    assert any(re.search(pattern, h) for h in hovers), hovers[:5]
    _shot(page, tmp_path, f"projection-{focus}")


def test_compare_with_every_modality_and_the_godey_preset(site, page, tmp_path):
    _open(page, site, "compare")
    wait_plots(page, 1)
    text = page.inner_text("body")
    assert "untrained Whisper tiny encoder" in text
    _shot(page, tmp_path, "compare")
    page.get_by_role("button", name=re.compile("Godey")).click()
    page.wait_for_url(re.compile("dinov2-vits14"), timeout=120_000)  # the preset's models reach the URL
    settle(page)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert query["models"] == list(GODEY_PRESET) and query.get("x") == ["depth"]
    assert page.get_by_test_id("stException").count() == 0
    goto_page(page, "Layers")  # the preset's runs are not computed here: the page says so, no error
    assert page.get_by_test_id("stException").count() == 0

