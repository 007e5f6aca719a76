"""The job queue (core.entry.jobs): one job per spec, progress, cancel, a worker killed halfway, restart,
the CLI waiting for a running job, and parallel jobs that do not disturb each other.

Workers are real `python -m core worker` processes on a temporary cache directory; the test
kinds of jobkinds.py sleep in steps, the others run the real pipeline on tiny local models.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import jobkinds  # noqa: F401 - registers test-steps / test-fail in this process too
import pytest
from job_helpers import ROOT, wait_for, worker, worker_env

from core.base.cache import get_store
from core.base.procfs import stat_fields
from core.base.spec import RunSpec
from core.compute.pipeline import analyze, is_cached, run_key
from core.entry import job_queue, job_run, jobs
from core.entry import worker as worker_process


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    # The tiny models are folders in temporary directories: a single-user worker may read them (it
    # re-checks every job's model and corpus under its own settings).
    monkeypatch.setenv("ANISO_ALLOW_SERVER_PATHS", "1")
    return tmp_path


def _steps(n=5, delay=0.1, **kw):
    return {"n": n, "delay": delay, **kw}


def test_messages_are_json_and_a_pickle_is_refused(cache):
    jid = jobs.submit("test-steps", _steps())
    h = jobs.queue(cache)
    [raw] = h.storage.enqueued_items()
    msg = json.loads(raw)["message"]
    assert msg["args"] == [jid, 1]
    with pytest.raises(ValueError):
        job_queue.JsonSerializer().deserialize(pickle.dumps({"a": 1}))
    # A pickled message planted in the queue is never unpickled: the worker's read fails on it.
    h.storage.flush_queue()
    h.storage.enqueue(pickle.dumps(("anything",)), None)
    with pytest.raises(ValueError):
        h.dequeue()


def test_one_job_per_params_whoever_asks(cache):
    ids = []
    threads = [threading.Thread(target=lambda: ids.append(jobs.submit("test-steps", _steps()))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1
    assert jobs.queue(cache).storage.queue_size() == 1  # one message: one computation
    assert jobs.submit("test-steps", _steps(n=6)) != ids[0]  # other params, other job
    assert jobs.status(ids[0]).status == jobs.QUEUED
    assert [j.id for j in jobs.list_jobs(kinds=("test-steps",))][::-1] == [ids[0], jobs.job_id("test-steps", _steps(n=6))]


def test_worker_runs_jobs_with_progress_and_results(cache):
    marker = cache / "ran.txt"
    jid = jobs.submit("test-steps", _steps(n=8, delay=0.2, marker=str(marker)), label="eight steps")
    bad = jobs.submit("test-fail", {"message": "that file is empty"})
    with worker(cache):
        seen = []
        done = jobs.wait(jid, timeout=120, on_update=lambda j: seen.append((j.status, j.progress.done)))
        failed = jobs.wait(bad, timeout=60)
    assert done.status == jobs.DONE and done.result == {"n": 8} and done.label == "eight steps"
    assert any(s == jobs.RUNNING and d > 0 for s, d in seen)  # progress was visible while it ran
    assert failed.status == jobs.FAILED and failed.error == "that file is empty"
    assert marker.read_text().count("done") == 1


def test_cancel_queued_and_running_jobs(cache):
    queued = jobs.submit("test-steps", _steps(n=3, marker=str(cache / "q.txt")))
    jobs.cancel(queued)
    assert jobs.status(queued).status == jobs.CANCELLED
    long = jobs.submit("test-steps", _steps(n=400, delay=0.05, marker=str(cache / "long.txt")))
    with worker(cache):
        wait_for(lambda: jobs.status(long).progress.done > 2, what="the long job to progress")
        assert jobs.status(long).status == jobs.RUNNING
        assert jobs.cancel(long).cancel_requested
        end = jobs.wait(long, timeout=60)
        assert end.status == jobs.CANCELLED and end.progress.done < 400
        time.sleep(0.5)
    assert not (cache / "q.txt").exists() and not (cache / "long.txt").exists()  # neither finished
    with pytest.raises(ValueError, match="nothing to cancel"):
        jobs.cancel(long)


def test_a_restarted_worker_picks_up_queued_jobs(cache, monkeypatch):
    monkeypatch.setenv("ANISO_WORKER_NICE", "10")  # an admin's choice (the default is 0, the CLI's)
    a = jobs.submit("test-steps", _steps(n=2))
    b = jobs.submit("test-steps", _steps(n=3))
    assert worker_process.worker_pid(cache) is None and jobs.status(a).status == jobs.QUEUED  # no worker: they wait
    with worker(cache) as proc:
        nice = int(stat_fields(proc.pid)[16])
        assert nice >= min(19, os.nice(0) + 10)  # ANISO_WORKER_NICE is honoured
        assert jobs.wait(a, timeout=60).status == jobs.DONE
        assert jobs.wait(b, timeout=60).status == jobs.DONE


def test_a_warm_worker_takes_a_queued_job_before_any_warm_up(cache):
    """Issue 36: the worker the app starts with --warm (a Run started it: its job is queued already) takes the
    job at once; the warm-up yields (it never imports torch first)."""
    jid = jobs.submit("test-steps", _steps(n=2))
    proc = subprocess.Popen([sys.executable, "-m", "core", "worker", "--cache-dir", str(cache), "--warm"], cwd=ROOT,
                            env=worker_env(cache), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert jobs.wait(jid, timeout=60).status == jobs.DONE
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "a job is queued, the warm-up stops before core.compute.analysis_jobs:warm_imports" in out, out
    assert "0 of 2 steps" in out, out


def test_a_queued_job_says_its_place_and_what_runs_ahead(cache, monkeypatch):
    """Issue 36: "2nd in the queue, behind: Godey reproduction, run 3 of 6, started by another user", and nothing
    of another user's job beyond that (no model, corpus or label)."""
    from core.base.progress import Progress

    t = time.time()
    running = jobs.Job("reproduce-aaa", "reproduce", {"paper": "godey", "models": ["secret-model"]}, "secret label",
                       jobs.RUNNING, created=t - 10, started=t - 9, owner="them",
                       worker={"host": "elsewhere", "pid": 1}, heartbeat=t,
                       progress=Progress("forward", 5, 10, message="run 3 of 6: Secret on private.csv: forward"))
    mine = jobs.Job("analyze-bbb", "analyze", {"spec": {}}, "my run", jobs.QUEUED, created=t - 5, owner="me")
    me2 = jobs.Job("analyze-ccc", "analyze", {"spec": {}}, "my other run", jobs.QUEUED, created=t - 1, owner="me")
    for j in (running, mine, me2):
        job_queue.write(j, cache)
    line = jobs.queue_line(mine, owner="me")
    assert line == "2nd in the queue, behind: Godey reproduction, run 3 of 6, started by another user", line
    line = jobs.queue_line(me2, owner="me")
    assert line.startswith("3rd in the queue, behind: Godey reproduction, run 3 of 6, started by another user; "
                           "extraction, queued, started by you"), line
    assert not any(w in line for w in ("secret", "Secret", "private", "my run"))
    assert jobs.queue_line(jobs.Job("analyze-ddd", "analyze", {}, created=t - 100)).startswith("1st in the queue")


