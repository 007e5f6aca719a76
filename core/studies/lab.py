"""The lab (issue 41): a grid of small trainings that differ in one factor at a time, and each factor's effect on
anisotropy with its interval over seeds.

    spec = LabSpec(factors={"arch": ["gpt2", "llama"], "optimizer": ["adamw", "sgd"]}, seeds=(0, 1, 2))
    run_lab(spec, cache_dir, progress, cancel) -> lab.json (also stored as <cache>/labs/<lab id>.json)
    load_lab(lab_id), list_labs()   the one reader of lab.json (checked: a damaged or foreign file is said), the ids

Every cell x seed is an ordinary `training.train()` run (cached, resumable: a killed worker resumes it from its last
Trainer checkpoint), whose checkpoints are analysed by the one extraction (`series.analyze_series`, on a small
stated budget: `analysis_tokens` tokens, `analysis_sample` sampled positions per checkpoint). `FACTORS` is the one
place that knows what a factor's level changes in a `TrainSpec`; a level whose field or value this version's
`TrainSpec` does not have is refused with a clear message. Per cell, `train_spec.matched_spec` (parameter counts
matched to GPT-2's) and `train_spec.default_lr` (the family's stated learning rate) apply where they exist.

lab.json (what the Lab page reads; `version` 1):

    {"kind": "lab", "version": 1, "id": "lab-<12 hex>",
     "spec": {"factors": {"arch": ["gpt2", "mamba"], ...}, "seeds": [0, 1, 2], "base": {<TrainSpec dict>},
              "lr": null | float (null: each family's default_lr), "analysis_tokens": int, "analysis_sample": int,
              "thresholds": [0.2, 0.5], "mid_layer": "the layer at relative depth 0.5 ..."},
     "status": "running" | "done" | "cancelled",
     "progress": {"done": k, "total": n},
     "cells": [{"cell": "arch=gpt2 / optimizer=adamw", "levels": {"arch": "gpt2", "optimizer": "adamw"},
                "runs": [RUN, ...],                      # one per seed, in `seeds` order
                "summary": {STAT: {"mean", "lo", "hi", "n", "sd"}, ...,   # learned, finished runs only
                            "mean_cosine_by_layer": {"layers": [...], "mean": [...], "lo": [...], "hi": [...], "n"},
                            "first_crossing": {"0.2": {"steps": [..], "crossed": k, "n": n}, ...}},
                "excluded": [{"seed": 1, "why": "held-out loss 6.3 not below the unigram entropy 6.2"}]}],
     "effects": [EFFECT, ...], "claims": [CLAIM, ...]}

    RUN = {"seed", "run" (run name), "status": "done" | "cancelled" | "failed" | "pending", "error" (failed only),
           "spec": {<TrainSpec dict>}, "params": {"total", "non_embedding"}, "lr", "lr_source",
           "held_out_loss", "unigram_entropy", "learned",
           "steps": [0, 1, 2, 4, ...],                    # the checkpoints analysed
           "mid_layer": int, "mid_mean_cosine_by_step": [...],        # one per step
           "final": {"layers": [0, 1, 2], "mean_cosine": [...], "centred_mean_cosine": [...],
                     "input_shared": [...],      # mean_cosine - centred_mean_cosine: what the vector every token
                                                 # shares (the layer's mean) adds to the raw value
                     "massive_ratio": [...],     # top-1 |x| / median |x| (Sun et al. 2024)
                     "outlier_dims": [...],      # how many activation outlier dims (3-sigma rule) each layer has
                     "sink_share": [...] | null, # per layer: mean over heads of the attention to the first position
                     "sink_rate": [...] | null}, # per layer: share of heads with alpha_1 > 0.3 (Gu et al. 2025)
                                                 # (layer 0, the embeddings, has no attention: null there)
           "scalars": {STAT: value},             # the per-run numbers the summaries and effects read
           "first_crossing": {"0.2": 16, "0.5": null},   # first analysed step whose mid-depth mean cosine >= t
           "not_applicable": {"sink_share": "Mamba has no attention", ...},
           "seconds": {"train": .., "analysis": ..}, "torch_threads": <torch's CPU threads while it trained>}
    EFFECT = {"factor", "from", "to", "statistic", "delta", "lo", "hi", "n" (seeds), "sd",
              "per_seed": [{"seed", "delta", "pairs"}], "averaged_over": {factor: levels}, "note"}
    CLAIM = {"id": "non_transformer_anisotropic" | "coupled_adam_lowers" | "gate_removes_massive", "claim",
             "verdict": "supported" | "not supported" | "inconclusive" | "not tested", "numbers", "delta", "lo", "hi",
             "why"}

STAT (`SCALARS`): `mid_mean_cosine`, `mid_centred_mean_cosine`, `mid_input_shared`, `max_massive_ratio` (the largest
top-1/median over layers 1..L), `mid_outlier_dims`, `mid_sink_share`, `sink_rate` (over every head), `held_out_loss`.
Intervals are 95% t-intervals of the per-seed values (`seed_interval`); with one seed there is none (null, said in
`note`). A main effect of factor F from level a to level b: per seed, the mean over the other factors' level
combinations of (value at F=b - value at F=a), over the combinations where both runs are learned and finished;
then the t-interval of those per-seed means.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.special import stdtrit

from ..base import settings
from ..base.errors import Cancelled, InputError
from ..base.progress import Progress
from ..base.spec import stable_hash
from ..inputs import checkpoints as trained
from ..inputs.access import quote_ident
from ..stats.chain_rules import MASSIVE_FACTORS, SINK_EPSILON
from . import train_spec as TS
from .selection import LAB_ID, check_lab_id
from .train_spec import TrainSpec

VERSION = 1
MAX_LAB_BYTES = 64 * 2**20  # a lab record is a few hundred kB; a larger file is not read
LEVEL = 0.95

# factor -> level -> the TrainSpec fields that level sets. The one place that knows factors.
FACTORS: dict[str, dict[str, dict]] = {
    "arch": {a: {"arch": a} for a in ("gpt2", "llama", "bert-causal", "mamba", "rwkv", "lstm", "xlstm")},
    "optimizer": {o: {"optimizer": o} for o in ("adamw", "sgd", "coupled-adam")},
    "tied": {"yes": {"tied": True}, "no": {"tied": False}},
    "gate": {"off": {"arch": "llama"}, "on": {"arch": "llama", "attn_gate": True}},  # the gate is LLaMA's attention
    "norm": {"pre": {"arch": "gpt2"}, "post": {"arch": "bert-causal"}},
    "tokenizer": {t: {"tokenizer": t} for t in ("bpe", "bytes", "uniform")},
    "data": {"natural": {"tokenizer": "bpe"}, "uniform": {"tokenizer": "uniform"}},
    "objective": {"causal": {"arch": "gpt2"}, "masked": {"arch": "bert"}},
}
TRANSFORMERS = ("gpt2", "llama", "bert-causal", "bert")
NO_ATTENTION = {
    "mamba": "Mamba has no attention (a selective state-space model)",
    "rwkv": "RWKV has no attention (a linear recurrence)",
    "lstm": "an LSTM has no attention (a recurrent network)",
    "xlstm": "xLSTM has no attention (a recurrent network)",
}
# The quick lab (issue 41's budget): 4 families x 1 seed, 500 steps, 2 layers, d 128. Families this version's
# TrainSpec does not have are refused; the lead fixes this constant at the merge if a name changes.
QUICK_FAMILIES = ("gpt2", "mamba", "rwkv", "lstm")
QUICK = {"seeds": (0,), "steps": 500, "n_layers": 2, "d_model": 128}
DEFAULT_FAMILIES = QUICK_FAMILIES
DEFAULT_OPTIMIZERS = ("adamw", "sgd")
ANALYSIS_TOKENS = 4096  # per checkpoint: the quick lab's analysis fits its 10 minutes (BENCHMARKS.md, "Lab")
ANALYSIS_SAMPLE = 1000
THRESHOLDS = (0.2, 0.5)
MAX_RUNS = 256  # cells x seeds of one lab (the default grid has 24)
MID_LAYER = "the layer at relative depth 0.5: layer ceil(L / 2) of 0..L (L = blocks; 1 of 0..2)"
SCALARS = (
    "mid_mean_cosine",
    "mid_centred_mean_cosine",
    "mid_input_shared",
    "max_massive_ratio",
    "mid_outlier_dims",
    "mid_sink_share",
    "sink_rate",
    "held_out_loss",
    "embedding_mean_cosine",
)
EFFECT_STATS = ("mid_mean_cosine", "mid_centred_mean_cosine", "max_massive_ratio", "embedding_mean_cosine")
SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_TESTED = "supported", "not supported", "inconclusive", "not tested"


# ----------------------------------------------------------------------------- the spec
def _spec_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(TrainSpec)}


@dataclass(frozen=True)
class LabSpec:
    """A grid: `factors` (name -> levels, in order; the first level is each effect's reference), `seeds`, the
    `base` TrainSpec every cell starts from, and the analysis budget."""

    factors: dict = field(default_factory=lambda: {"arch": list(DEFAULT_FAMILIES)})
    seeds: tuple = (0, 1, 2)
    base: dict = field(default_factory=dict)  # TrainSpec fields (steps, n_layers, d_model, ...); name and seed: no
    lr: float | None = None  # None: each cell's default_lr (where it exists), else base's lr
    analysis_tokens: int = ANALYSIS_TOKENS
    analysis_sample: int = ANALYSIS_SAMPLE
    thresholds: tuple = THRESHOLDS

    def __post_init__(self):
        if not isinstance(self.factors, dict) or not self.factors:
            raise InputError("A lab needs at least one factor, e.g. --factor arch=gpt2,llama.")
        factors = {}
        for name, levels in self.factors.items():
            if name not in FACTORS:
                raise InputError(f"Unknown factor {name!r}; one of {', '.join(FACTORS)}.")
            levels = [str(x) for x in (levels.split(",") if isinstance(levels, str) else levels)]
            if not levels or len(set(levels)) != len(levels):
                raise InputError(f"Factor {name}: give distinct levels, e.g. {name}={','.join(FACTORS[name])}.")
            for lv in levels:
                if lv not in FACTORS[name]:
                    raise InputError(f"Factor {name} has no level {lv!r}; its levels: {', '.join(FACTORS[name])}.")
            factors[name] = levels
        object.__setattr__(self, "factors", factors)
        touched: dict[str, str] = {}
        for name, levels in factors.items():
            for f in {k for lv in levels for k in FACTORS[name][lv]}:
                if f in touched:
                    raise InputError(f"Factors {touched[f]} and {name} both set the training's {f!r}: use one of them in a lab.")
                touched[f] = name
        try:
            seeds = tuple(int(s) for s in self.seeds)
            th = tuple(float(t) for t in self.thresholds)
            lr = None if self.lr is None else float(self.lr)
            n_tok, n_sample = int(self.analysis_tokens), int(self.analysis_sample)
        except (TypeError, ValueError):
            raise InputError("A lab's seeds, thresholds, lr and analysis budget are numbers.") from None
        n_runs = math.prod(len(v) for v in factors.values()) * len(seeds)
        if n_runs > MAX_RUNS:
            raise InputError(f"This lab has {n_runs:,} runs; a lab holds at most {MAX_RUNS} (fewer levels or seeds).")
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise InputError(f"Seeds must be distinct non-negative integers, got {list(self.seeds)}.")
        object.__setattr__(self, "seeds", seeds)
        base = dict(self.base or {})
        bad = sorted(set(base) - _spec_fields())
        if bad:
            raise InputError(f"Unknown training setting(s) {', '.join(bad)} in the lab's base.")
        if base.get("name") or "seed" in base:
            raise InputError("A lab names its runs and sets their seeds itself: leave name and seed out of its base.")
        base.pop("name", None)
        TrainSpec.from_dict(base)  # its own checks, once
        object.__setattr__(self, "base", base)
        if not th or not all(-1 < t < 1 for t in th):
            raise InputError(f"Thresholds are mean cosines between -1 and 1, got {list(self.thresholds)}.")
        object.__setattr__(self, "thresholds", th)
        if lr is not None and not lr > 0:
            raise InputError(f"lr must be positive, got {self.lr}.")
        object.__setattr__(self, "lr", lr)
        for k, v in (("analysis_tokens", n_tok), ("analysis_sample", n_sample)):
            if v < 16:
                raise InputError(f"{k} must be at least 16, got {v}.")
            object.__setattr__(self, k, v)
        for cell in self.cells():  # every cell's training is valid before anything runs
            cell_specs(self, cell)

    def to_dict(self) -> dict:
        return {
            "factors": self.factors,
            "seeds": list(self.seeds),
            "base": TrainSpec.from_dict(self.base).to_dict(),
            "lr": self.lr,
            "analysis_tokens": int(self.analysis_tokens),
            "analysis_sample": int(self.analysis_sample),
            "thresholds": list(self.thresholds),
            "mid_layer": MID_LAYER,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "LabSpec":
        base = {k: v for k, v in (d.get("base") or {}).items() if k not in ("name", "seed")}
        default = TrainSpec().to_dict()
        base = {k: v for k, v in base.items() if k not in default or default[k] != v}  # what differs from default
        return cls(
            factors=d.get("factors") or {},
            seeds=tuple(d.get("seeds") or (0,)),
            base=base,
            lr=d.get("lr"),
            analysis_tokens=int(d.get("analysis_tokens", ANALYSIS_TOKENS)),
            analysis_sample=int(d.get("analysis_sample", ANALYSIS_SAMPLE)),
            thresholds=tuple(d.get("thresholds") or THRESHOLDS),
        )

    @property
    def lab_id(self) -> str:
        """Stable across versions of TrainSpec: only base fields that differ from TrainSpec's defaults count."""
        default = TrainSpec().to_dict()
        base = {k: v for k, v in self.base.items() if default.get(k, object()) != v}
        key = {
            "factors": self.factors,
            "seeds": list(self.seeds),
            "base": base,
            "lr": self.lr,
            "analysis_tokens": int(self.analysis_tokens),
            "analysis_sample": int(self.analysis_sample),
            "thresholds": list(self.thresholds),
            "version": VERSION,
        }
        return "lab-" + stable_hash(key)[:12]

    def cells(self) -> list[dict]:
        """Every combination of levels, the first factor varying slowest: {"cell": label, "levels": {...}}."""
        names = list(self.factors)
        out = []
        for combo in itertools.product(*(self.factors[n] for n in names)):
            levels = dict(zip(names, combo))
            out.append({"cell": cell_label(levels), "levels": levels})
        return out


def cell_label(levels: dict) -> str:
    return " / ".join(f"{k}={v}" for k, v in levels.items())


def _overrides(levels: dict) -> dict:
    out: dict = {}
    fields = _spec_fields()
    for name, lv in levels.items():
        for k, v in FACTORS[name][lv].items():
            if k not in fields:
                raise InputError(
                    f"--factor {name}={lv} needs the training setting {k!r}, which this version's "
                    f"TrainSpec does not have yet (issue 41's families and optimizers add it)."
                )
            out[k] = v
    return out


def cell_specs(spec: LabSpec, cell: dict) -> list[tuple[TrainSpec, float, str]]:
    """(TrainSpec, lr, lr_source) of each seed of `cell`: base + the cell's levels, sizes matched
    (`matched_spec`, where it exists), the family's learning rate (`default_lr`) unless the lab fixes one."""
    over = _overrides(cell["levels"])
    try:
        ts = TrainSpec.from_dict({**spec.base, **over})
    except InputError as e:
        raise InputError(f"Cell {cell['cell']}: {e}") from None
    matched = getattr(TS, "matched_spec", None)
    if matched is not None:
        ts = matched(ts)
    default_lr = getattr(TS, "default_lr", None)
    if spec.lr is not None:
        lr, source = float(spec.lr), "set for this lab (--lr)"
    elif "lr" in spec.base:
        lr, source = float(spec.base["lr"]), "set in the lab's base"
    elif default_lr is not None:
        lr, source = default_lr(ts.arch, getattr(ts, "optimizer", "adamw"))
    else:
        lr, source = ts.lr, "TrainSpec's default (this version has no per-family learning rate)"
    return [(ts.replace(lr=float(lr), seed=int(s), name=None), float(lr), str(source)) for s in spec.seeds]


# ----------------------------------------------------------------------------- arithmetic (numpy only)
def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def seed_interval(values, level: float = LEVEL) -> dict:
    """Mean and the `level` t-interval of per-seed values (None values dropped): {"mean", "lo", "hi", "n", "sd"}.
    With fewer than two values there is no interval (lo = hi = None, `note` says so).

    >>> r = seed_interval([1.0, 2.0, 3.0]); round(r["mean"], 3), round(r["hi"] - r["mean"], 3)
    (2.0, 2.484)
    """
    v = np.asarray([x for x in (_num(x) for x in values) if x is not None], dtype=float)
    n = int(v.size)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0, "sd": None, "note": "no learned run"}
    mean = float(v.mean())
    if n < 2:
        return {"mean": mean, "lo": None, "hi": None, "n": 1, "sd": None, "note": "one seed: no interval"}
    sd = float(v.std(ddof=1))
    half = float(stdtrit(n - 1, 0.5 + level / 2)) * sd / math.sqrt(n)
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n, "sd": sd}


