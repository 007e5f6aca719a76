"""Runs as durable jobs: a huey task queue, one worker process, job records any process can poll.

    submit(kind, params)  -> job id   one job per (kind, key of params): whoever asks shares it
    status(job_id)        -> Job | None (a job whose worker died reads as failed, with the reason)
    list_jobs()           -> [Job], newest first
    cancel(job_id) / retry(job_id) / wait(job_id)

The job kinds and the `Job` record are core/entry/job_records.py; the worker process that serves this queue
(`ensure_worker`, `run_worker`: `python -m core worker`) is core/entry/worker.py. This module is the queue, the
API above and the execution of one job attempt (heartbeats, cancellation, partial results, the outcome).

The queue is huey (a maintained task queue): SQLite in `<cache>/jobs/queue.db` by default (no
server), Redis when `ANISO_QUEUE_URL=redis://...` (several app servers, one queue). Everything
the queue stores is JSON: the task message carries only the job id (huey's pickle serializer is
replaced by `JsonSerializer`, which refuses anything else), and a job's parameters, progress and
outcome are a JSON record in the queue's key-value store. Nothing read from the queue is ever
unpickled.

A job kind is a function `fn(params: dict, progress, cancel) -> dict | None` named in `KINDS`
("module:function", core/entry/job_records.py; imported by the worker only). `progress(...)` takes a `core.base.progress.Progress`
(or its fields as keywords: stage, done, total, rate, eta_s, message), stored in the job record as
`Job.progress`, what every progress bar reads; `cancel()` is True once the
Cancel button or `python -m core jobs cancel ID` asked: stop between steps by raising
`core.base.errors.Cancelled`, store nothing partial. A kind may also name a `key` function: the job id
is derived from it (analyze uses the cache key of the run, so one spec is one job).

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
import importlib
import json
import logging
import os
import re
import shutil
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

from ..base import cache as _cache
from ..base import settings
from ..base.errors import Cancelled, InputError
from ..base.procfs import stat_fields
from ..base.progress import Progress
from ..base.settings import QUEUE_URL_ENV, cache_root
from ..inputs.access import check_job_params
from .job_records import CANCELLED, DONE, FAILED, KINDS, QUEUED, RUNNING, Job, JobKind

log = logging.getLogger(__name__)

HEARTBEAT_S = 3.0  # a running job's record is rewritten at least this often
STALE_S = 45.0  # a running job silent for longer has lost its worker (other hosts; same host: pid check)
LATE_S = 2 * HEARTBEAT_S + 1  # a running job's record older than this is late: its panel says so
PROGRESS_WRITE_S = 0.5  # progress records are written at most this often (stage changes always)


# ---------------------------------------------------------------------- the queue (huey)
class JsonSerializer:
    """huey serializer that writes task messages as JSON and refuses to read anything else.

    huey's default serializer pickles; a queue file or Redis that someone else can write would then
    run code in the worker. Our messages carry only the job id (a string), so JSON is enough.
    """

    def serialize(self, data) -> bytes:
        from huey.registry import Message

        if isinstance(data, Message):
            if data.eta or data.expires or data.on_complete or data.on_error or data.chord_config:
                raise ValueError("job messages are plain: no schedule, expiry or pipeline")
            return json.dumps({"message": {"id": data.id, "name": data.name, "args": list(data.args or ()),
                                           "kwargs": data.kwargs or {}, "priority": data.priority,
                                           "retries": data.retries, "retry_delay": data.retry_delay}}).encode()
        return json.dumps({"value": data}).encode()

    def deserialize(self, data: bytes):
        from huey.registry import Message

        obj = json.loads(data)  # raises on anything that is not JSON (a pickle is refused here)
        if "message" in obj:
            m = obj["message"]
            return Message(id=str(m["id"]), name=str(m["name"]), eta=None, retries=m.get("retries") or 0,
                           retry_delay=m.get("retry_delay") or 0, priority=m.get("priority"),
                           args=tuple(m.get("args") or ()), kwargs=dict(m.get("kwargs") or {}))
        return obj["value"]


_queues: dict[tuple[str, str], "object"] = {}
_tasks: dict[int, "object"] = {}  # id(huey) -> its run_job task wrapper
_queues_lock = threading.Lock()


def jobs_dir(cache_dir=None) -> Path:
    d = settings.jobs_dir(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    return d


_QUEUE_ERRORS = (OSError, sqlite3.Error)  # what a read-only, full or broken queue raises on access
CACHE_FULL = "the cache is full"  # how a job that could not store its results fails (ui and tests match it)
_notes: dict[str, list[str]] = {}  # cache root -> warnings about its queue (read-only), once each
_readonly: dict[str, str] = {}  # cache root -> why its queue cannot be written (jobs then run in memory)


def notes(cache_dir=None) -> list[str]:
    """Warnings about this cache's job queue: a queue that cannot be written (a read-only cache)."""
    queue(cache_dir)
    return list(_notes.get(str(cache_root(cache_dir)), ()))


