"""`python -m bench --godey`: Godey et al.'s comparison as ONE `python -m core reproduce godey` against the same
runs as separate `python -m core analyze` commands (tens of minutes on 2 cores; method: BENCHMARKS.md, "Papers")."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from bench.common import ROOT, analyze_argv, command, core_cli, loadavg, log, measured, publish
from bench.report import blocks
from core.base.spec import RunSpec
from core.studies.papers.run import DEFAULT_MAX_TOKENS, DEFAULT_SAMPLE, PAPERS

TITLE = "Papers: Godey et al.'s comparison in one process (`python -m bench --godey`)"
GOAL_S = 600.0
TIMEOUT_S = 7200  # one command's limit
QUICK_MODELS = ("untrained-minilm-l6", "untrained-vit-s14")


def _side(out: dict, side: str, argvs: dict[str, list[str]], cache: Path) -> None:
    """One side's `python -m core` commands (label -> argv), one after the other on the cache `cache`: the load averages
    before and after, and each command's wall time (interpreter start included), exit code, last line."""
    out[side], out[f"load_before_{side}"] = {}, loadavg()
    log(f"godey: {len(argvs)} command(s) on the {side} side (load averages {out[f'load_before_{side}']})")
    for label, argv in argvs.items():
        s, rc, msg = core_cli(argv, cache, TIMEOUT_S)
        log(f"  {side} {label}: {s:.1f} s (rc {rc}): {msg}")
        out[side][label] = {"wall_s": s, "rc": rc, "last": msg}
    out[f"load_after_{side}"] = loadavg()


def measure(tokens: int, sample: int, models: tuple[str, ...] | None, root: Path, one_only: bool = False) -> dict:
    """Both sides at the same time, each from its own empty cache (on a shared machine both then see the same load),
    or with `one_only` the one process alone (the goal's measurement: about 10 minutes on a quiet machine)."""
    parts = [p for p in PAPERS["godey"].parts if models is None or p.model in models]
    out = {"tokens": tokens, "sample": sample, "models": [p.model for p in parts], "parallel": not one_only,
           "load_start": loadavg()}
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
    out["met"], out["measured"] = out["one_rc"] == 0 and out["one_s"] < GOAL_S, measured(out["load_start"])
    if out["one_rc"] == 0:
        rec = json.loads((root / "repro" / "godey.json").read_text())
        same = [[lay["mean_cosine"] for lay in json.loads(js.read_text())["layers"]] == r["curves"]["mean_cosine"]
                for r in rec["runs"] if (js := root / f"{r['model']}.json").exists()]
        out.update(same_numbers=bool(same) and all(same), inside_s={x["model"]: x["wall_s"] for x in rec["timing"]["runs"]},
                   claims=[{k: c[k] for k in ("claim", "verdict")} for c in rec["claims"]])
    return out


def render(r: dict, command: str) -> str:
    """The section's figures: the load before and after each side, both sides' times, and each run's."""
    alone, sep, corpus = not r["parallel"], r.get("separate", {}), {p.model: p.corpus for p in PAPERS["godey"].parts}
    one = [["one `python -m core reproduce godey`", f"{r['one_s']:.0f} s ({r['one_s'] / 60:.1f} min)",
            f"{r['one_cpu_s']:.0f} CPU-s" if r.get("one_cpu_s") is not None else "",
            f"< {GOAL_S / 60:.0f} min: {'met' if r['met'] else 'NOT met'}"]]
    la = {side: " / ".join(f"{x:.2f}" for x in r[f"load_before_{side}"]) + " before, "
          + " / ".join(f"{x:.2f}" for x in r[f"load_after_{side}"]) + " after" for side in ("one", "separate") if side in r}
    return blocks([
        f"`{command}`. {r['measured']} {len(r['models'])} runs, {r['tokens']:,} positions and a sample of "
        f"{r['sample']:,} each. " + ("Both sides ran AT THE SAME TIME, so that each saw the same load of the shared machine "
                                     "(each also slowed the other). " if r["parallel"] else "")
        + "The load averages (1, 5 and 15 minutes) before and after each side:",
        "\n".join(([] if alone else [f"- {len(sep)} separate commands: {la['separate']}"])
                  + [f"- one `reproduce godey`: {la['one']}"]),
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
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    publish(render(r, command("python -m bench --godey", argv)),
            "papers", TITLE, Path(a.out) if a.out else (None if a.quick else ROOT / "BENCHMARKS.md"))
    return 0 if r["one_rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