def first_crossing(steps, values, threshold: float) -> int | None:
    """The first step whose value is >= `threshold` (None: never)."""
    for s, v in zip(steps, values):
        if v is not None and v >= threshold:
            return int(s)
    return None


def usable(run: dict) -> bool:
    """A finished run that learned (held-out loss below the unigram entropy): evidence."""
    return run.get("status") == "done" and bool(run.get("learned"))


def exclusion(run: dict) -> str | None:
    """Why a run is not averaged in (None: it is)."""
    st = run.get("status")
    if st != "done":
        return {"pending": "not run yet", "cancelled": "cancelled before it finished"}.get(
            st, f"failed: {run.get('error', '')}".strip()
        )
    if run.get("learned"):
        return None
    loss, h = _num(run.get("held_out_loss")), _num(run.get("unigram_entropy"))
    if loss is None or h is None:
        return "no held-out loss or unigram entropy to tell whether it learned"
    return f"held-out loss {loss:.3f} not below the unigram entropy {h:.3f}: it did not learn"


def cell_summary(cell: dict, thresholds=THRESHOLDS) -> tuple[dict, list[dict]]:
    """(summary over the learned, finished runs of `cell`, the excluded runs with the reason)."""
    good = [r for r in cell["runs"] if usable(r)]
    excluded = [{"seed": r["seed"], "why": exclusion(r)} for r in cell["runs"] if not usable(r)]
    out: dict = {k: seed_interval([r["scalars"].get(k) for r in good]) for k in SCALARS}
    if good:
        layers = good[0]["final"]["layers"]
        per = [seed_interval([r["final"]["mean_cosine"][i] for r in good]) for i in range(len(layers))]
        out["mean_cosine_by_layer"] = {"layers": layers, "n": len(good), **{k: [p[k] for p in per] for k in ("mean", "lo", "hi")}}
    else:
        out["mean_cosine_by_layer"] = None
    out["first_crossing"] = {}
    for t in thresholds:
        steps = [r["first_crossing"].get(_tkey(t)) for r in good]
        out["first_crossing"][_tkey(t)] = {"steps": steps, "crossed": sum(s is not None for s in steps), "n": len(good)}
    return out, excluded