def _note(root: str, msg: str) -> None:
    if msg not in _notes.setdefault(root, []):
        log.info(msg)  # the CLI prints it as a warning, the app shows it on every page
        _notes[root].append(msg)


def readonly_reason(cache_dir=None) -> str:
    """Why this cache's job queue cannot be written ("" when it can)."""
    queue(cache_dir)
    return _readonly.get(str(cache_root(cache_dir)), "")


def writable(cache_dir=None) -> bool:
    """False when this cache's job queue can only be read (a read-only cache directory)."""
    queue(cache_dir)
    return str(cache_root(cache_dir)) not in _readonly


def queue(cache_dir=None):
    """The huey instance of this cache directory (or of ANISO_QUEUE_URL), with the job task.

    A damaged SQLite queue is set aside and a fresh one started (`_sqlite_queue`, `queue_notice`).
    A queue that cannot be written (a read-only cache directory) is opened read-only: jobs can be
    listed, and the app runs new ones in its own process, in memory (`submit(..., here=True)`),
    with one warning (`notes`).
    """
    url = settings.queue_url()
    root = cache_root(cache_dir)
    where = url or str(settings.queue_db(cache_dir))
    k = (where, str(root))
    with _queues_lock:
        if k not in _queues:
            if url:
                if not url.startswith(("redis://", "rediss://", "unix://")):
                    raise InputError(f"{QUEUE_URL_ENV} must be a redis:// URL, got {url!r}.")
                try:
                    import redis  # noqa: F401 - only needed for a Redis queue
                    from huey import RedisHuey
                except ImportError:
                    raise InputError(f"{QUEUE_URL_ENV} points at Redis: install the client "
                                     "(.venv/bin/python -m pip install redis).") from None
                h = RedisHuey("aniso-jobs", url=url, results=False, serializer=JsonSerializer())
            else:
                h = _open_sqlite(Path(where), str(root))
            _tasks[id(h)] = h.task(name="run_job")(_run_job)
            h.signal("interrupted")(_on_interrupted)
            _queues[k] = h
        return _queues[k]


_queue_notices: dict[str, str] = {}  # queue file -> why it was set aside (one warning per process and file)


def queue_notice(cache_dir=None) -> str | None:
    """The warning about this cache's job queue, if a damaged one was set aside by this process."""
    return _queue_notices.get(str(settings.queue_db(cache_dir)))


def _sqlite_problem(where: str) -> str | None:
    """Why the SQLite queue file cannot be used (None: it can, or it does not exist yet)."""
    import sqlite3

    if not os.path.exists(where) or os.path.getsize(where) == 0:
        return None
    try:
        con = sqlite3.connect(where, timeout=30)
        try:
            row = con.execute("PRAGMA quick_check").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:  # "file is not a database", "database disk image is malformed"
        return str(e) if _cache.sqlite_damaged(e) else None  # locked, unreadable: not damaged (the open says why)
    return None if row and row[0] == "ok" else f"integrity check: {row[0] if row else 'no answer'}"


