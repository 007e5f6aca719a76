"""Shared helpers: machine and process figures (psutil), timing, the subprocess runner, profiles, and the markdown
every bench module writes (`table`, and `put_section` / `publish` for the marked sections of BENCHMARKS.md)."""

from __future__ import annotations

import contextlib
import cProfile
import datetime as _dt
import importlib.metadata as md
import io
import json
import math
import numbers
import os
import platform
import pstats
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from core.base import settings
from core.base.procfs import usable_cores
from core.compute.distributed import spec_args

ROOT = Path(__file__).resolve().parent.parent
RESULT_TAG = "BENCH_RESULT "
HEADER = "# Benchmarks"
BUSY = 0.5  # a machine is busy when its 1-minute load average is over this share of its usable cores
_T0 = time.monotonic()


def command(prog: str, argv: list[str] | None) -> str:
    """A command as BENCHMARKS.md prints it (argv None: this process's): files by name only, since a directory of this
    machine tells a reader nothing."""
    argv = sys.argv[1:] if argv is None else argv
    return prog + "".join(" " + re.sub(r"(?<![\w.~-])/(?:[^/\s]+/)+", "", x) for x in argv)


def log(msg: str) -> None:
    """Progress on stderr, with the time since the bench started."""
    sys.stderr.write(f"[bench {time.monotonic() - _T0:7.1f}s] {msg}\n")
    sys.stderr.flush()


def median(xs) -> float:
    xs = [float(x) for x in xs]
    return statistics.median(xs) if xs else float("nan")


def alternate(reps: int, runs: dict) -> dict[str, list]:
    """Call each of `runs` (name -> function returning seconds, or a tuple whose first item is the seconds)
    `reps` times, in the order given, then reversed, and so on (A B B A ...: slow drift of a shared machine
    falls on every side); name -> the list of what the calls returned."""
    out: dict[str, list] = {k: [] for k in runs}
    names = list(runs)
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            out[name].append(runs[name]())
            got = out[name][-1]
            log(f"  rep {r + 1} {name}: {got[0] if isinstance(got, tuple) else got:.2f} s")
    return out


def seconds(fn) -> float:
    """Wall seconds of one call of fn()."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def timeit(fn, reps: int) -> list[float]:
    """Wall seconds of `reps` calls of fn(), one after the other."""
    return [seconds(fn) for _ in range(reps)]


def ab_ratio(bare_s: list, tool_s: list, n: int, goal: float = 0.90) -> dict:
    """An A/B of the bare forward and the tool over `n` analysed positions: the times, ratio = median bare / median
    tool, and a table row's cells: each side's throughput, the ratio with the range of the per-pair ratios, the goal."""
    pair = [b / t for b, t in zip(bare_s, tool_s)]
    ratio = median(bare_s) / median(tool_s)
    return {"bare_s": bare_s, "tool_s": tool_s, "ratio": ratio, "met": ratio >= goal,
            "cells": [fi(n / median(bare_s)), fi(n / median(tool_s)), f"**{fr(ratio)}** ({fr(min(pair))}-{fr(max(pair))})",
                      met(ratio >= goal)]}


# ----------------------------------------------------------------------------- markdown
def _num(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def fs(x, nd: int = 2) -> str:
    """Seconds."""
    return "n/a" if not _num(x) else f"{x:.{nd}f} s" if x < 100 else f"{x:.0f} s"


def fr(x, nd: int = 3) -> str:
    """A ratio."""
    return f"{x:.{nd}f}" if _num(x) else "n/a"


def fb(n) -> str:
    """Bytes, binary units."""
    return "n/a" if not _num(n) else f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fi(n) -> str:
    """A count or a rate, to the unit, with thousands separators."""
    return f"{n:,.0f}" if _num(n) else "n/a"


def met(flag) -> str:
    return "n/a" if flag is None else "met" if flag else "**MISSED**"


def status(r: dict) -> str:
    """How a run ended, for a table cell: ok, out of memory (where), not run (why), or the error's tail."""
    st = r.get("status", "ok")
    if st == "oom":
        return ("out of memory" + (f" during {r['oom_stage']}" if r.get("oom_stage") else "")
                + (f" (`{r['error'][:120]}`)" if r.get("error") else ""))
    return "ok" if st == "ok" else f"not run: {r.get('reason', '')}" if st == "skipped" else \
        f"{st}: {(r.get('error') or '')[-160:]}"