def _tkey(t: float) -> str:
    return f"{float(t):g}"


def _index(cells: list[dict]) -> dict:
    return {tuple(sorted(c["levels"].items())): c for c in cells}


def pair_effect(cells: list[dict], factors: dict, factor: str, a: str, b: str, stat: str, seeds) -> dict:
    """The main effect of `factor` from level `a` to `b` on `stat` (see the module docstring)."""
    others = {k: v for k, v in factors.items() if k != factor}
    idx = _index(cells)
    per_seed = []
    for j, seed in enumerate(seeds):
        deltas = []
        for combo in itertools.product(*others.values()):
            rest = dict(zip(others, combo))
            ca = idx.get(tuple(sorted({**rest, factor: a}.items())))
            cb = idx.get(tuple(sorted({**rest, factor: b}.items())))
            if ca is None or cb is None:
                continue
            ra, rb = ca["runs"][j], cb["runs"][j]
            va, vb = _num(ra.get("scalars", {}).get(stat)), _num(rb.get("scalars", {}).get(stat))
            if usable(ra) and usable(rb) and va is not None and vb is not None:
                deltas.append(vb - va)
        if deltas:
            per_seed.append({"seed": int(seed), "delta": float(np.mean(deltas)), "pairs": len(deltas)})
    iv = seed_interval([p["delta"] for p in per_seed])
    n_combos = int(np.prod([len(v) for v in others.values()])) if others else 1
    note = iv.get("note", "")
    short = [p["seed"] for p in per_seed if p["pairs"] < n_combos]
    if short:
        note = (note + "; " if note else "") + (
            f"seed(s) {', '.join(map(str, short))} averaged over fewer than "
            f"{n_combos} pairs (runs that did not learn or did not finish)"
        )
    return {
        "factor": factor,
        "from": a,
        "to": b,
        "statistic": stat,
        "delta": iv["mean"],
        "lo": iv["lo"],
        "hi": iv["hi"],
        "n": iv["n"],
        "sd": iv["sd"],
        "per_seed": per_seed,
        "averaged_over": others,
        "note": note,
    }


