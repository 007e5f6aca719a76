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
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, command, fi, log, machine_info, publish, table
from core.base import settings

settings.export_env(HF_HUB_OFFLINE="1")
settings.env_default(TOKENIZERS_PARALLELISM="false")

TITLE = "Learning rate per family (`python -m bench lab-lr`)"
GRID = {"adamw": (3e-4, 1e-3, 3e-3, 1e-2), "coupled-adam": (3e-4, 1e-3, 3e-3, 1e-2), "sgd": (0.03, 0.1, 0.3, 1.0, 3.0)}
ARCHS = ("gpt2", "llama")
OPTIMIZERS = ("adamw", "sgd")
STEPS = 300
LR_JSON = ROOT / "core" / "data" / "lab_lr.json"


def sweep_one(base, lrs, say=log) -> dict:
    """Train `base` at each of `lrs` (a temporary cache, deleted): the held-out loss of each, the pick."""
    from core.studies.training import train  # lazy: torch and transformers only once the sweep runs

    losses, seconds, entropy = {}, 0.0, None
    cache = tempfile.mkdtemp(prefix="aniso-bench-lr-")
    try:
        for lr in lrs:
            t0 = time.perf_counter()
            rec = train(base.replace(lr=lr, name=None), cache_dir=cache)
            dt = time.perf_counter() - t0
            seconds += dt
            loss = rec["checkpoints"][-1]["held_out_loss"]
            losses[f"{lr:g}"] = loss if math.isfinite(loss) else None  # a diverged run: no loss
            entropy = rec["unigram_entropy"]
            say(f"  {base.arch} / {base.optimizer} lr {lr:g}: held-out loss {loss:.4f} ({dt:.0f} s)")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
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
        bold = lambda k: "**" if float(k) == e["lr"] else ""  # noqa: E731
        cells = [bold(k) + (f"{e['losses'][k]:.3f}" if e["losses"][k] is not None else "diverged") + bold(k) for k in tried]
        edge = " (edge of the range)" if float(tried[0]) == e["lr"] or float(tried[-1]) == e["lr"] else ""
        rows.append([*key.split("/"), ", ".join(f"{float(k):g}" for k in tried), " / ".join(cells), f"{e['lr']:g}{edge}",
                     f"{e['unigram_entropy']:.3f}", f"{e['seconds']:.0f}", e["date_utc"][:16].replace("T", " "),
                     e["machine"]])
    first = next(iter(table_["entries"].values()))
    return "\n".join([
        f"Each rate trained {fi(first['steps'])} steps at {first['n_layers']} layers x d={first['d_model']}, batch "
        f"{first['batch_size']} x {first['seq_len']} tokens of {first['corpus']}. Command: `{table_['command']}`.", "",
        table(["Family", "Optimizer", "Rates tried", "Held-out loss (nats/token)", "Picked", "Unigram entropy",
               "Sweep time (s)", "Date (UTC)", "Machine"], rows)])


def main(argv: list[str] | None = None) -> int:
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
    from core.studies.train_spec import ARCHS as ALL_ARCHS  # lazy: the spec module reads the corpora registry
    from core.studies.train_spec import OPTIMIZERS as ALL_OPTIMIZERS
    from core.studies.train_spec import TrainSpec

    archs = [x.strip() for x in a.arch.split(",") if x.strip()]
    opts = [x.strip() for x in a.optimizer.split(",") if x.strip()]
    bad = [x for x in archs if x not in ALL_ARCHS] + [x for x in opts if x not in ALL_OPTIMIZERS]
    if bad or a.steps < 1:
        print(f"error: unknown {bad} (families {list(ALL_ARCHS)}, optimizers {list(ALL_OPTIMIZERS)}) or steps < 1",
              file=sys.stderr)
        return 2
    base = TrainSpec(corpus=a.corpus, steps=a.steps, device="cpu")
    if a.quick:
        base = base.replace(steps=8, d_model=16, n_heads=2, batch_size=4, seq_len=16, eval_tokens=512)
    m = machine_info()
    machine = f"{m['cpu_model']}, {m['usable_cores']} cores" + (
        f", load {m['loadavg_start'][0]:.1f}" if m["loadavg_start"] else "")
    out = Path(a.out) if a.out else (None if a.quick else LR_JSON)
    old = json.loads(out.read_text()) if out is not None and out.exists() else {}
    entries = dict(old.get("entries", {}))
    log(f"lab-lr: {archs} x {opts}, {base.steps} steps each rate")
    for arch in archs:
        for opt in opts:
            e = sweep_one(base.replace(arch=arch, optimizer=opt), GRID[opt])
            entries[f"{arch}/{opt}"] = {
                **e, **{k: getattr(base, k) for k in ("steps", "n_layers", "d_model", "batch_size", "seq_len", "corpus",
                                                      "seed")},
                "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine}
    doc = {"kind": "lab-lr", "version": 1, "command": command("python -m bench lab-lr", argv or []),
           "grid": {k: list(v) for k, v in GRID.items()}, "entries": entries}
    if out is not None:
        out.write_text(json.dumps(doc, indent=1) + "\n")
        log(f"wrote {out}")
    publish(render(doc), "lab-lr", TITLE, Path(a.md) if a.md else (None if a.quick else ROOT / "BENCHMARKS.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
