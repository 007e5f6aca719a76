"""A researcher's tasks in the browser (issue: own corpora by name, corpora compared, a dimension
drilled into, figures for a paper, layout). `streamlit run` + Debian's chromium via Playwright."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.browser.browser_helpers import download
from tests.browser.test_default_flow import CHROMIUM, _screenshot, _settle, _shots_dir, _wait_plots

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")]
SMALL = "tokens=1500&sample=400"


def _csv_bytes() -> bytes:
    df = pd.DataFrame({"id": range(60), "text": [f"Note {i}: the river runs past the old mill and the quiet town "
                                                 f"towards the sea, as rivers do in spring {i % 7}." for i in range(60)]})
    return df.to_csv(index=False).encode()


def _figure(page, title_part: str) -> dict:
    """Names of the traces and the title/subtitle of the first figure whose title contains `title_part`."""
    return page.evaluate("""(t) => {
        for (const el of document.querySelectorAll('.js-plotly-plot')) {
            const ti = (el.layout.title || {}); const txt = ti.text || '';
            if (txt.includes(t)) return {names: el.data.map(d => d.name || ''), title: txt,
                                         subtitle: (ti.subtitle || {}).text || ''};
        }
        return null; }""", title_part)


def _viewport_shot(page, path: Path) -> None:
    """What the window shows, as a 256-colour PNG (like the full-page screenshots)."""
    from PIL import Image

    img = Image.open(io.BytesIO(page.screenshot())).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    img.save(path, optimize=True)


def _upload(page, name: str, data: bytes) -> None:
    page.get_by_text("Upload a file", exact=True).click()
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        {"name": name, "mimeType": "text/csv", "buffer": data})
    _settle(page)


def test_own_upload_named_everywhere_and_a_paper_pdf(server, browser, tmp_path):
    url, cache = server
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = ctx.new_page()
    page.set_default_timeout(240_000)
    page.goto(f"{url}/?{SMALL}&ref=0")
    page.get_by_role("button", name="Run", exact=True).wait_for()
    _upload(page, "my-corpus.csv", _csv_bytes())
    side = page.get_by_test_id("stSidebar")
    side.get_by_text("my-corpus.csv", exact=False).first.wait_for()
    assert side.get_by_text("60 rows").count() >= 1 and side.get_by_text("(detected)").count() >= 1  # preview
    page.wait_for_url(lambda u: "corpus=upload" in u, timeout=60_000)
    assert str(cache) not in page.url  # an id, never the server path
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("computed in").first.wait_for()
    _wait_plots(page, 1)
    _settle(page)
    fig = _figure(page, "by layer")
    assert any("my-corpus.csv [text]" in n for n in fig["names"]), fig["names"]  # legend
    assert "my-corpus.csv [text]" in fig["subtitle"]  # subtitle
    dl = download(page, "curves", "CSV")
    assert dl.suggested_filename == "layers_mean_cosine__my-corpus.csv_text.csv"  # file name
    page.keyboard.press("Escape")
    df = pd.read_csv(dl.path())  # plain CSV
    assert set(df["corpus"]) == {"my-corpus.csv [text]"}

    # The publication PDF: one column wide, no title inside, manifest in its metadata.
    page.locator(".st-key-dl_curves").get_by_role("button", name="For a paper").click()
    pop = page.get_by_test_id("stPopoverBody")
    pop.get_by_text("one column (3.5 in)").wait_for()
    with page.expect_download(timeout=120_000) as dl:
        pop.get_by_role("button", name="Figure (PDF)").click()
    assert dl.value.suggested_filename == "layers_mean_cosine__my-corpus.csv_text_pub.pdf"
    from pypdf import PdfReader

    pdf = Path(dl.value.path()).read_bytes()
    reader = PdfReader(io.BytesIO(pdf))
    assert abs(float(reader.pages[0].mediabox.width) - 3.5 * 72) < 2
    assert "by layer" not in reader.pages[0].extract_text()
    man = json.loads(reader.metadata["/AnisotropyManifest"])
    assert man["runs"][0]["corpus"]["name"] == "my-corpus.csv [text]"
    page.keyboard.press("Escape")
    _screenshot(page, _shots_dir(tmp_path) / "upload.png")

    # Renamed: every label follows.
    name_box = side.get_by_role("textbox", name="Name in figures, tables and file names")
    name_box.fill("river notes")
    name_box.press("Enter")
    page.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(el => (el.data || []).some(t => (t.name || '').includes('river notes')))""", timeout=120_000)
    _settle(page)

    # A failed upload: the page says plainly which corpus is still shown.
    _upload(page, "broken.csv", b"\x00\x01\x02binary")
    page.get_by_text("Shown below: the results for the previous corpus").wait_for(timeout=60_000)
    _screenshot(page, tmp_path / "failed-upload.png")
    ctx.close()


