"""Live curves (issue 26): how soon the first curve is drawn in a real browser (method: BENCHMARKS.md, "Live curves").
Goals: first curve warm <= 10 s, fresh <= 30 s. What publishing the partial results costs the extraction is section
"partial" of `python -m bench`.

    python -m bench.live [--out l.md]  # about 5 minutes on 2 cores
    python -m bench.live --quick       # a small selection, prints the markdown (checks the code)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from core.base import settings

settings.export_env(HF_HUB_OFFLINE="1")  # before anything imports huggingface_hub
settings.env_default(TOKENIZERS_PARALLELISM="false")

from bench.appserver import CHROMIUM, CHROMIUM_ARGS, ROOT, app_server, browser_main  # noqa: E402
from bench.common import fs, loadavg, log, measured, met, proc_cpu_s, publish, table  # noqa: E402
from core.base.cache import get_store  # noqa: E402
from core.entry import jobs, worker  # noqa: E402

TITLE = "Live curves: partial results while a run computes (`python -m bench.live`)"
GOAL_WARM_S, GOAL_FRESH_S = 10.0, 30.0


FIRST_CURVE_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(el => !el.closest('[data-stale="true"]') && (el.data || []).length > 0)
    .map(el => ((el.layout || {}).title || {}).text || '')"""


def _others_cpu_s(server_pid: int, workers: set) -> float:
    """CPU seconds so far of the app server's other descendants (the UMAP process that compiles umap's kernels when
    the app starts), the job workers left out."""
    return proc_cpu_s(server_pid, tree=True) - proc_cpu_s(server_pid) - sum(proc_cpu_s(w) for w in workers)


def _warmed(cache: Path) -> bool:
    """Whether the worker's log says its warm-up is over (core.entry.worker.run_worker(warm=True))."""
    log_path = cache / "jobs" / "worker.log"
    return log_path.exists() and "warmed up in" in log_path.read_text(errors="replace")


def _analysis_job(cache: Path, since: float):
    """The analysis job submitted since `since` (wall clock): not the job of an earlier click, done long ago."""
    return next((j for j in jobs.list_jobs(cache, kinds=("analyze",))
                 if j.created >= since - 1 and (j.active or j.status == jobs.DONE)), None)


