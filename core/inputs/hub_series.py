"""A hub model with revisions as a series (e.g. Pythia's `step1000`, `step2000`... branches). No torch.

    register("EleutherAI/pythia-70m", ["step0", "step1000"]) -> "hub:EleutherAI/pythia-70m"

Each revision is an ordinary hub model identifier `org/name@rev`, analysed and cached like any
model (its cache key holds the commit the revision points to); the training step of each is read
from the revision's name (`step1000`, `step-1000`, `global_step1000`). The list of revisions is kept
in `<cache dir>/hub-series/<org>--<name>.json`, so that the Dynamics page and the job queue find
the series again, like a trained run's `run.json`.

It needs the hub, or a local hub cache that holds the revisions (HF_HOME, HF_HUB_OFFLINE=1): offline,
a revision that is not in the local cache is refused before anything is loaded.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..base import settings
from ..base.config import cache_identity
from ..base.errors import InputError
from ..base.integrity import duplicate_notes, is_weight_file, weights_digest
from ..base.settings import hub_series_dir
from . import hub
from .checkpoints import read_record, write_record
from .hub import hub_reachable, local_commit, local_weight_shas

PREFIX = "hub:"
HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
REVISION = re.compile(r"^(?:global_)?step[-_]?(\d{1,12})$")
MAX_REVISIONS = 64


def is_hub_series(run: str) -> bool:
    return isinstance(run, str) and run.startswith(PREFIX)


def series_dir(cache_dir=None) -> Path:
    return hub_series_dir(cache_dir)


def _path(name: str, cache_dir=None) -> Path:
    return series_dir(cache_dir) / (name.replace("/", "--") + ".json")


def step_of(revision: str) -> int:
    """The training step a revision's name gives (`step1000` -> 1000)."""
    m = REVISION.match(revision)
    if not m:
        raise InputError(f"Revision {revision!r} does not name a training step: a series takes revisions "
                         f"named stepN (like Pythia's step0, step1000, ...).")
    return int(m.group(1))


def parse_revisions(text: str | list[str]) -> list[str]:
    """'step0, step1000,step2000' (or a list) -> the revision names, stripped, without empties."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    return [p.strip() for p in parts if p and p.strip()]


def hub_offline() -> bool:
    return settings.hub_offline() or not hub_reachable()


def register(name: str, revisions: str | list[str], cache_dir=None) -> str:
    """Check a hub id and its revisions, keep them as a series; returns the series' run id `hub:<name>`.

    Offline (HF_HUB_OFFLINE=1 or the hub unreachable), every revision must be in the local hub cache."""
    name = (name or "").strip()
    if not HUB_NAME.match(name):
        raise InputError(f"{name!r} is not a hub model id: write organisation/name (e.g. EleutherAI/pythia-70m).")
    revs = parse_revisions(revisions)
    if len(revs) < 2:
        raise InputError("A series needs at least two revisions (e.g. step0,step1000).")
    if len(revs) > MAX_REVISIONS:
        raise InputError(f"At most {MAX_REVISIONS} revisions in a series, got {len(revs)}.")
    steps = {}
    for r in revs:
        s = step_of(r)
        if s in steps and steps[s] != r:
            raise InputError(f"Revisions {steps[s]!r} and {r!r} are the same step ({s}).")
        steps[s] = r
    if hub_offline():  # (the digests below ask the same question again: remembered for a minute)
        missing = [r for r in steps.values() if local_commit(name, r) is None]
        if missing:
            raise InputError(f"The model hub cannot be reached from here and the local hub cache "
                             f"({_hf_home()}) does not hold {name} at revision(s) {', '.join(missing)}: a hub "
                             f"series needs the hub, or those revisions downloaded beforehand.")
    offline = hub_offline()
    ckpts = [{"step": s, "revision": steps[s], "model": f"{name}@{steps[s]}",
              "weights_sha256": revision_digest(name, steps[s], offline)} for s in sorted(steps)]
    rec = {"run": PREFIX + name, "hub": name, "kind": "hub", "checkpoints": ckpts,
           "integrity": integrity_summary(ckpts)}
    _write(rec, cache_dir)
    return rec["run"]


def revision_digest(name: str, revision: str, offline: bool) -> str | None:
    """The weights digest of `name@revision` (core/base/integrity.py): from the local hub cache when it holds
    the revision, else from the sha256 the hub lists for its weight files (nothing downloaded); None when
    neither says. Online, a revision the hub does not have is refused here (InputError naming its branches
    and tags), before any checkpoint is analysed."""
    shas = local_weight_shas(name, revision)
    if shas is None and not offline:
        rev = hub.resolve(f"{name}@{revision}")
        shas = {f.path: f.sha256 for f in rev.files or () if is_weight_file(f.path) and f.sha256} or None
    return weights_digest(shas) if shas else None


def integrity_summary(checkpoints: list[dict]) -> dict:
    """What the digests say: how many checkpoints were hashed, and which repeat an earlier step."""
    return {"hashed": sum(1 for c in checkpoints if c.get("weights_sha256")), "checkpoints": len(checkpoints),
            "duplicates": duplicate_notes(checkpoints)}


def mark_no_attention(run: str, why: str, cache_dir=None) -> None:
    """Keep in the series' record that its architecture has no attention statistics (so that the
    series counts as analysed without them), with the version of the attention code that said so:
    a later version may support the architecture (`no_attention`)."""
    rec = read(run, cache_dir)
    rec["no_attention"] = why
    rec["no_attention_code"] = _attention_code()
    _write(rec, cache_dir)


def no_attention(rec: dict) -> str | None:
    """Why the series of record `rec` has no attention statistics, None when it should have them
    (never marked, or marked by another version of the attention code)."""
    why = rec.get("no_attention")
    return why if why and rec.get("no_attention_code") == _attention_code() else None


def _attention_code() -> str:
    return cache_identity("attention")["code"]


def _write(rec: dict, cache_dir=None) -> None:
    write_record(_path(rec["hub"], cache_dir), rec)


def _hf_home() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def read(run: str, cache_dir=None) -> dict:
    """The record of a registered hub series (`hub:<name>`)."""
    name = run[len(PREFIX):] if is_hub_series(run) else run
    path = _path(name, cache_dir) if HUB_NAME.match(name) else None
    if path is None or not path.exists():
        raise InputError(f"No hub series {run!r} here: make one with `python -m core series --hub {name} "
                         f"--revisions step0,step1000,...`.")
    return read_record(path, f"hub series {run!r}")


def list_series(cache_dir=None) -> list[str]:
    """The registered hub series (`hub:<name>`), sorted."""
    root = series_dir(cache_dir)
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.glob("*.json")):
        name = p.stem.replace("--", "/", 1)
        if HUB_NAME.match(name):
            out.append(PREFIX + name)
    return out