def test_blank_paste_and_a_tiny_paste_warn(server, browser):
    url, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{url}/?{SMALL}")
    page.get_by_role("button", name="Run", exact=True).wait_for()
    page.get_by_text("Paste text", exact=True).click()
    box = page.get_by_role("textbox", name="Paste documents (separate documents with a blank line)")
    box.fill("   ")
    page.get_by_role("button", name="Use this text").click()
    page.get_by_text("The pasted text is empty").first.wait_for()
    box.fill("four tiny words here")
    page.get_by_role("button", name="Use this text").click()
    page.get_by_text("Only about").first.wait_for()  # the degenerate-input warning, before any Run
    page.close()


# Whether a drawn figure's title contains the argument.
HAS_FIGURE = ("(t) => Array.from(document.querySelectorAll('.js-plotly-plot'))"
              ".some(e => ((e.layout.title || {}).text || '').includes(t))")


def _computed_page(browser, url: str, path: str):
    """A new tab at `path` (the SMALL run), Run pressed, the page's first figures drawn."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(240_000)
    page.goto(f"{url}/{path}?{SMALL}")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text(re.compile("computed in|loaded from cache")).first.wait_for()  # an earlier test may have run it
    _wait_plots(page, 1 if path == "layers" else 2)  # the first section: Layers' curves, Outliers' two figures
    _settle(page)
    return page


def test_drill_into_a_dimension(server, browser, tmp_path):
    url, _ = server
    page = _computed_page(browser, url, "outliers")
    page.get_by_role("tab", name="Frequency").click()  # one section at a time: drawn when opened
    page.wait_for_function(HAS_FIGURE, arg="signed Pearson r")
    _settle(page)
    freq = _figure(page, "signed Pearson r")
    assert freq and "baseline" in freq["names"][0]  # the band first in the legend
    page.get_by_role("tab", name="Drill into a dimension").click()
    page.get_by_text("Top-activating tokens of dim").first.wait_for()
    _wait_plots(page, 2)
    _settle(page)
    prof = _figure(page, "with token frequency per layer")
    assert prof and any(n.startswith("dim ") for n in prof["names"]) and any("Fisher" in n for n in prof["names"])
    assert _figure(page, "vs token frequency, layer")
    assert page.get_by_text("Top-activating tokens of dim").count() >= 1
    box = page.get_by_role("spinbutton", name="or any dim (0-383)")
    box.fill("7")
    box.press("Enter")
    _settle(page)
    page.get_by_text("Top-activating tokens of dim 7").wait_for()
    assert "dim=7" in page.url
    assert _figure(page, "Dim 7: Pearson r")
    assert page.get_by_role("tab", name="Drill into a dimension", selected=True).count() == 1  # still open
    page.get_by_role("tab", name="Drill into a dimension").scroll_into_view_if_needed()
    page.mouse.move(1395, 995)
    page.wait_for_timeout(2500)
    _viewport_shot(page, _shots_dir(tmp_path) / "drilldown.png")
    page.close()


def test_layout_details(server, browser):
    url, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{url}/layers?{SMALL}")  # typed by hand: no "Page not found"
    page.get_by_role("heading", name="Anisotropy by layer").wait_for()
    _settle(page)
    assert page.get_by_text("Page not found").count() == 0
    page.get_by_test_id("stSidebar").get_by_text("Models (up to 8)").wait_for()
    page.close()


def test_sections_are_drawn_when_opened(server, browser):
    """Outliers' sections (tabs), the metric's definition, the post-processing form, the sidebar's cache
    panel and the publication form are made only when opened: each opens on a click, with its content."""
    from tests.browser.test_default_flow import _goto_page

    url, _ = server
    page = _computed_page(browser, url, "layers")
    assert page.locator(".katex").count() == 0 and page.get_by_role("button", name="Apply post-processing").count() == 0
    page.get_by_text("What is mean cosine similarity?").click()
    page.locator(".katex").first.wait_for()  # the formula, typeset
    page.get_by_text("Post-processing what-if (dashed curves)").click()
    page.get_by_role("button", name="Apply post-processing").wait_for()
    side = page.get_by_test_id("stSidebar")
    side.get_by_text("Cache", exact=True).click()
    side.get_by_role("button", name="Clear cache").wait_for()
    page.locator(".st-key-dl_curves").get_by_role("button", name="For a paper").click()
    page.get_by_test_id("stPopoverBody").get_by_text("one column (3.5 in)").wait_for()
    page.keyboard.press("Escape")
    _settle(page)
    assert page.get_by_text("What is mean cosine similarity?").count() == 1 and page.locator(".katex").count() >= 1  # still open

    _goto_page(page, "Outliers")
    _wait_plots(page, 2)
    _settle(page)
    assert not page.evaluate(HAS_FIGURE, "signed Pearson r")  # another section's figure: not drawn
    page.get_by_role("tab", name="Frequency").click()
    page.wait_for_function(HAS_FIGURE, arg="signed Pearson r")
    page.get_by_role("tab", name="Two definitions").click()
    page.wait_for_function(HAS_FIGURE, arg="activation vs norm-parameter")
    page.close()
