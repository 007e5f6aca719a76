"""Busy machine (issue 36): the dashboard's job against the CLI beside unrelated CPU load, then page views while a
long job runs; method: BENCHMARKS.md, "Busy machine". Bounded: users <= 16, seconds <= 600, tokens <= 400,000;
psutil reads and stops the processes it started (never others).

    python -m bench.busy --json busy.json [--md BENCHMARKS.md] [--tokens 20000 --reps 2 --users 8 --seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench import common
from bench.appserver import app_server, browser_main
from core.base import settings
from core.base.spec import RunSpec
from core.compute.pipeline import analyze, analyze_params
from core.entry import jobs, worker

TITLE = "Busy machine: the dashboard's job against the CLI (`python -m bench.busy`)"
SPIN = "import time\nt = time.monotonic()\nwhile True:\n    t += 1\n"  # pure-Python, holds one core
TOKENS = 20_000
JOB_TOKENS = 400_000
GOAL_RATIO, GOAL_P95_S = 0.8, 2.0
ARMS = ("cli", "job", "cli_auto")  # the CLI as typed (torch's threads), the dashboard's job, the CLI with auto threads


def start_busy(n: int) -> list[psutil.Popen]:
    """`n` spinning processes at niceness 0, each the leader of its own session (an unrelated user's work:
    with Linux autogroups, each is a scheduling group of its own, as a job of another login would be)."""
    procs = []
    for _ in range(n):
        p = psutil.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)
    return procs


def stop(procs: list[psutil.Popen]) -> dict:
    """Stop the processes this benchmark started; returns their CPU seconds."""
    cpu = {}
    for p in procs:
        try:
            t = p.cpu_times()
            cpu[p.pid] = round(t.user + t.system, 1)
            p.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        p.kill()
    return cpu


def cli_run(spec: RunSpec, threads: str = "torch") -> dict:
    """`python -m core analyze` on `spec` in a fresh process and an empty cache, its torch threads `threads`
    (ANISO_TORCH_THREADS: torch's own count, the command line's default, or auto); killed with this process
    (subprocess.run kills its child on any exception, SIGTERM's exit included)."""
    cache = Path(tempfile.mkdtemp(prefix="aniso-busy-cli-"))
    wall, rc, msg = common.core_cli(common.analyze_argv(spec, cache, cache / "cli.json"), cache,
                                    env={settings.TORCH_THREADS_ENV: threads})
    if rc != 0:
        raise RuntimeError(f"the CLI failed ({rc}): {msg}")
    m = json.loads((cache / "cli.json").read_text())["manifest"]
    return {"tokens_per_s": m["timing"]["tokens_per_s"], "wall_s": wall, "tokens": m["tokens"]["analysed"],
            "forward_s": m["timing"]["forward_s"], "torch_threads": m["timing"].get("torch_threads")}


def job_run(spec: RunSpec, cache: Path, timeout_s: float = 3600) -> dict:
    """One `analyze` job through the worker, as Run queues it; its forward pass's tokens/s and wall."""
    t0 = time.perf_counter()
    jid = jobs.submit("analyze", analyze_params(spec, cache), label=f"bench.busy, {spec.max_tokens:,} tokens",
                      cache_dir=cache)
    worker.ensure_worker(cache)
    job = jobs.wait(jid, cache, timeout=timeout_s)
    wall = time.perf_counter() - t0
    if job.status != jobs.DONE:
        raise RuntimeError(f"the job ended {job.status}: {job.error}")
    m = analyze(spec, cache_dir=cache)["manifest"]  # a cache hit: the results the job stored
    queued = (job.started - job.created) if job.started else None
    return {"tokens_per_s": m["timing"]["tokens_per_s"], "wall_s": wall, "tokens": m["tokens"]["analysed"],
            "forward_s": m["timing"]["forward_s"], "queued_s": queued, "torch_threads": m["timing"].get("torch_threads")}


def _worker(cache: Path, what: str):
    """A figure of the worker process (psutil.Process's `what`: nice, num_threads), None when it does not run."""
    pid = worker.worker_pid(cache)
    try:
        return getattr(psutil.Process(pid), what)() if pid and pid > 0 else None
    except psutil.NoSuchProcess:
        return None


def run(tokens: int, job_tokens: int, users: int, seconds: float, n_busy: int = 2, reps: int = 2) -> dict:
    from bench import load  # lazy: bench.load imports playwright's helpers

    tokens, job_tokens = max(1000, min(tokens, 400_000)), max(10_000, min(job_tokens, 400_000))
    users, seconds, reps = max(1, min(users, 16)), max(10.0, min(seconds, 600.0)), max(1, min(reps, 4))
    out: dict = {"date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"), "tokens": tokens,
                 "job_tokens": job_tokens, "users": users, "seconds": seconds, "busy_processes": n_busy, "reps": reps,
                 "cores": common.usable_cores(), "cpu": platform.processor() or platform.machine(),
                 "python": platform.python_version(), "load_before": common.loadavg(),
                 "autogroups": _autogroups()}
    busy = start_busy(n_busy)
    try:
        app_cache = Path(tempfile.mkdtemp(prefix="aniso-busy-app-"))
        load.compute_browsed_run(app_cache)
        with app_server(app_cache, app_cache / "streamlit.log") as (url, server):
            worker.ensure_worker(app_cache)  # as a page opening does (ui.jobs_panel.prestart_worker)
            # Untimed: the worker's first job (its imports, the model's first load) and each page's first view (the
            # app's UMAP process compiles umap's kernels), as on a server that has been up; then the server idle.
            job_run(RunSpec(max_tokens=1000, seed=99), app_cache)
            asyncio.run(load.run_phase(url, 1, 10.0, think_mean=0.0))
            load.wait_idle(server.pid)
            seeds = {k: iter(range(1, reps + 1)) for k in ARMS}  # each arm computes the same runs

            def timed(which: str):
                spec = RunSpec(max_tokens=tokens, seed=next(seeds[which]))
                print(f"{which}: {tokens:,} tokens, seed {spec.seed}", file=sys.stderr)
                r = job_run(spec, app_cache) if which == "job" else cli_run(spec, "auto" if which == "cli_auto" else "torch")
                return r["wall_s"], r

            runs = common.alternate(reps, {k: (lambda k=k: timed(k)) for k in ARMS})  # A B C C B A ...
            for k in ARMS:
                out[f"{k}_runs"] = [r for _, r in runs[k]]
            out["worker_nice"], out["worker_threads"] = _worker(app_cache, "nice"), _worker(app_cache, "num_threads")
            jid = load.start_job(app_cache, job_tokens, "bench.busy: long job")
            print(f"{users} users browse for {seconds:.0f} s while job {jid} runs", file=sys.stderr)
            page = load.summarize(*asyncio.run(load.run_phase(url, users, seconds, load.THINK_MEAN_S, server.pid)))
            out["page"] = {**{k: page[k] for k in ("n", "p50", "p95", "max", "errors", "per_page", "server_n",
                                                   "server_p50", "server_p95")},
                           **load.job_figures(jid, app_cache, cancel=True)}
    finally:
        out["busy_cpu_s"] = stop(busy)
    out["load_after"] = common.loadavg()
    for k in ARMS:
        out[f"{k}_tokens_per_s"] = common.median([r["tokens_per_s"] for r in out[f"{k}_runs"]])
    out["ratio"] = out["job_tokens_per_s"] / out["cli_tokens_per_s"] if out["cli_tokens_per_s"] else float("nan")
    out["ratio_auto"] = out["job_tokens_per_s"] / out["cli_auto_tokens_per_s"] if out["cli_auto_tokens_per_s"] else float("nan")
    out["page_p95_s"], out["server_p95_s"] = out["page"]["p95"], out["page"]["server_p95"]
    # A navigation that timed out is a page view over any bound: the goal holds only with none.
    ok = out["ratio"] >= GOAL_RATIO and not out["page"]["errors"]
    out["met"] = bool(ok and out["page_p95_s"] < GOAL_P95_S)  # the whole view, the browsers' drawing included
    out["met_server"] = bool(ok and out["server_p95_s"] < GOAL_P95_S)  # the server's part of each view
    return out


