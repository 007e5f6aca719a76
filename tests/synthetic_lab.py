"""A synthetic lab record (lab.json as core/studies/lab.py writes it, version 1) for the Lab view's tests: numpy only.

The default is realistic: 4 families x 2 optimizers x 3 seeds, 500 steps; one run that did not learn (rwkv / sgd,
seed 1: excluded from its cell's summary, and said), attention sinks "not applicable" for the families without
attention, and one cell still pending (lstm / sgd) in a lab that is still running. The summaries, the effects and
the claims are computed here from the per-run values the way the lab computes them (95% t-intervals over seeds of
the runs' "scalars"), so that the view's numbers can be checked against the record's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from scipy import stats as sps

ARCHS = ("gpt2", "mamba", "rwkv", "lstm")
OPTIMIZERS = ("adamw", "sgd")
SEEDS = (0, 1, 2)
STEPS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 500)
THRESHOLDS = (0.2, 0.5)
NO_ATTENTION = {"mamba": "Mamba has no attention (a selective state-space model)",
                "rwkv": "RWKV has no attention (a linear recurrence)",
                "lstm": "an LSTM has no attention (a recurrent network)"}
LEVEL = {"gpt2": 0.45, "mamba": 0.32, "rwkv": 0.27, "lstm": 0.12}  # final mid-depth mean cosine with AdamW
SGD_SHIFT = -0.08
MASSIVE = {"gpt2": 60.0, "mamba": 20.0, "rwkv": 12.0, "lstm": 4.0}
PARAMS = {"gpt2": (929_408, 405_120), "mamba": (951_296, 427_008), "rwkv": (940_160, 415_872),
          "lstm": (921_600, 397_312)}
UNIGRAM = 6.2
NOT_LEARNED = ("rwkv", "sgd", 1)
PENDING = ("lstm", "sgd")
SCALARS = ("mid_mean_cosine", "mid_centred_mean_cosine", "mid_input_shared", "max_massive_ratio", "mid_outlier_dims",
           "mid_sink_share", "sink_rate", "held_out_loss")
EFFECT_STATS = ("mid_mean_cosine", "mid_centred_mean_cosine", "max_massive_ratio")


def _interval(values) -> dict:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    n = len(v)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0, "sd": None, "note": "no learned run"}
    m = float(v.mean())
    if n < 2:
        return {"mean": m, "lo": None, "hi": None, "n": 1, "sd": None, "note": "one seed: no interval"}
    sd = float(v.std(ddof=1))
    h = float(sps.t.ppf(0.975, n - 1) * sd / np.sqrt(n))
    return {"mean": m, "lo": m - h, "hi": m + h, "n": n, "sd": sd}


def _usable(r: dict) -> bool:
    return r["status"] == "done" and bool(r.get("learned"))


def _run(arch: str, opt: str, seed: int, rng, pending: bool) -> dict:
    name = f"{arch}-bpe-wiki-en-2x128-s{seed}-{opt[:4]}{seed:04d}"
    lr, source = (1e-3, "a stated sweep (BENCHMARKS.md)") if opt == "adamw" else (0.1, "a stated sweep (BENCHMARKS.md)")
    base = {"seed": seed, "run": name, "spec": {"arch": arch, "optimizer": opt, "seed": seed}, "lr": lr,
            "lr_source": source}
    if pending:
        return {**base, "status": "pending"}
    level = LEVEL[arch] + (SGD_SHIFT if opt == "sgd" else 0.0) + rng.normal(0, 0.015)
    t = np.log1p(np.asarray(STEPS, dtype=float)) / np.log1p(STEPS[-1])
    curve = [float(0.05 + (level - 0.05) * x + rng.normal(0, 0.004)) for x in t]
    curve[-1] = float(level)
    bad = (arch, opt, seed) == NOT_LEARNED
    loss = float(6.4 if bad else 4.6 + 0.3 * (arch != "gpt2") + 0.2 * (opt == "sgd") + rng.normal(0, 0.03))
    massive = float(MASSIVE[arch] * (0.7 if opt == "sgd" else 1.0) * np.exp(rng.normal(0, 0.1)))
    mean_c = [0.08, float(level), float(min(level + 0.1, 0.99))]
    centred = [0.01, float(level / 3), float(level / 2)]
    attn = arch not in NO_ATTENTION
    sink = float(0.6 + rng.normal(0, 0.03)) if attn else None
    final = {"layers": [0, 1, 2], "mean_cosine": mean_c, "centred_mean_cosine": centred,
             "input_shared": [a - b for a, b in zip(mean_c, centred)], "massive_ratio": [3.0, massive, massive * 1.2],
             "outlier_dims": [0, 2, 3], "sink_share": [None, sink, sink] if attn else None,
             "sink_rate": [None, 0.8, 0.9] if attn else None}
    scalars = {"mid_mean_cosine": mean_c[1], "mid_centred_mean_cosine": centred[1],
               "mid_input_shared": final["input_shared"][1], "max_massive_ratio": max(final["massive_ratio"][1:]),
               "mid_outlier_dims": 2, "mid_sink_share": sink, "sink_rate": 0.85 if attn else None,
               "held_out_loss": loss}
    return {**base, "status": "done", "params": {"total": PARAMS[arch][0], "non_embedding": PARAMS[arch][1]},
            "held_out_loss": loss, "unigram_entropy": UNIGRAM, "learned": loss < UNIGRAM, "steps": list(STEPS),
            "mid_layer": 1, "mid_mean_cosine_by_step": curve, "final": final, "scalars": scalars,
            "first_crossing": {f"{th:g}": next((s for s, v in zip(STEPS, curve) if v >= th), None) for th in THRESHOLDS},
            "not_applicable": {} if attn else {"sink_share": NO_ATTENTION[arch], "sink_rate": NO_ATTENTION[arch]},
            "seconds": {"train": 30.0, "analysis": 5.0}}


def _why(r: dict) -> str:
    if r["status"] == "pending":
        return "not run yet"
    return (f"held-out loss {r['held_out_loss']:.3f} not below the unigram entropy {r['unigram_entropy']:.3f}: it did "
            "not learn")


def _summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if _usable(r)]
    out = {k: _interval([r["scalars"].get(k) for r in ok]) for k in SCALARS}
    out["first_crossing"] = {f"{t:g}": {"steps": [r["first_crossing"][f"{t:g}"] for r in ok],
                                        "crossed": sum(r["first_crossing"][f"{t:g}"] is not None for r in ok),
                                        "n": len(ok)} for t in THRESHOLDS}
    return out


def _effects(cells: list[dict], factors: dict, seeds) -> list[dict]:
    """Each factor's contrast (its first level against each other one), per statistic: per seed the mean over the other
    factors' levels of the differences where both runs learned and finished, then the t-interval of those means."""
    out = []
    by = {tuple(sorted(c["levels"].items())): c for c in cells}
    for f, levels in factors.items():
        others = {k: v for k, v in factors.items() if k != f}
        for to in levels[1:]:
            for stat in EFFECT_STATS:
                per_seed = []
                for j, seed in enumerate(seeds):
                    deltas = []
                    for c in cells:
                        if c["levels"][f] != levels[0]:
                            continue
                        twin = by[tuple(sorted({**c["levels"], f: to}.items()))]
                        ra, rb = c["runs"][j], twin["runs"][j]
                        if _usable(ra) and _usable(rb):
                            deltas.append(rb["scalars"][stat] - ra["scalars"][stat])
                    if deltas:
                        per_seed.append({"seed": seed, "delta": float(np.mean(deltas)), "pairs": len(deltas)})
                iv = _interval([p["delta"] for p in per_seed])
                out.append({"factor": f, "from": levels[0], "to": to, "statistic": stat, "delta": iv["mean"],
                            "lo": iv["lo"], "hi": iv["hi"], "n": iv["n"], "sd": iv["sd"], "per_seed": per_seed,
                            "averaged_over": others, "note": iv.get("note", "")})
    return out


