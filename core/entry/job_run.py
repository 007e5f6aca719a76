"""One job attempt run: in a worker's thread (the queue's task, `_run_job`) or in this process (`run_here`).

    Running         the handle on a running job: its record's progress and heartbeat writes, its partial
                    result, the Cancel probe
    execute(run)    run the kind's function and record the outcome (done, failed, cancelled); never raises
    task(h)         the queue's job task (`_run_job`), bound to huey instance `h` once

A job kind is a function `fn(params: dict, progress, cancel) -> dict | None` named in `KINDS`
("module:function", core/entry/job_records.py; imported by the worker only). `progress(...)` takes a
`core.base.progress.Progress` (or its fields as keywords: stage, done, total, rate, eta_s, message), stored in the job
record as `Job.progress`, what every progress bar reads; `cancel()` is True once the Cancel button or
`python -m core jobs cancel ID` asked: stop between steps by raising `core.base.errors.Cancelled`, store nothing
partial. `progress.partial(dict)` publishes the job's result so far (`core.entry.jobs.partial` reads it).

Liveness: while a job runs, its record is rewritten every `HEARTBEAT_S` (core/entry/jobs.py reads a silent one as
failed). An outcome that cannot be written (a full disk) is retried with a smaller record; a worker process that
still cannot write it stops, so that no job stays in flight for good.

The queue and the records are core/entry/job_queue.py; the public API (submit, status, cancel...) is
core/entry/jobs.py; the worker process is core/entry/worker.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import sqlite3
import threading
import time

from ..base import cache as _cache
from ..base import settings
from ..base.errors import Cancelled, InputError
from ..base.procfs import stat_fields
from ..base.progress import Progress
from ..inputs.access import check_job_params
from . import job_queue
from .job_queue import CACHE_FULL, QUEUE_ERRORS, reason
from .job_records import CANCELLED, DONE, FAILED, QUEUED, RUNNING, Job, lookup, resolve_target

log = logging.getLogger(__name__)

HEARTBEAT_S = 3.0  # a running job's record is rewritten at least this often
PROGRESS_WRITE_S = 0.5  # progress records are written at most this often (stage changes always)


class Running:
    """The handle on one running job: progress and heartbeat writes, the cancel probe.

    here=True: a job run in this process (`run_here`): its record lives in memory, Cancel is an event.
    """

    def __init__(self, job: Job, cache_dir, here: bool = False):
        self.job, self.cache_dir, self.here = job, cache_dir, here
        self.lock = threading.Lock()
        self.last_write = 0.0
        self.stage_t0 = time.time()  # when the current progress stage began (a rate for kinds that give none)
        self.last_cancel_check = 0.0
        self.cancelled = False
        self.cancel_event = threading.Event()
        self.stop = threading.Event()
        self.beat = threading.Thread(target=self._heartbeat, name=f"heartbeat-{job.id}", daemon=True)
        self.partial_result: dict | None = None  # here=True: the last partial result (in memory)
        self.disk_error: BaseException | None = None  # a record write failed on a full or read-only disk
        self.report = _Report(self)

    def publish_partial(self, result: dict) -> None:
        """Keep `result` (JSON) as the job's partial result; a full or busy queue skips this one."""
        result = {**result, "published": time.time()}
        if self.here:
            self.partial_result = result
            return
        try:
            job_queue.store(self.cache_dir).put_data(job_queue.partial_key(self.job.id, self.job.attempt),
                                            json.dumps(result, allow_nan=False).encode())
        except QUEUE_ERRORS as e:
            log.warning("partial result of %s could not be recorded: %s", self.job.id, reason(e))

    def drop_partial(self) -> None:
        self.partial_result = None
        if not self.here:
            with contextlib.suppress(*QUEUE_ERRORS):
                job_queue.store(self.cache_dir).pop_data(job_queue.partial_key(self.job.id, self.job.attempt))

    def write(self) -> None:
        with self.lock:
            self.job.heartbeat = self.last_write = time.time()
            if not self.here:
                job_queue.write(self.job, self.cache_dir)

    def _heartbeat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            try:
                self.write()
            except Exception as e:  # noqa: BLE001 - a busy database: the next beat retries
                log.warning("heartbeat of %s failed: %s", self.job.id, e)
                self._disk_failed(e)

    def _disk_failed(self, e: BaseException) -> None:
        """A write of the job's record failed for want of disk: the job stops at its next cancel probe (results it
        could not store are of use to nobody; the dashboard computes the run in its own memory instead)."""
        if _disk_error(e) and self.disk_error is None:
            log.error("job %s: its record cannot be written (%s): the job stops", self.job.id, reason(e))
            self.disk_error = e

    def progress(self, p: Progress | None = None, **kw) -> None:
        """Record progress: a core.base.progress.Progress, or its fields as keywords (stage=, done=, total=,
        rate=, eta_s=, message=). A counted stage without a rate gets one from the stage's elapsed time."""
        if p is None:
            p = Progress(**kw)
        elif not isinstance(p, Progress):
            raise TypeError(f"progress takes a core.base.progress.Progress, got {type(p).__name__}")
        now = time.time()
        j = self.job
        same_stage = p.stage == j.progress.stage
        if not same_stage:
            self.stage_t0 = now
        j.progress = p.with_rate(now - self.stage_t0)
        if not same_stage or now - self.last_write >= PROGRESS_WRITE_S or p.finished:
            try:
                self.write()
            except QUEUE_ERRORS as e:  # busy: the job goes on; a full disk: it stops at its next cancel probe
                log.warning("progress of %s could not be recorded: %s", j.id, reason(e))
                self._disk_failed(e)

    def cancel_requested(self) -> bool:
        if self.disk_error is not None:  # not a Cancel: execute records it as the cache being full
            return True
        if self.here:
            return self.cancel_event.is_set()
        now = time.time()
        if not self.cancelled and now - self.last_cancel_check >= 0.25:
            self.last_cancel_check = now
            with contextlib.suppress(*QUEUE_ERRORS):
                key = job_queue.cancel_key(self.job.id, self.job.attempt)
                self.cancelled = job_queue.store(self.cache_dir).has_data_for_key(key)
        return self.cancelled


