"""Uploaded or pasted corpora, saved content-addressed under the cache directory.

The saved path is what RunSpec.corpus holds, so the corpus fingerprint (its sha256) and the URL
of a view both stay valid for as long as the file is there: <cache>/uploads/<sha256>.<ext>.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .corpora import TABLE_SUFFIXES, TEXT_SUFFIXES
from .errors import InputError
from .models import default_cache_dir

MAX_UPLOAD_BYTES = 200 * 2**20


def uploads_dir(cache_dir: str | Path | None = None) -> Path:
    return Path(cache_dir or default_cache_dir()) / "uploads"


def save_upload(data: bytes, filename: str, cache_dir: str | Path | None = None) -> Path:
    """Write `data` once as <cache>/uploads/<sha256>.<ext> and return that path."""
    suffix = Path(filename).suffix.lower()
    if suffix not in TEXT_SUFFIXES + TABLE_SUFFIXES:
        raise InputError(f"{filename}: unsupported file type {suffix or '(none)'}; use one of "
                         f"{', '.join(TEXT_SUFFIXES + TABLE_SUFFIXES)}.")
    if not data:
        raise InputError(f"{filename} is empty.")
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(f"{filename} is larger than {MAX_UPLOAD_BYTES // 2**20} MiB.")
    d = uploads_dir(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"{hashlib.sha256(data).hexdigest()}{suffix}"
    if not out.exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, out)  # whole or not at all
    return out


def save_pasted_text(text: str, cache_dir: str | Path | None = None) -> Path:
    """Pasted text as a .txt corpus (documents separated by blank lines)."""
    if not text or not text.strip():
        raise InputError("The pasted text is empty.")
    return save_upload(text.encode("utf-8"), "pasted.txt", cache_dir)