def main_effects(cells: list[dict], factors: dict, seeds, stats=EFFECT_STATS) -> list[dict]:
    """For each factor with 2+ levels, each (first level -> other level) pair, each statistic."""
    out = []
    for f, levels in factors.items():
        for b in levels[1:]:
            for stat in stats:
                out.append(pair_effect(cells, factors, f, levels[0], b, stat, seeds))
    return out


def _fmt(x, nd=3) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def _iv(e: dict, empty: str = "no learned pair") -> str:
    """A value with its 95% interval over seeds (`empty` where there is no value)."""
    if e.get("delta") is None:
        return empty
    if e.get("lo") is None:
        return f"{_fmt(e['delta'])} (n = {e['n']}: no interval)"
    return f"{_fmt(e['delta'])} [{_fmt(e['lo'])}, {_fmt(e['hi'])}] (95% over {e['n']} seeds)"


def _sign_verdict(e: dict, lowers: bool) -> tuple[str, str]:
    """supported when the interval lies wholly on the claimed side of 0, not supported when wholly on the other."""
    if e["delta"] is None:
        return INCONCLUSIVE, "no pair of learned, finished runs to compare"
    if e["lo"] is None:
        return INCONCLUSIVE, f"one seed: no interval (the point value is {_fmt(e['delta'])}); run more seeds"
    below, above = e["hi"] < 0, e["lo"] > 0
    if (below and lowers) or (above and not lowers):
        return SUPPORTED, "the 95% interval over seeds excludes 0 on the claimed side"
    if below or above:
        return NOT_SUPPORTED, "the 95% interval over seeds excludes 0 on the other side"
    return INCONCLUSIVE, "the 95% interval over seeds contains 0"


CLAIMS = {
    "non_transformer_anisotropic": "A non-Transformer trained identically is anisotropic",
    "coupled_adam_lowers": "Coupled Adam lowers anisotropy",
    "gate_removes_massive": "The attention gate removes massive activations",
}


