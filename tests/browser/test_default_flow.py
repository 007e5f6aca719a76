"""The default flow as a person does it: `streamlit run app.py`, Debian's chromium via Playwright.

MiniLM + Wikipedia with a small budget from the URL, press Run, then every page: a layer curve,
an outlier chart and a projection must be drawn (Plotly figures with traces), and the PNG and CSV
downloads must arrive non-empty. Full-page screenshots go to a temporary folder, or to
$ANISO_SCREENSHOT_DIR (the README's docs/screenshots/ are made that way).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, download
from browser_helpers import goto_page as _goto_page  # noqa: F401 - the other browser modules import these from here
from browser_helpers import plots_with_traces as _plots_with_traces  # noqa: F401
from browser_helpers import settle as _settle
from browser_helpers import wait_plots as _wait_plots

# Budget of the flow: small enough for a loaded 2-core machine, large enough for real curves.
QUERY = os.environ.get("ANISO_FLOW_QUERY", "tokens=4000&sample=1500")
SAMPLE = int(dict(kv.split("=") for kv in QUERY.split("&") if "=" in kv).get("sample", 5000))
# The untrained control with 2 seeds (the app's default is 3): its spread is drawn as a band.
COMPARE_QUERY = "&".join(q for q in (QUERY, "models=minilm-l6&models=untrained-minilm-l6&seeds=2") if q)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Debian's chromium is not installed at "
                                 f"{CHROMIUM} (apt-get install chromium)")]


def _shots_dir(tmp_path) -> Path:
    d = Path(os.environ.get("ANISO_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _screenshot(page, path: Path) -> None:
    """Full page: Streamlit scrolls inside its main container, so grow the viewport to fit it."""
    page.mouse.move(1395, 995)  # no tooltip in the picture
    h = 0
    for _ in range(5):  # grow until the height is stable (figures resize with the viewport)
        new = page.evaluate("""() => Math.max(document.body.scrollHeight,
            ...Array.from(document.querySelectorAll('[data-testid=stMain], [data-testid=stMainBlockContainer]'))
                   .map(e => e.scrollHeight))""")
        if new <= h:
            break
        h = new
        page.set_viewport_size({"width": 1400, "height": int(min(max(h, 900), 7000))})
        page.wait_for_timeout(1200)
    raw = page.screenshot(full_page=True)
    from PIL import Image  # a 256-colour PNG keeps the committed screenshots small

    img = Image.open(io.BytesIO(raw)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    img.save(path, optimize=True)
    page.set_viewport_size({"width": 1400, "height": 1000})


def test_deep_link_on_a_fresh_server_goes_through_the_app(server, browser):
    """The server's very first visit is a shared link to a page (must run before the other tests):
    it gets the app's sidebar and navigation, not the page file alone."""
    url, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/outliers?{QUERY}")
        page.get_by_role("heading", name="Outlier dimensions").wait_for(timeout=90_000)
        page.get_by_role("button", name="Run").wait_for(timeout=90_000)  # the sidebar of app.py
        assert page.get_by_text("Models (up to 8)").count() == 1
    finally:
        page.close()