def _autogroups() -> bool | None:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


def render(r: dict, command: str) -> str:
    page = r["page"]

    def rates(which: str) -> str:
        return " / ".join(f"{x['tokens_per_s']:,.0f} ({x.get('torch_threads')})" for x in r[f"{which}_runs"])

    names = {"cli": "CLI (torch's threads, its default)", "job": "dashboard job (the worker: auto threads)",
             "cli_auto": "CLI with ANISO_TORCH_THREADS=auto"}
    return "\n".join([
        f"{r['busy_processes']} busy processes; each timed run: {r['tokens']:,} tokens; {r['users']} users browse for "
        f"{r['seconds']:.0f} s beside a {r['job_tokens']:,}-token job.", "",
        common.table(["", "tokens/s (torch threads), each run in the order A B C C B A ...", "median tokens/s"],
                     [[names[k], rates(k), f"{r[f'{k}_tokens_per_s']:,.0f}"] for k in ARMS if f"{k}_runs" in r]), "",
        f"Ratio job / CLI (medians): **{r['ratio']:.2f}** (goal >= {GOAL_RATIO}); job / CLI with auto threads: "
        f"{r['ratio_auto']:.2f}. Page views while the job runs: "
        f"{page['n']}, p50 {page['p50']:.2f} s, **p95 {page['p95']:.2f} s** (goal < {GOAL_P95_S:g} s), "
        f"{len(page['errors'])} navigations failed (not in the p95: a failure fails the goal); "
        f"the long job ran at {page['job_tokens_per_s']:,.0f} tokens/s meanwhile. The server's part of "
        f"{page['server_n']} of those views (from the click to the last element the server sent for the page before "
        f"the view was drawn; the browser's drawing and the jobs panel's fragment reruns left out): "
        f"p50 {page['server_p50']:.2f} s, **p95 {page['server_p95']:.2f} s**. "
        f"Goals with the whole view: **{'met' if r['met'] else 'not met'}**; with the server's part: "
        f"**{'met' if r['met_server'] else 'not met'}**.", "",
        f"Measured {r['date_utc']} UTC on {r['cores']} cores ({r['cpu']}), Python {r['python']}, autogroups "
        f"{'on' if r['autogroups'] else 'off'}; worker niceness {r.get('worker_nice')}; 1-min load average "
        f"{r['load_before'][0]:.1f} before, {r['load_after'][0]:.1f} after.",
        "", f"Command: `{command}`"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.busy", description=__doc__.splitlines()[0])
    p.add_argument("--json", required=True, help="where to write the figures")
    p.add_argument("--md", default=None, help="markdown file to write into (e.g. BENCHMARKS.md; default: printed)")
    p.add_argument("--tokens", type=int, default=TOKENS, help="the run the CLI and the job both compute")
    p.add_argument("--job-tokens", type=int, default=JOB_TOKENS, help="the job that runs while users browse")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--seconds", type=float, default=60, help="how long the users browse")
    p.add_argument("--busy", type=int, default=2, help="unrelated busy processes")
    p.add_argument("--reps", type=int, default=2, help="CLI and job runs each, alternated A B B A")
    a = p.parse_args(argv)
    if not browser_main():
        return 2
    r = run(a.tokens, a.job_tokens, a.users, a.seconds, max(0, min(a.busy, 16)), a.reps)
    Path(a.json).write_text(json.dumps(r, indent=1, default=str))
    common.publish(render(r, common.command("python -m bench.busy", argv)), "busy", TITLE, Path(a.md) if a.md else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
