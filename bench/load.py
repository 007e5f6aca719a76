"""Load test: simultaneous browser users on the dashboard, with and without a running job (method: BENCHMARKS.md,
"Load"). Bounded: users <= 16, seconds per phase <= 600, each page wait <= 120 s.

    python -m bench.load [--users 8 --seconds 120] [--out load.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from bench.appserver import CHROMIUM, ROOT, app_server, browser_main
from bench.appserver import CHROMIUM_ARGS as ARGS
from bench.common import command, fb, fr, fs, loadavg, log, measured, proc_cpu_s, publish, rss, table
from core.base import settings
from core.base.spec import RunSpec
from core.compute.pipeline import analyze
from core.entry import jobs, worker
from core.studies.selection import from_query_params

# page -> the figures of its first section (the one open on a visit) for the browsed run: all of them
# must be drawn before the view counts as shown
PAGES = {"Layers": 1, "Outliers": 2, "Projection": 1, "Compare": 1}
QUERY = "tokens=4000&sample=1000"
JOB_TOKENS = 400_000  # the background job: long enough to outlast phase 2 on 2 cores
TITLE = "Load: browser users while a job runs"
PAGE_TIMEOUT_S = 120
SLOW_S = 10  # a view slower than this is described in the report (what the page showed)
THINK_MEAN_S = 7.0  # TPC-W's think time: exponential with this mean, cut at 10 times the mean
STRESS_S = 40.0  # phase 3 (no think time) lasts at most this long
PHASES = {"idle": "no job", "job": "job running", "stress": "job running, no think time"}


def _probe(server_pid: int, cache: Path, peaks: dict, stop: threading.Event) -> None:
    """Peak RSS of the server and of the worker into `peaks` (cleared: a new start), sampled every 0.25 s."""
    while not stop.wait(0.25):
        for k, pid in (("peak_server", server_pid), ("peak_worker", worker.worker_pid(cache) or 0)):
            peaks[k] = max(peaks.get(k, 0), rss(pid))


# Ready: at the page's own path, no script running, and every figure of the page drawn, none of them the last
# page's (data-stale): without the path and stale checks the last page's figures counted, and the next click raced
# the navigation still in flight.
READY_JS = """(a) => {
    if (!a.paths.includes(location.pathname) || document.querySelector('[data-testid=stStatusWidget]')) return false;
    const charts = Array.from(document.querySelectorAll('[data-testid=stPlotlyChart]'))
        .filter(e => !e.closest('[data-stale="true"]'));
    return charts.length >= a.n && charts.every(c => {
        const p = c.querySelector('.js-plotly-plot');
        return p && p._fullLayout && (p.data || []).length > 0; });
}"""


async def _page_ready(page, name: str, slow: list, label: str = "") -> None:
    """Wait until the page shows its PAGES[name] figures with data and Streamlit is idle. A view still not
    ready after SLOW_S is noted in `slow` with what the page showed then (the wait goes on)."""
    paths = [f"/{name.lower()}"] + (["/", "/home"] if name == "Layers" else [])  # Layers is the default page
    arg = {"paths": paths, "n": PAGES[name]}
    try:
        await page.wait_for_function(READY_JS, arg=arg, timeout=SLOW_S * 1000)
        return
    except Exception:  # noqa: BLE001 - a Playwright timeout: note what the page shows, then wait on
        slow.append(f"{label or name}: not ready after {SLOW_S} s [{await _describe(page)}]")
    await page.wait_for_function(READY_JS, arg=arg, timeout=(PAGE_TIMEOUT_S - SLOW_S) * 1000)


STATE_JS = """() => ({path: location.pathname,
    plots: Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => (e.data || []).length),
    busy: !!document.querySelector('[data-testid=stStatusWidget]'),
    said: Array.from(document.querySelectorAll('[data-testid=stAlert], [data-testid=stCaptionContainer]'))
               .map(e => e.innerText.slice(0, 80)).slice(0, 4)})"""


async def _describe(page) -> str:
    """What the page showed when a wait failed: its path, the traces per figure, whether Streamlit
    was still running, and its first messages (so that an error says why the figures never came)."""
    try:
        s = await page.evaluate(STATE_JS)
    except Exception as e:  # noqa: BLE001 - a closed page: say so
        return f"page unreadable: {type(e).__name__}"
    return f"at {s['path']}, traces per figure {s['plots']}, running {s['busy']}, says {s['said']}"


def watch_server(page, sent: list) -> None:
    """Note when each element the server sends this page's session arrives over the websocket (a Streamlit
    ForwardMsg delta). A view's server part is from the click to the last element that arrived before the page was
    drawn: what the browser drew had all been sent by then. Left out: heartbeats, the run's bookkeeping
    (`script_finished` often arrives after the figures are drawn, as the script still writes what lies below them)
    and elements written by a fragment (`delta.fragment_id`: the jobs panel's reruns every 2 s; the browsed pages
    draw their own sections outside fragments)."""
    # lazy: streamlit's protobuf stays out of what the numpy-only tier imports (the renderers)
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    def frame(payload) -> None:
        if not isinstance(payload, (bytes, bytearray)):
            return
        msg = ForwardMsg()
        try:
            msg.ParseFromString(bytes(payload))
        except Exception:  # noqa: BLE001 - not a ForwardMsg: not the server's page
            return
        if msg.WhichOneof("type") == "delta" and not msg.delta.fragment_id:  # an element of the page's own run
            sent.append(time.perf_counter())

    page.on("websocket", lambda ws: ws.on("framereceived", frame))


async def _open(browser, url: str, offset: int, times: list, errors: list, slow: list) -> tuple:
    """A user's own browser context and first page (the ramp-up, not a view): (the page, the pages it visits
    next, when the server's elements arrived)."""
    ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await ctx.new_page()
    sent: list[float] = []
    watch_server(page, sent)
    order = itertools.islice(itertools.cycle(PAGES), offset, None)  # each user starts at another page
    t0, name = time.perf_counter(), next(order)
    try:
        await page.goto(f"{url}/{name.lower()}?{QUERY}", timeout=PAGE_TIMEOUT_S * 1000)
        await _page_ready(page, name, slow, "first load")
        times.append(("open", time.perf_counter() - t0))
    except Exception as e:  # noqa: BLE001 - counted; this user goes on browsing
        errors.append(f"first load: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    return page, order, sent


async def _browse(page, order, sent: list, seconds: float, think_mean: float, rng: random.Random, times: list,
                  errors: list, slow: list) -> None:
    """A user's timed browsing: a think time, a click on the next page in the navigation, until it is drawn."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        # the user reads the page before the next click: TPC-W's think time, exponential with its mean, cut at 10x
        think = min(rng.expovariate(1.0 / think_mean), 10.0 * think_mean) if think_mean > 0 else 0.0
        await asyncio.sleep(min(think, max(0.0, end - time.monotonic())))
        if time.monotonic() >= end:
            break
        t0, name = time.perf_counter(), next(order)
        try:
            await page.get_by_test_id("stSidebarNav").get_by_text(name, exact=True).click()
            await _page_ready(page, name, slow)
            drawn = time.perf_counter()
            times.append((name, drawn - t0))
            got = [t for t in sent if t0 < t <= drawn]
            if got:  # the server's part of this view: from the click to its last message before the drawing
                times.append(("server", got[-1] - t0))
            if await page.locator("[data-testid=stException]").count():
                errors.append(f"{name}: exception shown")
        except Exception as e:  # noqa: BLE001 - a timeout or a broken page is an error of the run
            errors.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                          f" [{await _describe(page)}]")


def run_phase(url: str, users: int, seconds: float, think_mean: float = THINK_MEAN_S, server_pid: int | None = None) -> dict:
    """`users` browsing for `seconds`: their views, errors, slow views, and (given the server's pid) the CPU used
    during the timed browsing, summarized."""
    from playwright.async_api import async_playwright

    times, errors, slow, cpu = [], [], [], []

    async def phase() -> None:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:  # every user opens the app at the same instant; the timed browsing starts once all have a first page
                opened = await asyncio.gather(*[_open(browser, url, k, times, errors, slow) for k in range(users)])
                cpu.append(_cpu_s(server_pid) if server_pid else None)
                await asyncio.gather(*[_browse(*u, seconds, think_mean, random.Random(1000 + k), times, errors, slow)
                                       for k, u in enumerate(opened)])
                cpu.append(_cpu_s(server_pid) if server_pid else None)  # before any browser context closes
            finally:
                await browser.close()

    asyncio.run(phase())
    return summarize(times, errors, slow, {k: cpu[1][k] - cpu[0][k] for k in cpu[1]} if server_pid else None)


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, 100 * q)) if xs else float("nan")  # linear between the two nearest ranks


def summarize(times: list, errors: list, slow: list, cpu: dict | None = None) -> dict:
    nav = [t for name, t in times if name not in ("open", "server")]
    server = [t for name, t in times if name == "server"]
    return {"cpu": cpu, "n": len(nav), "p50": _pct(nav, 0.5), "p95": _pct(nav, 0.95), "max": max(nav) if nav else float("nan"),
            "server_n": len(server), "server_p50": _pct(server, 0.5), "server_p95": _pct(server, 0.95),
            "open_p50": _pct([t for n, t in times if n == "open"], 0.5),
            "open_max": max([t for n, t in times if n == "open"], default=float("nan")), "errors": errors,
            "slow": [v for v in slow if not v.startswith("first load:")],
            "per_page": {p: _pct([t for n, t in times if n == p], 0.95) for p in PAGES},
            "max_page": {p: max([t for n, t in times if n == p], default=float("nan")) for p in PAGES}}


@contextlib.contextmanager
def browsed_server(prefix: str):
    """A new cache directory with the run the users browse (QUERY) computed in it (untimed), and the app server
    on it: (cache, url, server process)."""
    cache = Path(tempfile.mkdtemp(prefix=prefix))
    settings.set_cache_dir(cache)
    sel, _ = from_query_params(dict(kv.split("=") for kv in QUERY.split("&")))
    log(f"computing the browsed run ({sel.max_tokens} tokens, not timed)")
    analyze(sel.spec(sel.models[0]), cache_dir=cache)
    with app_server(cache, cache / "streamlit.log") as (url, proc):
        yield cache, url, proc


def warm_up(url: str, server_pid: int) -> None:
    """One user browses every page for 10 s (the app's first visit starts its UMAP process, which compiles umap's
    kernels), then the server's processes must be idle (fast page views never came in one run), untimed."""
    s = run_phase(url, 1, 10.0, think_mean=0.0)
    log(f"warm-up, one user: {s['n']} views, p50 {fr(s['p50'], 2)} s, max {fr(s['max'], 2)} s")
    wait_idle(server_pid)


def start_job(cache: Path, tokens: int, label: str) -> str:
    """A long `analyze` job through the worker (seed 7: not the browsed run); returns once its forward pass runs."""
    jid = jobs.submit("analyze", {"spec": RunSpec(max_tokens=tokens, seed=7).to_dict()}, label=label, cache_dir=cache)
    worker.ensure_worker(cache)
    t0 = time.time()
    while time.time() - t0 < 300:
        j = jobs.status(jid, cache)
        if not j.active or (j.progress.stage == "forward" and j.progress.done > 0):
            break
        time.sleep(0.5)
    return jid


def job_figures(jid: str, cache: Path, cancel: bool = False) -> dict:
    """The job's status and progress now; with `cancel`, then stop it."""
    j = jobs.status(jid, cache)
    if cancel and j.active:
        jobs.cancel(jid, cache)
        jobs.wait(jid, cache, timeout=120)
    return {"job_status": j.status, "job_tokens_per_s": j.progress.rate, "job_done": j.progress.done}


def _cpu_s(server_pid: int) -> dict:
    """CPU seconds used so far: the server's process tree, every chromium process, the load test itself
    (this process and Playwright's driver), and the whole machine (busy; niced, which is the job's worker
    and the UMAP process; stolen by the host)."""
    procs = [(p.pid, " ".join(p.info["cmdline"] or []), p.info["cpu_times"])
             for p in psutil.process_iter(["cmdline", "cpu_times"])]
    browsers = sum(t.user + t.system for _, cmd, t in procs if t and "chromium" in cmd)
    harness = sum(t.user + t.system for pid, cmd, t in procs  # Playwright's driver and this process
                  if t and "chromium" not in cmd and ("playwright" in cmd or pid == os.getpid()))
    ct = psutil.cpu_times()._asdict()  # the machine's CPU seconds, all cores
    return {"server": proc_cpu_s(server_pid, tree=True), "browsers": browsers, "harness": harness,
            "busy": sum(ct[k] for k in ("user", "nice", "system", "irq", "softirq")), "niced": ct["nice"],
            "stolen": ct.get("steal", 0.0), "t": time.monotonic()}


def wait_idle(root: int, window_s: float = 5.0, limit_s: float = 400.0) -> None:
    """Until the server's processes use under 10% of a core for `window_s`: a fresh server's UMAP process compiles
    umap's kernels for minutes, taking CPU from the browsers (a phase measured meanwhile: p50 4.4 s, not 0.3 s)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        before = proc_cpu_s(root, tree=True)
        time.sleep(window_s)
        if proc_cpu_s(root, tree=True) - before < 0.1 * window_s:
            log(f"  server idle after {time.monotonic() - t0:.0f} s more")
            return
    log(f"  server still busy after {limit_s:.0f} s: measuring anyway")


def run(users: int, seconds: float, think_mean: float = THINK_MEAN_S, stress_seconds: float = STRESS_S) -> dict:
    """Warm-up, then phase 1 (browsing, no job), phase 2 (the same while a long job runs) and phase 3
    (the job still running, no think time: the stress variant; skipped when stress_seconds is 0)."""
    users, seconds = max(1, min(users, 16)), max(5.0, min(seconds, 600.0))
    think_mean, stress_seconds = max(0.0, min(think_mean, 60.0)), max(0.0, min(stress_seconds, 600.0))
    out = {"users": users, "seconds": seconds, "think_mean": think_mean, "stress_seconds": stress_seconds,
           "load_before": loadavg()}
    jid, peaks, stop = None, {}, threading.Event()
    with browsed_server("aniso-load-") as (cache, url, proc):

        def phase(key: str, length: float, think: float) -> None:  # views, peaks (then a new start), the job's progress
            log(f"{PHASES[key]}: {users} users, {length:.0f} s")
            got = {**run_phase(url, users, length, think, proc.pid), "load": loadavg(), **peaks}
            peaks.clear()  # phase 2's worker peak includes its start on the job
            for v in got["slow"]:  # every slow view (the markdown shows six per phase)
                log(f"slow ({key}): {v}")
            out[key] = got if jid is None else {**got, **job_figures(jid, cache)}

        try:
            warm_up(url, proc.pid)
            threading.Thread(target=_probe, args=(proc.pid, cache, peaks, stop), daemon=True).start()
            phase("idle", seconds, think_mean)
            jid = start_job(cache, JOB_TOKENS, f"load-test job, {JOB_TOKENS:,} tokens")
            phase("job", seconds, think_mean)
            if stress_seconds > 0 and jobs.status(jid, cache).active:
                phase("stress", stress_seconds, 0.0)
            job_figures(jid, cache, cancel=True)
        finally:
            stop.set()
    out["measured"] = measured(out["load_before"])
    return out


def render(r: dict, command: str) -> str:
    phases = [k for k in PHASES if k in r]
    cores, think, job = psutil.cpu_count(), r.get("think_mean", 0.0), r["job"]
    rows = []
    for k in phases:  # "n/a": a page not visited in the phase, or no CPU reading
        s, c = r[k], r[k].get("cpu")
        cpu = c and s["n"] and c["t"] > 0
        rows.append([PHASES[k], s["n"], " / ".join(fr(s[x], 2) for x in ("p50", "p95", "max")), len(s["errors"]),
                     f"{fs(s['open_p50'])} / {fs(s['open_max'])}", " / ".join(fs(v) for v in s["per_page"].values()),
                     " / ".join(fs(v) for v in s["max_page"].values()), fb(s.get("peak_server")),
                     fb(s.get("peak_worker")) if k != "idle" else "(no job)",
                     " / ".join(fr(c[x] / s["n"], 2) for x in ("server", "browsers", "harness")) if cpu else "n/a",
                     " / ".join(fr(c[x] / c["t"], 2) for x in ("busy", "niced", "stolen")) if cpu else "n/a",
                     f"{s['load'][0]:.1f}"])
    pages = " / ".join(PAGES)
    lines = [f"{r['users']} users, {r['seconds']:.0f} s per phase, on a computed run ({QUERY}); think time "
             + (f"mean {think:g} s, cut at {10 * think:g} s" if think > 0 else "none (each user clicks the moment a page "
                "is drawn)") + f"; the job: {JOB_TOKENS:,} tokens" + (f"; phase 3: {r['stress_seconds']:.0f} s" if "stress" in r
                                                                      else "") + f". {r.get('measured', '')}", "",
             table(["phase", "page views", "p50 / p95 / max (s)", "errors", f"first loads ({r['users']} users opening at "
                    "once, not counted): p50 / max", f"p95 per page ({pages})", f"slowest view per page ({pages})",
                    "server peak RSS", "worker peak RSS", "CPU-s per view: server / browsers / the load test's driver",
                    f"cores busy (of {cores}) / niced (the job's worker, the UMAP process) / stolen by the host",
                    "1-min load average at the end"], rows), "",
             f"The job advanced at {job['job_tokens_per_s']:,.0f} tokens/s during phase 2 ({job['job_done']:,} tokens done "
             f"by its end, then cancelled). Goal: p95 < 2 s while a job runs: "
             + (f"**{'met' if job['p95'] < 2 else 'not met'}** ({job['p95']:.2f} s)." if job["n"] else
                "not judged (no page view in phase 2: a longer --seconds).")
             + (f" Without think time (phase 3) p95 is {r['stress']['p95']:.2f} s: "
                f"{'the goal holds' if r['stress']['p95'] < 2 else 'the goal does not hold'} "
                "when every user clicks without pause." if "stress" in r else ""), ""]
    for k in phases:
        if r[k]["slow"]:
            lines += [f"Views not ready after {SLOW_S} s ({PHASES[k]}, {len(r[k]['slow'])}): "
                      + "; ".join(r[k]["slow"][:6]), ""]
    errs = sorted({e for k in phases for e in r[k]["errors"]})
    if errs:
        lines += ["Errors: " + "; ".join(errs[:8]), ""]
    return "\n".join(lines + [f"Command: `{command}`"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--seconds", type=float, default=120, help="length of phases 1 and 2")
    p.add_argument("--think-mean", type=float, default=THINK_MEAN_S,
                   help="mean think time between two views (s; 0: none)")
    p.add_argument("--stress-seconds", type=float, default=STRESS_S,
                   help="length of phase 3 (job running, no think time; 0: skip it)")
    p.add_argument("--out", default=None, help="markdown file whose load section is replaced (default BENCHMARKS.md)")
    a = p.parse_args(argv)
    if not browser_main():
        return 2
    r = run(a.users, a.seconds, a.think_mean, a.stress_seconds)
    publish(render(r, command("python -m bench.load", argv)), "load", TITLE, Path(a.out) if a.out else ROOT / "BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