@pytest.mark.slow
def test_worker_killed_halfway_fails_the_job_stores_nothing_and_retry_works(cache, tiny_bert_dir):
    """SIGKILL (what the OOM killer sends) in the middle of an extraction."""
    spec = RunSpec(model=str(tiny_bert_dir), corpus="wiki-en", max_tokens=25_000, max_seq_len=64, batch_size=2,
                   sample=300)
    jid = jobs.submit("analyze", {"spec": spec.to_dict()})
    assert jid == jobs.job_id("analyze", {"spec": spec.to_dict()})
    with worker(cache) as proc:
        wait_for(lambda: jobs.status(jid).progress.stage == "forward" and jobs.status(jid).progress.done > 0, timeout=240,
                 what="the forward pass to start")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    job = jobs.status(jid)
    assert job.status == jobs.FAILED and "stopped while running" in job.error and "retry" in job.error
    assert not is_cached(spec)  # nothing read as complete
    assert run_key(spec) not in get_store(cache).keys()
    job = jobs.retry(jid)
    assert job.status == jobs.QUEUED and job.attempt == 2
    with worker(cache):
        job = jobs.wait(jid, timeout=600)
    assert job.status == jobs.DONE, job.error
    assert is_cached(spec) and job.result["tokens"] == analyze(spec)["manifest"]["tokens"]["analysed"]