def claims(doc: dict) -> list[dict]:
    """The three claims of issue 41, each computed from the lab's cells (or "not tested", with what to run)."""
    factors, seeds, cells = doc["spec"]["factors"], doc["spec"]["seeds"], doc["cells"]
    th = min(doc["spec"]["thresholds"])
    out = []
    # 1. a non-Transformer is anisotropic: its final mid-depth mean cosine above the lab's lowest threshold
    archs = factors.get("arch", [])
    nt = [a for a in archs if a not in TRANSFORMERS]
    tr = [a for a in archs if a in TRANSFORMERS]
    c = {
        "id": "non_transformer_anisotropic",
        "claim": CLAIMS["non_transformer_anisotropic"],
        "delta": None,
        "lo": None,
        "hi": None,
    }
    if not nt or not tr:
        c.update(
            verdict=NOT_TESTED,
            numbers="",
            why=(
                "the lab has no arch factor with a Transformer and a non-Transformer family; run "
                "`python -m core lab --factor arch=gpt2,mamba,rwkv,lstm --seeds 3`"
            ),
        )
    else:
        # Judged cell by cell: a non-Transformer against the Transformer trained identically (the same levels of every
        # other factor), each interval over that cell's seeds. Pooling a family's runs across the other factors' cells
        # (adamw and sgd, say) would treat runs of different trainings as repeats of one.
        others = {k: v for k, v in factors.items() if k != "arch"}
        idx = _index(cells)
        parts, levels = [], {}
        for a in nt:
            for combo in itertools.product(*others.values()):
                rest = dict(zip(others, combo))
                cell = idx.get(tuple(sorted({**rest, "arch": a}.items())))
                if cell is None:
                    continue
                name = short_label({"arch": a, **rest})
                runs = [r for r in cell["runs"] if usable(r)]
                iv = seed_interval([r["scalars"].get("mid_mean_cosine") for r in runs])
                cen = seed_interval([r["scalars"].get("mid_centred_mean_cosine") for r in runs])
                matched = {**{k: [v] for k, v in rest.items()}, "arch": [tr[0], a]}
                e = pair_effect(cells, matched, "arch", tr[0], a, "mid_mean_cosine", seeds)
                iv["effect"], iv["centred"] = e, cen
                iv["margins"] = [r["unigram_entropy"] - r["held_out_loss"] for r in runs
                                 if _num(r.get("unigram_entropy")) is not None and _num(r.get("held_out_loss")) is not None]
                levels[name] = iv
                none = "not run yet" if any(r.get("status") == "pending" for r in cell["runs"]) else "no learned run"
                parts.append(
                    f"{name}: mid-depth mean cosine {_iv({**iv, 'delta': iv['mean']}, none)}, centred "
                    f"{_iv({**cen, 'delta': cen['mean']}) if cen['n'] else 'n/a'}, "
                    f"Δ vs {short_label({'arch': tr[0], **rest})} {_iv(e)}"
                )
        tested = {a: iv for a, iv in levels.items() if iv["n"]}
        above = [a for a, iv in tested.items() if iv["lo"] is not None and iv["lo"] > th]
        below = [a for a, iv in tested.items() if iv["hi"] is not None and iv["hi"] < th]
        if above:
            # The deciding cell is the one whose runs learned most (the largest margin below the unigram entropy, its
            # worst run): a cell that barely learned is weaker evidence than one that did, however high its cosine.
            pick = max(above, key=lambda a: min(tested[a]["margins"], default=-math.inf))
            also = [a for a in above if a != pick]
            verdict, why = SUPPORTED, f"{pick}'s 95% interval lies above {th:g}" + (
                f" (as do those of {', '.join(also)})" if also else "")
        elif tested and len(below) == len(tested) == len(levels):
            pick = max(below, key=lambda a: tested[a]["mean"])
            verdict, why = NOT_SUPPORTED, f"every non-Transformer cell's 95% interval lies below {th:g}"
        else:
            pick = max(tested, key=lambda a: tested[a]["mean"]) if tested else next(iter(levels))
            verdict = INCONCLUSIVE
            waiting = any(r.get("status") == "pending" for cell in cells if cell["levels"]["arch"] in nt
                          for r in cell["runs"])
            why = (
                ("no non-Transformer run has finished yet" if waiting else "no non-Transformer run learned")
                if not tested
                else f"an interval contains {th:g}, or one seed gives none; run more seeds"
            )
        e = levels[pick]["effect"]
        # Raw and centred judged alike (issue 35): a raw cosine above the threshold whose centred value lies below
        # it is one direction shared by every token (the layer's mean), not a narrow cone of the tokens' spread.
        cen = levels[pick]["centred"]
        shared = ""
        if verdict != NOT_SUPPORTED and cen["n"]:
            upper = cen["mean"] if cen["hi"] is None else cen["hi"]  # one seed: the value itself
            upto = "" if cen["hi"] is None else f" (95% interval up to {_fmt(cen['hi'])})"
            if upper < th:
                shared = (f"; raw and centred disagree: {pick}'s centred mid-depth mean cosine is "
                          f"{_fmt(cen['mean'])}{upto}, below {th:g}: its anisotropy is the mean vector every token "
                          "shares, not the spread of the tokens around it")
        # How far the deciding cell's runs learned: a run barely below the unigram entropy has learned little more than
        # the token frequencies, and a referee weighs its cosine accordingly.
        margins = levels[pick]["margins"] if levels else []
        if margins:
            shared += (f"; {pick}'s held-out loss is {_fmt(min(margins))}-{_fmt(max(margins))} nats below the corpus's "
                       f"unigram entropy (runs that learned)")
        c.update(
            verdict=verdict,
            numbers="; ".join(parts),
            delta=e["delta"],
            lo=e["lo"],
            hi=e["hi"],
            why=f"{why} (anisotropic: final mid-depth mean cosine above {th:g}, the lab's lowest threshold; "
            f"delta: {pick} minus {tr[0]} trained identically; each interval over one cell's seeds){shared}",
        )
    out.append(c)
    # 2. Coupled Adam lowers anisotropy; 3. the gate removes massive activations
    for cid, factor, a, b, stat, hint in (
        (
            "coupled_adam_lowers",
            "optimizer",
            "adamw",
            "coupled-adam",
            "mid_mean_cosine",
            "`python -m core lab --factor arch=gpt2 --factor optimizer=adamw,coupled-adam --seeds 3`",
        ),
        ("gate_removes_massive", "gate", "off", "on", "max_massive_ratio", "`python -m core lab --factor gate=off,on --seeds 3`"),
    ):
        c = {"id": cid, "claim": CLAIMS[cid], "delta": None, "lo": None, "hi": None}
        if a not in factors.get(factor, []) or b not in factors.get(factor, []):
            c.update(verdict=NOT_TESTED, numbers="", why=f"the lab has no {factor} factor with levels {a} and {b}; run {hint}")
        else:
            e = pair_effect(cells, factors, factor, a, b, stat, seeds)
            verdict, why = _sign_verdict(e, lowers=True)
            numbers = f"{stat} {b} minus {a}: {_iv(e)}"
            if cid == "coupled_adam_lowers":  # the paper measures the embedding matrix, not the hidden states
                numbers, why = _embedding_reading(cells, factors, a, b, seeds, verdict, numbers, why)
            if cid == "gate_removes_massive":  # nothing to remove where the gate-off runs have none
                verdict, why = _massive_present(cells, factor, a, verdict, why)
            c.update(
                verdict=verdict,
                delta=e["delta"],
                lo=e["lo"],
                hi=e["hi"],
                numbers=numbers,
                why=why + (f"; {e['note']}" if e["note"] else ""),
            )
        out.append(c)
    return out


