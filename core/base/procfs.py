"""Facts about this machine and its processes from Linux's /proc, in one place.

Every reader returns a neutral value (0, None, False) where /proc or the field is missing
(another OS, a sandbox), so callers never need their own try/except.

>>> meminfo("NoSuchField")
0
>>> status_bytes("NoSuchField")
0
"""

from __future__ import annotations

import os


def _kib_field(path: str, key: str) -> int:
    """`key:  1234 kB` of a /proc file, in bytes (0 when absent)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def meminfo(key: str = "MemAvailable") -> int:
    """A field of /proc/meminfo in bytes: MemTotal, MemAvailable, ..."""
    return _kib_field("/proc/meminfo", key)


def status_bytes(key: str, pid: int | str = "self") -> int:
    """A memory field of /proc/<pid>/status in bytes: VmRSS, VmHWM (peak RSS), VmSize, ..."""
    return _kib_field(f"/proc/{pid}/status", key)


def stat_fields(pid: int | str = "self") -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: [0] is the state (R, S, Z...), [16]
    the nice value, [19] the start time in clock ticks since boot (proc(5) numbering minus 3)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def nvidia_driver_present() -> bool:
    """Whether an NVIDIA driver is loaded, without importing torch (a cache hit must not pay for it)."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")
