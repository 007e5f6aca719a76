"""The one module that reads and writes the on-disk cache (diskcache).

An entry is a JSON document plus named numpy arrays, serialised WITHOUT pickle:
    MAGIC | sha256(payload) | payload,  payload = u32 len(json) | json | npz bytes
It is written whole in one diskcache transaction or not at all. On read the checksum is verified;
a corrupted entry is reported (logged and listed in `events`), deleted, and treated as a miss.
Locks are per-key advisory file locks, so two processes asking for one key compute it once and a
crashed process never leaves a stale lock behind.

Nothing is ever unpickled: diskcache would unpickle an entry stored in its pickle mode (code
execution for whoever can write the cache directory), so the store reads entries only in the raw
bytes form it writes (`_BytesOnlyDisk`) and treats anything else as a corrupted entry.

A cache directory that cannot be written (read-only, full disk) does not stop an analysis: the
store keeps entries in memory for this process (bounded) and says so in `events`/`degraded`. A write
that fails leaves no value file behind (no orphan `.val` that no row references).

A damaged index (`entries/cache.db` not a database, or malformed) is set aside as the job queue's is:
renamed `cache.db.damaged-<time>-<pid>` with its side files (never deleted), a fresh index started, and
one warning (`notes`, `events`). A locked, read-only or full database is never set aside.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import shutil
import sqlite3
import struct
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import diskcache
import numpy as np

from .errors import InputError
from .settings import current, default_cache_dir, locks_dir, results_dir, uploads_dir

log = logging.getLogger(__name__)
MAGIC = b"ANISO1\n"
DEFAULT_SIZE_LIMIT = 20 * 2**30  # 20 GiB, least-recently-stored entries are evicted beyond it
MEMORY_FALLBACK_BYTES = 2 * 2**30  # entries kept in memory when the directory cannot be written
_WRITE_ERRORS = (OSError, sqlite3.OperationalError, sqlite3.DatabaseError, diskcache.Timeout)


_failed = threading.local()  # per thread: writes that fell back to memory, and the last error


def write_failures() -> tuple[int, Exception | None]:
    """(count, last error) of this thread's cache writes that could not reach the disk (kept in memory).

    The job worker compares it before and after a job: results kept in a worker's memory are of use
    to nobody, so such a job fails with the reason (a full disk) instead of reporting done."""
    return getattr(_failed, "n", 0), getattr(_failed, "last", None)


def _count_failure(e: Exception | None) -> None:
    _failed.n = getattr(_failed, "n", 0) + 1
    _failed.last = e if e is not None else getattr(_failed, "last", None)


class NotRawEntry(ValueError):
    """A cache row that is not raw bytes (e.g. a pickle): refused, never loaded."""


class _BytesOnlyDisk(diskcache.Disk):
    """diskcache's Disk that returns raw bytes only and refuses to unpickle keys or values."""

    def fetch(self, mode, filename, value, read):
        if mode not in (diskcache.core.MODE_RAW, diskcache.core.MODE_BINARY):
            raise NotRawEntry(f"an entry in diskcache mode {mode} (not raw bytes) was refused unread")
        return super().fetch(mode, filename, value, read)

    def get(self, key, raw):
        if not raw:
            raise NotRawEntry("a pickled cache key was refused unread")
        return super().get(key, raw)

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        size, mode, filename, db_value = super().store(value, read, key=key)
        _failed.file = (self._directory, filename)  # removed again if the row that names it is not written
        return size, mode, filename, db_value

    def _write(self, full_path, iterator, mode, encoding=None):
        try:
            return super()._write(full_path, iterator, mode, encoding)
        except BaseException:  # a full disk mid-file: no half-written value file stays behind
            with contextlib.suppress(OSError):
                os.remove(full_path)
            raise


