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
import time


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


def cpu_busy_s() -> float:
    """CPU seconds this machine has spent busy since boot, all cores together (user, nice, system, irq, softirq
    and steal: time no process here could have had); 0.0 without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    except (OSError, ValueError):
        return 0.0
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds this process has used, all its threads."""
    t = os.times()
    return t.user + t.system


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def free_cores(window_s: float = 0.3, busy=cpu_busy_s, own=own_cpu_s, wait=None) -> float | None:
    """How many of this process's usable cores the other processes left idle over the next `window_s` seconds:
    the usable cores minus the machine's busy CPU time in the window (this process's own left out), per second
    of the window. None where /proc/stat cannot be read. `busy`, `own` and `wait` are the readers and the sleep
    (tests pass their own)."""
    b0, o0 = busy(), own()
    if b0 <= 0:
        return None
    (wait or time.sleep)(window_s)
    others = max(0.0, (busy() - b0) - (own() - o0)) / window_s
    return usable_cores() - others
