"""The lab's budget (issue 41): the quick lab or the default grid, timed (method: BENCHMARKS.md, "Lab").

    python -m bench lab [--default] [--families gpt2,llama] [--steps N] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, command, fr, fs, log, machine_info, measured, publish
from bench.report import blocks
from core.base.errors import InputError
from core.studies import lab as LAB  # run by bench/__main__.py, which sets the environment (offline hub) first

GOAL_S = {"quick": 600, "default": 5400}
DEFAULT_STEPS = 2000


def _available(names, field: str) -> tuple[list[str], list[str]]:
    """(the names this TrainSpec can train, the others)."""
    ok, gone = [], []
    for n in names:
        try:
            LAB.LabSpec(factors={field: [n]}, seeds=(0,))
            ok.append(n)
        except InputError:  # refused: this version cannot train it
            gone.append(n)
    return ok, gone


def build_spec(a) -> tuple[LAB.LabSpec, list[str]]:
    fams = a.families.split(",") if a.families else list(LAB.QUICK_FAMILIES)
    fams, skipped = _available(fams, "arch")
    if not fams:
        raise SystemExit("error: none of the families can be trained by this version")
    base = {"n_layers": LAB.QUICK["n_layers"], "d_model": LAB.QUICK["d_model"], "device": "cpu"}
    opts, gone = _available(list(LAB.DEFAULT_OPTIMIZERS), "optimizer") if a.default else ([], [])  # quick: one optimizer
    skipped += [f"optimizer {o}" for o in gone]
    spec = LAB.LabSpec(factors={"arch": fams, **({"optimizer": opts} if len(opts) > 1 else {})},
                       seeds=(0, 1, 2) if a.default else LAB.QUICK["seeds"],
                       base={**base, "steps": a.steps or (DEFAULT_STEPS if a.default else LAB.QUICK["steps"])})
    return spec, skipped


def render(doc: dict, spec: LAB.LabSpec, skipped: list[str], wall: float, info: dict, which: str, argv) -> str:
    """The section's figures: the machine and command, the grid, each run's times and results, the total against the
    goal (or, for some families only, the total extrapolated to the whole lab)."""
    rows = [[cell["cell"], r["seed"], r["status"], fs(sec.get("train"), 1), fs(sec.get("analysis"), 1),
             fs((sec.get("train") or 0) + (sec.get("analysis") or 0), 1), fr(r.get("held_out_loss")),
             fr(r.get("unigram_entropy")), r.get("learned"), fr((r.get("scalars") or {}).get("mid_mean_cosine"))]
            for cell in doc["cells"] for r in cell["runs"] for sec in [r.get("seconds") or {}]]
    n, goal, b = len(rows), GOAL_S[which], spec.to_dict()["base"]
    full = len(LAB.QUICK_FAMILIES) * (1 if which == "quick" else 3 * len(LAB.DEFAULT_OPTIMIZERS))
    per_run, what = wall / max(n, 1), "quick lab" if which == "quick" else "default grid"
    runs = f"**{n} runs in {wall:.0f} s** ({per_run:.0f} s a run, lab bookkeeping included)"
    grid = ", ".join(f"{k}={','.join(v)}" for k, v in spec.factors.items())
    return blocks([
        f"{measured(info['loadavg_start'])} Torch threads: {info.get('torch_threads')}. Command: "
        f"`{command('python -m bench', argv)}`.",
        f"Grid: {grid} x seeds {list(spec.seeds)}; {b['steps']} steps, {b['n_layers']} layers, d {b['d_model']}, batch "
        f"{b['batch_size']} x {b['seq_len']} tokens of {b['corpus']}; each checkpoint analysed on {spec.analysis_tokens:,} "
        f"tokens (sample {spec.analysis_sample:,}) with its attention statistics.",
        *([f"Left out (this version cannot train them yet): {', '.join(skipped)}."] if skipped else []),
        (["cell", "seed", "status", "train s", "analysis s", "run s", "held-out loss", "unigram entropy", "learned",
          "mid mean cosine"], rows),
        f"{runs}: " + (f"the {what} measured whole" if n == full else f"at this rate the {what} ({full} runs) would take about "
                       f"{per_run * full / 60:.1f} min (extrapolated from the families run here)")
        + f", {'within' if per_run * full <= goal else 'over'} its goal of {goal / 60:.0f} min on 2 cores."])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench lab", description=__doc__.split("\n\n")[0])
    p.add_argument("--default", action="store_true", help="the default grid instead of the quick lab")
    p.add_argument("--families", default=None, help=f"comma-separated (default {','.join(LAB.QUICK_FAMILIES)})")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--no-write", action="store_true", help="print the markdown instead of updating BENCHMARKS.md")
    p.add_argument("--json", default=None, help="also write lab.json here")
    a = p.parse_args(argv)
    spec, skipped = build_spec(a)
    which = "default" if a.default else "quick"
    info = machine_info()
    last = {"t": 0.0}

    def progress(q):
        if time.monotonic() - last["t"] > 10 or q.stage in ("start", "done"):
            last["t"] = time.monotonic()
            log(q.message)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-lab-", ignore_cleanup_errors=True) as cache:
        log(f"lab {spec.lab_id}: {len(spec.cells()) * len(spec.seeds)} runs in {cache}; skipped: {skipped or 'none'}")
        doc = LAB.run_lab(spec, cache_dir=Path(cache), progress=progress)
    wall = time.perf_counter() - t0
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
    publish(render(doc, spec, skipped, wall, info, which, ["lab", *argv]), f"lab-{which}",
            f"Lab (`python -m bench lab{' --default' if a.default else ''}`)", None if a.no_write else ROOT / "BENCHMARKS.md")
    return 0


if __name__ == "__main__":  # its entry point is `python -m bench lab` (bench/__main__.py sets the environment)
    raise SystemExit("run it as: python -m bench lab")
