"""Browser tests: one `streamlit run app.py` per test module (own cache, own worker), Debian's chromium."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from browser_helpers import ARGS, CHROMIUM, ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    cache = tmp_path_factory.mktemp("browser-cache")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANISO_CACHE_DIR": str(cache), "TOKENIZERS_PARALLELISM": "false"}
    log = open(tmp_path_factory.mktemp("log") / "streamlit.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", "127.0.0.1", "--server.port",
         str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        while time.time() - t0 < 90:
            try:
                urllib.request.urlopen(url + "/_stcore/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.5)
        else:
            pytest.fail("streamlit did not answer within 90 s")
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"streamlit exited: {log.read()[-3000:]}")
        yield url, cache
    finally:
        from core import jobs

        jobs.stop_worker(cache)  # the app started a worker process for this cache
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


