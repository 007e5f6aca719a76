"""The worker process: `python -m core worker` serves the job queue (core/entry/job_queue.py), each job run as
core/entry/job_run.py says; the app starts one per cache directory (`ensure_worker`), which holds
`<cache>/jobs/worker.lock` for its lifetime.

    ensure_worker()       start the worker process when none runs (the app calls it)
    run_worker()          the worker itself (`python -m core worker`)
    worker_pid() / stop_worker()
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..base import settings
from ..base.errors import InputError
from ..base.settings import cache_root
from . import job_queue, job_records, job_run, jobs

log = logging.getLogger(__name__)

AUTOSTART_IDLE_EXIT_S = 900  # an auto-started worker exits after this long without jobs
ROOT = Path(__file__).resolve().parents[2]


def _worker_lock_path(cache_dir=None) -> Path:
    return settings.jobs_dir(cache_dir) / "worker.lock"  # not created here: a read-only cache has none


def worker_pid(cache_dir=None) -> int | None:
    """The pid of the worker serving this cache directory, or None when none runs."""
    path = _worker_lock_path(cache_dir)
    try:
        f = open(path, "a+")
    except OSError:  # a read-only cache directory: a worker holds the file open only where it exists
        try:
            f = open(path)
        except OSError:
            return None
    with f:
        try:  # a shared probe: two probes never block each other, the worker's exclusive lock blocks them
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            try:
                return int(f.read().strip() or 0) or -1
            except ValueError:
                return -1
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


def ensure_worker(cache_dir=None, idle_exit: float = AUTOSTART_IDLE_EXIT_S) -> int | None:
    """Start a worker process for this cache directory unless one runs; returns its pid.

    Two app processes calling this at once start one worker: the spawn is serialised by a file
    lock and the worker holds `worker.lock` for its lifetime. `ANISO_WORKER_AUTOSTART=0` turns it off.
    The worker warms up before its first job (`run_worker(warm=True)`) unless `ANISO_WORKER_WARM=0`.
    """
    pid = worker_pid(cache_dir)
    if pid is not None or not settings.worker_autostart() or not job_queue.writable(cache_dir):
        return pid  # a read-only queue: the app runs its jobs itself (submit(..., here=True))
    d = job_queue.jobs_dir(cache_dir)
    with open(d / "spawn.lock", "a+") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            pid = worker_pid(cache_dir)
            if pid is not None:
                return pid
            lk.seek(0)
            try:  # a worker spawned moments ago may still be importing: don't start a second one
                spawned, when = (float(x) for x in lk.read().split())
                if jobs.pid_alive(int(spawned)) and time.time() - when < 60:
                    return int(spawned)
            except ValueError:
                pass
            argv = [
                sys.executable,
                "-m",
                "core",
                "worker",
                "--cache-dir",
                str(cache_root(cache_dir)),
                "--idle-exit",
                str(idle_exit),
            ] + (["--warm"] if settings.worker_warm() else [])
            with open(d / "worker.log", "ab") as out:
                proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
            lk.seek(0)
            lk.truncate()
            lk.write(f"{proc.pid} {time.time()}")
            lk.flush()
            return proc.pid
        finally:
            fcntl.flock(lk, fcntl.LOCK_UN)


def stop_worker(cache_dir=None, timeout: float = 20) -> bool:
    """Stop the worker of this cache directory (SIGTERM; SIGKILL after `timeout` s).

    A job it was running is recorded as failed (retry it). Returns True when no worker runs afterwards.
    """
    pid = worker_pid(cache_dir)
    if not pid or pid < 0:
        return pid is None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if worker_pid(cache_dir) is None:
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    return worker_pid(cache_dir) is None


# What `run_worker(warm=True)` calls, in order, with the cache directory; a step is skipped once a job is queued.
WARM_UP = ("core.compute.analysis_jobs:warm_imports", "core.compute.analysis_jobs:warm_up")
IDLE_POLL_S = 0.5  # an idle worker looks at the queue this often (a Run's job waits half of it on average)


def run_worker(cache_dir=None, workers: int | None = None, idle_exit: float | None = None, warm: bool = False) -> int:
    """Serve the queue until SIGINT/SIGTERM (or `idle_exit` seconds without work). Returns an exit code.

    warm: before taking jobs, call the steps of `WARM_UP` (the app starts its worker so, when a page opens): an
    analysis's imports (torch, transformers, pandas: about 10 CPU-seconds), then the default model's first load
    (its classes), paid before the first Run, not after it. The warm-up yields: before each step it looks at
    the queue, and once a job waits there it stops and the consumer takes the job (a worker started by a Run
    skips it entirely). A job thus waits at most for the step in progress, and the first step is what the job
    would import anyway. In the main thread, before the consumer's threads start: two threads importing torch
    and transformers at once can meet half-initialised modules. A warm-up that fails is logged; the jobs then
    pay what it did not do."""
    root = cache_root(cache_dir)
    settings.set_cache_dir(root)  # job kinds and the pipeline use this cache
    if not job_queue.writable(root):
        raise InputError(
            f"The job queue of {root} cannot be written ({job_queue.readonly_reason(root)}): a worker needs a "
            "writable cache directory."
        )
    job_run.mark_worker_process()
    job_queue.jobs_dir(root)  # created here (a Redis queue makes no folder of its own)
    path = _worker_lock_path(root)
    f = open(path, "a+")
    try:  # a probe (worker_pid) may hold a shared lock for an instant: retry briefly before giving up
        for _ in range(100):
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                f.seek(0)
                if f.read().strip():  # a worker wrote its pid: it holds the lock for good
                    raise
                time.sleep(0.05)
        else:
            raise BlockingIOError
    except BlockingIOError:
        f.seek(0)
        print(f"a worker already serves {root} (pid {f.read().strip() or '?'})", file=sys.stderr)
        f.close()
        return 0
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    workers = settings.worker_threads(workers)
    _lower_priority(settings.worker_nice())
    # A job's forward passes take the cores other processes leave free (core.compute.forward_run.fit_threads): a
    # lab server is never quiet, and the worker runs beside other users' work (docs/jobs.md, issue 36)
    settings.env_default(**{settings.TORCH_THREADS_ENV: "auto"})
    job_records.load_job_modules()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    jobs.list_jobs(root)  # running jobs of a dead worker are marked failed now (status() does it)
    h = jobs.queue(root)
    if warm:
        _warm_up(root, h)
    consumer = h.create_consumer(
        workers=workers,
        worker_type="thread",
        periodic=False,
        initial_delay=0.1,
        backoff=1.15,
        max_delay=IDLE_POLL_S,
        check_worker_health=True,
    )
    if idle_exit:
        threading.Thread(target=_idle_watch, args=(consumer, h, float(idle_exit)), daemon=True).start()
    print(
        f"worker {os.getpid()} serving {settings.queue_url() or settings.queue_db(root)} with {workers} thread(s)",
        file=sys.stderr,
        flush=True,
    )
    try:
        consumer.run()
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()
    if job_run.busy():  # stopped (SIGTERM) mid-job: its record says so (job_run._on_interrupted); its thread is not waited for
        logging.shutdown()
        os._exit(0)
    return 0


def _job_waiting(h) -> bool:
    """True when a job message waits in the queue (a locked or broken queue: False, the warm-up goes on)."""
    try:
        return h.storage.queue_size() > 0
    except Exception:  # noqa: BLE001 - a busy database: the next look decides
        return False


def _warm_up(root: Path, h) -> list[str]:
    """The warm-up's steps until a job waits (`run_worker`); returns the steps done."""
    t0, c0 = time.perf_counter(), time.process_time()
    done = []
    for target in WARM_UP:
        if _job_waiting(h):
            print(f"worker {os.getpid()}: a job is queued, the warm-up stops before {target}", file=sys.stderr, flush=True)
            break
        try:
            job_records.resolve_target(target)(root)
            done.append(target)
        except Exception as e:  # noqa: BLE001 - a warm-up is an optimisation: the first job pays instead
            log.warning("warm-up %s failed: %s: %s", target, type(e).__name__, e)
    print(
        f"worker {os.getpid()} warmed up in {time.perf_counter() - t0:.1f} s ({time.process_time() - c0:.1f} "
        f"CPU-s; {len(done)} of {len(WARM_UP)} steps)",
        file=sys.stderr,
        flush=True,
    )
    return done


