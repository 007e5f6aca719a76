"""`python -m bench --godey`: Godey et al.'s comparison as ONE `python -m core reproduce godey` against the same
runs as separate `python -m core analyze` commands (tens of minutes on 2 cores; method: BENCHMARKS.md, "Papers")."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from bench.common import ROOT, analyze_argv, command, core_cli, cpu_model, log, publish, usable_cores
from bench.report import blocks
from core.base.spec import RunSpec
from core.studies.papers.run import DEFAULT_MAX_TOKENS, DEFAULT_SAMPLE, PAPERS

TITLE = "Papers: Godey et al.'s comparison in one process (`python -m bench --godey`)"
GOAL_S = 600.0
TIMEOUT_S = 7200  # one command's limit
QUICK_MODELS = ("untrained-minilm-l6", "untrained-vit-s14")


def _uptime() -> str:
    """The load of the machine as `uptime` prints it (its clock time, uptime and load averages)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _side(out: dict, side: str, argvs: dict[str, list[str]], cache: Path) -> None:
    """One side's `python -m core` commands (label -> argv), one after the other on the cache `cache`: the load of the
    machine (`uptime`) before and after, and each command's wall time (interpreter start included), exit code, last line."""
    out[side], out[f"uptime_before_{side}"] = {}, _uptime()
    log(f"godey: {len(argvs)} command(s) on the {side} side ({out[f'uptime_before_{side}']})")
    for label, argv in argvs.items():
        s, rc, msg = core_cli(argv, cache, TIMEOUT_S)
        log(f"  {side} {label}: {s:.1f} s (rc {rc}): {msg}")
        out[side][label] = {"wall_s": s, "rc": rc, "last": msg}
    out[f"uptime_after_{side}"] = _uptime()


def measure(tokens: int, sample: int, models: tuple[str, ...] | None, root: Path, one_only: bool = False) -> dict:
    """Both sides at the same time, each from its own empty cache (on a shared machine both then see the same load),
    or with `one_only` the one process alone (the goal's measurement: about 10 minutes on a quiet machine)."""
    parts = [p for p in PAPERS["godey"].parts if models is None or p.model in models]
    out = {"tokens": tokens, "sample": sample, "models": [p.model for p in parts], "parallel": not one_only}
    one = ["reproduce", "godey", "--max-tokens", str(tokens), "--sample", str(sample), "--cache-dir", str(root / "one"),
           "--formats", "json", "--out", str(root / "repro")] + (["--models", ",".join(out["models"])] if models else [])
    separate = {p.model: analyze_argv(RunSpec(model=p.model, corpus=p.corpus, max_tokens=tokens, sample=sample),
                                      root / "separate", root / f"{p.model}.json") for p in parts}
    c0 = psutil.Process().cpu_times()
    with ThreadPoolExecutor(1) as pool:
        sep = None if one_only else pool.submit(_side, out, "separate", separate, root / "separate")
        _side(out, "one", {"reproduce godey": one}, root / "one")
        c1 = psutil.Process().cpu_times()
    if sep:
        sep.result()  # raises what the separate side raised
    # The process's own CPU seconds (every thread), steadier than its wall time on a shared machine: only exact when
    # the separate commands do not run at the same time (--one-only); with both at once the account counts theirs too.
    cpu = c1.children_user + c1.children_system - c0.children_user - c0.children_system
    out.update(one_s=out["one"]["reproduce godey"]["wall_s"], one_rc=out["one"]["reproduce godey"]["rc"],
               one_cpu_s=None if out["parallel"] else cpu, separate_s=sum(x["wall_s"] for x in out.get("separate", {}).values()))
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
    alone, sep, corpus = not r["parallel"], r.get("separate", {}), {p.model: p.corpus for p in PAPERS["godey"].parts}
    one = [["one `python -m core reproduce godey`", f"{r['one_s']:.0f} s ({r['one_s'] / 60:.1f} min)",
            f"{r['one_cpu_s']:.0f} CPU-s" if r.get("one_cpu_s") is not None else "",
            f"< {GOAL_S / 60:.0f} min: {'met' if r['met'] else 'NOT met'}"]]
    return blocks([
        f"Measured {date} on {machine}, with `{command}`. {len(r['models'])} runs, {r['tokens']:,} positions and a sample of "
        f"{r['sample']:,} each. " + ("Both sides ran AT THE SAME TIME, so that each saw the same load of the shared machine "
                                     "(each also slowed the other). " if r["parallel"] else "")
        + "The load of the machine (`uptime`) before and after each side:",
        "\n".join(([] if alone else [f"- {len(sep)} separate commands: before `{r['uptime_before_separate']}`, after "
                                      f"`{r['uptime_after_separate']}`"])
                  + [f"- one `reproduce godey`: before `{r['uptime_before_one']}`, after `{r['uptime_after_one']}`"]),
        (["", "wall time", "CPU time", "goal"], one if alone else [
            [f"{len(sep)} separate `python -m core analyze`", f"{r['separate_s']:.0f} s ({r['separate_s'] / 60:.1f} min)",
             "", ""], *one, ["ratio (separate / one)", f"{r['separate_s'] / r['one_s']:.2f}x", "", ""]]),
        f"The {len(r['models'])} separate commands were not run (`--one-only`)." if alone else
        f"Same numbers on both sides (every run's per-layer mean cosine): {'yes' if r.get('same_numbers') else 'NO'}.",
        (["run", "separate command (s)", "inside the reproduction (s)"],
         [[f"{m} on {corpus.get(m, '')}", f"{sep[m]['wall_s']:.1f}" if m in sep else "not run",
           f"{r.get('inside_s', {}).get(m, float('nan')):.1f}"] for m in r["models"]])])


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
    with tempfile.TemporaryDirectory(prefix="aniso-bench-papers-", ignore_cleanup_errors=True) as root:
        r = measure(tokens, sample, models, Path(root), one_only=a.one_only)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    publish(render(r, f"{cpu_model()}, {usable_cores()} usable cores", date, command("python -m bench --godey", argv)),
            "papers", TITLE, Path(a.out) if a.out else (None if a.quick else ROOT / "BENCHMARKS.md"))
    return 0 if r["one_rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