def sqlite_damaged(e: BaseException) -> bool:
    """SQLite's own verdict that a file is damaged (not a lock, a permission, a full disk): the results index's and
    the job queue's test before either is set aside."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError)


def set_aside(path: str | Path) -> str:
    """Renames a damaged SQLite file and its side files (-wal, -shm, -journal) to `<path>.damaged-<time>-<pid>`
    (kept, never deleted); returns the new name. Callers hold `file_lock(<path>.repair.lock)`."""
    path = str(path)
    aside = f"{path}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, aside + suffix)
    return aside


@contextlib.contextmanager
def file_lock(path: str | Path):
    """An exclusive lock between the processes of this host on the file `path` (created), released even if the
    holder crashes. Where the file cannot be opened (a read-only directory) there is nothing on disk to share,
    so it holds no lock."""
    try:
        f = open(path, "a+")
    except OSError:
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_notes: dict[str, str] = {}  # index file -> why it was set aside (one warning per process and file)


def _open_dc(directory: Path, size_limit: int):
    return diskcache.Cache(str(results_dir(directory)), size_limit=size_limit, disk=_BytesOnlyDisk,
                           eviction_policy="least-recently-stored")


def _open(directory: Path, size_limit: int):
    """The diskcache of `directory`; a damaged index is set aside (renamed, with its side files) and a fresh one
    started, by one process at a time (the others then open the fresh one)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        return _open_dc(directory, size_limit)
    except sqlite3.DatabaseError as e:
        if not sqlite_damaged(e):
            raise
    db = results_dir(directory) / "cache.db"
    with file_lock(str(db) + ".repair.lock"):
        try:
            return _open_dc(directory, size_limit)  # another process set it aside meanwhile
        except sqlite3.DatabaseError as e:
            if not sqlite_damaged(e):
                raise
            why = str(e)
        aside = set_aside(db)
        msg = (f"The cache index {db.parent.name}/{db.name} was damaged ({why}): it was renamed to "
               f"{os.path.basename(aside)} (kept, not deleted) and a fresh index started. Results stored before "
               "are computed again when asked for.")
        log.warning(msg)
        _notes[str(db)] = msg
        return _open_dc(directory, size_limit)