@pytest.mark.slow
def test_cli_analyze_waits_for_the_running_job(cache, tiny_bert_dir):
    spec = RunSpec(model=str(tiny_bert_dir), corpus="wiki-en", max_tokens=20_000, max_seq_len=64, batch_size=2,
                   sample=300)
    jid = jobs.submit("analyze", {"spec": spec.to_dict()})
    with worker(cache):
        wait_for(lambda: jobs.status(jid).status == jobs.RUNNING, timeout=120, what="the job to run")
        out = cache / "r.json"
        cli = subprocess.run([sys.executable, "-m", "core", "analyze", "--model", str(tiny_bert_dir), "--corpus",
                              "wiki-en", "--max-tokens", "20000", "--max-seq-len", "64", "--batch-size", "2",
                              "--sample", "300", "--out", str(out)], cwd=ROOT, env=worker_env(cache),
                             capture_output=True, text=True, timeout=600)
        assert cli.returncode == 0, cli.stderr
        assert f"waiting for job {jid}" in cli.stderr
        assert jobs.status(jid).status == jobs.DONE
    res = json.loads(out.read_text())
    assert res["manifest"]["cache_hit"] is True  # read what the worker computed: one computation
    assert res["manifest"]["cache_key"] == run_key(spec)


@pytest.mark.slow
def test_parallel_jobs_do_not_disturb_each_other(cache, tiny_gpt2_dir):
    """Two workers threads: an ablation (zeroes norm weights of its own model copy) next to an
    extraction of the same model; both equal what they give when run alone."""
    base = RunSpec(model=str(tiny_gpt2_dir), corpus="wiki-en", max_tokens=1500, max_seq_len=64, batch_size=4,
                   sample=200)
    other = base.replace(seed=1, max_tokens=4000)
    analyze(base)  # the ablated run is computed; the other one is not
    store = get_store(cache)
    jobs_ab = jobs.submit("ablation", {"spec": base.to_dict(), "dims": [1, 2, 3], "n_random": 2,
                                       "held_out_tokens": 1500})
    jobs_an = jobs.submit("analyze", {"spec": other.to_dict()})
    with worker(cache, workers=2):
        ab = jobs.wait(jobs_ab, timeout=600)
        an = jobs.wait(jobs_an, timeout=600)
    assert ab.status == jobs.DONE and an.status == jobs.DONE, (ab.error, an.error)
    assert ab.started < an.finished and an.started < ab.finished  # they did overlap
    parallel = analyze(other)
    for k in list(store.keys()):  # recompute both alone, in this process, from scratch
        store.delete(k)
    from core.compute.pipeline import run_ablation

    alone = analyze(other)
    assert json.dumps(alone["layers"], sort_keys=True) == json.dumps(parallel["layers"], sort_keys=True)
    ab_alone = run_ablation(base, dims=[1, 2, 3], n_random=2, held_out_tokens=1500)
    assert ab_alone["delta"] == pytest.approx(ab.result["delta"], rel=1e-6)


def test_jobs_cli_list_cancel_retry(cache):
    jid = jobs.submit("test-steps", _steps(n=2), label="two steps")
    env = worker_env(cache)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "core", "jobs", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)

    out = cli("list")
    assert out.returncode == 0 and jid in out.stdout and "queued" in out.stdout and "not running" in out.stdout
    out = cli("cancel", jid)
    assert out.returncode == 0 and "cancelled" in out.stdout
    out = cli("retry", jid)
    assert out.returncode == 0 and "queued (attempt 2)" in out.stdout
    out = cli("cancel", "nope")
    assert out.returncode == 2 and out.stderr.startswith("error: No job 'nope'")
    rows = json.loads(cli("list", "--json").stdout)
    assert [r["id"] for r in rows] == [jid] and rows[0]["status"] == "queued"


