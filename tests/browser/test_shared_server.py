"""A shared server (ANISO_SHARED=1) in a real browser, as two users and as a hostile one (issue 27):
the image and speech corpus keys of the URL cannot probe or reach server folders, an upload is refused
from its declared sizes (a zip bomb) before anything is decompressed, and a
job can be cancelled only from the browser that started it, while the other browser sees its progress. No
worker runs here (ANISO_WORKER_AUTOSTART=0), so the job stays queued while both look at it.
Screenshots go to $ANISO_SCREENSHOT_DIR or a temp dir."""

from __future__ import annotations

import io
import urllib.parse
import zipfile
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, settle, shots_dir, user_page

from bench.appserver import app_server

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")]

SELECTION = {"models": "minilm-l6", "corpus": "wiki-en", "tokens": "3200"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("shared-cache")
    log = tmp_path_factory.mktemp("log") / "streamlit.log"
    try:
        with app_server(cache, log, env={"ANISO_SHARED": "1", "ANISO_WORKER_AUTOSTART": "0",
                                         "ANISO_MAX_UNPACKED_MB": "4"},
                        drop_env=("ANISO_ALLOW_SERVER_PATHS", "ANISO_DATA_DIR", "ANISO_ALLOW_HUB",
                                  "ANISO_ALLOW_MODEL_FOLDERS")) as (url, _):
            yield url
    except RuntimeError as e:
        pytest.fail(str(e))




@pytest.mark.parametrize("key,model", [("icorpus", "dinov2-vits14"), ("acorpus", "whisper-tiny-en")])
def test_corpus_folders_from_the_url_are_refused_alike(server, browser, key, model, tmp_path):
    pg = user_page(browser)
    answers = []
    for path in ("/usr", "/no-such-folder-here"):
        pg.goto(f"{server}/?{urllib.parse.urlencode({'models': model, key: path})}")
        pg.get_by_text("not available here").first.wait_for()
        settle(pg)
        body = pg.inner_text("body")
        assert "Traceback" not in body
        answers.append(sorted(line.replace(path, "PATH") for line in body.splitlines() if "not available here" in line))
        assert f"{key}=" not in pg.url  # the refused key is dropped from the link
    assert answers[0] and answers[0] == answers[1]  # the same answer whether the folder exists or not
    pg.screenshot(path=str(shots_dir(tmp_path) / f"shared-{key}.png"), full_page=True)
    pg.context.close()


def test_only_the_browser_that_started_a_job_can_cancel_it(server, browser, tmp_path):
    alice, bob = user_page(browser), user_page(browser)
    link = f"{server}/?{urllib.parse.urlencode(SELECTION)}"
    alice.goto(link)
    settle(alice)
    alice.get_by_role("button", name="Run").click()
    alice.get_by_role("button", name="Cancel").wait_for()
    assert alice.get_by_role("button", name="Cancel").is_enabled()

    bob.goto(link)  # the same link, another browser: bob sees the job, not a working Cancel
    bob.get_by_role("button", name="Cancel").wait_for()
    settle(bob)
    assert bob.get_by_role("button", name="Cancel").is_disabled()
    bob.screenshot(path=str(shots_dir(tmp_path) / "shared-second-user.png"), full_page=True)

    alice.get_by_role("button", name="Cancel").click()
    alice.get_by_text("cancelled").first.wait_for()
    bob.reload()
    settle(bob)
    assert not bob.get_by_role("button", name="Cancel").count()  # gone for everyone
    for pg in (alice, bob):
        pg.context.close()


def _zip_of_zeros(mib: int) -> bytes:
    """A zip whose one image unpacks to `mib` MiB of zeros (a few KB on the wire)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("photo.png", bytes(mib << 20))
    return buf.getvalue()


def test_a_zip_bomb_upload_is_refused_from_its_declared_sizes(server, browser, tmp_path):
    name, data, says = "bomb.zip", _zip_of_zeros(16), "unpacks to 16 MiB, more than the limit of 4 MiB"
    pg = user_page(browser)
    pg.goto(f"{server}/?models=dinov2-vits14")
    settle(pg)
    assert len(data) < 100_000  # what crosses the wire is small; what it would unpack to is not
    pg.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        {"name": name, "mimeType": "application/octet-stream", "buffer": data})
    pg.get_by_text(says).first.wait_for(timeout=60_000)
    settle(pg)
    body = pg.inner_text("body")
    assert "Traceback" not in body and "DecompressionBomb" not in body
    pg.screenshot(path=str(shots_dir(tmp_path) / "shared-upload-bomb.png"), full_page=True)
    pg.context.close()