def _massive_present(cells, factor: str, a: str, verdict: str, why: str) -> tuple[str, str]:
    """The gate claim needs massive activations in the runs without the gate (Sun et al. 2024: a value above 100x
    the median); where the largest top-1/median of the learned `a` runs is below that, the lab cannot test it."""
    ratios = [v for c in cells if c["levels"].get(factor) == a for r in c["runs"] if usable(r)
              for v in [_num((r.get("scalars") or {}).get("max_massive_ratio"))] if v is not None]
    if not ratios or max(ratios) >= MASSIVE_FACTORS[0]:
        return verdict, why
    return INCONCLUSIVE, (f"{why}; but the runs with gate {a} have no massive activations to remove (top-1/median at "
                          f"most {_fmt(max(ratios))}, below the {MASSIVE_FACTORS[0]:g}x of Sun et al. 2024): this lab "
                          "cannot test the claim (more layers, width or steps may grow them)")


def _embedding_cosine(training, run: str, cache_dir, rec: dict | None = None) -> float | None:
    """The final checkpoint's input-embedding mean cosine: from its run record (`rec`, read when not given), else
    from its saved weights (runs trained before records held it); None when neither can be read."""
    try:
        rec = rec if rec is not None else trained.read_run(run, cache_dir)
        last = rec["checkpoints"][-1]
        got = last.get("embedding_mean_cosine")
        return _num(got if got is not None else training.checkpoint_embedding_mean_cosine(rec, last["step"], cache_dir))
    except (InputError, OSError, KeyError, IndexError, ValueError):
        return None


def _embedding_reading(cells, factors, a: str, b: str, seeds, verdict: str, numbers: str, why: str) -> tuple[str, str]:
    """Coupled Adam's claim read on the input embedding matrix too (the mean cosine between its rows, each token
    type once: what Stollenwerk & Stollenwerk measure), beside the lab's hidden-state reading; said when the two
    disagree."""
    e = pair_effect(cells, factors, "optimizer", a, b, "embedding_mean_cosine", seeds)
    if e["delta"] is None:
        return numbers, why
    v2, why2 = _sign_verdict(e, lowers=True)
    numbers += f"; input embedding matrix (mean cosine between its rows) {b} minus {a}: {_iv(e)}"
    why += f" (the hidden states at mid-depth); on the input embedding matrix: {v2}, {why2.replace('the 95', 'its 95')}"
    if v2 != verdict:
        why += ": the two readings disagree, so which anisotropy is meant decides the verdict"
    return numbers, why


def finish(doc: dict) -> dict:
    """Fill in every cell's summary, the main effects and the claims from the runs (cheap; numpy only)."""
    th = doc["spec"]["thresholds"]
    for cell in doc["cells"]:
        cell["summary"], cell["excluded"] = cell_summary(cell, th)
    doc["effects"] = main_effects(doc["cells"], doc["spec"]["factors"], doc["spec"]["seeds"])
    doc["claims"] = claims(doc)
    runs = [r for c in doc["cells"] for r in c["runs"]]
    doc["progress"] = {"done": sum(r["status"] == "done" for r in runs), "total": len(runs)}
    return doc


# ----------------------------------------------------------------------------- per-run numbers
def run_numbers(rec: dict, ser: dict, thresholds=THRESHOLDS, no_attention: str | None = None) -> dict:
    """A run's entry of lab.json from its run record and its analysed series (`series.analyze_series`)."""
    steps = [int(s) for s in ser["steps"]]
    res = ser["results"]
    final_rows = res[-1]["layers"]
    layers = [int(r["layer"]) for r in final_rows]
    L = max(layers)
    mid = math.ceil(L / 2)
    mi = layers.index(mid) if mid in layers else len(layers) // 2

    def col(rows, key):
        return [_num(r.get(key)) for r in rows]

    mc, cc = col(final_rows, "mean_cosine"), col(final_rows, "centred_mean_cosine")
    final = {
        "layers": layers,
        "mean_cosine": mc,
        "centred_mean_cosine": cc,
        "input_shared": [None if a is None or b is None else a - b for a, b in zip(mc, cc)],
        "massive_ratio": col(final_rows, "massive_ratio"),
        "outlier_dims": [len(r.get("outlier_dims") or []) for r in final_rows],
        "sink_share": None,
        "sink_rate": None,
    }
    not_applicable = dict(ser.get("not_applicable") or {})
    att = ser.get("attention")
    if att:
        sec = att[-1]
        by_layer = {int(b["layer"]): b for b in sec["layers"]}
        share, rate = [], []
        for lay in layers:
            b = by_layer.get(lay)
            if b is None:
                share.append(None)
                rate.append(None)
                continue
            sf = np.asarray(b["sink_first"], dtype=float)
            af = np.asarray(b["alpha_first"], dtype=float)
            share.append(_num(np.nanmean(sf)) if np.isfinite(sf).any() else None)
            rate.append(float((af > SINK_EPSILON).mean()) if af.size else None)
        final["sink_share"], final["sink_rate"] = share, rate
    else:
        why = no_attention or ser.get("attention_note") or "no attention statistics for this model"
        not_applicable.update(sink_share=why, sink_rate=why)
    mid_by_step = [_num(r["layers"][mi].get("mean_cosine")) if len(r["layers"]) > mi else None for r in res]
    ck = rec.get("checkpoints") or []
    massive = [v for lay, v in zip(layers, final["massive_ratio"]) if lay >= 1 and v is not None]
    rates = [v for v in (final["sink_rate"] or []) if v is not None]
    scalars = {
        "mid_mean_cosine": mc[mi],
        "mid_centred_mean_cosine": cc[mi],
        "mid_input_shared": final["input_shared"][mi],
        "max_massive_ratio": max(massive) if massive else None,
        "mid_outlier_dims": final["outlier_dims"][mi],
        "mid_sink_share": final["sink_share"][mi] if final["sink_share"] else None,
        "sink_rate": float(np.mean(rates)) if rates else None,
        "held_out_loss": _num(ck[-1]["held_out_loss"]) if ck else None,
        "embedding_mean_cosine": _num(ck[-1].get("embedding_mean_cosine")) if ck else None,
    }
    return {
        "steps": steps,
        "mid_layer": mid,
        "mid_mean_cosine_by_step": mid_by_step,
        "final": final,
        "scalars": scalars,
        "held_out_loss": scalars["held_out_loss"],
        "first_crossing": {_tkey(t): first_crossing(steps, mid_by_step, t) for t in thresholds},
        "not_applicable": not_applicable,
    }