class CacheStore:
    def __init__(self, directory: str | Path, size_limit: int = DEFAULT_SIZE_LIMIT):
        self.directory = Path(directory)
        self.size_limit = int(size_limit)
        self.events: list[str] = []  # human-readable notes (corrupted entries...) for CLI and UI
        self.degraded: str | None = None  # why entries are kept in memory only, if they are
        self._mem: OrderedDict[str, bytes] = OrderedDict()
        self._mem_lock = threading.Lock()
        try:
            self._dc = _open(self.directory, self.size_limit)
        except _WRITE_ERRORS as e:
            self._dc = None
            self._degrade(e)
        note = _notes.get(str(results_dir(self.directory) / "cache.db"))
        self.notes: list[str] = [note] if note else []  # a damaged index set aside (shown on the pages)
        self.events += self.notes

    def _degrade(self, e: Exception) -> None:
        self._error = e
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        msg = (f"The cache directory cannot be written ({why}): results are computed but kept in memory "
               f"only, for this process. Free disk space or set ANISO_CACHE_DIR to a writable folder.")
        if self.degraded is None:
            log.warning(msg)
        self.degraded = msg
        self.events.append(msg)

    # ------------------------------------------------------------------ encoding
    @staticmethod
    def encode(meta: dict, arrays: dict[str, np.ndarray] | None = None) -> bytes:
        js = json.dumps(meta, allow_nan=True).encode()
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in (arrays or {}).items()})
        payload = struct.pack("<I", len(js)) + js + buf.getvalue()
        return MAGIC + hashlib.sha256(payload).digest() + payload

    @staticmethod
    def decode(blob: bytes) -> tuple[dict, dict[str, np.ndarray]]:
        if not isinstance(blob, (bytes, bytearray)) or not blob.startswith(MAGIC):
            raise ValueError("bad header")
        digest, payload = blob[len(MAGIC):len(MAGIC) + 32], blob[len(MAGIC) + 32:]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        (n,) = struct.unpack("<I", payload[:4])
        meta = json.loads(payload[4:4 + n])
        with np.load(io.BytesIO(payload[4 + n:]), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        return meta, arrays

    # ------------------------------------------------------------------ access
    def _raw_get(self, key: str):
        with self._mem_lock:
            if key in self._mem:
                return self._mem[key]
        if self._dc is None:
            return None
        try:
            return self._dc.get(key, default=None, retry=True)
        except NotRawEntry as e:
            return e  # decoded below as a corrupted entry
        except _WRITE_ERRORS as e:  # an unreadable database: as if not cached
            self.events.append(f"The cache could not be read ({e}); recomputing.")
            return None

    def get(self, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
        blob = self._raw_get(key)
        if blob is None:
            return None
        try:
            if isinstance(blob, Exception):
                raise blob
            return self.decode(blob)
        except Exception as e:  # noqa: BLE001 - any decoding failure means a corrupted entry
            msg = f"Cache entry {key[:16]}... was corrupted ({e}); it was removed and will be recomputed."
            log.warning(msg)
            self.events.append(msg)
            self.delete(key)
            return None

    def put(self, key: str, meta: dict, arrays: dict[str, np.ndarray] | None = None) -> None:
        self._put_bytes(key, self.encode(meta, arrays))

    def _put_bytes(self, key: str, blob: bytes) -> None:
        if self._dc is not None:
            _failed.file = None
            try:
                self._dc.set(key, blob, retry=True)
                return
            except _WRITE_ERRORS as e:  # full disk, read-only directory, broken database
                stored = getattr(_failed, "file", None)
                if stored and stored[1]:  # its value file, written before the row failed: referenced by no row
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(*stored))
                self._degrade(e)
                _count_failure(e)
        else:
            self.events.append(self.degraded)
            _count_failure(getattr(self, "_error", None))
        with self._mem_lock:  # bounded: least recently stored entries go first
            self._mem[key] = blob
            while sum(map(len, self._mem.values())) > min(self.size_limit, MEMORY_FALLBACK_BYTES) \
                    and len(self._mem) > 1:
                self._mem.popitem(last=False)

    def get_json(self, key: str) -> dict | None:
        got = self.get(key)
        return None if got is None else got[0]

    def get_or_compute(self, key: str, compute: Callable[[], dict], force: bool = False) -> tuple[dict, bool]:
        """(the JSON entry under `key`, whether it was already stored). When it is absent (or
        `force`), `compute()` runs under the key's lock (`lock`), unless another process stored it
        meanwhile, and its result is stored."""
        got = None if force else self.get_json(key)
        if got is not None:
            return got, True
        with self.lock(key):
            got = None if force else self.get_json(key)  # another process may have finished meanwhile
            if got is not None:
                return got, True
            got = compute()
            self.put(key, got)
        return got, False

    def delete(self, key: str) -> None:
        with self._mem_lock:
            self._mem.pop(key, None)
        if self._dc is not None:
            with contextlib.suppress(*_WRITE_ERRORS):
                self._dc.delete(key, retry=True)

    def __contains__(self, key: str) -> bool:
        with self._mem_lock:
            if key in self._mem:
                return True
        if self._dc is None:
            return False
        try:
            return key in self._dc
        except _WRITE_ERRORS:
            return False

    def keys(self) -> list[str]:
        if self._dc is None:
            return list(self._mem)
        out = []
        for k in self._dc.iterkeys():  # a pickled key raises NotRawEntry: never loaded
            out.append(k)
        return out

    # ------------------------------------------------------------------ size
    def size_bytes(self) -> int:
        """Bytes on disk: entries plus uploads (what `clear` frees)."""
        n = 0
        if self._dc is not None:
            with contextlib.suppress(*_WRITE_ERRORS):
                n += int(self._dc.volume())  # database pages + value files, without walking the tree
        d = uploads_dir(self.directory)
        if d.is_dir():
            n += sum(p.stat().st_size for p in d.iterdir() if p.is_file() and not p.is_symlink())
        with self._mem_lock:
            return n + sum(map(len, self._mem.values()))

    def clear(self) -> int:
        """Remove every entry and every uploaded file; return the bytes freed. InputError (saying why, without
        the server's path) when the directory cannot be written: nothing, or not everything, was removed."""
        before = self.size_bytes()
        with self._mem_lock:
            self._mem.clear()
        failed: list[BaseException] = []
        if self._dc is not None:
            try:
                self._dc.clear(retry=True)
            except _WRITE_ERRORS as e:
                failed.append(e)
        elif getattr(self, "_error", None) is not None:  # the database never opened: it cannot be cleared
            failed.append(self._error)
        up = uploads_dir(self.directory)
        if up.exists():
            shutil.rmtree(up, onerror=lambda fn, path, exc: failed.append(exc[1]))
        if failed:
            e = failed[0]
            why = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise InputError(f"The cache directory cannot be written ({why}): it was not cleared "
                             f"({max(0, before - self.size_bytes()):,} bytes freed). Make it writable and clear it again.")
        return max(0, before - self.size_bytes())

    @contextlib.contextmanager
    def lock(self, key: str):
        """Exclusive per-key lock across processes; released even if the holder crashes."""
        d = locks_dir(self.directory)
        try:
            d.mkdir(exist_ok=True)
        except OSError:  # a read-only directory: no cross-process lock (nothing is shared on disk)
            pass
        with file_lock(d / hashlib.sha256(key.encode()).hexdigest()[:32]):
            yield

    def close(self) -> None:
        if self._dc is not None:
            self._dc.close()


_stores: dict[str, CacheStore] = {}


def get_store(cache_dir: str | Path | None = None) -> CacheStore:
    """One CacheStore per directory per process (the default directory: core.base.settings)."""
    d = str(Path(cache_dir or default_cache_dir()).resolve())
    if d not in _stores:
        _stores[d] = CacheStore(d, size_limit=current().cache_size_bytes)
    return _stores[d]
