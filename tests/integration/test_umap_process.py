"""The app fits UMAP in a process of its own, so that compiling and fitting never hold the server."""

import os
import signal
import time

import numpy as np
import pytest

from core.compute import projection as P
from tests.internals import stop_umap_process, umap_process_pids


@pytest.fixture
def umap_process():
    stop_umap_process()
    yield
    stop_umap_process()


@pytest.mark.slow
def test_umap_fits_in_its_process_alike_and_survives_its_death(umap_process, monkeypatch):
    monkeypatch.setenv("ANISO_UMAP_NICE", "10")  # the app's default (tests/conftest.py sets 0 for speed)
    X = np.random.default_rng(3).normal(size=(120, 6)).astype(np.float32)
    expected = P._umap_fit(X, n_neighbors=10, min_dist=0.1, metric="cosine", seed=0)  # in this process
    pid = P._umap_executor().submit(os.getpid).result()  # once it answers, it has run its initializer
    assert umap_process_pids() == [pid]
    assert pid != os.getpid()
    assert open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16] == "10"  # niced behind the server
    # the processes started below at the tests' niceness: a niced one waits behind the other test worker
    monkeypatch.setenv("ANISO_UMAP_NICE", "0")
    os.kill(pid, signal.SIGKILL)  # killed (out of memory, by hand): the next fit starts a fresh process
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z" \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    got = P.umap_2d(X, n_neighbors=10, seed=0)
    assert umap_process_pids() and umap_process_pids() != [pid]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)  # seeded: the same in either process
    stop_umap_process()
    assert P._process is None and np.allclose(P.umap_2d(X, n_neighbors=10, seed=0), expected, atol=1e-5)


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_umap_process_exits_when_the_server_dies(tmp_path):
    """SIGKILL of the app server (no exit hooks run): its UMAP process does not stay behind."""
    import subprocess
    import sys

    code = ("import os, sys, time\n"
            "from core.compute import projection as P\n"
            "print(P._umap_executor().submit(os.getpid).result(), flush=True)\n"
            "time.sleep(600)\n")
    server = subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(os.path.dirname(P.__file__))),
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(server.stdout.readline())
        assert child != server.pid and _alive(child)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        deadline = time.monotonic() + 60  # it polls its parent every second
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(child), f"the UMAP process {child} outlived its server"
    finally:
        server.kill()
        server.wait(timeout=30)