class _Report:
    """What a job kind receives as `progress`: call it with a Progress; `.partial(dict)` publishes the
    job's result so far (`partial`)."""

    def __init__(self, run: Running):
        self.partial = run.publish_partial
        self._progress = run.progress

    def __call__(self, p: Progress | None = None, **kw) -> None:
        self._progress(p, **kw)


_in_flight: dict[str, Running] = {}
_in_flight_lock = threading.Lock()
_in_worker = False  # True in a `python -m core worker` process (core.entry.worker.run_worker)


def mark_worker_process() -> None:
    """This process is a worker (`core.entry.worker.run_worker`): a job whose outcome cannot be written stops it."""
    global _in_worker
    _in_worker = True


def busy() -> bool:
    """True while a job runs in this process's worker threads."""
    with _in_flight_lock:
        return bool(_in_flight)


def _run_job(jid: str, attempt: int) -> None:
    """The huey task: run one job attempt and record its outcome. Never raises."""
    cache_dir = settings.cache_root()  # the worker's (run_worker set it from its --cache-dir)
    job = job_queue.read(jid, cache_dir)
    if job is None or job.attempt != attempt or job.status != QUEUED:
        return  # cancelled before it started, or superseded by a newer attempt
    execute(Running(job, cache_dir))


def _cache_full_error(e: BaseException) -> str:
    """The message of a job whose results could not be stored: the cache's disk is full (or unwritable)."""
    why = reason(e)
    if getattr(e, "errno", None) == errno.ENOSPC or "full" in str(e):
        return (f"{CACHE_FULL} ({why}): the results were computed but could not be stored. Free disk space "
                "(or set ANISO_CACHE_DIR to a larger disk) and retry; meanwhile the dashboard computes them "
                "again in its own memory.")
    return (f"the cache directory cannot be written ({why}): the results were computed but could not be stored; "
            "retry once it is writable.")


def _disk_error(e: BaseException) -> bool:
    return (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT)) or (
        isinstance(e, sqlite3.OperationalError) and ("full" in str(e) or "readonly" in str(e)))


