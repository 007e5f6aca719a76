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
store keeps entries in memory for this process (bounded) and says so in `events`/`degraded`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import shutil
import sqlite3
import struct
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import diskcache
import numpy as np

from .settings import locks_dir, results_dir, uploads_dir

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


def _open(directory: Path, size_limit: int):
    directory.mkdir(parents=True, exist_ok=True)
    return diskcache.Cache(str(results_dir(directory)), size_limit=size_limit, disk=_BytesOnlyDisk,
                           eviction_policy="least-recently-stored")


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
            try:
                self._dc.set(key, blob, retry=True)
                return
            except _WRITE_ERRORS as e:  # full disk, read-only directory, broken database
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

    def raw_set(self, key: str, blob: bytes) -> None:
        """Store raw bytes under a key (tests use it to simulate a corrupted entry)."""
        self._put_bytes(key, blob)

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
        """Remove every entry and every uploaded file; return the bytes freed."""
        before = self.size_bytes()
        with self._mem_lock:
            self._mem.clear()
        if self._dc is not None:
            with contextlib.suppress(*_WRITE_ERRORS):
                self._dc.clear(retry=True)
        shutil.rmtree(uploads_dir(self.directory), ignore_errors=True)
        return max(0, before - self.size_bytes())

    @contextlib.contextmanager
    def lock(self, key: str):
        """Exclusive per-key lock across processes; released even if the holder crashes."""
        d = locks_dir(self.directory)
        try:
            d.mkdir(exist_ok=True)
            f = open(d / hashlib.sha256(key.encode()).hexdigest()[:32], "a+")
        except OSError:  # a read-only directory: no cross-process lock (nothing is shared on disk)
            yield
            return
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._dc is not None:
            self._dc.close()
