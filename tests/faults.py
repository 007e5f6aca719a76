"""Fault injection shared by the tests: a cache directory that cannot be written."""

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
