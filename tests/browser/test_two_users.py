"""Two users of a shared server (ANISO_SHARED=1) in a real browser, each a browser context of its own (its own
Streamlit session and random token), on one upload (issue 37 items 1-2):

- user B opens user A's upload link and tries to rename it: A's header, legends and export file names keep A's
  name; B's own rename (after uploading the same bytes) shows only in B's view;
- B uploads the same bytes and presses *Clear my uploads*: A's upload still works.

Both failed before uploads had owners (core/inputs/uploads.py, ui/sidebar.py before 4aacec1): B's name replaced A's
everywhere, and B's clear removed the file A's link names. The app starts its own worker here (one short MiniLM
run of about 500 tokens, shared by both users). Screenshots go to $ANISO_SCREENSHOT_DIR or a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, download, settle, shots_dir, user_page, wait_plots

from bench.appserver import app_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]

NAME = "fake wiki-en.txt"  # user A's file name: what A's header, legends and file names say
RENAMED = "RENAMED BY B"
DATA = b"".join(b"Rivers run to the sea and mountains rise high above plain number %d.\n\n" % i for i in range(40))
NAME_BOX = "Name in figures, tables and file names"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("two-users-cache")
    log = tmp_path_factory.mktemp("log") / "streamlit.log"
    try:
        with app_server(
            cache,
            log,
            env={"ANISO_SHARED": "1"},
            drop_env=("ANISO_ALLOW_SERVER_PATHS", "ANISO_DATA_DIR", "ANISO_ALLOW_HUB", "ANISO_ALLOW_MODEL_FOLDERS"),
        ) as (url, _):
            yield url
    except RuntimeError as e:
        pytest.fail(str(e))




def _upload(pg, filename: str) -> None:
    """The sidebar's *Upload a file* with DATA under `filename`; the page's link then names the upload."""
    pg.get_by_test_id("stSidebar").get_by_text("Upload a file", exact=True).click()
    settle(pg)
    pg.locator("[data-testid=stSidebar] [data-testid=stFileUploaderDropzoneInput]").set_input_files(
        {"name": filename, "mimeType": "text/plain", "buffer": DATA}
    )
    pg.get_by_test_id("stSidebar").get_by_text(filename, exact=True).first.wait_for()  # the uploader's file line
    pg.wait_for_function("() => location.search.includes('corpus=upload')", timeout=60_000)
    settle(pg)


def _main(pg) -> str:
    """What the page shows (title, status lines, the figures' legends and titles), in one line."""
    return " ".join(pg.inner_text("[data-testid=stMain]").split())


def _shows(pg, *wanted: str, timeout_s: float = 60) -> str:
    """The page's text once it holds every string in `wanted` (or at `timeout_s`): the rerun a name box's Enter
    starts may begin after `settle` has already seen an idle page on a loaded machine (CI once read the old header
    while the new one was on its way)."""
    shown = _main(pg)
    for _ in range(int(timeout_s * 2)):
        if all(w in shown for w in wanted):
            break
        pg.wait_for_timeout(500)
        shown = _main(pg)
    return shown


def _name_box(pg):
    return pg.get_by_test_id("stSidebar").get_by_label(NAME_BOX, exact=True)


@pytest.fixture(scope="module")
def alice_link(server, browser):
    """User A uploads NAME, runs it (MiniLM) and keeps the page open: (A's page, A's link)."""
    alice = user_page(browser, downloads=True)
    alice.goto(f"{server}/?tokens=500")
    settle(alice)
    _upload(alice, NAME)
    alice.get_by_test_id("stSidebar").get_by_role("button", name="Run").click()
    wait_plots(alice, 1)
    settle(alice)
    yield alice, alice.url
    alice.context.close()


def _alice_keeps_her_name(alice, link: str, export: bool = True) -> None:
    alice.goto(link)
    settle(alice)
    wait_plots(alice, 1)
    shown = _shows(alice, f"on {NAME}", f"· {NAME}")
    assert RENAMED not in shown, shown[:800]  # header, status lines, legends and figure titles
    assert f"on {NAME}" in shown and f"· {NAME}" in shown, shown[:800]  # the header and a legend
    assert "not on this server" not in shown, shown[:800]
    if export:
        csv = download(alice, "curves", "CSV").suggested_filename
        assert "RENAMED" not in csv and "fake" in csv, csv  # export names carry the name A gave


def test_another_browser_cannot_rename_an_upload_for_its_owner(server, browser, alice_link, tmp_path):
    alice, link = alice_link
    bob = user_page(browser, downloads=True)
    bob.goto(link)  # A's link, in B's browser
    settle(bob)
    box = _name_box(bob)
    box.wait_for()
    could_type = box.is_enabled()
    if could_type:  # what the user B did (no owner check): type a new name for A's upload
        box.fill(RENAMED)
        box.press("Enter")
        settle(bob)
    _alice_keeps_her_name(alice, link, export=False)  # (the header and legends fail first on a name B gave)
    assert not could_type, "another browser could type a new name for A's upload"
    bob.screenshot(path=str(shots_dir(tmp_path) / "two-users-bob-on-alices-link.png"), full_page=True)

    # B uploads the same bytes: B may name them, for B alone.
    _upload(bob, "bob's copy.txt")
    assert bob.url == link  # stored once, by content hash: the same link
    box = _name_box(bob)
    for _ in range(120):  # the upload's rerun makes B an owner: the box turns editable
        if box.is_enabled():
            break
        bob.wait_for_timeout(500)
    assert box.is_enabled(), "the browser that uploaded the bytes cannot name them"
    box.fill(RENAMED)
    box.press("Enter")
    settle(bob)
    wait_plots(bob, 1)  # the run is shared (computed once, for A)
    shown = _shows(bob, f"on {RENAMED}", f"· {RENAMED}")  # header and legend
    assert f"on {RENAMED}" in shown and f"· {RENAMED}" in shown, shown[:800]
    csv = download(bob, "curves", "CSV").suggested_filename
    assert "RENAMED" in csv, csv  # B's export names carry B's name
    _alice_keeps_her_name(alice, link)
    alice.screenshot(path=str(shots_dir(tmp_path) / "two-users-alice-after-bobs-rename.png"), full_page=True)
    bob.context.close()


def test_clearing_the_same_bytes_in_another_browser_keeps_the_owners_upload(server, browser, alice_link, tmp_path):
    alice, link = alice_link
    bob = user_page(browser, downloads=True)
    bob.goto(f"{server}/?tokens=500")  # not A's link: B has the same file and uploads it
    settle(bob)
    _upload(bob, "same bytes.txt")
    assert bob.url.split("corpus=")[1].split("&")[0] == link.split("corpus=")[1].split("&")[0]  # one stored file
    bob.get_by_test_id("stSidebar").get_by_text("Cache", exact=True).click()
    bob.get_by_role("button", name="Clear my uploads").click()
    settle(bob)
    bob.screenshot(path=str(shots_dir(tmp_path) / "two-users-bob-cleared.png"), full_page=True)
    _alice_keeps_her_name(alice, link, export=False)  # the upload still opens, with its figures and A's name
    alice.screenshot(path=str(shots_dir(tmp_path) / "two-users-alice-after-bobs-clear.png"), full_page=True)
    bob.context.close()
