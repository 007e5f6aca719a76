"""Models trained here: where their checkpoints live and how the registry names them. No torch.

A training run (core/studies/training.py) writes one folder per run under `<cache dir>/trained/<run>/`:

    run.json          the TrainSpec, status, checkpoints (step, losses), the loss log, timing
    step-<N>/         a transformers model folder (config.json, model.safetensors, tokenizer)
    trainer/          the Trainer's own resumable checkpoint (optimizer, RNG states)

Every checkpoint is a model identifier: `trained/<run>@step-<N>` (`trained/<run>` = its last
checkpoint), listed, fingerprinted and loaded like any local model folder.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..base import settings
from ..base.errors import InputError

PREFIX = "trained/"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def trained_dir(cache_dir: str | Path | None = None) -> Path:
    """Where trained runs live: `trained/` in the cache directory (ANISO_CACHE_DIR or ./cache)."""
    return settings.trained_dir(cache_dir)


def is_trained(ident: str) -> bool:
    return isinstance(ident, str) and ident.startswith(PREFIX)


def ident_of(run: str, step: int) -> str:
    return f"{PREFIX}{run}@step-{int(step)}"


def parse(ident: str) -> tuple[str, int | None]:
    """(run, step) of `trained/<run>@step-<N>`; step None for `trained/<run>` (its last checkpoint)."""
    body = ident[len(PREFIX):]
    run, _, rev = body.partition("@")
    if not RUN_NAME.match(run):
        raise InputError(f"{ident!r} is not a trained-model identifier: expected trained/<run>@step-<N>.")
    if not rev:
        return run, None
    m = re.fullmatch(r"step-(\d+)", rev)
    if not m:
        raise InputError(f"{ident!r}: the checkpoint is written step-<N> (e.g. {PREFIX}{run}@step-64).")
    return run, int(m.group(1))


def read_run(run: str, cache_dir=None) -> dict:
    path = trained_dir(cache_dir) / run / "run.json"
    if not path.exists():
        known = ", ".join(list_runs(cache_dir)) or "none yet"
        raise InputError(f"No trained run {run!r} (trained runs here: {known}). Train one with "
                         f"`python -m core train`.")
    return read_record(path, f"trained run {run!r}")


def read_record(path: Path, what: str) -> dict:
    """A JSON record (a run's, a series'), or an InputError that says whose record is unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"The record of {what} is unreadable ({e}).") from None


def write_record(path: Path, record: dict) -> None:
    """A JSON record written whole or not at all (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1, allow_nan=False))
    os.replace(tmp, path)


def write_run(run: str, record: dict, cache_dir=None) -> None:
    """run.json, written whole or not at all."""
    write_record(trained_dir(cache_dir) / run / "run.json", record)


def list_runs(cache_dir=None) -> list[str]:
    root = trained_dir(cache_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "run.json").exists())


def checkpoint_steps(run: str, cache_dir=None) -> list[int]:
    """Steps whose checkpoint folder is complete, ascending."""
    rec = read_run(run, cache_dir)
    return sorted(int(c["step"]) for c in rec.get("checkpoints", []))


def resolve(ident: str, cache_dir=None) -> Path:
    """The model folder of a checkpoint identifier (InputError when it does not exist)."""
    run, step = parse(ident)
    steps = checkpoint_steps(run, cache_dir)
    if not steps:
        raise InputError(f"Trained run {run!r} has no checkpoint yet.")
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise InputError(f"Trained run {run!r} has no checkpoint at step {step}; it has steps "
                         f"{', '.join(map(str, steps))}.")
    return trained_dir(cache_dir) / run / f"step-{step}"


def describe(ident: str, cache_dir=None) -> dict:
    """Registry entry of a checkpoint: label, description, causal or masked, the note the UI shows."""
    run, step = parse(ident)
    rec = read_run(run, cache_dir)
    spec = rec.get("spec", {})
    steps = sorted(int(c["step"]) for c in rec.get("checkpoints", []))
    if step is None and steps:
        step = steps[-1]
    last = rec.get("max_steps") or spec.get("steps")
    return {"id": ident, "label": f"{run} @ step {step}",
            "description": (f"trained here: {spec.get('arch')} {spec.get('n_layers')} layers, d={spec.get('d_model')}, "
                            f"{spec.get('tokenizer')} tokens on {spec.get('corpus')}, step {step} of {last}"),
            "causal_lm": spec.get("arch") in ("gpt2", "llama"), "note": "", "trained": bool(step),
            "run": run, "step": step}


def list_checkpoints(cache_dir=None) -> list[str]:
    """Every checkpoint identifier available here, run by run, in step order."""
    out = []
    for run in list_runs(cache_dir):
        try:
            out += [ident_of(run, s) for s in checkpoint_steps(run, cache_dir)]
        except InputError:
            continue  # an unreadable record: list the others
    return out