def test_ensure_worker_starts_one_worker_for_two_callers(cache, monkeypatch):
    for k, v in worker_env(cache).items():
        if k in ("ANISO_JOB_MODULES", "PYTHONPATH"):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "1")
    monkeypatch.setenv("ANISO_WORKER_WARM", "0")  # its jobs are test kinds: no torch to import first
    monkeypatch.setenv("ANISO_WORKER_NICE", "10")  # an admin's choice (the default is 0, the CLI's)
    pids = []
    threads = [threading.Thread(target=lambda: pids.append(worker_process.ensure_worker(cache, idle_exit=60))) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert pids[0] and pids[0] == pids[1]
        wait_for(lambda: worker_process.worker_pid(cache) == pids[0], timeout=60, what="the worker to take its lock")
        if os.path.exists(f"/proc/{pids[0]}/cmdline"):  # its cache root is an argument, not the environment
            argv = open(f"/proc/{pids[0]}/cmdline").read().split("\0")
            assert argv[argv.index("--cache-dir") + 1] == str(cache.resolve())
        jid = jobs.submit("test-steps", _steps(n=2))
        assert jobs.wait(jid, timeout=60).status == jobs.DONE  # the auto-started worker serves the queue
        # It leads its own session: its autogroup is niced too, or it would take an equal share of the CPU
        # against the app server whatever its own niceness (Linux autogroups share CPU per session first).
        if os.path.exists(f"/proc/{pids[0]}/autogroup"):
            group = open(f"/proc/{pids[0]}/autogroup").read()
            assert group.split()[-1] == "10", group  # "/autogroup-123 nice 10"
            # A process in the kernel's default autogroup (a session never started by setsid, as under some
            # CI runners) reads an empty file; the worker's own group then differs from it by construction.
            own = open("/proc/self/autogroup").read().split()
            assert not own or group.split()[0] != own[0], (group, own)
    finally:
        assert worker_process.stop_worker(cache)
    assert worker_process.worker_pid(cache) is None


def _running_record(cache, worker: dict, heartbeat: float, attempt: int = 1) -> jobs.Job:
    jid = jobs.job_id("test-steps", {"n": 1})
    job = jobs.Job(jid, "test-steps", {"n": 1}, "x", jobs.RUNNING, attempt, created=time.time(),
                   started=time.time(), heartbeat=heartbeat, worker=worker)
    job_queue.write(job, cache)
    return job


def test_a_starved_worker_on_this_host_is_alive_a_dead_or_reused_pid_is_not(cache):
    """Same host: the pid (and its start time) decides, never a late heartbeat (a niced worker on a busy
    machine was once reported dead, and its job failed while it ran); another host: the heartbeat."""
    import socket

    me = {"host": socket.gethostname(), "pid": os.getpid(), "start": job_run.proc_start(os.getpid())}
    job = _running_record(cache, me, heartbeat=time.time() - 10 * jobs.STALE_S)
    assert jobs.status(job.id, cache).status == jobs.RUNNING
    reused = {**me, "start": me["start"] - 1}  # this pid, but another process's start time: the worker is gone
    _running_record(cache, reused, heartbeat=time.time())
    st = jobs.status(job.id, cache)
    assert st.status == jobs.FAILED and "stopped while running" in st.error
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _running_record(cache, {"host": socket.gethostname(), "pid": dead.pid}, heartbeat=time.time())
    assert jobs.status(job.id, cache).status == jobs.FAILED
    other = {"host": "another-host.invalid", "pid": os.getpid()}
    _running_record(cache, other, heartbeat=time.time())
    assert jobs.status(job.id, cache).status == jobs.RUNNING
    _running_record(cache, other, heartbeat=time.time() - 2 * jobs.STALE_S)
    st = jobs.status(job.id, cache)
    assert st.status == jobs.FAILED and "has not reported" in st.error


def test_marking_a_dead_job_failed_never_overwrites_a_newer_attempt(cache):
    """The read-check-write of status() re-reads under a lock: a Retry written meanwhile stays."""
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    seen = _running_record(cache, {"host": socket.gethostname(), "pid": dead.pid}, heartbeat=time.time())
    retried = _running_record(cache, {"host": socket.gethostname(), "pid": os.getpid()}, heartbeat=time.time(),
                              attempt=2)
    out = jobs._mark_failed(seen, "gone", cache)  # what a poll that read attempt 1 just before the Retry does
    assert (out.attempt, out.status) == (2, jobs.RUNNING)
    assert (jobs.status(retried.id, cache).attempt, jobs.status(retried.id, cache).status) == (2, jobs.RUNNING)


def test_an_attention_job_reports_a_moving_bar(cache, tiny_gpt2_dir, monkeypatch):
    """The attention job's progress is typed (core.base.progress.Progress) and counted: the bar it
    records moves through the pass (it stayed at 0 while its stage was an untyped string)."""
    from core.base.progress import Stage

    spec = RunSpec(model=str(tiny_gpt2_dir), corpus="wiki-en", max_tokens=1200, max_seq_len=32, batch_size=2,
                   sample=100)
    jid = jobs.submit("attention", {"spec": spec.to_dict()})
    written = []
    write = job_queue.write

    def record(job, cache_dir=None):  # every record the worker writes for the job, as a poller reads it
        written.append((job.status, job.progress))
        write(job, cache_dir)

    monkeypatch.setattr(job_queue, "write", record)
    monkeypatch.setattr(job_run, "PROGRESS_WRITE_S", 0.0)  # each report is written (a poller may see any)
    job_run._run_job(jid, 1)  # the worker's task, in this process
    assert jobs.status(jid).status == jobs.DONE, jobs.status(jid).error
    passes = [p for s, p in written if s == jobs.RUNNING and p.stage == Stage.ATTENTION]
    done = [p.done for p in passes]
    assert len(set(done)) >= 3 and done == sorted(done) and done[-1] == passes[-1].total > 0
    moving = [p.fraction for p in passes if 0 < p.done < p.total]
    assert moving and all(0 < f < 1 for f in moving)  # the bar moves before the pass ends
    assert all(p.rate > 0 and p.eta_s is not None for p in passes if p.done)
    forward = [p.done for s, p in written if p.stage == Stage.FORWARD]
    assert forward == sorted(forward) and forward[-1] > 0  # the run's own extraction came first, counted too


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_queue_is_set_aside_with_one_warning(cache, caplog, damage):
    """Issue 27 item 9: a corrupted queue.db made every page an exception box and `jobs list`, `worker`
    and `jobs retry` tracebacks. Now it is renamed aside (kept), a fresh queue starts, one warning says so."""
    import logging

    db = cache / "jobs" / "queue.db"
    db.parent.mkdir(parents=True)
    if damage == "garbage":
        db.write_bytes(b"this is not a database at all\n" * 200)
    else:  # a real queue cut short: the header is fine, the pages are gone
        jid = jobs.submit("test-steps", _steps(1), cache_dir=cache)
        assert jobs.status(jid, cache) is not None
        job_queue._queues.clear()
        raw = db.read_bytes()
        db.write_bytes(raw[:100] + b"\xff" * (len(raw) - 100))
    with caplog.at_level(logging.WARNING, logger="core.entry.job_queue"):
        assert jobs.list_jobs(cache) == []
        assert jobs.list_jobs(cache) == []
    warned = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(warned) == 1 and "fresh queue" in warned[0] and "not deleted" in warned[0]
    side = ("-wal", "-shm", "-journal")  # the aside file itself ends in its pid, which may be 3 digits (CI)
    aside = [p for p in db.parent.iterdir() if p.name.startswith("queue.db.damaged-") and not p.name.endswith(side)]
    assert aside and aside[0].read_bytes()[:4] in (b"this", b"SQLi")  # kept as it was
    assert job_queue.queue_notice(cache) == warned[0]
    jid = jobs.submit("test-steps", _steps(1), cache_dir=cache)  # the fresh queue works
    assert jobs.status(jid, cache).status == jobs.QUEUED


def test_the_cli_survives_a_damaged_queue(tmp_path):
    db = tmp_path / "jobs" / "queue.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"garbage" * 1000)
    env = {**worker_env(tmp_path), "ANISO_WORKER_AUTOSTART": "0"}
    out = subprocess.run([sys.executable, "-m", "core", "jobs", "list", "--cache-dir", str(tmp_path)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.count("was damaged") == 1


def _forged(cache, jid: str, params: dict) -> None:
    """A job record and a queue message written straight into queue.db, as plain SQL could."""
    job_queue.write(jobs.Job(jid, "analyze", params, "forged", jobs.QUEUED, 1, created=time.time()), cache)
    job_run.task(jobs.queue(cache))(jid, 1)


def test_the_worker_rechecks_a_forged_job(cache, tmp_path, monkeypatch):
    """Issue 27 item 2: a record asking for trust_remote_code made the worker import a folder's Python."""
    from core.base.spec import RunSpec

    folder = tmp_path / "evil"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {"AutoModel": "evil.Evil"}}))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("ANISO_DATA_DIR", str(data))
    monkeypatch.delenv("ANISO_ALLOW_SERVER_PATHS")  # a served dashboard's worker: the data directory only
    cases = {
        "remote": (RunSpec(model=str(folder), corpus="wiki-en", trust_remote_code=True), "ANISO_ALLOW_REMOTE_CODE"),
        "folder": (RunSpec(model=str(folder), corpus="wiki-en"), "not available here"),
        "corpus": (RunSpec(model="minilm-l6", corpus="/etc/passwd"), "not available here"),
    }
    for name, (spec, expected) in cases.items():
        _forged(cache, f"forged-{name}", {"spec": spec.to_dict()})
        job_run._run_job(f"forged-{name}", 1)
        job = jobs.status(f"forged-{name}", cache)
        assert job.status == jobs.FAILED and expected in job.error, (name, job.error)
    monkeypatch.setenv("ANISO_SHARED", "1")  # a shared server's worker refuses hub ids too
    _forged(cache, "forged-hub", {"spec": RunSpec(model="someone/model", corpus="wiki-en").to_dict()})
    job_run._run_job("forged-hub", 1)
    assert "switched off" in jobs.status("forged-hub", cache).error
    assert not marker.exists()


