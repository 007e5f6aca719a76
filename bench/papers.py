"""`python -m bench --godey`: Godey et al.'s comparison as ONE `python -m core reproduce godey` against the same
runs as separate `python -m core analyze` commands (tens of minutes on 2 cores; method: BENCHMARKS.md, "Papers")."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from bench.common import ROOT, analyze_argv, command, core_cli, cpu_model, loadavg, log, publish, table, usable_cores
from core.base.spec import RunSpec
from core.studies.papers.run import DEFAULT_MAX_TOKENS, DEFAULT_SAMPLE, PAPERS

TITLE = "Papers: Godey et al.'s comparison in one process (`python -m bench --godey`)"
GOAL_S = 600.0
QUICK_MODELS = ("untrained-minilm-l6", "untrained-vit-s14")


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _one(out: dict, tokens: int, sample: int, models, cache: Path, root: Path, timeout: float) -> None:
    out["uptime_before_one"], out["load_before_one"] = _uptime(), loadavg()
    log(f"godey: one `python -m core reproduce godey` ({out['uptime_before_one']})")
    argv = ["reproduce", "godey", "--max-tokens", str(tokens), "--sample", str(sample), "--cache-dir", str(cache),
            "--formats", "json", "--out", str(root / "repro")]
    if models is not None:
        argv += ["--models", ",".join(out["models"])]
    r0 = psutil.Process().cpu_times()
    s, rc, msg = core_cli(argv, cache, timeout)
    r1 = psutil.Process().cpu_times()
    # The process's own CPU seconds (every thread), steadier than its wall time on a shared machine: only exact when
    # the separate commands do not run at the same time (--one-only); with both at once the account counts theirs too.
    out.update(one_s=s, one_rc=rc, one_last=msg,
               one_cpu_s=None if out.get("parallel") else (r1.children_user + r1.children_system
                                                           - r0.children_user - r0.children_system))
    out["uptime_after_one"], out["load_after_one"] = _uptime(), loadavg()
    log(f"  one process: {s:.1f} s (rc {rc}): {msg}")


def _separate(out: dict, parts, tokens: int, sample: int, cache: Path, root: Path, timeout: float) -> None:
    out["uptime_before_separate"], out["load_before_separate"] = _uptime(), loadavg()
    log(f"godey: {len(parts)} separate `python -m core analyze` commands ({out['uptime_before_separate']})")
    t0 = time.perf_counter()
    for p in parts:
        js = root / f"{p.model}.json"
        spec = RunSpec(model=p.model, corpus=p.corpus, max_tokens=tokens, sample=sample)
        s, rc, msg = core_cli(analyze_argv(spec, cache, js), cache, timeout)
        log(f"  separate {p.model}: {s:.1f} s (rc {rc})")
        out["separate"].append({"model": p.model, "corpus": p.corpus, "wall_s": s, "rc": rc, "last": msg})
    out["separate_s"] = time.perf_counter() - t0
    out["uptime_after_separate"], out["load_after_separate"] = _uptime(), loadavg()


def measure(tokens: int, sample: int, models: tuple[str, ...] | None, root: Path, one_only: bool = False,
            timeout: float = 7200) -> dict:
    """Both sides at the same time, each from its own empty cache (on a shared machine both then see the same load),
    or with `one_only` the one process alone (the goal's measurement: about 10 minutes on a quiet machine)."""
    parts = [p for p in PAPERS["godey"].parts if models is None or p.model in models]
    sep_cache, one_cache = root / "separate", root / "one"
    sep_cache.mkdir()
    one_cache.mkdir()
    out = {"tokens": tokens, "sample": sample, "models": [p.model for p in parts], "separate": [], "goal_s": GOAL_S,
           "parallel": not one_only, "one_only": one_only, "separate_s": None}
    th = None if one_only else threading.Thread(target=_separate, args=(out, parts, tokens, sample, sep_cache, root,
                                                                         timeout))
    if th:
        th.start()
    _one(out, tokens, sample, models, one_cache, root, timeout)
    if th:
        th.join()
    out["ratio"] = out["separate_s"] / out["one_s"] if out["one_s"] and out["separate_s"] else None
    out["met"] = out["one_rc"] == 0 and out["one_s"] < GOAL_S
    same = []
    if out["one_rc"] == 0:
        rec = json.loads((root / "repro" / "godey.json").read_text())
        for r in rec["runs"]:
            js = root / f"{r['model']}.json"
            if js.exists():
                sep = [lay["mean_cosine"] for lay in json.loads(js.read_text())["layers"]]
                same.append(sep == r["curves"]["mean_cosine"])
        out["per_run_s"] = rec["timing"]["runs"]
        out["claims"] = [{k: c[k] for k in ("claim", "verdict")} for c in rec["claims"]]
    out["same_numbers"] = bool(same) and all(same)
    out["cpu_s"] = out.get("one_cpu_s")
    return out


def render(r: dict, machine: str, date: str, command: str) -> str:
    lines = [f"Measured {date} on {machine}, with `{command}`. {len(r['models'])} runs, {r['tokens']:,} positions and a "
             f"sample of {r['sample']:,} each. "
             + ("Both sides ran AT THE SAME TIME, so that each saw the same load of the shared machine (each "
                "also slowed the other). " if r.get("parallel") else "")
             + "The load of the machine (`uptime`) before and after each side:", "",
             *([] if r.get("one_only") else
               [f"- 14 separate commands: before `{r['uptime_before_separate']}`, after `{r['uptime_after_separate']}`"]),
             f"- one `reproduce godey`: before `{r['uptime_before_one']}`, after `{r['uptime_after_one']}`", "",
             table(["", "wall time", "CPU time", "goal"],
                   ([] if r.get("one_only") else [[f"{len(r['separate'])} separate `python -m core analyze`",
                                                   f"{r['separate_s']:.0f} s ({r['separate_s'] / 60:.1f} min)", "", ""]])
                   + [["one `python -m core reproduce godey`", f"{r['one_s']:.0f} s ({r['one_s'] / 60:.1f} min)",
                       f"{r['one_cpu_s']:.0f} CPU-s" if r.get("one_cpu_s") is not None else "",
                       f"< {GOAL_S / 60:.0f} min: {'met' if r['met'] else 'NOT met'}"]]
                   + ([] if r.get("one_only") else [["ratio (separate / one)", f"{r['ratio']:.2f}x", "", ""]])), "",
             ("The 14 separate commands were not run (`--one-only`)." if r.get("one_only") else
              f"Same numbers on both sides (every run's per-layer mean cosine): {'yes' if r['same_numbers'] else 'NO'}."),
             ""]
    inside = {x["model"]: x["wall_s"] for x in r.get("per_run_s", [])}
    sep = {x["model"]: x for x in r["separate"]}
    corpus = {p.model: p.corpus for p in PAPERS["godey"].parts}
    lines.append(table(["run", "separate command (s)", "inside the reproduction (s)"],
                       [[f"{m} on {sep[m]['corpus'] if m in sep else corpus.get(m, '')}",
                         f"{sep[m]['wall_s']:.1f}" if m in sep else "not run", f"{inside.get(m, float('nan')):.1f}"]
                        for m in r["models"]]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench --godey", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two small models at 64 positions: checks the mode runs")
    p.add_argument("--tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE)
    p.add_argument("--out", default=None, help="markdown file to write into (default BENCHMARKS.md; --quick: printed)")
    p.add_argument("--json", default=None, help="also write the raw numbers here")
    p.add_argument("--one-only", action="store_true", help="the one `core reproduce godey` alone (the goal's measurement)")
    a = p.parse_args(argv)
    tokens, sample, models = (64, 32, QUICK_MODELS) if a.quick else (a.tokens, a.sample, None)
    root = Path(tempfile.mkdtemp(prefix="aniso-bench-papers-"))
    try:
        r = measure(tokens, sample, models, root, one_only=a.one_only)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{cpu_model()}, {usable_cores()} usable cores"
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    out = Path(a.out) if a.out else (None if a.quick else ROOT / "BENCHMARKS.md")
    publish(render(r, machine, date, command("python -m bench --godey", argv)), "papers", TITLE, out)
    return 0 if r["one_rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