def table(header: list, rows: list[list]) -> str:
    """The one markdown table of bench/: a header row, its rule, then one row per list; a cell's `|` is
    escaped and a newline becomes a space."""
    cell = lambda c: str(c).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(map(cell, r)) + " |" for r in rows])


def code(text: str) -> str:
    return "```\n" + (text or "").rstrip() + "\n```"


def markers(name: str) -> tuple[str, str]:
    """The markers around a section's measured figures in BENCHMARKS.md (its method is stated above them)."""
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def put_section(text: str | None, name: str, body: str, title: str | None = None) -> str:
    """`text` with the figures between the markers of section `name` replaced by `body`; a text without them gets
    them appended (under `## title`). Everything outside the markers is kept: each section's method, notes."""
    start, end = markers(name)
    block = f"{start}\n{body}\n{end}"
    if text and start in text and end in text:
        return text[:text.index(start)] + block + text[text.index(end) + len(end):]
    return (text or HEADER).rstrip() + "\n\n" + (f"## {title}\n\n" if title else "") + block + "\n"


def publish(body: str, name: str, title: str, out: Path | None) -> None:
    """A section's figures into the markdown file `out` (put_section), or printed when `out` is None."""
    if out is None:
        sys.stdout.write(f"## {title}\n\n{body}\n")
        return
    out.write_text(put_section(out.read_text() if out.exists() else None, name, body, title))
    log(f"wrote the {name} section of {out}")


# ----------------------------------------------------------------------------- machine and process figures
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():  # psutil does not name the CPU
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg() -> list[float]:
    """The 1, 5 and 15-minute load averages ([] where the platform has none)."""
    try:
        return [float(x) for x in psutil.getloadavg()]
    except OSError:
        return []


def cpu_share() -> dict:
    """Shares of the whole machine's CPU time (all cores) since this thread's previous call (psutil's
    cpu_times_percent; a first call starts the count): steal, and idle with iowait."""
    t = psutil.cpu_times_percent()._asdict()
    return {"steal": t.get("steal", 0.0) / 100, "idle": (t["idle"] + t.get("iowait", 0.0)) / 100}


def proc_cpu_s(pid: int | None, tree: bool = False) -> float:
    """User + system CPU seconds so far of process `pid` (0 when it does not run); with `tree`, of its
    descendants too."""
    total = 0.0
    try:
        p = psutil.Process(pid) if pid and pid > 0 else None
        for q in ([p] + (p.children(recursive=True) if tree else [])) if p else []:
            with contextlib.suppress(psutil.Error):  # a descendant that ended meanwhile
                total += sum(q.cpu_times()[:2])
    except psutil.Error:
        return 0.0
    return total


def rss(pid: int | None = None) -> int:
    """Resident set size of process `pid` (this one by default), bytes; 0 when it does not run."""
    try:
        return psutil.Process(pid).memory_info().rss if pid is None or pid > 0 else 0
    except psutil.Error:
        return 0


def measured(load_start: list[float]) -> str:
    """The sentence that says where and when a benchmark measured: the date, the machine, and the 1, 5 and 15-minute
    load averages at its start and now (its end); and whether the machine was busy when it started."""
    cores, busy = usable_cores(), (load_start or [0.0])[0]
    return (f"Measured {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {cpu_model()}, {cores} usable "
            f"cores, {platform.platform()}, Python {platform.python_version()} (load average at start "
            f"{' / '.join(f'{x:.2f}' for x in load_start)}, at end {' / '.join(f'{x:.2f}' for x in loadavg())})."
            + (f" **The machine was busy when it started** (1-minute load average {busy:.1f} on {cores} cores): the times "
               "are longer and noisier than on a quiet machine." if busy > BUSY * cores else ""))


