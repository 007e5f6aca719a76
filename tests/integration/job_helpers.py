"""A worker process for the queue tests: `python -m core worker` on a test cache directory."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def worker_env(cache: Path) -> dict:
    return {
        **os.environ,
        "ANISO_CACHE_DIR": str(cache),
        "ANISO_JOB_MODULES": "jobkinds",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


@contextlib.contextmanager
def worker(cache: Path, workers: int = 1):
    """A worker subprocess serving `cache`; SIGKILLed at the end if still alive."""
    from core.entry.worker import worker_pid

    proc = subprocess.Popen(
        [sys.executable, "-m", "core", "worker", "--cache-dir", str(cache), "--workers", str(workers)],
        cwd=ROOT,
        env=worker_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    t0 = time.monotonic()
    while worker_pid(cache) != proc.pid:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() - t0 < 60, "the worker did not start within 60 s"
        time.sleep(0.1)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()


def wait_for(pred, timeout: float = 120, what: str = "condition"):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_done(jid: str, timeout: float = 120):
    """The finished job `jid` (done, failed or cancelled), polled every 50 ms; fails after `timeout` s with its state."""
    from core.entry import jobs

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        job = jobs.status(jid)
        if not job.active and job.finished is not None:
            return job
        time.sleep(0.05)
    job = jobs.status(jid)
    raise AssertionError(f"{jid} still {job.status} after {timeout} s: {job.describe()}")
