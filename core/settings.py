"""Deployment settings: what a served dashboard may touch. One place, read from the environment.

These are the knobs of a lab server, not analysis rules (those live in core/config.py):

=============================  =========  =====================================================
environment variable           default    meaning
=============================  =========  =====================================================
ANISO_DATA_DIR                 (unset)    a folder whose files and model folders the URL and the
                                          sidebar may name (as ``data:<relative path>``)
ANISO_ALLOW_SERVER_PATHS       0          1: the URL and the sidebar may name any server path
                                          (single-user machines). The CLI always may.
ANISO_ALLOW_MODEL_FOLDERS      1          0: no local model folders from the URL/sidebar
ANISO_ALLOW_HUB                1          0: no hub identifiers from the URL/sidebar
ANISO_SHARED                   0          1: a shared server: sets both switches above to 0
                                          (and server paths off) unless they are set explicitly
ANISO_MAX_UPLOAD_MB            200        largest upload accepted (refused before it is read)
ANISO_CACHE_SIZE_GB            20         disk cache size; least recently stored entries go first
ANISO_HUB_TIMEOUT_S            2          how long to wait for the model hub before calling it
                                          unreachable
ANISO_TORCHRUN_NPROC           0          K > 1: the job queue runs each analysis, attention
                                          pass and series as a local torchrun job of K processes
                                          (e.g. one per GPU); 0 or 1: in the worker's process
=============================  =========  =====================================================

Settings are read at call time (`current()`), so a test or a server restart sees a change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InputError(f"{name}={raw!r} is not a boolean (use 1 or 0).")


def _number(name: str, default: float, lo: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = float(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r} is not a number.") from None
    if not v >= lo:
        raise InputError(f"{name} must be at least {lo:g}, got {raw!r}.")
    return v


def _count(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = int(raw)
    except ValueError:
        v = -1
    if v < 0:
        raise InputError(f"{name} must be a whole number of processes (0: no torchrun), got {raw!r}.")
    return v


@dataclass(frozen=True)
class Settings:
    data_dir: Path | None = None
    allow_server_paths: bool = False
    allow_model_folders: bool = True
    allow_hub: bool = True
    max_upload_bytes: int = 200 * 2**20
    cache_size_bytes: int = 20 * 2**30
    hub_timeout_s: float = 2.0
    torchrun_nproc: int = 0

    @property
    def max_upload_mb(self) -> int:
        return max(1, self.max_upload_bytes // 2**20)


def current() -> Settings:
    """The settings from the environment (see the module docstring for each variable)."""
    shared = _flag("ANISO_SHARED", False)
    data = os.environ.get("ANISO_DATA_DIR", "").strip()
    return Settings(
        data_dir=Path(data).expanduser().resolve() if data else None,
        allow_server_paths=_flag("ANISO_ALLOW_SERVER_PATHS", False) and not (
            shared and "ANISO_ALLOW_SERVER_PATHS" not in os.environ),
        allow_model_folders=_flag("ANISO_ALLOW_MODEL_FOLDERS", not shared),
        allow_hub=_flag("ANISO_ALLOW_HUB", not shared),
        max_upload_bytes=int(_number("ANISO_MAX_UPLOAD_MB", 200, 1) * 2**20),
        cache_size_bytes=int(_number("ANISO_CACHE_SIZE_GB", 20, 0.001) * 2**30),
        hub_timeout_s=_number("ANISO_HUB_TIMEOUT_S", 2.0, 0.1),
        torchrun_nproc=_count("ANISO_TORCHRUN_NPROC", 0),
    )