def _lower_priority(nice: int) -> None:
    """ANISO_WORKER_NICE > 0 (an admin's choice; the default is 0): jobs yield the CPU to everything else.

    `os.nice` alone is not enough on Linux with autogroups (sched_autogroup_enabled=1, the default
    of most distributions): CPU time is first shared equally between sessions, and niceness only
    counts inside one. The worker the app starts is its own session, so it would still take an
    equal share against the app server (a page took 10-20 s to draw while a job ran). A worker
    that leads its session therefore also nices its autogroup; one started by hand in a terminal
    shares the terminal's autogroup and leaves it alone.
    """
    if nice <= 0:
        return
    with contextlib.suppress(OSError, ValueError):
        os.nice(nice)
    if os.getsid(0) == os.getpid():
        with contextlib.suppress(OSError, ValueError), open("/proc/self/autogroup", "w") as f:
            f.write(str(min(19, nice)))


def _idle_watch(consumer, h, idle_exit: float) -> None:
    last_busy = time.monotonic()
    while True:
        time.sleep(min(5.0, idle_exit / 4))
        busy = job_run.busy()
        try:
            busy = busy or h.storage.queue_size() > 0
        except Exception:  # noqa: BLE001 - a locked database counts as busy
            busy = True
        if busy:
            last_busy = time.monotonic()
        elif time.monotonic() - last_busy > idle_exit:
            log.info("no jobs for %.0f s: the worker exits", idle_exit)
            consumer.stop(graceful=True)
            return