def _claims(effects: list[dict], factors: dict) -> list[dict]:
    arch = [e for e in effects if e["factor"] == "arch" and e["statistic"] == "mid_mean_cosine"]
    first = {"id": "non_transformer_anisotropic", "claim": "A non-Transformer trained identically is anisotropic",
             "delta": None, "lo": None, "hi": None}
    if arch:
        e = max(arch, key=lambda x: x["delta"])
        first.update(verdict="supported", numbers=f"{e['to']}: Δ mid-depth mean cosine {e['delta']:+.3f} vs gpt2",
                     delta=e["delta"], lo=e["lo"], hi=e["hi"], why=f"{e['to']}'s 95% interval lies above 0.2")
    else:
        first.update(verdict="not tested", numbers="", why="the lab has no arch factor with a Transformer and a "
                                                           "non-Transformer family")
    out = [first]
    for cid, claim, f, a, b in (("coupled_adam_lowers", "Coupled Adam lowers anisotropy", "optimizer", "adamw",
                                 "coupled-adam"),
                                ("gate_removes_massive", "The attention gate removes massive activations", "gate", "off",
                                 "on")):
        out.append({"id": cid, "claim": claim, "verdict": "not tested", "numbers": "", "delta": None, "lo": None,
                    "hi": None, "why": f"the lab has no {f} factor with levels {a} and {b}"})
    return out


