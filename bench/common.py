"""Shared helpers: machine facts, timing, the subprocess runner, RSS sampling and profiles."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from core import settings
from core.procfs import meminfo, status_bytes

ROOT = Path(__file__).resolve().parent.parent
RESULT_TAG = "BENCH_RESULT "
_T0 = time.monotonic()


def log(msg: str) -> None:
    """Progress on stderr, with the time since the bench started."""
    el = time.monotonic() - _T0
    sys.stderr.write(f"[bench {el:7.1f}s] {msg}\n")
    sys.stderr.flush()


def median(xs) -> float:
    xs = [float(x) for x in xs]
    return statistics.median(xs) if xs else float("nan")


def gib(nbytes: float) -> float:
    return float(nbytes) / 2**30


def mib(nbytes: float) -> float:
    return float(nbytes) / 2**20


# ----------------------------------------------------------------------------- machine facts
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total() -> int:
    return meminfo("MemTotal")


def vm_hwm() -> int:
    """Peak resident set size of this process image (VmHWM), bytes."""
    return status_bytes("VmHWM")


def mem_available() -> int:
    return meminfo("MemAvailable")


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def cpu_times() -> dict:
    """Aggregate jiffies from /proc/stat (user..steal), to compute steal and busy shares."""
    try:
        parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
        return {n: int(v) for n, v in zip(names, parts)}
    except (OSError, IndexError, ValueError):
        return {}


def cpu_share(before: dict, after: dict) -> dict:
    """Shares of CPU time between two cpu_times() readings (whole machine, all cores)."""
    if not before or not after:
        return {}
    d = {k: after[k] - before[k] for k in before}
    tot = sum(d.values()) or 1
    return {"steal": d.get("steal", 0) / tot, "idle": (d.get("idle", 0) + d.get("iowait", 0)) / tot}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in ("torch", "transformers", "numpy", "scikit-learn", "umap-learn", "numba", "streamlit"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = None
    return out


def machine_info() -> dict:
    info = {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_bytes": _mem_total(),
        "ram_available_bytes": mem_available(),
        "os": platform.platform(),
        "versions": versions(),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_start": loadavg(),
    }
    try:
        # lazy: torch only in the sections that run a model
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - facts only
        pass
    return info


# ----------------------------------------------------------------------------- environment
def child_env(cache_dir: str | Path | None = None, extra: dict | None = None) -> dict:
    env = settings.child_env(cache_dir, HF_HUB_OFFLINE="1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def link_converted_models(cache_dir: Path) -> list[str]:
    """Reuse SmolLM2's one-time GGUF->safetensors conversion from the default cache, if present.

    The conversion (~15 s) is setup, not something the bench measures; stats and results are
    still computed afresh in `cache_dir`.
    """
    src = settings.models_dir()
    linked = []
    if src.is_dir():
        settings.models_dir(cache_dir).mkdir(parents=True, exist_ok=True)
        for p in sorted(src.glob("smollm2-135m-*")):
            if (p / "DONE").exists() and (p / "model.safetensors").exists():
                dst = settings.models_dir(cache_dir) / p.name
                if not dst.exists():
                    os.symlink(p.resolve(), dst)
                    linked.append(p.name)
    return linked


# ----------------------------------------------------------------------------- subprocess tasks
def run_task(task: str, args: dict, *, cache_dir=None, env_extra: dict | None = None,
             timeout: float = 1800) -> dict:
    """Run `python -m bench.worker TASK ARGS` in a fresh process and return its result dict.

    Peak RSS comes from the child's own rusage (os.wait4), so it is per run, and it is known even
    when the child died (MemoryError, OOM kill). `status` is "ok", "oom", "error", "killed" or
    "timeout"; `wall_s` is the wall time of the whole process (interpreter start included).
    """
    cmd = [sys.executable, "-m", "bench.worker", task, json.dumps(args)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=str(ROOT), env=child_env(cache_dir, env_extra), stdout=out, stderr=err,
                             start_new_session=True)
        timed_out = threading.Event()

        def _kill():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group of the child we started, nothing else
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, _kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    res = None
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
            break
    # The child's own high-water mark of THIS process image (VmHWM, reported by the worker) is the
    # per-run peak; rusage's ru_maxrss also counts the parent's pages at fork, so it is only an
    # upper bound, used when the child could not report (killed).
    fork_bound = ru.ru_maxrss * 1024  # kB on Linux
    if res is None:
        if timed_out.is_set():
            st = "timeout"
        elif p.returncode in (-9, 137):
            st = "killed"
        else:
            st = "error"
        tail = "\n".join(stderr.strip().splitlines()[-6:])
        res = {"status": st, "returncode": p.returncode, "error": tail}
    res.setdefault("status", "ok")
    if "peak_rss_bytes" not in res:
        res["peak_rss_bytes"] = fork_bound
        res["peak_rss_source"] = "ru_maxrss upper bound (includes the parent's pages at fork)"
    res["wall_s"] = wall
    if res["status"] not in ("ok", "oom"):
        log(f"task {task} {args} -> {res['status']} rc={p.returncode}: {res.get('error', '')[-400:]}")
    return res


class RssSampler:
    """Samples this process's RSS every `interval` s; keeps the maximum per stage label."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.stage = "start"
        self.by_stage: dict[str, int] = {}
        self.seconds: dict[str, float] = {}  # wall time spent in each stage
        self._since = time.perf_counter()
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._t = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * self._page
        except OSError:
            return 0

    def _run(self):
        while not self._stop.is_set():
            r = self.rss()
            if r > self.by_stage.get(self.stage, 0):
                self.by_stage[self.stage] = r
            self._stop.wait(self.interval)

    def set(self, stage: str) -> None:
        r = self.rss()
        if r > self.by_stage.get(self.stage, 0):
            self.by_stage[self.stage] = r
        now = time.perf_counter()
        self.seconds[self.stage] = self.seconds.get(self.stage, 0.0) + now - self._since
        self._since = now
        self.stage = stage

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self.set(self.stage)
        self._stop.set()
        self._t.join()