def execute(run: Running) -> None:
    """Run one job attempt (in a worker, or here) and record its outcome. Never raises."""
    job, jid = run.job, run.job.id
    job.status, job.started, job.message = RUNNING, time.time(), "starting"
    job.worker = {"host": socket.gethostname(), "pid": os.getpid(), "start": proc_start(os.getpid()),
                  "thread": threading.current_thread().name, **({"here": True} if run.here else {})}
    try:
        run.write()
    except QUEUE_ERRORS as e:
        job.status, job.error, job.finished = FAILED, _cache_full_error(e), time.time()
        _record_outcome(run)
        return
    with _in_flight_lock:
        _in_flight[jid] = run
    run.beat.start()
    failures, _ = _cache.write_failures()
    try:
        if run.cancel_requested():
            raise Cancelled("cancelled before it started")
        fn = resolve_target(lookup(job.kind).run)
        check_job_params(job.params)  # the worker re-checks what the queue says, under its own settings
        result = fn(dict(job.params), run.report, run.cancel_requested)
        json.dumps(result, allow_nan=False)
        job.status, job.result, job.message = DONE, result, "done"
        n, last = _cache.write_failures()
        if n > failures and not run.here:  # the results are in this worker's memory only: of use to nobody
            job.status, job.error, job.message = FAILED, _cache_full_error(last), "failed"
    except Cancelled:
        if run.disk_error is not None:  # stopped because its record could not be written
            job.status, job.error, job.message = FAILED, _cache_full_error(run.disk_error), "failed"
        else:
            job.status, job.message = CANCELLED, "cancelled; nothing partial was stored"
    except InputError as e:
        job.status, job.error = FAILED, str(e)
    except MemoryError:
        job.status, job.error = FAILED, ("out of memory: lower the token budget, the sample size, the batch size or "
                                         "the maximum sequence length, and retry")
    except Exception as e:  # noqa: BLE001 - a job's failure is recorded, the worker keeps going
        if _disk_error(e):
            job.status, job.error = FAILED, _cache_full_error(e)
        else:
            log.exception("job %s failed", jid)
            job.status, job.error = FAILED, f"unexpected error: {type(e).__name__}: {e}"
    finally:
        run.stop.set()
        if run.beat.is_alive():
            run.beat.join(timeout=10)
        job.finished = time.time()
        if job.status == RUNNING:  # BaseException (SystemExit) on the way out
            job.status, job.error = FAILED, "the worker stopped while running this job; retry it"
        if job.status != FAILED:  # done: its results replace it; cancelled: a cancelled run keeps nothing
            run.drop_partial()
        _record_outcome(run)
        with _in_flight_lock:
            _in_flight.pop(jid, None)


FINAL_WRITE_TRIES = 5  # attempts at writing a job's outcome before the worker gives up and stops


def _record_outcome(run: Running) -> None:
    """Write the job's outcome. On a full disk, retry with a smaller record (failed, the cache is full);
    a worker that still cannot write it stops, so that no job stays in flight for good: readers then
    see its process gone and report the job failed (with "the cache is full" while the disk is)."""
    job = run.job
    for i in range(FINAL_WRITE_TRIES):
        try:
            run.write()
            return
        except QUEUE_ERRORS as e:
            log.warning("the outcome of job %s could not be recorded (%s); try %d/%d", job.id, reason(e), i + 1,
                        FINAL_WRITE_TRIES)
            if job.status != FAILED or not job.error.startswith(CACHE_FULL):
                job.status, job.result, job.message = FAILED, None, "failed"
                job.error = _cache_full_error(e)
            time.sleep(min(2.0, 0.2 * 2**i))
    _unrecordable(job)


def _unrecordable(job: Job) -> None:
    """No outcome could be written: a worker process stops (its jobs then read as failed)."""
    log.error("job %s: its outcome cannot be written (%s); the worker stops", job.id, job.error)
    if _in_worker:
        os._exit(75)  # EX_TEMPFAIL; the app starts a new worker for the next job


def _on_interrupted(signal_name, task, *a) -> None:
    """huey: the consumer was stopped with this task in flight (SIGTERM): say so in its record."""
    jid = (task.args or (None,))[0]
    with _in_flight_lock:
        run = _in_flight.get(jid)
    if run is not None:
        run.job.status, run.job.finished = FAILED, time.time()
        run.job.error = "the worker was stopped while running this job; nothing partial was stored; retry it"
        with contextlib.suppress(*QUEUE_ERRORS):
            run.write()


def proc_start(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot), or None where unknown."""
    st = stat_fields(pid)
    try:
        return int(st[19]) if st else None
    except (IndexError, ValueError):
        return None


_tasks: dict[int, "object"] = {}  # id(huey) -> its run_job task (which holds the huey: an id is never reused)
_tasks_lock = threading.Lock()


def task(h):
    """The job task of huey instance `h` (core.entry.job_queue.queue): `_run_job`, bound once per instance, with
    `_on_interrupted` on huey's "interrupted" signal. Its message carries only [job id, attempt]."""
    with _tasks_lock:
        if id(h) not in _tasks:
            _tasks[id(h)] = h.task(name="run_job")(_run_job)
            h.signal("interrupted")(_on_interrupted)
        return _tasks[id(h)]