def versions() -> dict:
    """The versions of Python and of the libraries the figures depend on (None: not installed)."""
    def version(p: str) -> str | None:
        with contextlib.suppress(md.PackageNotFoundError):
            return md.version(p)

    libraries = ("torch", "transformers", "numpy", "scikit-learn", "umap-learn", "numba", "streamlit")
    return {"python": platform.python_version()} | {p: version(p) for p in libraries}


def machine_info() -> dict:
    """The machine and the software a run measures on, and the load average at its start."""
    import torch  # lazy: torch only in the sections that run a model

    return {"cpu_model": cpu_model(), "logical_cores": psutil.cpu_count(), "usable_cores": usable_cores(),
            "torch_threads": torch.get_num_threads(), "ram_bytes": psutil.virtual_memory().total, "os": platform.platform(),
            "versions": versions(), "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "loadavg_start": loadavg()}


# ----------------------------------------------------------------------------- environment
def child_env(cache_dir: str | Path | None = None, extra: dict | None = None) -> dict:
    env = settings.child_env(cache_dir, HF_HUB_OFFLINE="1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def link_converted_models(cache_dir: Path) -> list[str]:
    """Reuse SmolLM2's one-time GGUF->safetensors conversion (~15 s of setup, not measured) from the default cache;
    statistics and results are still computed afresh in `cache_dir`."""
    src = settings.models_dir()
    linked = []
    if src.is_dir():
        settings.models_dir(cache_dir).mkdir(parents=True, exist_ok=True)
        for p in sorted(src.glob("smollm2-135m-*")):
            dst = settings.models_dir(cache_dir) / p.name
            if (p / "DONE").exists() and (p / "model.safetensors").exists() and not dst.exists():
                os.symlink(p.resolve(), dst)
                linked.append(p.name)
    return linked


# ----------------------------------------------------------------------------- fresh processes
def core_cli(argv: list[str], cache, timeout: float = 3600, env: dict | None = None) -> tuple[float, int, str]:
    """`python -m core ARGV` in a fresh process on the cache directory `cache` (with the variables `env` set): wall
    seconds (interpreter start included), exit code and the last line it wrote on stderr."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "core", *argv], cwd=str(ROOT), env=child_env(cache, env),
                       capture_output=True, text=True, timeout=timeout)
    lines = [x for x in p.stderr.replace("\r", "\n").splitlines() if x.strip()]
    return time.perf_counter() - t0, p.returncode, lines[-1] if lines else ""


def analyze_argv(spec, cache, out) -> list[str]:
    """`python -m core analyze`'s arguments for the RunSpec `spec` on the cache `cache`, its results into `out`."""
    return ["analyze", *spec_args(spec), "--cache-dir", str(cache), "--quiet", "--out", str(out)]


def fresh_process_times(cmd: list[str], processes: int, cache_dir) -> list[float]:
    """Wall seconds of `cmd` (interpreter start included; child_env on `cache_dir`), once in each of `processes` fresh
    processes, timed by pyperf's harness (`python -m pyperf command`: no warm-up, one value per process)."""
    with tempfile.TemporaryDirectory(prefix="aniso-pyperf-") as d:
        out = Path(d) / "times.json"
        p = subprocess.run([sys.executable, "-m", "pyperf", "command", "--processes", str(processes), "--values", "1",
                            "--warmups", "0", "--loops", "1", "--copy-env", "--quiet", "--output", str(out), "--", *cmd],
                           cwd=str(ROOT), env=child_env(cache_dir), capture_output=True, text=True, timeout=1800)
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"pyperf command failed ({p.returncode}): {(p.stderr or p.stdout)[-600:]}")
        import pyperf  # lazy: pyperf only where a fresh-process timing is made

        return list(pyperf.Benchmark.load(str(out)).get_values())


def run_task(task: str, args: dict, *, cache_dir=None, env_extra: dict | None = None,
             timeout: float = 1800) -> dict:
    """`python -m bench.worker TASK ARGS` in a fresh process: its result dict, with `status` ("ok", "oom", "error",
    "killed", "timeout"), `wall_s` (interpreter start included) and a peak RSS known even when the child died."""
    cmd = [sys.executable, "-m", "bench.worker", task, json.dumps(args)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=str(ROOT), env=child_env(cache_dir, env_extra), stdout=out, stderr=err,
                             start_new_session=True)
        def kill():  # the group of the child we started, nothing else; it may have ended meanwhile
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        rc, wall = os.waitstatus_to_exitcode(status), time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    res = next((json.loads(x[len(RESULT_TAG):]) for x in reversed(stdout.splitlines()) if x.startswith(RESULT_TAG)), None)
    # The child's own high-water mark of THIS process image (VmHWM, reported by the worker with its status) is the
    # per-run peak; rusage's ru_maxrss also counts the parent's pages at fork, so it is only an
    # upper bound, used when the child could not report (killed).
    if res is None:
        st = "timeout" if wall >= timeout else "killed" if rc in (-9, 137) else "error"
        res = {"status": st, "returncode": rc, "error": "\n".join(stderr.strip().splitlines()[-6:]),
               "peak_rss_bytes": ru.ru_maxrss * 1024,  # kB on Linux
               "peak_rss_source": "ru_maxrss upper bound (includes the parent's pages at fork)"}
    res["wall_s"] = wall
    if res["status"] not in ("ok", "oom"):
        log(f"task {task} {args} -> {res['status']} rc={rc}: {res.get('error', '')[-400:]}")
    return res


class RssSampler:
    """Samples this process's RSS every 20 ms (and at each change of stage); keeps the maximum per stage label."""

    def __init__(self):
        self.stage, self._since = "start", time.perf_counter()
        self.by_stage: dict[str, int] = {}
        self.seconds: dict[str, float] = {}  # wall time spent in each stage
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        self.by_stage[self.stage] = max(self.by_stage.get(self.stage, 0), rss())

    def _run(self):
        while not self._stop.wait(0.02):
            self._sample()

    def set(self, stage: str) -> None:
        self._sample()
        now = time.perf_counter()
        self.seconds[self.stage] = self.seconds.get(self.stage, 0.0) + now - self._since
        self._since, self.stage = now, stage

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self.set("end")
        self._sample()  # the RSS at the end (after the last stage)
        self._stop.set()
        self._t.join()

    def report(self) -> dict:
        """The maximum RSS per stage, and the seconds per stage (the stages between the start and the end)."""
        return {"rss_by_stage": self.by_stage, "seconds_by_stage": {k: v for k, v in self.seconds.items()
                                                                    if k not in ("start", "end")}}


# ----------------------------------------------------------------------------- profiles
def cprofile_table(fn, top: int = 15, sort: str = "cumulative") -> str:
    """Run fn() under cProfile; the top functions by `sort` (cumulative time, or "tottime": their own time), as text."""
    with cProfile.Profile() as pr:
        fn()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).strip_dirs().sort_stats(sort).print_stats(top)
    lines = s.getvalue().splitlines()
    head = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)  # pstats' preamble
    return "\n".join(l.rstrip() for l in lines[head:] if l.strip())


