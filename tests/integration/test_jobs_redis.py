"""The job queue on Redis (ANISO_QUEUE_URL), as a lab with several app servers runs it.

A real `redis-server` (Debian's, installed by `./dev.sh test`) on a free loopback port, no
persistence, and a real worker process: the same guarantees as the SQLite default (one job per
spec, progress, cancel, failures with their message), plus what Redis is for: two app servers
with their own cache directories see and share the same jobs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading

import jobkinds  # noqa: F401 - registers test-steps / test-fail in this process too
import pytest
from job_helpers import wait_for, worker

from core.entry import jobs

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
pytestmark = pytest.mark.skipif(not os.path.exists(REDIS), reason="needs Debian's redis-server (./dev.sh test "
                                "installs it as root: apt-get install redis-server)")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    pytest.importorskip("redis")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(d)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    import redis

    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    wait_for(lambda: _ping(client), timeout=30, what="redis-server to answer")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _ping(client) -> bool:
    try:
        return client.ping()
    except Exception:  # noqa: BLE001 - not listening yet
        return False


@pytest.fixture
def cache(tmp_path, monkeypatch, redis_url):
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    monkeypatch.setenv("ANISO_QUEUE_URL", redis_url)
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    return tmp_path / "a"


def test_jobs_run_through_redis_one_per_spec_with_progress_cancel_and_failures(cache):
    assert type(jobs.queue(cache)).__name__ == "RedisHuey"
    ids = []
    threads = [threading.Thread(target=lambda: ids.append(jobs.submit("test-steps", {"n": 6, "delay": 0.2})))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and jobs.queue(cache).storage.queue_size() == 1  # one message, one computation
    bad = jobs.submit("test-fail", {"message": "that file is empty"})
    long = jobs.submit("test-steps", {"n": 400, "delay": 0.05})
    with worker(cache):
        seen = []
        done = jobs.wait(ids[0], timeout=120, on_update=lambda j: seen.append((j.status, j.progress.done)))
        assert done.status == jobs.DONE and done.result == {"n": 6}
        assert any(s == jobs.RUNNING and d > 0 for s, d in seen)
        assert jobs.wait(bad, timeout=60).error == "that file is empty"
        wait_for(lambda: jobs.status(long).progress.done > 2, what="the long job to progress")
        jobs.cancel(long)
        end = jobs.wait(long, timeout=60)
        assert end.status == jobs.CANCELLED and end.progress.done < 400


def test_two_app_servers_share_the_jobs_of_one_redis(cache, tmp_path, monkeypatch):
    """Server A queues; server B (another cache directory, same ANISO_QUEUE_URL) sees the job, joins it
    instead of queuing a second one, and sees it finish (B's worker runs it)."""
    jid = jobs.submit("test-steps", {"n": 3, "delay": 0.1}, label="from server A")
    other = tmp_path / "b"
    monkeypatch.setenv("ANISO_CACHE_DIR", str(other))
    assert jobs.status(jid, other).label == "from server A"
    assert jobs.submit("test-steps", {"n": 3, "delay": 0.1}, cache_dir=other) == jid
    assert jobs.queue(other).storage.queue_size() == 1
    with worker(other):
        assert jobs.wait(jid, other, timeout=120).status == jobs.DONE
    assert jobs.status(jid, cache).status == jobs.DONE
    assert [j.id for j in jobs.list_jobs(cache, kinds=("test-steps",))] == [jid]
    assert jobs.queue(cache).storage.queue_size() == 0
