"""Fault injection shared by the tests: a cache directory that cannot be written, a small disk that fills up."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def read_only(path: Path):
    """Make `path` (a folder, recursively) unwritable for this process, as a read-only mount is.

    root ignores permission bits, so as root the folder and its files are made immutable
    (`chattr +i`, which root cannot write through either); otherwise the write bits are removed.
    """
    path = Path(path)
    if os.geteuid() == 0:
        if not shutil.which("chattr") or subprocess.run(["chattr", "-R", "+i", str(path)],
                                                        capture_output=True).returncode:
            pytest.skip("running as root on a file system without chattr +i: cannot make a folder read-only")
        try:
            yield path
        finally:
            subprocess.run(["chattr", "-R", "-i", str(path)], check=True)
        return
    modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
    for p, m in sorted(modes.items(), key=lambda kv: -len(kv[0].parts)):
        p.chmod(m & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        yield path
    finally:
        for p, m in sorted(modes.items(), key=lambda kv: len(kv[0].parts)):
            p.chmod(m)


@contextlib.contextmanager
def small_disk(path: Path, size: str = "700k"):
    """A real file system of `size` mounted at `path` (tmpfs; needs root, skipped elsewhere), unmounted after.

    ENOSPC then comes from the kernel where it would on a full disk: mid-file, in SQLite's journal, on mkdir."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