def test_what_the_app_submits_passes_the_workers_check(cache, tmp_path, monkeypatch):
    from core.inputs.access import check_job_params
    from core.inputs.uploads import save_upload, upload_id
    from core.studies.selection import Selection

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "c.txt").write_text("one\n\ntwo")
    monkeypatch.setenv("ANISO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ANISO_SHARED", "1")
    up = upload_id(save_upload(b"hello world\n\nagain", "a.txt"))
    for sel in (Selection(corpus=up), Selection(corpus="data:c.txt", models=("untrained-gpt2", "minilm-l6")),
                Selection(models=("trained/run@step-4",)), Selection(models=("dinov2-vits14",))):
        for spec in sel.specs():
            check_job_params({"spec": spec.to_dict()})


def test_the_worker_rechecks_series_and_torchrun_parameters(cache, tmp_path, monkeypatch):
    """The parameters beyond the spec: a series' options and run, a torchrun job's cache and processes."""
    from core.base.spec import RunSpec

    monkeypatch.delenv("ANISO_ALLOW_SERVER_PATHS")
    elsewhere = tmp_path / "elsewhere"
    outside = tmp_path / "outside.txt"
    outside.write_text("private\n\nnotes\n")
    small = RunSpec(model="minilm-l6", corpus="wiki-en", max_tokens=200, sample=50).to_dict()
    cases = {
        "series-cache": ("series", {"run": "r", "kw": {"cache_dir": str(elsewhere)}}, "series options"),
        "series-corpus": ("series", {"run": "r", "kw": {"corpus": str(outside)}}, "not available here"),
        "series-run": ("series", {"run": "../../x", "kw": {}}, "not a run name"),
        "train-series": ("train", {"spec": {"corpus": "wiki-en"}, "analyse": True, "series": {"cache_dir": "/"}},
                         "series options"),
        "torchrun-cache": ("analyze-torchrun", {"spec": small, "nproc": 1, "cache_dir": str(elsewhere)},
                           "another cache directory"),
        "torchrun-nproc": ("analyze-torchrun", {"spec": small, "nproc": 64}, "torchrun processes"),
    }
    for name, (kind, params, expected) in cases.items():
        job_queue.write(jobs.Job(f"forged-{name}", kind, params, "forged", jobs.QUEUED, 1, created=time.time()), cache)
        job_run._run_job(f"forged-{name}", 1)
        job = jobs.status(f"forged-{name}", cache)
        assert job.status == jobs.FAILED and expected in job.error, (name, job.error)
    assert not elsewhere.exists()