def synthetic_lab(archs=ARCHS, optimizers=OPTIMIZERS, seeds=SEEDS, status: str = "running", pending=PENDING,
                  seed: int = 0, lab_id: str = "lab-0123456789ab") -> dict:
    rng = np.random.default_rng(seed)
    factors = {"arch": list(archs), "optimizer": list(optimizers)}
    cells = []
    for a in archs:
        for o in optimizers:
            runs = [_run(a, o, s, rng, (a, o) == pending) for s in seeds]
            cells.append({"cell": f"arch={a} / optimizer={o}", "levels": {"arch": a, "optimizer": o}, "runs": runs,
                          "summary": _summary(runs),
                          "excluded": [{"seed": r["seed"], "why": _why(r)} for r in runs if not _usable(r)]})
    effects = _effects(cells, factors, seeds)
    runs = [r for c in cells for r in c["runs"]]
    return {"kind": "lab", "version": 1, "id": lab_id,
            "spec": {"factors": factors, "seeds": list(seeds),
                     "base": {"corpus": "wiki-en", "arch": "gpt2", "tokenizer": "bpe", "vocab_size": 4096, "n_layers": 2,
                              "d_model": 128, "n_heads": 4, "seq_len": 64, "batch_size": 16, "steps": STEPS[-1],
                              "lr": 1e-3, "seed": 0, "name": None},
                     "lr": None, "analysis_tokens": 4096, "analysis_sample": 1000, "thresholds": list(THRESHOLDS),
                     "mid_layer": "the layer at relative depth 0.5: layer ceil(L / 2) of 0..L (L = blocks; 1 of 0..2)"},
            "status": status, "progress": {"done": sum(r["status"] == "done" for r in runs), "total": len(runs)},
            "cells": cells, "effects": effects, "claims": _claims(effects, factors)}


def write_lab(cache_dir, lab_id: str, doc: dict, mtime: float | None = None) -> Path:
    """Store `doc` as the lab `lab_id` of `cache_dir` (<cache_dir>/labs/<id>.json), optionally with its mtime."""
    folder = Path(cache_dir) / "labs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{lab_id}.json"
    path.write_text(json.dumps({**doc, "id": lab_id}), encoding="utf-8")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path
