"""Busy machine (issue 36): the dashboard's job against the CLI beside unrelated CPU load, then page views while a
long job runs; method: BENCHMARKS.md, "Busy machine". Bounded: users <= 16, seconds <= 600, tokens <= 400,000;
psutil reads and stops the processes it started (never others).

    python -m bench.busy --json busy.json [--md BENCHMARKS.md] [--tokens 20000 --reps 2 --users 8 --seconds 60]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench import common
from bench.appserver import browser_main
from core.base import settings
from core.base.spec import RunSpec
from core.compute.pipeline import analyze, analyze_params
from core.entry import jobs, worker

TITLE = "Busy machine: the dashboard's job against the CLI (`python -m bench.busy`)"
SPIN = "import time\nt = time.monotonic()\nwhile True:\n    t += 1\n"  # pure-Python, holds one core
TOKENS = 20_000
JOB_TOKENS = 400_000
GOAL_RATIO, GOAL_P95_S = 0.8, 2.0
ARMS = {"cli": "CLI (torch's threads, its default)", "job": "dashboard job (the worker: auto threads)",
        "cli_auto": "CLI with ANISO_TORCH_THREADS=auto"}  # the CLI as typed (torch's threads), the job, auto threads
AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")


def start_busy(n: int) -> list[psutil.Popen]:
    """`n` spinning processes at niceness 0, each the leader of its own session (an unrelated user's work:
    with Linux autogroups, each is a scheduling group of its own, as a job of another login would be)."""
    return [psutil.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True) for _ in range(n)]


def stop(procs: list[psutil.Popen]) -> dict:
    """Stop the processes this benchmark started; returns their CPU seconds."""
    cpu = {}
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            cpu[p.pid] = round(sum(p.cpu_times()[:2]), 1)
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        p.kill()
    return cpu


def arm_run(which: str, spec: RunSpec, cache: Path) -> dict:
    """One run of `spec` by arm `which` (ARMS): an `analyze` job through the worker of `cache`, as Run queues it, or
    `python -m core analyze` in a fresh process on an empty cache, its torch threads (ANISO_TORCH_THREADS) torch's
    own count (the command line's default) or auto; killed with this process (subprocess.run kills its child on any
    exception, SIGTERM's exit included). Its forward pass's tokens/s, the wall time and torch's threads."""
    if which == "job":
        t0 = time.perf_counter()
        jid = jobs.submit("analyze", analyze_params(spec, cache), label=f"bench.busy, {spec.max_tokens:,} tokens",
                          cache_dir=cache)
        worker.ensure_worker(cache)
        job = jobs.wait(jid, cache, timeout=3600)
        more = {"wall_s": time.perf_counter() - t0, "queued_s": (job.started - job.created) if job.started else None}
        if job.status != jobs.DONE:
            raise RuntimeError(f"the job ended {job.status}: {job.error}")
        m = analyze(spec, cache_dir=cache)["manifest"]  # a cache hit: the results the job stored
    else:
        cache = Path(tempfile.mkdtemp(prefix="aniso-busy-cli-"))
        wall, rc, msg = common.core_cli(common.analyze_argv(spec, cache, cache / "cli.json"), cache,
                                        env={settings.TORCH_THREADS_ENV: "auto" if which == "cli_auto" else "torch"})
        if rc != 0:
            raise RuntimeError(f"the CLI failed ({rc}): {msg}")
        m, more = json.loads((cache / "cli.json").read_text())["manifest"], {"wall_s": wall}
    return {"tokens_per_s": m["timing"]["tokens_per_s"], "tokens": m["tokens"]["analysed"],
            "forward_s": m["timing"]["forward_s"], "torch_threads": m["timing"].get("torch_threads"), **more}


def run(tokens: int, job_tokens: int, users: int, seconds: float, n_busy: int = 2, reps: int = 2) -> dict:
    from bench import load  # lazy: bench.load imports playwright's helpers

    tokens, job_tokens = max(1000, min(tokens, 400_000)), max(10_000, min(job_tokens, 400_000))
    users, seconds, reps = max(1, min(users, 16)), max(10.0, min(seconds, 600.0)), max(1, min(reps, 4))
    out: dict = {"tokens": tokens, "job_tokens": job_tokens, "users": users, "seconds": seconds, "busy_processes": n_busy,
                 "reps": reps, "load_before": common.loadavg(),
                 "autogroups": AUTOGROUPS.exists() and AUTOGROUPS.read_text().strip() == "1"}
    busy = start_busy(n_busy)
    try:
        with load.browsed_server("aniso-busy-app-") as (app_cache, url, server):
            worker.ensure_worker(app_cache)  # as a page opening does (ui.jobs_panel.prestart_worker)
            # Untimed: the worker's first job (its imports, the model's first load) and each page's first view (the
            # app's UMAP process compiles umap's kernels), as on a server that has been up; then the server idle.
            arm_run("job", RunSpec(max_tokens=1000, seed=99), app_cache)
            load.warm_up(url, server.pid)
            seeds = {k: iter(range(1, reps + 1)) for k in ARMS}  # each arm computes the same runs

            def timed(which: str):
                spec = RunSpec(max_tokens=tokens, seed=next(seeds[which]))
                common.log(f"{which}: {tokens:,} tokens, seed {spec.seed}")
                r = arm_run(which, spec, app_cache)
                return r["wall_s"], r

            runs = common.alternate(reps, {k: (lambda k=k: timed(k)) for k in ARMS})  # A B C C B A ...
            for k in ARMS:
                out[f"{k}_runs"] = [r for _, r in runs[k]]
                out[f"{k}_tokens_per_s"] = common.median([r["tokens_per_s"] for r in out[f"{k}_runs"]])
            wpid = worker.worker_pid(app_cache)  # its niceness and threads (none: it does not run)
            out["worker"] = psutil.Process(wpid).as_dict(["nice", "num_threads"]) if wpid and psutil.pid_exists(wpid) else {}
            jid = load.start_job(app_cache, job_tokens, "bench.busy: long job")
            common.log(f"{users} users browse for {seconds:.0f} s while job {jid} runs")
            out["page"] = {**load.run_phase(url, users, seconds, load.THINK_MEAN_S, server.pid),
                           **load.job_figures(jid, app_cache, cancel=True)}
    finally:
        out["busy_cpu_s"] = stop(busy)
    out["measured"] = common.measured(out["load_before"])
    out["ratio"] = out["job_tokens_per_s"] / out["cli_tokens_per_s"]
    out["ratio_auto"] = out["job_tokens_per_s"] / out["cli_auto_tokens_per_s"]
    # A navigation that timed out is a page view over any bound: the goal holds only with none.
    ok = out["ratio"] >= GOAL_RATIO and not out["page"]["errors"]
    out["met"] = bool(ok and out["page"]["p95"] < GOAL_P95_S)  # the whole view, the browsers' drawing included
    out["met_server"] = bool(ok and out["page"]["server_p95"] < GOAL_P95_S)  # the server's part of each view
    return out


def render(r: dict, command: str) -> str:
    page, fs = r["page"], common.fs

    def rates(which: str) -> str:
        return " / ".join(f"{x['tokens_per_s']:,.0f} ({x.get('torch_threads')})" for x in r[f"{which}_runs"])

    return "\n".join([
        f"{r['busy_processes']} busy processes; each timed run: {r['tokens']:,} tokens; {r['users']} users browse for "
        f"{r['seconds']:.0f} s beside a {r['job_tokens']:,}-token job, which ran at {page['job_tokens_per_s']:,.0f} "
        "tokens/s meanwhile.", "",
        common.table(["", "tokens/s (torch threads), each run in the order A B C C B A ...", "median tokens/s"],
                     [[name, rates(k), f"{r[f'{k}_tokens_per_s']:,.0f}"] for k, name in ARMS.items()]), "",
        f"Ratio job / CLI (medians): **{r['ratio']:.2f}** (goal >= {GOAL_RATIO}); job / CLI with auto threads: "
        f"{r['ratio_auto']:.2f}.", "",
        common.table(["Page views while the job runs", "views", "failed (not in the p95: a failure fails the goal)",
                      "p50", f"p95 (goal < {GOAL_P95_S:g} s)", "goals"],
                     [["whole (click until every figure is drawn)", page["n"], len(page["errors"]), fs(page["p50"]),
                       f"**{fs(page['p95'])}**", f"**{'met' if r['met'] else 'not met'}**"],
                      ["the server's part (click to the last element it sent for the page before the view was drawn; "
                       "the browser's drawing and the jobs panel's fragment reruns left out)", page["server_n"], "",
                       fs(page["server_p50"]), f"**{fs(page['server_p95'])}**",
                       f"**{'met' if r['met_server'] else 'not met'}**"]]), "",
        f"{r['measured']} Autogroups {'on' if r['autogroups'] else 'off'}; worker niceness {r['worker'].get('nice')}.",
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