# ----------------------------------------------------------------------------- profiles
def torch_profile_ops(fn) -> dict[str, tuple[float, int]]:
    """Run fn() under torch.profiler (CPU); {op name: (self CPU ms, calls)}."""
    # lazy: torch only in the sections that run a model
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    out = {}
    for e in prof.key_averages():
        out[e.key] = (e.self_cpu_time_total / 1000.0, int(e.count))
    return out


def profile_diff_table(bare: dict, tool: dict, top: int = 15) -> dict:
    """Top ops by extra self CPU time of the tool over the bare forward (same windows)."""
    names = set(bare) | set(tool)
    rows = []
    for n in names:
        b = bare.get(n, (0.0, 0))
        t = tool.get(n, (0.0, 0))
        rows.append({"op": n, "bare_ms": b[0], "tool_ms": t[0], "extra_ms": t[0] - b[0],
                     "bare_calls": b[1], "tool_calls": t[1]})
    rows.sort(key=lambda r: -r["extra_ms"])
    return {"total_bare_ms": sum(v[0] for v in bare.values()), "total_tool_ms": sum(v[0] for v in tool.values()),
            "rows": rows[:top]}


def cprofile_table(fn, top: int = 15) -> str:
    """Run fn() under cProfile; the top functions by cumulative time, as text."""
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    try:
        fn()
    finally:
        pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).strip_dirs().sort_stats("cumulative").print_stats(top)
    lines = s.getvalue().splitlines()
    # Drop pstats' preamble up to the column header.
    for i, line in enumerate(lines):
        if line.strip().startswith("ncalls"):
            lines = lines[i:]
            break
    return "\n".join(l.rstrip() for l in lines if l.strip())


# ----------------------------------------------------------------------------- token windows
def subset_windows(windows, n_tokens: int):
    """The first windows of `windows` holding about n_tokens analysed tokens (for profiles)."""
    # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)
    from core.corpora import TokenWindows

    ids, special, doc = [], [], []
    content = 0
    for i, (w, s) in enumerate(zip(windows.ids, windows.special)):
        if content >= n_tokens:
            break
        ids.append(w)
        special.append(s)
        doc.append(windows.doc[i])
        content += int((~s).sum())
    return TokenWindows(ids, special, __import__("numpy").asarray(doc), len(set(doc)),
                        sum(len(w) for w in ids), content)


def padded_batch(windows, b, pad_id: int):
    """(input_ids, attention_mask) int64 numpy arrays of one batch, right-padded by the tool's own function."""
    # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)
    from core.batching import pad_batch

    return pad_batch([windows.ids[i] for i in b], pad_id)


def bare_forward(model, windows, batches, pad_id: int, device: str = "cpu", sync=None) -> float:
    """Seconds for the bare forward pass over `batches`: no hidden states kept, no metrics."""
    # lazy: torch only in the sections that run a model
    import torch

    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in batches:
            ids, att = padded_batch(windows, b, pad_id)
            out = model(input_ids=torch.as_tensor(ids).to(device), attention_mask=torch.as_tensor(att).to(device))
            del out
        if sync:
            sync()
    return time.perf_counter() - t0
