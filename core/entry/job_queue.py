"""The job queue's backend: the huey instance of a cache directory and the job records it stores.

    queue(cache_dir)          the huey instance (SQLite in `<cache>/jobs/queue.db`, or Redis); opened once
    store(cache_dir)          its key-value store (the records, the Cancel and partial-result keys)
    read / write              a job's record (`core.entry.job_records.Job`, JSON) in the queue's key-value store
    cancel_key / partial_key  the store's keys of a job attempt's Cancel and of its partial result
    notes / writable / readonly_reason / queue_notice   what is wrong with this cache's queue, if anything

The queue is huey (a maintained task queue): SQLite in `<cache>/jobs/queue.db` by default (no
server), Redis when `ANISO_QUEUE_URL=redis://...` (several app servers, one queue). Everything
the queue stores is JSON: the task message carries only the job id (huey's pickle serializer is
replaced by `JsonSerializer`, which refuses anything else), and a job's parameters, progress and
outcome are a JSON record in the queue's key-value store. Nothing read from the queue is ever
unpickled.

What a job message runs is bound to the queue by core/entry/job_run.py; the public API over both is
core/entry/jobs.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path

from ..base import cache as _cache
from ..base import settings
from ..base.errors import InputError
from ..base.settings import QUEUE_URL_ENV, cache_root
from .job_records import Job

log = logging.getLogger(__name__)


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
_queues_lock = threading.Lock()


def jobs_dir(cache_dir=None) -> Path:
    d = settings.jobs_dir(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    return d


QUEUE_ERRORS = (OSError, sqlite3.Error)  # what a read-only, full or broken queue raises on access
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
    """The huey instance of this cache directory (or of ANISO_QUEUE_URL), opened once per process. What its
    messages run is bound to it by core.entry.job_run.task (core.entry.jobs.queue: the instance with its task).

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
            _queues[k] = h
        return _queues[k]


_queue_notices: dict[str, str] = {}  # queue file -> why it was set aside (one warning per process and file)


def queue_notice(cache_dir=None) -> str | None:
    """The warning about this cache's job queue, if a damaged one was set aside by this process."""
    return _queue_notices.get(str(settings.queue_db(cache_dir)))


def _sqlite_problem(where: str) -> str | None:
    """Why the SQLite queue file cannot be used (None: it can, or it does not exist yet)."""
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
    except QUEUE_ERRORS as e:
        why = reason(e)
    _readonly[root] = why
    # no server path in it: the pages show it to every visitor (the CLI's `cache size` names the folder)
    _note(root, f"The job queue of the cache directory cannot be written ({why}): runs are computed in this process "
                "instead and kept in memory only. Make the cache directory writable or set ANISO_CACHE_DIR to a "
                "writable folder.")
    for mode in (1, 2) if path.is_file() else ():  # read-only, with its write-ahead log; else the file alone
        with contextlib.suppress(*QUEUE_ERRORS):
            h = _sqlite(path, readonly=mode)
            h.storage.result_items()
            return h
    from huey import MemoryHuey  # lazy: huey is imported where a queue is opened

    return MemoryHuey("aniso-jobs", results=False, serializer=JsonSerializer())  # nothing to list


def store(cache_dir=None):
    return queue(cache_dir).storage


def read(jid: str, cache_dir=None) -> Job | None:
    from huey.constants import EmptyData

    blob = store(cache_dir).peek_data(f"job:{jid}")
    if blob is EmptyData or blob is None:
        return None
    try:
        return Job.from_json(blob)
    except (ValueError, TypeError) as e:
        log.warning("job record %s is unreadable (%s): ignored", jid, e)
        return None


def write(job: Job, cache_dir=None) -> None:
    store(cache_dir).put_data(f"job:{job.id}", job.to_json())


def cancel_key(jid: str, attempt: int) -> str:
    return f"cancel:{jid}:{attempt}"


def partial_key(jid: str, attempt: int) -> str:
    return f"partial:{jid}:{attempt}"


def reason(e: Exception) -> str:
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__) if isinstance(e, OSError) else str(e)
