"""The Attention page in Debian's chromium, as a researcher uses it: with the run in the server's
cache, "Compute attention statistics" queues the job (its progress panel at the top, no second
button meanwhile, other pages usable), and when it ends the page draws the heatmap and curve (with
axis titles), the outlier-link grid (mean |r| by default), one window's map beside its ablated twin
(on a shared 0-to-max scale; the window picked by document) and the controlled experiment; Compare draws the attention curve by
relative depth. Screenshots go to $ANISO_SCREENSHOT_DIR or a temporary folder."""

from __future__ import annotations

import time

from playwright.sync_api import expect
from test_default_flow import (
    _goto_page,
    _screenshot,
    _settle,
    _shots_dir,
    _wait_plots,
    pytestmark,  # noqa: F401 - the browser tests' marks (server/browser: conftest.py)
)

QUERY = "tokens=1500&sample=500"
LAYOUTS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => {
    const L = el.layout || {}, ax = k => ((L[k] || {}).title || {}).text || '';
    return {title: (L.title || {}).text || '', subtitle: ((L.title || {}).subtitle || {}).text || '',
            x: ax('xaxis'), y: ax('yaxis'), cmax: (L.coloraxis || {}).cmax}; })"""


def _figure(page, title: str) -> dict:
    got = [f for f in page.evaluate(LAYOUTS) if f["title"].startswith(title)]
    assert got, f"no figure titled {title!r}: {[f['title'] for f in page.evaluate(LAYOUTS)]}"
    return got[0]


def test_attention_page(server, browser, tmp_path):
    from core.compute.pipeline import analyze
    from core.entry import jobs
    from core.studies.selection import Selection

    url, cache = server
    spec = Selection(models=("minilm-l6",), max_tokens=1500, sample=500).spec("minilm-l6")
    analyze(spec, cache)  # as after Run; the attention statistics are computed from the page
    shots = _shots_dir(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(240_000)
    try:
        page.goto(f"{url}/attention?{QUERY}")
        page.get_by_text("not computed yet").wait_for()
        page.get_by_role("button", name="Compute attention statistics").click()
        page.get_by_role("button", name="Cancel").wait_for()  # the job's progress panel
        [job] = jobs.list_jobs(cache, kinds=("attention",))
        t0 = time.monotonic()  # while it runs: a line saying so instead of a second button (unless it ends first)
        while jobs.status(job.id, cache).active and not page.get_by_text("Computing the attention statistics").count():
            assert time.monotonic() - t0 < 240, "the page never said the attention statistics are being computed"
            page.wait_for_timeout(300)
        if jobs.status(job.id, cache).active:
            # Streamlit keeps the last run's elements on screen until the new run ends: the old button
            # can sit beside the new line for a moment on a busy machine; it must then go.
            expect(page.get_by_role("button", name="Compute attention statistics")).to_have_count(0, timeout=60_000)
        _goto_page(page, "Compare", wait=False)  # clicking around meanwhile: the job goes on
        page.wait_for_timeout(1500)
        _goto_page(page, "Attention", wait=False)
        got = _wait_plots(page, 3, timeout_s=600)  # heatmap, curve, outlier-link grid (two panels in one figure)
        # The worker stores the section, then writes "done": the page can draw a moment before that.
        assert jobs.wait(job.id, cache, timeout=120).status == jobs.DONE
        assert sorted(got)[-1] >= 2, got
        _settle(page)
        heat = _figure(page, "Attention entropy per block and head")
        assert (heat["x"], heat["y"]) == ("head (1 = first)", "block (1 = first)"), heat  # both from 1
        assert _figure(page, "Attention entropy by block")["y"] == "H(a_q) / log(visible keys)"
        link = _figure(page, "Outlier link")
        assert "mean |r|" in link["subtitle"] and link["y"] == "block (1 = first)", link
        page.get_by_role("button", name="Show attention map").click()
        _wait_plots(page, 4, timeout_s=600)
        _settle(page)
        amap = _figure(page, "Attention map of one window")
        assert (amap["x"], amap["y"]) == ("key position", "query position") and 0 < amap["cmax"] <= 1, amap
        assert "document " in amap["subtitle"] and "window 1 of " in amap["subtitle"], amap  # picked by document
        page.get_by_role("button", name="Run experiment").click()
        _wait_plots(page, 6, timeout_s=300)
        _settle(page)
        assert not page.get_by_test_id("stException").count()
        _screenshot(page, shots / "attention.png")
        _goto_page(page, "Compare")
        _wait_plots(page, 1, timeout_s=300)
        page.get_by_role("tab", name="Attention").click()  # Compare shows one section at a time
        page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(e => "
                               "((e.layout.title || {}).text || '').includes('Attention entropy by relative depth'))",
                               timeout=300_000)
        _settle(page)
        assert _figure(page, "Attention entropy by relative depth")["x"] == "relative depth (block / L)"
        assert not page.get_by_test_id("stException").count()
    finally:
        page.close()


CHAIN_TOKENS = 2320  # this test's own budget in the module's server cache


def test_chain_page_draws_every_link(server, browser, tmp_path):
    """The Chain page on a synthetic run (no model) with a planted chain section: the four panels
    draw their curves on one depth axis (the super-weight block marked) and the sentences follow."""
    from synthetic import synthetic_stats

    from core.base.cache import get_store
    from core.compute.pipeline import analyze, resolve
    from core.stats.chain_summary import high_norm_section, massive_section
    from core.studies.chain.run import chain_key
    from core.studies.selection import Selection

    url, cache = server
    spec = Selection(models=("minilm-l6",), max_tokens=CHAIN_TOKENS, sample=500).spec("minilm-l6")
    run = resolve(spec, cache)
    s = synthetic_stats(n_layers=7, d=384, seed=3, label=spec.model)  # outlier dim 5
    store = get_store(cache)
    store.put(run.key, {"manifest": s.manifest, "meta": s.meta}, s.arrays)
    analyze(run, cache)
    per_block = [0.0, 0.17, 0.5, 0.67, 0.83, 0.33]
    store.put(chain_key(run.key), {
        "run_key": run.key, "modality": "text",
        "super_weights": [{"block": 1, "hidden_layer": 2, "module": "output.dense", "row": 5, "col": 11,
                           "value": -7.25, "ratio_to_median": 120.0}],
        "massive": massive_section(s), "high_norm": high_norm_section(s),
        "sink_rate": {"epsilon": 0.3, "rate": 0.42, "per_layer": per_block,
                      "alpha_first_mean": [0.05, 0.2, 0.4, 0.45, 0.5, 0.3]}})
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(240_000)
    try:
        page.goto(f"{url}/chain?tokens={CHAIN_TOKENS}&sample=500")
        _wait_plots(page, 1, timeout_s=300)
        _settle(page)
        drawn = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .filter(el => ((el.layout.title || {}).text || '').startsWith('The outlier chain'))
            .map(el => ({names: el.data.map(t => t.name),
                         points: el.data.map(t => (t.y || []).filter(v => v !== null).length),
                         drawn: el.querySelectorAll('.scatterlayer .trace path.js-line, .scatterlayer .trace .point').length,
                         text: el.data.map(t => t.text)}))""")
        assert len(drawn) == 1, drawn
        fig = drawn[0]
        want = ["top-1 / median |x|", "top-1 dim", "first-position sink share (block b at layer b+1)",
                "sink rate (heads with α₁ > 0.3)", "mean cosine",
                "super weight, confirmed by ablation (dashed: block b writes layer b+1)"]
        assert fig["names"] == want, fig["names"]
        assert fig["points"] == [7, 7, 6, 6, 7, 1], fig["points"]  # every layer (blocks at layers 1-6)
        assert fig["drawn"] >= 7 + 7 + 6 + 1, fig  # lines and markers in the SVG, not only in the data
        assert fig["text"][-1] == ["block 1 output.dense[5, 11]"], fig["text"]
        page.get_by_text("Block 1's output.dense[5, 11] (value -7.25)").first.wait_for()
        page.get_by_text("Sink rate: 0.42 of all heads").first.wait_for()
        page.get_by_text("Mean cosine:").first.wait_for()
        assert not page.get_by_test_id("stException").count()
        _screenshot(page, _shots_dir(tmp_path) / "chain-synthetic.png")
    finally:
        page.close()