def _click_to_curves(browser, url: str, timeout_s: float, server_pid: int, cache: Path) -> dict:
    """From the click on Run: seconds to the first drawn figure (partial or not) and to the final one, the CPU
    seconds until the first, and the job's steps as the poll saw them (BENCHMARKS.md, "Live curves")."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(url)
        run = page.get_by_role("button", name="Run")
        run.wait_for(timeout=120_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=120_000)
        page.evaluate("() => { window.__no_reload = true; }")
        worker0, warmed0 = worker.worker_pid(cache), _warmed(cache)
        server0, wcpu0 = proc_cpu_s(server_pid), proc_cpu_s(worker0)
        others0 = _others_cpu_s(server_pid, {worker0})
        t0, wall0 = time.monotonic(), time.time()
        run.click()
        steps: dict[str, dict] = {}
        first_title = ""

        def step(key: str, what: str, at: float | None = None) -> None:
            """The first time the poll sees step `key`: when (`at`: the job record's own time, else now), and the CPU
            seconds since the click of the server, the worker and the server's other processes."""
            if key in steps:
                return
            wpid = worker.worker_pid(cache)
            steps[key] = {"step": what, "s": round(time.monotonic() - t0 if at is None else at, 2),
                          "server_cpu_s": round(proc_cpu_s(server_pid) - server0, 2),
                          "worker_cpu_s": round(proc_cpu_s(wpid) - (wcpu0 if wpid == worker0 else 0.0), 2),
                          "other_cpu_s": round(_others_cpu_s(server_pid, {wpid, worker0}) - others0, 2)}

        while time.monotonic() - t0 < timeout_s:
            titles = page.evaluate(FIRST_CURVE_JS)
            job = _analysis_job(cache, wall0) if "done" not in steps else None
            if job is not None:
                step("queued", "queued (the click's script run submitted it)", job.created - wall0)
                if job.started:
                    step("started", "taken by the worker", job.started - wall0)
                if not warmed0 and "warmed" not in steps and _warmed(cache):
                    step("warmed", "worker warm-up over (seen)")
                got = jobs.partial(job, cache) if job.status == jobs.RUNNING and "partial" not in steps else None
                if got:
                    step("partial", f"first partial result published ({got['partial']['tokens']:,} tokens)",
                         got["published"] - wall0)
                if job.status == jobs.DONE and job.finished:
                    step("done", "run stored, job done", job.finished - wall0)
            if titles and "first" not in steps:
                first_title = titles[0]
                step("first", "first figure drawn")
            if any("partial" not in t for t in titles):
                step("final", "final figure drawn")
                break
            page.wait_for_timeout(100)
        first = steps.get("first")
        return {"first_s": first and first["s"], "first_title": first_title, "first_partial": "partial" in first_title,
                "final_s": steps["final"]["s"] if "final" in steps else None,
                "reloaded": not page.evaluate("() => window.__no_reload === true"),
                "cpu_to_first_s": first and first["server_cpu_s"] + first["worker_cpu_s"],
                "worker_was_running": bool(worker0 and worker0 > 0), "worker_warm_at_click": warmed0,
                "steps": list(steps.values())}
    finally:
        page.close()


def first_curve(tokens: int | None, timeout_s: float) -> str:
    """The fresh and the warm measurement on one server (see the module's doc), as markdown."""
    from playwright.sync_api import sync_playwright  # lazy: playwright only for the browser measurement

    query = f"tokens={tokens}" if tokens else ""
    root = Path(tempfile.mkdtemp(prefix="aniso-live-"))
    cache = root / "cache"
    cache.mkdir()
    rows, steps = [], []
    with app_server(cache, root / "streamlit.log") as (url, proc), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for name, goal, how in (("fresh", GOAL_FRESH_S, "a new cache, no worker"),
                                    ("warm", GOAL_WARM_S, "the same worker, the run deleted from the cache")):
                if name == "warm":
                    t0 = time.monotonic()
                    while any(j.active for j in jobs.list_jobs(cache)) and time.monotonic() - t0 < timeout_s:
                        time.sleep(1)  # the fresh run still running: let it end
                    store = get_store(cache)
                    for k in store.keys():
                        if k.startswith(("stats:", "results:")):
                            store.delete(k)
                    time.sleep(2)  # the app keeps no "not computed" (ui.data.is_cached): the next page run sees it
                log(f"{name}: {how}")
                r = _click_to_curves(browser, f"{url}/?{query}", timeout_s, proc.pid, cache)
                log(f"{name}: {r}")
                ok = r["first_s"] is not None and r["first_s"] <= goal
                miss = "" if ok or r["first_s"] is None else f" (over by {r['first_s'] - goal:.1f} s)"
                rows.append([name, fs(r["first_s"], 1), "partial" if r["first_partial"] else "final", fs(r["final_s"], 1),
                             "yes" if r["reloaded"] else "no", fs(r["cpu_to_first_s"], 1),
                             "yes" if r["worker_warm_at_click"] else "no", f"<= {goal:.0f} s: {met(ok)}{miss}"])
                steps += [[name, x["step"], f"{x['s']:.1f} s", f"{x['server_cpu_s']:.1f}", f"{x['worker_cpu_s']:.1f}",
                           f"{x['other_cpu_s']:.1f}"] for x in r["steps"]]
        finally:
            browser.close()
    nice = settings.env_value("ANISO_WORKER_NICE")
    return "\n".join([
        f"**First curve in a real browser** (`streamlit run app.py` on {url.split('//')[1]}; selection "
        f"{query or '(the default selection)'})." + (f" The worker ran at niceness {nice} (the app's default is 10)."
                                                      if nice is not None else ""), "",
        table(["Run", "First curve", "It was", "Final curve", "Page reloaded", "CPU to the first curve",
               "Worker warm at the click", "Goal"], rows), "", "Where the seconds went:", "",
        table(["Run", "Step", "Since the click", "Server CPU-s", "Worker CPU-s", "Other CPU-s"], steps)])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small selection: checks the code, prints the markdown")
    p.add_argument("--timeout", type=float, default=300, help="longest wait for a curve (s)")
    p.add_argument("--out", default=None, help="markdown file to write into (default BENCHMARKS.md)")
    a = p.parse_args(argv)
    if not browser_main():
        return 2
    load_start = loadavg()
    figures = first_curve(1000 if a.quick else None, a.timeout)
    out = Path(a.out) if a.out else (None if a.quick else ROOT / "BENCHMARKS.md")
    publish(measured(load_start) + "\n\n" + figures, "live", TITLE, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