def _sqlite_queue(where: str):
    """The SQLite queue at `where`; a damaged file is renamed aside (never deleted) and a fresh queue
    started, with one warning (logged, and shown by the pages through `queue_notice`)."""
    import sqlite3

    from huey import SqliteHuey

    def make():
        return SqliteHuey("aniso-jobs", filename=where, results=False, serializer=JsonSerializer(), timeout=30)

    why = _sqlite_problem(where)
    if why is None:
        try:
            return make()
        except sqlite3.DatabaseError as e:
            if not _cache.sqlite_damaged(e):
                raise
            why = str(e)
    with _cache.file_lock(where + ".repair.lock"):  # one process sets it aside; the others see the fresh one
        why = _sqlite_problem(where) and why
        if why:
            aside = _cache.set_aside(where)
            msg = (f"The job queue {os.path.basename(where)} was damaged ({why}): it was renamed to "
                   f"{os.path.basename(aside)} (kept, not deleted) and a fresh queue started. Jobs queued before "
                   f"are not listed; results already computed are in the cache as before.")
            log.warning(msg)
            _queue_notices[where] = msg
        return make()


def _sqlite(path: Path, readonly: int = 0):
    from huey import SqliteHuey  # lazy: huey is imported where a queue is opened, as in _sqlite_queue

    if readonly:  # immutable: SQLite reads the file alone (no -wal/-shm file, no lock): where ro cannot
        return SqliteHuey("aniso-jobs", filename=f"{path.as_uri()}?mode=ro{'&immutable=1' if readonly > 1 else ''}",
                          uri=True, results=False, serializer=JsonSerializer(), journal_mode=None, create_tables=False)
    return SqliteHuey("aniso-jobs", filename=str(path), results=False, serializer=JsonSerializer(), timeout=30)


