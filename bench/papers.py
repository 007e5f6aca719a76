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

from bench.common import ROOT, analyze_argv, command, core_cli, cpu_model, log, publish, usable_cores
from bench.report import blocks
from core.base.spec import RunSpec
from core.studies.papers.run import DEFAULT_MAX_TOKENS, DEFAULT_SAMPLE, PAPERS

TITLE = "Papers: Godey et al.'s comparison in one process (`python -m bench --godey`)"
GOAL_S = 600.0
QUICK_MODELS = ("untrained-minilm-l6", "untrained-vit-s14")


def _uptime() -> str:
    """The load of the machine as `uptime` prints it (its clock time, uptime and load averages)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _one(out: dict, tokens: int, sample: int, models, cache: Path, root: Path, timeout: float) -> None:
    out["uptime_before_one"] = _uptime()
    log(f"godey: one `python -m core reproduce godey` ({out['uptime_before_one']})")
    argv = ["reproduce", "godey", "--max-tokens", str(tokens), "--sample", str(sample), "--cache-dir", str(cache),
            "--formats", "json", "--out", str(root / "repro")] + (["--models", ",".join(out["models"])] if models else [])
    r0 = psutil.Process().cpu_times()
    s, rc, msg = core_cli(argv, cache, timeout)
    r1 = psutil.Process().cpu_times()
    # The process's own CPU seconds (every thread), steadier than its wall time on a shared machine: only exact when
    # the separate commands do not run at the same time (--one-only); with both at once the account counts theirs too.
    out.update(one_s=s, one_rc=rc, one_last=msg, uptime_after_one=_uptime(), one_cpu_s=None if out["parallel"] else
               r1.children_user + r1.children_system - r0.children_user - r0.children_system)
    log(f"  one process: {s:.1f} s (rc {rc}): {msg}")


def _separate(out: dict, parts, tokens: int, sample: int, cache: Path, root: Path, timeout: float) -> None:
    out["uptime_before_separate"] = _uptime()
    log(f"godey: {len(parts)} separate `python -m core analyze` commands ({out['uptime_before_separate']})")
    t0 = time.perf_counter()
    for p in parts:
        spec = RunSpec(model=p.model, corpus=p.corpus, max_tokens=tokens, sample=sample)
        s, rc, msg = core_cli(analyze_argv(spec, cache, root / f"{p.model}.json"), cache, timeout)
        log(f"  separate {p.model}: {s:.1f} s (rc {rc})")
        out["separate"][p.model] = {"corpus": p.corpus, "wall_s": s, "rc": rc, "last": msg}
    out.update(separate_s=time.perf_counter() - t0, uptime_after_separate=_uptime())


def measure(tokens: int, sample: int, models: tuple[str, ...] | None, root: Path, one_only: bool = False,
            timeout: float = 7200) -> dict:
    """Both sides at the same time, each from its own empty cache (on a shared machine both then see the same load),
    or with `one_only` the one process alone (the goal's measurement: about 10 minutes on a quiet machine)."""
    parts = [p for p in PAPERS["godey"].parts if models is None or p.model in models]
    (root / "separate").mkdir()
    (root / "one").mkdir()
    out = {"tokens": tokens, "sample": sample, "models": [p.model for p in parts], "separate": {}, "parallel": not one_only}
    th = None if one_only else threading.Thread(target=_separate, args=(out, parts, tokens, sample, root / "separate", root,
                                                                         timeout))
    if th:
        th.start()
    _one(out, tokens, sample, models, root / "one", root, timeout)
    if th:
        th.join()
    out["met"] = out["one_rc"] == 0 and out["one_s"] < GOAL_S
    if out["one_rc"] == 0:
        rec = json.loads((root / "repro" / "godey.json").read_text())
        same = [[lay["mean_cosine"] for lay in json.loads(js.read_text())["layers"]] == r["curves"]["mean_cosine"]
                for r in rec["runs"] if (js := root / f"{r['model']}.json").exists()]
        out.update(same_numbers=bool(same) and all(same), inside_s={x["model"]: x["wall_s"] for x in rec["timing"]["runs"]},
                   claims=[{k: c[k] for k in ("claim", "verdict")} for c in rec["claims"]])
    return out


def render(r: dict, machine: str, date: str, command: str) -> str:
    """The section's figures: the load before and after each side, both sides' times, and each run's."""
    alone, sep, corpus = not r["parallel"], r["separate"], {p.model: p.corpus for p in PAPERS["godey"].parts}
    one = [["one `python -m core reproduce godey`", f"{r['one_s']:.0f} s ({r['one_s'] / 60:.1f} min)",
            f"{r['one_cpu_s']:.0f} CPU-s" if r.get("one_cpu_s") is not None else "",
            f"< {GOAL_S / 60:.0f} min: {'met' if r['met'] else 'NOT met'}"]]
    return blocks([
        f"Measured {date} on {machine}, with `{command}`. {len(r['models'])} runs, {r['tokens']:,} positions and a sample of "
        f"{r['sample']:,} each. " + ("Both sides ran AT THE SAME TIME, so that each saw the same load of the shared machine "
                                     "(each also slowed the other). " if r["parallel"] else "")
        + "The load of the machine (`uptime`) before and after each side:",
        "\n".join(([] if alone else [f"- 14 separate commands: before `{r['uptime_before_separate']}`, after "
                                      f"`{r['uptime_after_separate']}`"])
                  + [f"- one `reproduce godey`: before `{r['uptime_before_one']}`, after `{r['uptime_after_one']}`"]),
        (["", "wall time", "CPU time", "goal"], one if alone else [
            [f"{len(sep)} separate `python -m core analyze`", f"{r['separate_s']:.0f} s ({r['separate_s'] / 60:.1f} min)",
             "", ""], *one, ["ratio (separate / one)", f"{r['separate_s'] / r['one_s']:.2f}x", "", ""]]),
        "The 14 separate commands were not run (`--one-only`)." if alone else
        f"Same numbers on both sides (every run's per-layer mean cosine): {'yes' if r.get('same_numbers') else 'NO'}.",
        (["run", "separate command (s)", "inside the reproduction (s)"],
         [[f"{m} on {sep[m]['corpus'] if m in sep else corpus.get(m, '')}", f"{sep[m]['wall_s']:.1f}" if m in sep else
           "not run", f"{r.get('inside_s', {}).get(m, float('nan')):.1f}"] for m in r["models"]])])


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
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    publish(render(r, f"{cpu_model()}, {usable_cores()} usable cores", date, command("python -m bench --godey", argv)),
            "papers", TITLE, Path(a.out) if a.out else (None if a.quick else ROOT / "BENCHMARKS.md"))
    return 0 if r["one_rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