# ----------------------------------------------------------------------------- token windows
def subset_windows(windows, n_tokens: int):
    """The first windows of `windows` holding about n_tokens analysed tokens (for profiles)."""
    import numpy as np  # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)

    from core.inputs.corpora import TokenWindows

    k, content = 0, 0
    while k < len(windows.ids) and content < n_tokens:
        content += int((~windows.special[k]).sum())
        k += 1
    doc = list(windows.doc[:k])
    return TokenWindows(list(windows.ids[:k]), list(windows.special[:k]), np.asarray(doc), len(set(doc)),
                        sum(len(w) for w in windows.ids[:k]), content)


def bare_forward(model, windows, batches, pad_id: int, device: str = "cpu", sync=None, **kw) -> float:
    """Seconds for the bare forward pass over `batches`: no hidden states kept, no metrics (`kw`: passed to
    the model, e.g. output_attentions=True)."""
    import torch  # lazy: torch only in the sections that run a model

    from core.stats.batching import pad_batch  # lazy: imported once --threads is applied (numpy reads it at import)

    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in batches:
            ids, att = pad_batch([windows.ids[i] for i in b], pad_id)  # the tool's own right-padding
            model(input_ids=torch.as_tensor(ids).to(device), attention_mask=torch.as_tensor(att).to(device), **kw)
        if sync:
            sync()
    return time.perf_counter() - t0