def _open_sqlite(path: Path, root: str):
    """The SQLite queue at `path` (a damaged file set aside by `_sqlite_queue`); where it cannot be
    written (a read-only cache directory), a read-only view of it, with one warning (`notes`)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        h = _sqlite_queue(str(path))
        h.storage.put_data("writable", b"1")  # a read-only file opens and reads fine: find out now
        return h
    except _QUEUE_ERRORS as e:
        why = _why(e)
    _readonly[root] = why
    # no server path in it: the pages show it to every visitor (the CLI's `cache size` names the folder)
    _note(root, f"The job queue of the cache directory cannot be written ({why}): runs are computed in this process "
                "instead and kept in memory only. Make the cache directory writable or set ANISO_CACHE_DIR to a "
                "writable folder.")
    for mode in (1, 2) if path.is_file() else ():  # read-only, with its write-ahead log; else the file alone
        with contextlib.suppress(*_QUEUE_ERRORS):
            h = _sqlite(path, readonly=mode)
            h.storage.result_items()
            return h
    from huey import MemoryHuey  # lazy: huey is imported where a queue is opened

    return MemoryHuey("aniso-jobs", results=False, serializer=JsonSerializer())  # nothing to list


def _store(cache_dir=None):
    return queue(cache_dir).storage


def _read(jid: str, cache_dir=None) -> Job | None:
    from huey.constants import EmptyData

    blob = _store(cache_dir).peek_data(f"job:{jid}")
    if blob is EmptyData or blob is None:
        return None
    try:
        return Job.from_json(blob)
    except (ValueError, TypeError) as e:
        log.warning("job record %s is unreadable (%s): ignored", jid, e)
        return None


def _write(job: Job, cache_dir=None) -> None:
    _store(cache_dir).put_data(f"job:{job.id}", job.to_json())


def _cancel_key(jid: str, attempt: int) -> str:
    return f"cancel:{jid}:{attempt}"


def _partial_key(jid: str, attempt: int) -> str:
    return f"partial:{jid}:{attempt}"


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
        blob = _store(cache_dir).peek_data(_partial_key(job.id, job.attempt))
    except _QUEUE_ERRORS:
        return None
    if blob is EmptyData or blob is None:
        return None
    try:
        return json.loads(blob)
    except ValueError:
        return None


# ---------------------------------------------------------------------- public API
def resolve_target(target: str) -> Callable:
    mod, _, name = target.partition(":")
    return getattr(importlib.import_module(mod), name)


def load_job_modules() -> None:
    for mod in settings.job_modules():
        importlib.import_module(mod)


def _kind(kind: str) -> JobKind:
    if kind not in KINDS:
        load_job_modules()
    if kind not in KINDS:
        raise InputError(f"Unknown job kind {kind!r}; known: {', '.join(sorted(KINDS))}.")
    return KINDS[kind]


def job_id(kind: str, params: dict) -> str:
    """The id of the one job that computes `params` (same params, same id, in every process)."""
    k = _kind(kind)
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
        st = _store(cache_dir)
        if not writable(cache_dir):
            raise OSError(errno.EROFS, _readonly[str(cache_root(cache_dir))])
        for _ in range(100):
            job = status(jid, cache_dir)
            if job is not None and job.active:
                return jid
            attempt = job.attempt + 1 if job is not None else 1
            if st.put_if_empty(f"claim:{jid}:{attempt}", b"1"):
                new = Job(jid, kind, params, label or (job.label if job else ""), QUEUED, attempt, created=time.time(),
                          message="waiting for a worker", owner=owner)
                with _record_lock(cache_dir):  # never between _mark_failed's re-read and its write
                    _write(new, cache_dir)
                if job is not None:  # the last attempt's partial result (a failed run's) goes with it
                    st.pop_data(_partial_key(jid, job.attempt))
                _tasks[id(queue(cache_dir))](jid, attempt)  # enqueues the message {"args": [jid, attempt]}
                return jid
            time.sleep(0.05)  # another process claimed this attempt: its record is being written
        return jid
    except _QUEUE_ERRORS as e:
        why = _why(e)
        if here:
            return run_here(kind, params, label, cache_dir, owner)
        raise InputError(f"The job queue cannot be written ({why}); nothing was queued.") from e


def _why(e: Exception) -> str:
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__) if isinstance(e, OSError) else str(e)


# Jobs run in this process (the app, when the queue cannot be written): records in memory only.
_here: dict[tuple[str, str], "_Running"] = {}
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
        run = _here[k] = _Running(job, cache_dir, here=True)
    threading.Thread(target=_execute, args=(run,), name=f"job-here-{jid}", daemon=True).start()
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
        job = _read(jid, cache_dir)
    except _QUEUE_ERRORS as e:
        if mine is None:
            raise InputError(f"The job queue cannot be read ({_why(e)}).") from e
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
        job.cancel_requested = _store(cache_dir).has_data_for_key(_cancel_key(jid, job.attempt))
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
    with _cache.file_lock(jobs_dir(cache_dir) / "records.lock"):  # read-only cache: no record written, no lock
        yield


def _mark_failed(seen: Job, why: str, cache_dir=None) -> Job:
    """Record `seen` as failed unless its record changed meanwhile (a retry, the worker's last write).

    Where the record cannot be written (a read-only or full cache), the failure is reported unsaved.
    """
    with _record_lock(cache_dir):
        now = _read(seen.id, cache_dir)
        if now is None or (now.attempt, now.status, now.worker) != (seen.attempt, RUNNING, seen.worker):
            return now if now is not None else seen
        now.status, now.error, now.finished, now.message = FAILED, why, time.time(), "failed"
        try:
            _write(now, cache_dir)
        except _QUEUE_ERRORS as e:
            log.warning("job %s failed (%s); its record could not be updated: %s", now.id, why, _why(e))
        return now


def _proc_start(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot), or None where unknown."""
    st = stat_fields(pid)
    try:
        return int(st[19]) if st else None
    except (IndexError, ValueError):
        return None


def _worker_gone(job: Job) -> str:
    """Why the running job's worker is gone ('' while it lives)."""
    host, pid, start = job.worker.get("host"), job.worker.get("pid"), job.worker.get("start")
    if host == socket.gethostname() and pid:
        alive = pid_alive(int(pid)) and (start is None or _proc_start(int(pid)) in (None, start))
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
        items = _store(cache_dir).result_items()
    except _QUEUE_ERRORS as e:
        raise InputError(f"The job queue cannot be read ({_why(e)}).") from e
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
        _store(cache_dir).put_data(_cancel_key(jid, job.attempt), b"1")
        if job.status == QUEUED:  # the worker skips it when it reaches it
            job.status, job.finished, job.message = CANCELLED, time.time(), "cancelled before it started"
            _write(job, cache_dir)
    except _QUEUE_ERRORS as e:
        raise InputError(f"The job queue cannot be written ({_why(e)}): job {jid} was not cancelled.") from e
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


# ---------------------------------------------------------------------- running a job (worker side)
class _Running:
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
            _store(self.cache_dir).put_data(_partial_key(self.job.id, self.job.attempt),
                                            json.dumps(result, allow_nan=False).encode())
        except _QUEUE_ERRORS as e:
            log.warning("partial result of %s could not be recorded: %s", self.job.id, _why(e))

    def drop_partial(self) -> None:
        self.partial_result = None
        if not self.here:
            with contextlib.suppress(*_QUEUE_ERRORS):
                _store(self.cache_dir).pop_data(_partial_key(self.job.id, self.job.attempt))

    def write(self) -> None:
        with self.lock:
            self.job.heartbeat = self.last_write = time.time()
            if not self.here:
                _write(self.job, self.cache_dir)

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
            log.error("job %s: its record cannot be written (%s): the job stops", self.job.id, _why(e))
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
            except _QUEUE_ERRORS as e:  # busy: the job goes on; a full disk: it stops at its next cancel probe
                log.warning("progress of %s could not be recorded: %s", j.id, _why(e))
                self._disk_failed(e)

    def cancel_requested(self) -> bool:
        if self.disk_error is not None:  # not a Cancel: _execute records it as the cache being full
            return True
        if self.here:
            return self.cancel_event.is_set()
        now = time.time()
        if not self.cancelled and now - self.last_cancel_check >= 0.25:
            self.last_cancel_check = now
            with contextlib.suppress(*_QUEUE_ERRORS):
                self.cancelled = _store(self.cache_dir).has_data_for_key(_cancel_key(self.job.id, self.job.attempt))
        return self.cancelled


class _Report:
    """What a job kind receives as `progress`: call it with a Progress; `.partial(dict)` publishes the
    job's result so far (`partial`)."""

    def __init__(self, run: _Running):
        self.partial = run.publish_partial
        self._progress = run.progress

    def __call__(self, p: Progress | None = None, **kw) -> None:
        self._progress(p, **kw)


_in_flight: dict[str, _Running] = {}
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
    job = _read(jid, cache_dir)
    if job is None or job.attempt != attempt or job.status != QUEUED:
        return  # cancelled before it started, or superseded by a newer attempt
    _execute(_Running(job, cache_dir))


def _cache_full_error(e: BaseException) -> str:
    """The message of a job whose results could not be stored: the cache's disk is full (or unwritable)."""
    why = _why(e)
    if getattr(e, "errno", None) == errno.ENOSPC or "full" in str(e):
        return (f"{CACHE_FULL} ({why}): the results were computed but could not be stored. Free disk space "
                "(or set ANISO_CACHE_DIR to a larger disk) and retry; meanwhile the dashboard computes them "
                "again in its own memory.")
    return (f"the cache directory cannot be written ({why}): the results were computed but could not be stored; "
            "retry once it is writable.")


def _disk_error(e: BaseException) -> bool:
    return (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT)) or (
        isinstance(e, sqlite3.OperationalError) and ("full" in str(e) or "readonly" in str(e)))


def _execute(run: _Running) -> None:
    """Run one job attempt (in a worker, or here) and record its outcome. Never raises."""
    job, jid = run.job, run.job.id
    job.status, job.started, job.message = RUNNING, time.time(), "starting"
    job.worker = {"host": socket.gethostname(), "pid": os.getpid(), "start": _proc_start(os.getpid()),
                  "thread": threading.current_thread().name, **({"here": True} if run.here else {})}
    try:
        run.write()
    except _QUEUE_ERRORS as e:
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
        fn = resolve_target(_kind(job.kind).run)
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


def _record_outcome(run: _Running) -> None:
    """Write the job's outcome. On a full disk, retry with a smaller record (failed, the cache is full);
    a worker that still cannot write it stops, so that no job stays in flight for good: readers then
    see its process gone and report the job failed (with "the cache is full" while the disk is)."""
    job = run.job
    for i in range(FINAL_WRITE_TRIES):
        try:
            run.write()
            return
        except _QUEUE_ERRORS as e:
            log.warning("the outcome of job %s could not be recorded (%s); try %d/%d", job.id, _why(e), i + 1,
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
        with contextlib.suppress(*_QUEUE_ERRORS):
            run.write()
