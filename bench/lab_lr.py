"""`python -m bench lab-lr`: the learning rate of each family and optimizer, by a short stated sweep, into
core/data/lab_lr.json (read by `core.studies.train_spec.default_lr`; entries not swept this time are kept) and
BENCHMARKS.md (method there).

    python -m bench lab-lr                                           # gpt2, llama x adamw, sgd (about 15 min)
    python -m bench lab-lr --arch mamba,rwkv --optimizer adamw,sgd   # add families
    python -m bench lab-lr --quick                                   # tiny sizes, checks the code; writes nothing
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, command, cpu_model, fi, loadavg, log, publish, usable_cores
from bench.report import blocks

TITLE = "Learning rate per family (`python -m bench lab-lr`)"
GRID = {"adamw": (3e-4, 1e-3, 3e-3, 1e-2), "coupled-adam": (3e-4, 1e-3, 3e-3, 1e-2), "sgd": (0.03, 0.1, 0.3, 1.0, 3.0)}
ARCHS = ("gpt2", "llama")
OPTIMIZERS = ("adamw", "sgd")
STEPS = 300
LR_JSON = ROOT / "core" / "data" / "lab_lr.json"


def sweep_one(base, lrs) -> dict:
    """Train `base` at each of `lrs` (a temporary cache, deleted): the held-out loss of each, the pick."""
    from core.studies.training import train  # lazy: torch and transformers only once the sweep runs

    losses, seconds, entropy = {}, 0.0, None
    with tempfile.TemporaryDirectory(prefix="aniso-bench-lr-", ignore_cleanup_errors=True) as cache:
        for lr in lrs:
            t0 = time.perf_counter()
            rec = train(base.replace(lr=lr, name=None), cache_dir=cache)
            dt = time.perf_counter() - t0
            seconds += dt
            loss = rec["checkpoints"][-1]["held_out_loss"]
            losses[f"{lr:g}"] = loss if math.isfinite(loss) else None  # a diverged run: no loss
            entropy = rec["unigram_entropy"]
            log(f"  {base.arch} / {base.optimizer} lr {lr:g}: held-out loss {loss:.4f} ({dt:.0f} s)")
    finite = {k: v for k, v in losses.items() if v is not None}
    if not finite:
        raise RuntimeError(f"{base.arch} / {base.optimizer}: every rate of {list(losses)} diverged")
    best = min(finite, key=finite.get)
    return {"lr": float(best), "losses": losses, "unigram_entropy": entropy, "seconds": round(seconds, 1)}


def render(table_: dict) -> str:
    """The BENCHMARKS.md section: every entry of lab_lr.json."""
    rows = []
    for key, e in sorted(table_["entries"].items()):
        tried = sorted(e["losses"], key=float)
        cells = [("**{:.3f}**" if float(k) == e["lr"] else "{:.3f}").format(v) if v is not None else "diverged"
                 for k in tried for v in [e["losses"][k]]]
        edge = " (edge of the range)" if float(tried[0]) == e["lr"] or float(tried[-1]) == e["lr"] else ""
        rows.append([*key.split("/"), ", ".join(f"{float(k):g}" for k in tried), " / ".join(cells), f"{e['lr']:g}{edge}",
                     f"{e['unigram_entropy']:.3f}", f"{e['seconds']:.0f}", e["date_utc"][:16].replace("T", " "),
                     e["machine"]])
    first = next(iter(table_["entries"].values()))
    return blocks([
        f"Each rate trained {fi(first['steps'])} steps at {first['n_layers']} layers x d={first['d_model']}, batch "
        f"{first['batch_size']} x {first['seq_len']} tokens of {first['corpus']}. Command: `{table_['command']}`.",
        (["Family", "Optimizer", "Rates tried", "Held-out loss (nats/token)", "Picked", "Unigram entropy", "Sweep time (s)",
          "Date (UTC)", "Machine"], rows)])


def main(argv: list[str]) -> int:
    """Run by bench/__main__.py, which sets the environment (offline hub) first."""
    p = argparse.ArgumentParser(prog="python -m bench lab-lr", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default=",".join(ARCHS), help=f"comma-separated families (default {','.join(ARCHS)})")
    p.add_argument("--optimizer", default=",".join(OPTIMIZERS),
                   help=f"comma-separated optimizers (default {','.join(OPTIMIZERS)})")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--corpus", default="wiki-en")
    p.add_argument("--quick", action="store_true", help="tiny sizes (8 steps, d=16): checks the code, writes nothing")
    p.add_argument("--out", default=None, help="the JSON to update (default core/data/lab_lr.json; --quick: none)")
    p.add_argument("--md", default=None, help="the markdown to update (default BENCHMARKS.md; --quick: printed)")
    a = p.parse_args(argv)
    from core.studies import train_spec as TS  # lazy: the spec module reads the corpora registry

    archs = [x.strip() for x in a.arch.split(",") if x.strip()]
    opts = [x.strip() for x in a.optimizer.split(",") if x.strip()]
    bad = [x for x in archs if x not in TS.ARCHS] + [x for x in opts if x not in TS.OPTIMIZERS]
    if bad or a.steps < 1:
        p.error(f"unknown {bad} (families {list(TS.ARCHS)}, optimizers {list(TS.OPTIMIZERS)}) or steps < 1")
    base = TS.TrainSpec(corpus=a.corpus, steps=a.steps, device="cpu")
    if a.quick:
        base = base.replace(steps=8, d_model=16, n_heads=2, batch_size=4, seq_len=16, eval_tokens=512)
    load = loadavg()
    machine = f"{cpu_model()}, {usable_cores()} cores" + (f", load {load[0]:.1f}" if load else "")
    out = Path(a.out) if a.out else (None if a.quick else LR_JSON)
    entries = json.loads(out.read_text())["entries"] if out is not None and out.exists() else {}  # kept unless swept again
    log(f"lab-lr: {archs} x {opts}, {base.steps} steps each rate")
    for arch in archs:
        for opt in opts:
            e = sweep_one(base.replace(arch=arch, optimizer=opt), GRID[opt])
            at = {k: getattr(base, k) for k in ("steps", "n_layers", "d_model", "batch_size", "seq_len", "corpus", "seed")}
            entries[f"{arch}/{opt}"] = {**e, **at, "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                        "machine": machine}
    doc = {"kind": "lab-lr", "version": 1, "command": command("python -m bench lab-lr", argv),
           "grid": {k: list(v) for k, v in GRID.items()}, "entries": entries}
    if out is not None:
        out.write_text(json.dumps(doc, indent=1) + "\n")
        log(f"wrote {out}")
    publish(render(doc), "lab-lr", TITLE, Path(a.md) if a.md else (None if a.quick else ROOT / "BENCHMARKS.md"))
    return 0


if __name__ == "__main__":  # its entry point is `python -m bench lab-lr` (bench/__main__.py sets the environment)
    raise SystemExit("run it as: python -m bench lab-lr")
