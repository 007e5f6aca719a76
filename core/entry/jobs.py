"""Runs as durable jobs, the API: submit, poll, cancel and retry jobs that a worker process runs.

    submit(kind, params)  -> job id   one job per (kind, key of params): whoever asks shares it
    status(job_id)        -> Job | None (a job whose worker died reads as failed, with the reason)
    list_jobs()           -> [Job], newest first
    cancel(job_id) / retry(job_id) / wait(job_id)
    partial(job)          -> the result so far of a running (or failed) job
    run_here(kind, params) a job in a thread of this process, its record in memory (the app's fallback)

Four modules make the jobs, each with one job of its own:
    core/entry/job_records.py  what a job is: the kinds (`KINDS`) and the `Job` record
    core/entry/job_queue.py    the queue's backend: the huey instance and the records it stores
    core/entry/job_run.py      one attempt run (in a worker or here): heartbeats, Cancel, partial results, outcome
    core/entry/jobs.py         this API over them (what the app, the CLI and the Python API call)
and core/entry/worker.py is the worker process that serves the queue (`python -m core worker`).

A job kind is a function `fn(params: dict, progress, cancel) -> dict | None` named in `KINDS`
(core/entry/job_records.py; how it reports progress and Cancel: core/entry/job_run.py). A kind may also name a
`key` function: the job id is derived from it (analyze uses the cache key of the run, so one spec is one job).

Partial results: a kind may publish what it has so far with `progress.partial(dict)` (JSON; the analysis
publishes its curves so far every few seconds). `partial(job)` reads the last one of a running job, and of
a failed one (its last partial, shown as such beside the error). It is kept apart from the job record and
from the results cache: a finished job's partial is deleted (its results replace it), a cancelled job's
too (a cancelled run keeps nothing), and a new attempt starts without one.

Liveness: the worker writes a heartbeat into the running job's record every few seconds. A
running job whose worker process is gone (same host: its pid, checked with the process's start
time so that a reused pid does not count) or, on another host, whose heartbeat is older than
`STALE_S` is reported failed ("the worker stopped ...") and can be retried. On the worker's own
host a late heartbeat never fails a job: a niced worker starved of CPU by a busy machine is slow,
not gone. Marking a job failed re-reads its record under a lock and writes only when it is still
the same attempt of the same worker, so that it never overwrites a newer attempt (a Retry).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
from typing import Callable

from ..base import cache as _cache
from ..base import settings
from ..base.errors import InputError
from ..base.procfs import stat_fields
from ..base.settings import cache_root
from . import job_queue, job_run
from .job_queue import CACHE_FULL, QUEUE_ERRORS, reason
from .job_records import CANCELLED, DONE, FAILED, KINDS, QUEUED, RUNNING, Job, lookup, resolve_target  # noqa: F401 (DONE: jobs.DONE)
from .job_run import HEARTBEAT_S, Running, execute, proc_start

log = logging.getLogger(__name__)

STALE_S = 45.0  # a running job silent for longer has lost its worker (other hosts; same host: pid check)
LATE_S = 2 * HEARTBEAT_S + 1  # a running job's record older than this is late: its panel says so


def queue(cache_dir=None):
    """The huey instance of this cache directory (core.entry.job_queue.queue) with the job task bound
    (core.entry.job_run.task): what the worker consumes and `submit` enqueues to."""
    h = job_queue.queue(cache_dir)
    job_run.task(h)
    return h


def job_id(kind: str, params: dict) -> str:
    """The id of the one job that computes `params` (same params, same id, in every process)."""
    k = lookup(kind)
    key = resolve_target(k.key)(params) if k.key else json.dumps(params, sort_keys=True, default=str)
    return f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def submit(kind: str, params: dict, label: str = "", cache_dir=None, here: bool = False, owner: str = "") -> str:
    """Queue a job, or join the same job when it is already queued or running. Returns its id.

    Finished, failed or cancelled jobs are queued again (a new attempt); a finished analysis then
    reads from the cache. Concurrent submitters are serialised by an atomic claim per attempt.
    here=True (the app): when the queue cannot be written (a read-only or full cache directory),
    run the job in this process instead, its record and results in memory only (`run_here`).
    Without it such a queue is an InputError that says why.
    """
    json.dumps(params, allow_nan=False)  # params are plain JSON (they travel through the queue)
    jid = job_id(kind, params)
    try:
        st = job_queue.store(cache_dir)
        if not job_queue.writable(cache_dir):
            raise OSError(errno.EROFS, job_queue.readonly_reason(cache_dir))
        for _ in range(100):
            job = status(jid, cache_dir)
            if job is not None and job.active:
                return jid
            attempt = job.attempt + 1 if job is not None else 1
            if st.put_if_empty(f"claim:{jid}:{attempt}", b"1"):
                new = Job(jid, kind, params, label or (job.label if job else ""), QUEUED, attempt, created=time.time(),
                          message="waiting for a worker", owner=owner)
                with _record_lock(cache_dir):  # never between _mark_failed's re-read and its write
                    job_queue.write(new, cache_dir)
                if job is not None:  # the last attempt's partial result (a failed run's) goes with it
                    st.pop_data(job_queue.partial_key(jid, job.attempt))
                job_run.task(job_queue.queue(cache_dir))(jid, attempt)  # enqueues the message {"args": [jid, attempt]}
                return jid
            time.sleep(0.05)  # another process claimed this attempt: its record is being written
        return jid
    except QUEUE_ERRORS as e:
        why = reason(e)
        if here:
            return run_here(kind, params, label, cache_dir, owner)
        raise InputError(f"The job queue cannot be written ({why}); nothing was queued.") from e


# Jobs run in this process (the app, when the queue cannot be written): records in memory only.
_here: dict[tuple[str, str], "Running"] = {}
_here_lock = threading.Lock()


def run_here(kind: str, params: dict, label: str = "", cache_dir=None, owner: str = "") -> str:
    """Run a job in a thread of this process, its record in memory (the app's fallback). Returns its id.

    Used when the queue cannot take it (a read-only cache directory) and when a worker's job failed
    because the cache is full: the results then stay in this process's memory (core.base.cache falls
    back to memory), where the pages read them, until the process ends.
    """
    jid = job_id(kind, params)
    k = (str(cache_root(cache_dir)), jid)
    with _here_lock:
        cur = _here.get(k)
        if cur is not None and cur.job.active:
            return jid
        job = Job(jid, kind, params, label, QUEUED, (cur.job.attempt + 1) if cur else 1, created=time.time(),
                  message="computed in this process; kept in memory only", worker={"pid": os.getpid(), "here": True},
                  owner=owner)
        run = _here[k] = Running(job, cache_dir, here=True)
    threading.Thread(target=execute, args=(run,), name=f"job-here-{jid}", daemon=True).start()
    return jid


def _here_job(jid: str, cache_dir=None) -> Job | None:
    with _here_lock:
        run = _here.get((str(cache_root(cache_dir)), jid))
    if run is None:
        return None
    with run.lock:
        job = dataclasses.replace(run.job)
    job.cancel_requested = job.active and run.cancel_event.is_set()
    return job


def status(jid: str, cache_dir=None) -> Job | None:
    """The job's record; a running job whose worker is gone is marked failed (and saved so).

    A job run in this process (`run_here`) is read from memory, unless the queue holds a newer attempt.
    """
    mine = _here_job(jid, cache_dir)
    try:
        job = job_queue.read(jid, cache_dir)
    except QUEUE_ERRORS as e:
        if mine is None:
            raise InputError(f"The job queue cannot be read ({reason(e)}).") from e
        job = None
    if mine is not None and (job is None or mine.created >= job.created):
        return mine
    if job is None:
        return None
    if job.status == RUNNING:
        dead = _worker_gone(job)
        if dead:
            if _disk_full(cache_dir):
                dead = f"{CACHE_FULL} (no space left on its disk): {dead}"
            job = _mark_failed(job, dead, cache_dir)
        elif _late_s(job) > LATE_S and _disk_full(cache_dir):  # its worker lives but cannot write its record
            job = _mark_failed(job, f"{CACHE_FULL} (no space left on its disk): the worker could not record this "
                                    f"job for {_late_s(job):.0f} s and stops it; nothing partial was stored. Free disk "
                                    "space (or set ANISO_CACHE_DIR to a larger disk) and retry; meanwhile the "
                                    "dashboard computes the run in its own memory.", cache_dir)
    if job.active:
        job.cancel_requested = job_queue.store(cache_dir).has_data_for_key(job_queue.cancel_key(jid, job.attempt))
    return job


def _late_s(job: Job) -> float:
    """Seconds since the running job's record was last written (0 when it never was)."""
    return time.time() - job.heartbeat if job.heartbeat else 0.0


