"""The dashboard on a busy machine (issue 36), in Debian's chromium, on a server of its own (a fresh process and
cache: its first visits are this module's).

- Browsers that open at once on a fresh server each get the app (its sidebar and navigation), not a page file
  alone with Streamlit's file-name navigation ("app", "attention"...): all but the first used to keep that for
  good (bench.busy's 14 of 25 navigations that never found their link).
- With 2 unrelated busy processes (pure-Python spins at niceness 0, each in a session of its own, started here and
  stopped in a finally), Run on the defaults (a small budget from the URL) draws the final curve within 2x the
  time the same run takes without them, measured first in the same test (another seed: not cached).
- Under the same load, Export report (zip) is a job: its bar, then the download, which arrives (PNG figures:
  ANISO_REPORT_FORMATS=png keeps the test short).
"""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, plots_with_traces, settle, wait_plots

from bench.appserver import app_server
from bench.busy import start_busy, stop

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Debian's chromium is not installed at "
                                 f"{CHROMIUM} (apt-get install chromium)")]

QUERY = "tokens=2000&sample=500"  # the defaults but a small budget: the whole test stays short
N_BUSY = 2
BOUND = 2.0  # the busy run's time over the quiet one's (issue 36)


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("busy-cache")
    try:
        with app_server(cache, tmp_path_factory.mktemp("log") / "streamlit.log",
                        env={"ANISO_REPORT_FORMATS": "png"}) as (url, _):
            yield url
    except RuntimeError as e:
        pytest.fail(str(e))



def _nav(page) -> list[str]:
    """The navigation's entries (their text, without the icon's name)."""
    return [t.strip().splitlines()[-1].strip() for t in page.get_by_test_id("stSidebarNavLink").all_inner_texts()]


def test_browsers_opening_at_once_on_a_fresh_server_each_get_the_app(own_server, browser, tmp_path):
    url = own_server
    ctxs = [browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in range(3)]
    try:
        pages = [c.new_page() for c in ctxs]
        for p, path in zip(pages, ("outliers", "compare", "")):  # three visits while the first run still starts
            p.goto(f"{url}/{path}?{QUERY}", wait_until="commit")
        for i, p in enumerate(pages):
            p.get_by_role("button", name="Run").wait_for(timeout=120_000)  # app.py's sidebar
            settle(p)
            nav = _nav(p)
            p.screenshot(path=str(tmp_path / f"fresh-{i}.png"))
            assert "Layers" in nav and "Outliers" in nav and "app" not in nav, (i, nav)
    finally:
        for c in ctxs:
            c.close()


def _run_and_time(page, url: str, seed: int) -> float:
    """Open the defaults with `seed` (not computed yet), press Run, and time it until the final curve is drawn."""
    page.goto(f"{url}/?{QUERY}&seed={seed}")
    page.get_by_role("button", name="Run").wait_for(timeout=120_000)
    settle(page)
    assert not [t for t in plots_with_traces(page) if t > 0], "the run was computed already"
    t0 = time.monotonic()
    page.get_by_role("button", name="Run").click()
    page.get_by_text("computed in").first.wait_for(timeout=240_000)
    wait_plots(page, 1)  # the final curve (partial curves are not counted)
    return time.monotonic() - t0


def test_run_on_a_busy_machine_within_twice_the_quiet_time(own_server, browser, tmp_path):
    url = own_server
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    busy = []
    try:
        _run_and_time(page, url, seed=101)  # not timed: the worker's first job (its model's first load)
        quiet = _run_and_time(page, url, seed=102)
        busy = start_busy(N_BUSY)
        time.sleep(1.0)  # the spins are running
        loaded = _run_and_time(page, url, seed=103)
        page.screenshot(path=str(tmp_path / "busy-run.png"))
        print(f"Run to the final curve: quiet {quiet:.1f} s, beside {N_BUSY} busy processes {loaded:.1f} s "
              f"({loaded / quiet:.2f}x)")
        assert loaded <= BOUND * quiet, f"{loaded:.1f} s beside {N_BUSY} busy processes, {quiet:.1f} s without"
    finally:
        stop(busy)
        ctx.close()


def test_the_report_zip_arrives_on_a_busy_machine(own_server, browser, tmp_path):
    url = own_server
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = ctx.new_page()
    busy = start_busy(N_BUSY)
    try:
        page.goto(f"{url}/?{QUERY}&seed=103")  # computed by the test before (or computed here)
        run = page.get_by_role("button", name="Run")
        run.wait_for(timeout=120_000)
        settle(page)
        if not page.get_by_role("button", name="Export report (zip)").count():
            run.click()
        export = page.get_by_role("button", name="Export report (zip)")
        export.wait_for(timeout=240_000)
        export.click()
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_role("button", name="Cancel").wait_for(timeout=60_000)  # its bar, with Cancel
        page.screenshot(path=str(tmp_path / "report-running.png"))
        got = page.get_by_role("button", name="Download report (zip)")
        got.wait_for(timeout=240_000)
        page.screenshot(path=str(tmp_path / "report-ready.png"))
        with page.expect_download(timeout=60_000) as dl:
            got.click()
        assert dl.value.suggested_filename == "anisotropy-report.zip"
        z = zipfile.ZipFile(io.BytesIO(Path(dl.value.path()).read_bytes()))
        names = z.namelist()
        assert "report.html" in names and "manifest.json" in names
        assert any(n.startswith("figures/") and n.endswith(".png") for n in names), names[:20]
        assert any(n.startswith("results/") for n in names)
    finally:
        stop(busy)
        ctx.close()
