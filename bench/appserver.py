"""The dashboard (`streamlit run app.py`) on a free loopback port, for the browser benchmarks and tests:
`with app_server(cache_dir, log_path) as (url, proc): ...`; on the way out it stops the worker the app started
for `cache_dir` (if any), then the server. Also the browser benchmarks' entry check (`browser_main`)."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from core.base import settings
from core.entry import worker

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
START_TIMEOUT_S = 90


@contextlib.contextmanager
def app_server(cache: Path, log_path: Path, env: dict | None = None, drop_env: tuple[str, ...] = (),
               bind_flag: bool = True) -> Iterator[tuple[str, subprocess.Popen]]:
    """The app on 127.0.0.1 with its own cache directory; raises RuntimeError with the log's tail when it
    does not answer within START_TIMEOUT_S. `bind_flag=False` leaves the address to .streamlit/config.toml."""
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    full_env = {**settings.child_env(cache, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false"), **(env or {})}
    full_env = {k: v for k, v in full_env.items() if k not in drop_env}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless",
           "true", "--browser.gatherUsageStats", "false"]
    if bind_flag:
        cmd += ["--server.address", "127.0.0.1"]
    log = open(log_path, "w+")
    # Its own session, as a server started from its own terminal is: with Linux autogroups it is then a scheduling
    # group of its own, not one with the benchmark's or the tests' browsers (which on a lab server are elsewhere).
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        while True:
            try:
                urllib.request.urlopen(url + "/_stcore/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() - t0 > START_TIMEOUT_S:
                    log.seek(0)
                    raise RuntimeError(f"streamlit did not start within {START_TIMEOUT_S} s "
                                       f"(exit code {proc.poll()}): {log.read()[-3000:]}") from None
                time.sleep(0.5)
        yield url, proc
    finally:
        worker.stop_worker(cache)  # the app may have started a worker process for this cache
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def browser_main() -> bool:
    """For a benchmark's main(): SIGTERM (`timeout`, a Ctrl-C elsewhere) exits through the finally blocks, so that the
    app server and its worker do not outlive it; False (said on stderr) when Debian's chromium is missing."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not Path(CHROMIUM).exists():
        print(f"error: Debian's chromium is needed at {CHROMIUM}", file=sys.stderr)
        return False
    return True
