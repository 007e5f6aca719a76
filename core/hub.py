"""The model hub as seen from this machine: whether it answers, and what the local hub cache
(HF_HOME) holds. No torch; huggingface_hub is imported only to read the local cache.

core/models.py (identifiers, fingerprints) and core/hub_series.py (checkpoint series) both ask
these questions; they live here, below both.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from .integrity import file_sha256, is_weight_file
from .settings import current, hub_endpoint, hub_offline


def _local_snapshot(name: str, revision: str) -> Path | None:
    """The snapshot folder of `name@revision` in the local hub cache (HF_HOME), None when it is not there."""
    from huggingface_hub import try_to_load_from_cache

    try:
        got = try_to_load_from_cache(name, "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - a malformed name or cache: treat as not cached
        return None
    return Path(got).parent if isinstance(got, str) else None  # .../snapshots/<commit>/config.json


def local_commit(name: str, revision: str) -> str | None:
    """The commit of `name@revision` in the local hub cache (HF_HOME), None when it is not there."""
    snap = _local_snapshot(name, revision)
    return snap.name if snap is not None else None



_HUB_PROBE: dict[str, tuple[float, bool]] = {}  # endpoint -> (when, reachable), remembered for a minute


def hub_reachable(timeout: float | None = None) -> bool:
    """Whether the model hub answers a TCP connection within `timeout` seconds (ANISO_HUB_TIMEOUT_S).

    Probed in a thread so that a slow DNS lookup cannot hold the caller longer than the timeout;
    without it an unreachable hub costs ~48 s of retries inside transformers."""
    if hub_offline():
        return False
    endpoint = hub_endpoint()
    now = time.monotonic()
    if endpoint in _HUB_PROBE and now - _HUB_PROBE[endpoint][0] < 60:
        return _HUB_PROBE[endpoint][1]
    u = urlparse(endpoint)
    host, port = u.hostname or "huggingface.co", u.port or (80 if u.scheme == "http" else 443)
    timeout = timeout or current().hub_timeout_s
    result = [False]

    def probe():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result[0] = True
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    _HUB_PROBE[endpoint] = (now, result[0])
    return result[0]


def _lfs_sha(path: Path) -> str | None:
    """The sha256 of a file of the local hub cache from its blob's name (an LFS blob is named by it)."""
    try:
        blob = path.resolve().name
    except OSError:
        return None
    return blob if len(blob) == 64 and all(c in "0123456789abcdef" for c in blob) else None


def local_weight_shas(name: str, revision: str) -> dict[str, str] | None:
    """{weight file: sha256} of `name@revision` in the local hub cache, None when it is not there."""
    snap = _local_snapshot(name, revision)
    if snap is None:
        return None
    files = [p for p in sorted(snap.iterdir()) if is_weight_file(p.name) and p.exists()]
    return {p.name: _lfs_sha(p) or file_sha256(p) for p in files} or None


def remote_weight_shas(name: str, revision: str) -> dict[str, str] | None:
    """{weight file: sha256} of `name@revision` as the hub lists its LFS files (nothing downloaded);
    None when the hub does not answer."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=hub_endpoint()).model_info(name, revision=revision, files_metadata=True)
    except Exception:  # noqa: BLE001 - unreachable, unknown revision, rate-limited: no digest, said so by the caller
        return None
    out = {}
    for s in info.siblings or []:
        lfs = getattr(s, "lfs", None)
        sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        if is_weight_file(s.rfilename) and sha:
            out[s.rfilename] = sha
    return out or None
