"""The one module that reads and writes the on-disk cache (diskcache).

An entry is a JSON document plus named numpy arrays, serialised WITHOUT pickle:
    MAGIC | sha256(payload) | payload,  payload = u32 len(json) | json | npz bytes
It is written whole in one diskcache transaction or not at all. On read the checksum is verified;
a corrupted entry is reported (logged and listed in `events`), deleted, and treated as a miss.
Locks are per-key advisory file locks, so two processes asking for one key compute it once and a
crashed process never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import struct
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
MAGIC = b"ANISO1\n"
DEFAULT_SIZE_LIMIT = 20 * 2**30  # 20 GiB, least-recently-stored entries are evicted beyond it


class CacheStore:
    def __init__(self, directory: str | Path, size_limit: int = DEFAULT_SIZE_LIMIT):
        import diskcache

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._dc = diskcache.Cache(str(self.directory / "entries"), size_limit=size_limit,
                                   eviction_policy="least-recently-stored")
        self.events: list[str] = []  # human-readable notes (corrupted entries...) for CLI and UI

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
    def get(self, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
        blob = self._dc.get(key, default=None, retry=True)
        if blob is None:
            return None
        try:
            return self.decode(blob)
        except Exception as e:  # noqa: BLE001 - any decoding failure means a corrupted entry
            msg = f"Cache entry {key[:16]}... was corrupted ({e}); it was removed and will be recomputed."
            log.warning(msg)
            self.events.append(msg)
            self._dc.delete(key, retry=True)
            return None

    def put(self, key: str, meta: dict, arrays: dict[str, np.ndarray] | None = None) -> None:
        self._dc.set(key, self.encode(meta, arrays), retry=True)

    def get_json(self, key: str) -> dict | None:
        got = self.get(key)
        return None if got is None else got[0]

    def delete(self, key: str) -> None:
        self._dc.delete(key, retry=True)

    def __contains__(self, key: str) -> bool:
        return key in self._dc

    def raw_set(self, key: str, blob: bytes) -> None:
        """Store raw bytes under a key (tests use it to simulate a corrupted entry)."""
        self._dc.set(key, blob, retry=True)

    def keys(self) -> list[str]:
        return list(self._dc.iterkeys())

    @contextlib.contextmanager
    def lock(self, key: str):
        """Exclusive per-key lock across processes; released even if the holder crashes."""
        d = self.directory / "locks"
        d.mkdir(exist_ok=True)
        with open(d / hashlib.sha256(key.encode()).hexdigest()[:32], "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def close(self) -> None:
        self._dc.close()