def learned_flag(held_out_loss, unigram_entropy) -> bool | None:
    a, b = _num(held_out_loss), _num(unigram_entropy)
    return None if a is None or b is None else bool(a < b)


# ----------------------------------------------------------------------------- storage
def labs_dir(cache_dir=None) -> Path:
    return settings.labs_dir(cache_dir)


def lab_path(lab_id: str, cache_dir=None) -> Path:
    return labs_dir(cache_dir) / f"{check_lab_id(lab_id)}.json"


def save_lab(doc: dict, cache_dir=None) -> Path:
    path = lab_path(doc["id"], cache_dir)
    trained.write_record(path, _clean(doc))
    return path


def check_lab(doc, where: str = "the lab record") -> dict:
    """The record's shape (kind, version, spec, status, cells): a damaged or foreign file is said, not drawn."""
    if not isinstance(doc, dict) or doc.get("kind") != "lab":
        raise InputError(f"{where} is not a lab record (no \"kind\": \"lab\").")
    if doc.get("version") != VERSION:
        raise InputError(f"{where} has version {quote_ident(str(doc.get('version')))}; this workbench reads version "
                         f"{VERSION}.")
    spec = doc.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("factors"), dict) or not isinstance(doc.get("cells"), list):
        raise InputError(f"{where} has no factors or no cells: it is incomplete or damaged.")
    if not isinstance(spec.get("seeds", []), list) or not isinstance(spec.get("base") or {}, dict) or \
            not all(isinstance(v, list) for v in spec["factors"].values()):
        raise InputError(f"{where}: its spec's seeds, base or factor levels are not what a lab writes: it is damaged.")
    for c in doc["cells"]:
        if not isinstance(c, dict) or not isinstance(c.get("levels"), dict) or not isinstance(c.get("runs"), list):
            raise InputError(f"{where} has a cell without levels or runs: it is incomplete or damaged.")
        if not isinstance(c.get("summary") or {}, dict) or not isinstance(c.get("excluded") or [], list) or \
                not all(isinstance(x, dict) for x in c["runs"] + list(c.get("excluded") or [])) or \
                not all(v is None or isinstance(v, dict) for v in (c.get("summary") or {}).values()):
            raise InputError(f"{where}: a cell's runs, summary or excluded runs are not what a lab writes: it is "
                             "damaged.")
        for r in c["runs"]:
            for k, kind in (("steps", list), ("mid_mean_cosine_by_step", list), ("params", dict),
                            ("not_applicable", dict)):
                if r.get(k) is not None and not isinstance(r[k], kind):
                    raise InputError(f"{where}: a run's {k!r} is not a {kind.__name__}: the record is damaged.")
    for k in ("effects", "claims"):
        if not isinstance(doc.get(k) or [], list) or not all(isinstance(x, dict) for x in doc.get(k) or []):
            raise InputError(f"{where}: {k!r} is not a list of records: it is damaged.")
    return doc


def load_lab(lab_id: str, cache_dir: str | Path | None = None) -> dict:
    """The stored lab `lab_id` (checked), with its "id". InputError: no such lab, or an unreadable record."""
    path = lab_path(lab_id, cache_dir)
    try:
        if path.stat().st_size > MAX_LAB_BYTES:
            raise InputError(f"The lab {quote_ident(lab_id)} is larger than {MAX_LAB_BYTES // 2**20} MiB: not read.")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"No lab {quote_ident(lab_id)} is stored here (the list shows the stored labs).") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"The lab {quote_ident(lab_id)} could not be read ({type(e).__name__}): the file is damaged.") \
            from None
    return {**check_lab(doc, f"The lab {quote_ident(lab_id)}"), "id": lab_id}


def list_labs(cache_dir=None) -> list[str]:
    d = labs_dir(cache_dir)
    return sorted(p.stem for p in d.glob("*.json") if LAB_ID.fullmatch(p.stem)) if d.is_dir() else []


def _clean(o):
    """JSON-ready: NaN and inf as null, numpy scalars as Python numbers."""
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (bool, np.bool_)):
        return bool(o)
    if isinstance(o, (int, np.integer)):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return _num(o)
    return o


def new_doc(spec: LabSpec) -> dict:
    cells = []
    for cell in spec.cells():
        runs = [
            {"seed": ts.seed, "run": ts.run_name(), "status": "pending", "spec": ts.to_dict(), "lr": lr, "lr_source": src}
            for ts, lr, src in cell_specs(spec, cell)
        ]
        cells.append({**cell, "runs": runs})
    return finish(
        {"kind": "lab", "version": VERSION, "id": spec.lab_id, "spec": spec.to_dict(), "status": "running", "cells": cells}
    )


# ----------------------------------------------------------------------------- running it
def short_label(levels: dict) -> str:
    return " / ".join(str(v) for v in levels.values())


def run_lab(
    spec: LabSpec, cache_dir=None, progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None
) -> dict:
    """Train and analyse every cell x seed (each an ordinary cached, resumable run), storing lab.json after every
    finished run. Cancelling keeps the finished runs (lab.json says "cancelled"); running it again resumes."""
    with settings.use_cache_dir(cache_dir):  # the checkpoints are models named trained/<run>@step-N in this cache
        return _run_lab(spec, cache_dir, progress or (lambda p: None), cancel)