def late(job: Job | None) -> str | None:
    """What a running job's panel says when its record is older than LATE_S (its worker's writes fail, or the
    worker is starved of CPU): the progress shown is that old."""
    if job is None or job.status != RUNNING or _late_s(job) <= LATE_S:
        return None
    return (f"No news from the worker for {_late_s(job):.0f} s (it records this job every {HEARTBEAT_S:.0f} s): the "
            "progress shown is that old. Its writes to the cache may be failing (a full or unwritable disk), or the "
            "machine is too busy to run it.")


def cache_full(job: Job | None) -> bool:
    """True when the job failed because its results could not be stored (no space on the cache's disk)."""
    return job is not None and job.status == FAILED and job.error.startswith(CACHE_FULL)


def _disk_full(cache_dir=None) -> bool:
    try:
        return shutil.disk_usage(cache_root(cache_dir)).free < 2**20
    except OSError:
        return False


@contextlib.contextmanager
def _record_lock(cache_dir=None):
    """Serialises read-check-write of job records between the processes of this host."""
    with _cache.file_lock(job_queue.jobs_dir(cache_dir) / "records.lock"):  # read-only cache: no record written, no lock
        yield


def _mark_failed(seen: Job, why: str, cache_dir=None) -> Job:
    """Record `seen` as failed unless its record changed meanwhile (a retry, the worker's last write).

    Where the record cannot be written (a read-only or full cache), the failure is reported unsaved.
    """
    with _record_lock(cache_dir):
        now = job_queue.read(seen.id, cache_dir)
        if now is None or (now.attempt, now.status, now.worker) != (seen.attempt, RUNNING, seen.worker):
            return now if now is not None else seen
        now.status, now.error, now.finished, now.message = FAILED, why, time.time(), "failed"
        try:
            job_queue.write(now, cache_dir)
        except QUEUE_ERRORS as e:
            log.warning("job %s failed (%s); its record could not be updated: %s", now.id, why, reason(e))
        return now


