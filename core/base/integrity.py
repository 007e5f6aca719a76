"""Checkpoint integrity: which checkpoints of a series hold the same weights. No torch.

    weights_digest({"model.safetensors": "<sha256>"}) -> "<sha256 of the weight files' hashes>"
    duplicate_steps(checkpoints) -> {step: earlier step with the same weights}

A checkpoint's weights digest is the sha256 of its weight files' own sha256 (`*.safetensors`,
`*.bin`), in file-name order. Two revisions whose weights are the same bytes get the same digest;
some Pythia revisions are such copies of another step (EleutherAI/pythia#205, #206), and a series
must not analyse them silently as distinct steps. A file's sha256 is the one the hub keeps for its
LFS files, so a revision can be checked before it is downloaded. Weights saved twice in different
files (a .bin and a .safetensors of the same tensors) are not recognised as the same.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES) and not Path(name).name.startswith("training_args")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def weights_digest(file_shas: dict[str, str]) -> str | None:
    """The digest of a checkpoint from {weight file name: its sha256}; None without weight files."""
    files = {Path(k).name: v for k, v in file_shas.items() if is_weight_file(k) and v}
    if not files:
        return None
    return hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()


def folder_digest(folder: Path) -> str | None:
    """The digest of the weight files in a model folder (None when it has none)."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    return weights_digest({p.name: file_sha256(p) for p in sorted(folder.iterdir())
                           if p.is_file() and is_weight_file(p.name)})


def duplicate_steps(checkpoints: list[dict]) -> dict[int, int]:
    """{step: the earliest step whose `weights_sha256` is the same} for every checkpoint after the
    first of each group of identical weights; checkpoints without a digest are never duplicates."""
    first: dict[str, int] = {}
    out: dict[int, int] = {}
    for c in sorted(checkpoints, key=lambda c: int(c["step"])):
        d = c.get("weights_sha256")
        if not d:
            continue
        s = int(c["step"])
        if d in first:
            out[s] = first[d]
        else:
            first[d] = s
    return out


def duplicate_notes(checkpoints: list[dict]) -> list[dict]:
    """[{step, same_as, weights_sha256, revision?}] of the checkpoints that repeat an earlier step's weights."""
    by_step = {int(c["step"]): c for c in checkpoints}
    out = []
    for s, first in sorted(duplicate_steps(checkpoints).items()):
        c = by_step[s]
        note = {"step": s, "same_as": first, "weights_sha256": c["weights_sha256"]}
        if c.get("revision"):
            note.update(revision=c["revision"], same_as_revision=by_step[first].get("revision"))
        out.append(note)
    return out


def describe_duplicate(note: dict) -> str:
    """One sentence for a duplicate checkpoint (the page, the CLI and the report say the same)."""
    what = (f"revision {note['revision']} (step {note['step']:,})" if note.get("revision")
            else f"step {note['step']:,}")
    same = (f"revision {note['same_as_revision']} (step {note['same_as']:,})" if note.get("same_as_revision")
            else f"step {note['same_as']:,}")
    return (f"{what} has the same weights as {same} (weights sha256 {note['weights_sha256'][:12]}…): "
            f"it is analysed once, as {same}, and left out of the curves.")