def _run_lab(spec: LabSpec, cache_dir, progress, cancel) -> dict:
    # lazy: torch and transformers only for a lab that trains; the Lab page reads lab.json through this module
    from . import series, training

    doc = new_doc(spec)
    try:
        old = load_lab(spec.lab_id, cache_dir)
    except InputError:
        old = None
    if old:  # finished runs of an earlier attempt are kept as they are: nothing retrained, nothing reanalysed
        prev = {r["run"]: r for c in old.get("cells", []) for r in c.get("runs", []) if r.get("status") == "done"}
        for r in prev.values():  # a lab.json written before the embedding matrix's number was kept: that number only
            if "embedding_mean_cosine" not in (r.get("scalars") or {}):
                r.setdefault("scalars", {})["embedding_mean_cosine"] = _embedding_cosine(training, r["run"], cache_dir)
        for c in doc["cells"]:
            c["runs"] = [prev.get(r["run"], r) for r in c["runs"]]
    save_lab(finish(doc), cache_dir)
    order = [(c, j) for c in doc["cells"] for j in range(len(spec.seeds))]
    n = len(order)
    for i, (cell, j) in enumerate(order):
        run = cell["runs"][j]
        if run["status"] == "done":
            continue
        ts = TrainSpec.from_dict(run["spec"])
        head = f"run {i + 1} of {n}: {short_label(cell['levels'])} / seed {run['seed']}"

        def inner(q: Progress, head=head, i=i, last={"frac": 0.0}) -> None:  # noqa: B006 - one dict per run
            # training fills 0.8 of a run's share, the analysis the rest; other stages keep the bar where it is
            if q.stage == "train" and q.total:
                last["frac"] = 0.8 * q.done / q.total
            elif q.stage == "series" and q.total:
                last["frac"] = 0.8 + 0.2 * q.done / q.total
            frac = last["frac"]
            what = (
                f"step {q.done:,} of {q.total:,}"
                if q.stage == "train" and q.total
                else f"analysis, checkpoint {min(q.done + 1, q.total)} of {q.total}"
                if q.stage == "series" and q.total
                else q.message
            )
            progress(
                Progress(
                    q.stage,
                    q.done,
                    q.total,
                    q.rate,
                    q.eta_s,
                    f"{head}, {what}" if what else head,
                    overall=(i + min(frac, 1.0)) / n,
                )
            )

        if cancel is not None and cancel():
            return _cancelled(doc, cache_dir, run, None)
        inner(Progress("start"))
        try:
            t0 = time.perf_counter()
            rec = training.train(ts, cache_dir=cache_dir, progress=inner, cancel=cancel)
            t1 = time.perf_counter()
            arch = ts.arch
            ser = series.analyze_series(
                rec["run"],
                cache_dir=cache_dir,
                progress=inner,
                cancel=cancel,
                attention=arch not in NO_ATTENTION,
                max_tokens=int(spec.analysis_tokens),
                sample=int(spec.analysis_sample),
                device=ts.device,
            )
            t2 = time.perf_counter()
        except Cancelled as e:
            return _cancelled(doc, cache_dir, run, e)
        except Exception as e:  # noqa: BLE001 - a run that cannot train or be analysed: said, the others go on
            why = " ".join(str(e).split())
            run.update(status="failed", error=why if isinstance(e, InputError) else f"{type(e).__name__}: {why}")
            save_lab(finish(doc), cache_dir)
            continue
        h = rec.get("unigram_entropy")
        if h is None:  # run records before issue 41's optimizers: the same definition, computed here
            h = unigram_entropy(training.build_data(ts, training.make_tokenizer(ts)).train)
        last = (rec.get("checkpoints") or [{}])[-1]
        if "step" in last and last.get("embedding_mean_cosine") is None:  # a run trained before records held it
            last["embedding_mean_cosine"] = _embedding_cosine(training, rec["run"], cache_dir, rec)
        nums = run_numbers(rec, ser, spec.thresholds, NO_ATTENTION.get(arch))
        learned = rec.get("learned")
        if learned is None:
            learned = learned_flag(nums["held_out_loss"], h)
        params = rec.get("params") or {"total": rec.get("n_params"), "non_embedding": None}
        run.update(
            status="done",
            params=params,
            unigram_entropy=_num(h),
            learned=bool(learned),
            lr=rec.get("lr", run["lr"]),
            lr_source=rec.get("lr_source", run["lr_source"]),
            seconds={"train": round(t1 - t0, 2), "analysis": round(t2 - t1, 2)},
            torch_threads=rec.get("torch_threads"),
            **nums,
        )
        save_lab(finish(doc), cache_dir)
    doc["status"] = "done"
    save_lab(finish(doc), cache_dir)
    progress(Progress("done", n, n, message=f"lab {doc['id']}: {n} runs", overall=1.0))
    return _clean(doc)


def _cancelled(doc: dict, cache_dir, run: dict, e) -> dict:
    if e is not None:  # cancelled inside this run (its Trainer checkpoint resumes it); else it never started
        run["status"] = "cancelled"
    doc["status"] = "cancelled"
    save_lab(finish(doc), cache_dir)
    k = doc["progress"]["done"]
    raise Cancelled(
        f"Lab {doc['id']} cancelled with {k} of {doc['progress']['total']} runs finished (kept); run it again to resume."
    ) from e


def unigram_entropy(rows: np.ndarray) -> float:
    """Entropy (nats per token) of the unigram distribution of the training rows' tokens."""
    counts = np.bincount(np.asarray(rows).ravel())
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def job_lab(params: dict, progress, cancel) -> dict:
    """The "lab" job: `params["lab"]` (a LabSpec dict) trained and analysed; lab.json in the cache."""
    spec = LabSpec.from_dict(params["lab"])
    doc = run_lab(spec, progress=progress, cancel=cancel)
    return {"lab": doc["id"], "runs": doc["progress"]["total"], "status": doc["status"]}


# ----------------------------------------------------------------------------- text
def effects_lines(doc: dict) -> list[str]:
    """The main-effects table as aligned text lines (the CLI and the benchmark print it)."""
    rows = [("factor", "from -> to", "statistic", "delta", "95% interval", "seeds")]
    for e in doc.get("effects", []):
        iv = "n/a" if e["lo"] is None else f"[{_fmt(e['lo'])}, {_fmt(e['hi'])}]"
        rows.append((e["factor"], f"{e['from']} -> {e['to']}", e["statistic"], _fmt(e["delta"]), iv, str(e["n"])))
    if len(rows) == 1:
        return ["(no factor with two levels: no main effect)"]
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]


def claims_lines(doc: dict) -> list[str]:
    out = []
    for c in doc.get("claims", []):
        out.append(f"- {c['claim']}: {c['verdict']}" + (f". {c['numbers']}" if c["numbers"] else "") + f" ({c['why']})")
    return out


def excluded_lines(doc: dict) -> list[str]:
    return [f"- {c['cell']} seed {x['seed']}: {x['why']}" for c in doc.get("cells", []) for x in c.get("excluded", [])]