def _worker_gone(job: Job) -> str:
    """Why the running job's worker is gone ('' while it lives)."""
    host, pid, start = job.worker.get("host"), job.worker.get("pid"), job.worker.get("start")
    if host == socket.gethostname() and pid:
        alive = pid_alive(int(pid)) and (start is None or proc_start(int(pid)) in (None, start))
        if alive:
            return ""  # same host: the process decides, however late its heartbeat (a starved worker)
        return (f"the worker (pid {pid}) stopped while running this job: killed, out of memory or shut "
                "down. Nothing partial was stored; retry it.")
    if job.heartbeat and time.time() - job.heartbeat > STALE_S:
        return (f"the worker on {host} (pid {pid}) has not reported for {time.time() - job.heartbeat:.0f} s: "
                "it stopped (killed, out of memory or lost). Nothing partial was stored; retry it.")
    return ""


def pid_alive(pid: int) -> bool:
    """True when the process exists and is not a zombie (a killed child not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    st = stat_fields(pid)
    return st is None or st[0] != "Z"


def list_jobs(cache_dir=None, kinds: tuple[str, ...] | None = None) -> list[Job]:
    """Every job record, newest first (running jobs with a dead worker read as failed), with this process's own."""
    out, seen = [], set()
    try:
        items = job_queue.store(cache_dir).result_items()
    except QUEUE_ERRORS as e:
        raise InputError(f"The job queue cannot be read ({reason(e)}).") from e
    root = str(cache_root(cache_dir))
    with _here_lock:
        mine = [jid for (r, jid) in _here if r == root]
    for k in [k.decode() if isinstance(k, bytes) else k for k in items] + [f"job:{j}" for j in mine]:
        if k.startswith("job:") and k not in seen:
            seen.add(k)
            job = status(k[4:], cache_dir)
            if job is not None and (kinds is None or job.kind in kinds):
                out.append(job)
    return sorted(out, key=lambda j: j.created, reverse=True)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _ahead_of(j: Job, owner: str | None) -> str:
    """One job ahead in the queue as another user may see it: its kind (a reproduction's paper), the run it is
    at ("run 3 of 6"), who started it (you / another user). Never its model, corpus, label or parameters."""
    what = (KINDS[j.kind].title if j.kind in KINDS else "") or j.kind
    if j.kind == "reproduce" and isinstance(j.params.get("paper"), str):
        what = f"{j.params['paper'].capitalize()} reproduction"
    if j.status == RUNNING:
        m = re.match(r"run \d+ of \d+", j.progress.message or "")
        what += f", {m.group(0)}" if m else ", running"
    else:
        what += ", queued"
    who = "you" if owner and j.owner == owner else "another user"
    return f"{what}, started by {who}"