def test_default_flow(server, browser, tmp_path):
    server, _ = server
    shots = _shots_dir(tmp_path)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = ctx.new_page()
    page.set_default_timeout(240_000)
    page.goto(f"{server}/?{QUERY}")
    run = page.get_by_role("button", name="Run")
    run.wait_for()
    run.click()
    # Layers: the default curve (mean cosine by layer) with traces.
    page.get_by_text("computed in").first.wait_for()
    traces = _wait_plots(page, 1)
    _settle(page)
    assert traces[0] >= 2, traces  # CI band + measured curve (+ published references)
    assert page.get_by_text("computed in").count() >= 1

    # Downloads of the first figure: PNG and CSV, non-empty, manifest inside.
    png = Path(download(page, "curves", "PNG").path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert b"tEXtmanifest" in png
    dl = download(page, "curves", "CSV", 60_000)  # the popover is still open
    csv = Path(dl.path()).read_text()
    assert csv.splitlines()[0].startswith("series,") and "mean_cosine" in csv.splitlines()[0]  # plain CSV
    assert dl.suggested_filename == "layers_mean_cosine__wiki-en.csv"
    page.keyboard.press("Escape")
    page.mouse.move(0, 0)  # no tooltip over the page in the screenshot (hover, or the focused Download button)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.wait_for_timeout(500)
    _screenshot(page, shots / "layers.png")
    # Its other sections, each drawn when opened: the table, then the two one-layer figures.
    page.get_by_role("tab", name="Numbers").click()
    page.get_by_test_id("stDataFrame").first.wait_for()
    page.get_by_role("tab", name="At one layer").click()
    page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => "
                           "((e.layout || {}).title || {}).text || '').join('|').includes('Pairwise cosine')")
    _wait_plots(page, 2)  # histogram and frequency deciles, each with traces

    # Outliers, its first section: mean |x_d| bars with the outliers highlighted, and the contributions.
    _goto_page(page, "Outliers")
    traces = _wait_plots(page, 2)
    assert all(t > 0 for t in traces[:2]), traces
    _screenshot(page, shots / "outliers.png")

    # Projection: PCA of the sample at the middle layer, one trace of points.
    _goto_page(page, "Projection")
    traces = _wait_plots(page, 1)
    assert traces[0] >= 1
    n_points = page.evaluate("() => document.querySelector('.js-plotly-plot')._fullData[0]._length")
    assert n_points == SAMPLE
    _screenshot(page, shots / "projection.png")
    # UMAP: fitted in the server's own UMAP process (spawned at the server's start; the suite sets
    # ANISO_UMAP_WARM=0, so this fit compiles its kernels there)
    page.get_by_test_id("stRadio").get_by_text("UMAP", exact=True).click()
    page.get_by_role("button", name="Project").click()
    page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot')).some("
                           "el => ((el.layout || {}).title || {}).text?.startsWith('UMAP'))", timeout=300_000)
    _settle(page)
    n_points = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).find("
                             "el => el.layout.title.text.startsWith('UMAP'))._fullData[0]._length")
    assert n_points == SAMPLE
    _screenshot(page, shots / "projection-umap.png")

    # Compare: MiniLM and its untrained control (MiniLM-sized: 5x fewer weights than the BERT-base control it had).
    page.goto(f"{server}/compare?{COMPARE_QUERY}")
    page.get_by_role("button", name="Run").click()
    # The control's job ends (MiniLM is loaded from cache); the page redraws by itself.
    page.locator("[data-testid=stCaptionContainer]", has_text="untrained MiniLM").filter(has_text="computed in") \
        .first.wait_for(timeout=400_000)
    # The page redraws by itself once the control's second seed is computed too (its band).
    page.wait_for_function("""() => { const el = document.querySelector('.js-plotly-plot');
        return el && (el.data || []).some(t => (t.name || '').includes('2 seeds (min-max)')); }""", timeout=400_000)
    _settle(page)
    traces = _wait_plots(page, 2)  # its first section: the curves and the difference of the two runs
    curves = page.evaluate("() => document.querySelector('.js-plotly-plot').data.map(t => t.name)")
    assert any("untrained MiniLM" in (n or "") for n in curves), curves
    assert any("MiniLM" in (n or "") and "untrained" not in (n or "") for n in curves), curves
    assert any("2 seeds (min-max)" in (n or "") for n in curves), curves  # the control's seed band
    _screenshot(page, shots / "compare.png")
    ctx.close()
    for name in ("layers", "outliers", "projection", "compare"):
        assert (shots / f"{name}.png").stat().st_size > 20_000


def test_cancel_stores_nothing(server, browser):
    """A long job, cancelled from its progress panel: the app says so and the cache has no entry."""
    from core.compute.pipeline import is_cached
    from core.studies.selection import Selection

    url, cache = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(180_000)
    page.goto(f"{url}/?tokens=300000")
    page.get_by_role("button", name="Run").click()
    page.get_by_text("tokens/s").first.wait_for()  # the progress bar of the running model
    page.get_by_role("button", name="Cancel").click()
    page.get_by_text("the last run was cancelled; nothing partial was stored").wait_for(timeout=120_000)
    assert not is_cached(Selection(max_tokens=300000).spec("minilm-l6"), cache_dir=cache)
    page.close()