def queue_line(job: Job, owner: str | None = None, cache_dir=None, limit: int = 3) -> str:
    """Where a queued job stands: "2nd in the queue, behind: Godey reproduction, run 3 of 6, started by another
    user". The jobs ahead are the active ones queued before it (the running one first), oldest first."""
    try:
        ahead = [j for j in list_jobs(cache_dir) if j.active and j.id != job.id and j.created <= job.created]
    except InputError:
        return "waiting for the worker…"
    if not ahead:
        return "1st in the queue: waiting for the worker…"
    ahead.sort(key=lambda j: (j.status != RUNNING, j.created))
    shown = "; ".join(_ahead_of(j, owner) for j in ahead[:limit])
    more = f"; and {len(ahead) - limit} more" if len(ahead) > limit else ""
    return f"{_ordinal(len(ahead) + 1)} in the queue, behind: {shown}{more}"


def may_cancel(job: Job, owner: str | None) -> bool:
    """Whether `owner` (a browser session's token; None: the command line) may cancel `job`.

    On a shared server (ANISO_SHARED=1) only the browser session that queued a job may cancel it;
    the command line always may. Elsewhere, anyone may."""
    return owner is None or not settings.current().shared or (bool(job.owner) and job.owner == owner)


def visible_while_active(job: Job, owner: str | None) -> bool:
    """Whether a queued or running training is listed to `owner`: on a shared server only to the
    browser session that queued it (everyone sees it once it is finished)."""
    return may_cancel(job, owner)


def cancel(jid: str, cache_dir=None, owner: str | None = None) -> Job:
    """Cancel a queued job, or ask a running one to stop between batches (nothing partial is stored).

    owner: the token of the browser session asking (the app); None: the command line."""
    job = status(jid, cache_dir)
    if job is None:
        raise InputError(f"No job {jid!r} (see `python -m core jobs list`).")
    if not may_cancel(job, owner):
        raise InputError(f"Job {jid} was started by another user of this shared server: only they can cancel it.")
    if not job.active:
        raise InputError(f"Job {jid} is {job.status}: nothing to cancel.")
    if job.worker.get("here"):
        with _here_lock:
            _here[(str(cache_root(cache_dir)), jid)].cancel_event.set()
        job.cancel_requested = True
        return job
    try:
        job_queue.store(cache_dir).put_data(job_queue.cancel_key(jid, job.attempt), b"1")
        if job.status == QUEUED:  # the worker skips it when it reaches it
            job.status, job.finished, job.message = CANCELLED, time.time(), "cancelled before it started"
            job_queue.write(job, cache_dir)
    except QUEUE_ERRORS as e:
        raise InputError(f"The job queue cannot be written ({reason(e)}): job {jid} was not cancelled.") from e
    job.cancel_requested = True
    return job


def retry(jid: str, cache_dir=None, here: bool = False, owner: str = "") -> Job:
    """Queue a failed or cancelled job again (a new attempt with the same parameters)."""
    job = status(jid, cache_dir)
    if job is None:
        raise InputError(f"No job {jid!r} (see `python -m core jobs list`).")
    if job.active:
        raise InputError(f"Job {jid} is {job.status}: it is not finished.")
    if here and (job.worker.get("here") or cache_full(job)):
        run_here(job.kind, job.params, job.label, cache_dir, owner)
    else:
        submit(job.kind, job.params, job.label, cache_dir, here=here, owner=owner)
    return status(jid, cache_dir)


def wait(jid: str, cache_dir=None, timeout: float | None = None, on_update: Callable[[Job], None] | None = None,
         poll_s: float = 0.5) -> Job:
    """Block until the job is finished (or `timeout` seconds passed); returns its last record."""
    t0 = time.monotonic()
    while True:
        job = status(jid, cache_dir)
        if job is None:
            raise InputError(f"No job {jid!r}.")
        if on_update:
            on_update(job)
        if not job.active or (timeout is not None and time.monotonic() - t0 > timeout):
            return job
        time.sleep(poll_s)


def partial(job: Job | None, cache_dir=None) -> dict | None:
    """The last partial result a running (or failed) job published, or None (none yet, or the job is
    queued, done or cancelled). The dict the kind published, with `published` (UNIX seconds) added."""
    if job is None or job.status not in (RUNNING, FAILED):
        return None
    if job.worker.get("here"):
        with _here_lock:
            run = _here.get((str(cache_root(cache_dir)), job.id))
        got = run.partial_result if run is not None and run.job.attempt == job.attempt else None
        return dict(got) if got is not None else None
    from huey.constants import EmptyData

    try:
        blob = job_queue.store(cache_dir).peek_data(job_queue.partial_key(job.id, job.attempt))
    except QUEUE_ERRORS:
        return None
    if blob is EmptyData or blob is None:
        return None
    try:
        return json.loads(blob)
    except ValueError:
        return None
