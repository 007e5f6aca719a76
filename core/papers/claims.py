"""The claims tables of the reproduced papers, computed from measured numbers (numpy only).

Each function takes the small measurement records that `core.papers.run` keeps (per-layer curves,
outlier sets, ablation deltas) and returns rows ``{claim, source, measured, verdict, reason}``.
No verdict is typed in: each one is a comparison of numbers under the rules below, and the reason
of a disagreement is composed from the numbers and from the facts recorded about the model
(``note``: e.g. "a sentence encoder fine-tuned with a contrastive objective"), so flipping the
numbers flips the verdict.

Layer 0 is the embedding output (a CNN's stem); "non-input layers" are 1..L.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

AGREES, DISAGREES, UNTESTED = "agrees", "does not agree", "not testable here"
VERDICTS = (AGREES, DISAGREES, UNTESTED)

# The rules (data, one place): an isotropic cloud's mean cosine is ~0 (± 1/sqrt(d)).
ANISOTROPIC_MIN = 0.1  # mean cosine at or above this: anisotropic
DRIFT_RISE_MIN = 0.1  # the drift experiment's output mean cosine must rise at least this much
SHAPE_R_MIN = 0.5  # Pearson r over relative depth at or above this: our curve follows the published one
ABLATION_SIGMAS = 3.0  # zeroing the outliers hurts "far more" than random dims: above their mean + 3 std
FEW_DIMS_SHARE = 0.05  # "a few" outlier dims: at most 5% of the width (and at least one)
MASSIVE_RATIO_MIN = 100.0  # Sun et al.: massive activations are about 100-10,000x the median |x|
FEW_MASSIVE_DIMS = 3  # "a few fixed dims": the layers' top-1 dims (where massive) are at most this many
SINK_RATE_MIN = 0.3  # Gu et al.'s Sink^0.3: at least this share of the heads put > 0.3 on the first token
SINK_POSITIONS = ("first position", "BOS/special", "delimiter/punctuation")  # where Sun et al. find them

GODEY = "Godey et al. 2023"
GODEY_DRIFT = "Godey et al. 2024"
ETHAYARAJH = "Ethayarajh 2019"
PUCCETTI = "Puccetti et al. 2022"
SUN = "Sun et al. 2024"
YU = "Yu et al. 2024"
GU = "Gu et al. 2025"
CONTROL = "control added here"


def row(claim: str, source: str, measured: str, verdict: str, reason: str = "") -> dict:
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    return {"claim": claim, "source": source, "measured": measured, "verdict": verdict, "reason": reason}


def level(curve: Sequence[float]) -> float:
    """Mean of a per-layer curve over the non-input layers 1..L (all layers when there is one)."""
    v = np.asarray(curve, dtype=float)
    v = v[1:] if v.size > 1 else v
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


def halves(curve: Sequence[float]) -> tuple[float, float]:
    """(mean of the lower half, mean of the upper half) of layers 1..L; the middle layer of an odd count
    goes to neither."""
    v = np.asarray(curve, dtype=float)[1:]
    h = v.size // 2
    if h == 0:
        return float("nan"), float("nan")
    return float(np.nanmean(v[:h])), float(np.nanmean(v[-h:]))


def _because(run: dict, text: str) -> str:
    note = run.get("note")
    return f"{run['label']} is {note}; {text}" if note else text


def _levels(runs: Sequence[dict]) -> str:
    return ", ".join(f"{r['label']} {level(r['mean_cosine']):.2f}" for r in runs)


# ----------------------------------------------------------------------------- Godey et al.
def godey_claims(runs: Sequence[dict], drift: dict | None) -> list[dict]:
    """Claims of Godey et al. from the runs (``model, label, modality, family, tokenization, role, group,
    note, mean_cosine``) and the controlled drift experiment (``alphas, taus, output_mean_cosine,
    attention_entropy``, grids alphas x taus), or None when it was not run."""
    out = []
    trained = [r for r in runs if r["role"] == "trained" and r["family"] == "transformer"]
    measured_how = "mean cosine, mean over the non-input layers"
    for modality in ("text", "image", "audio"):
        rs = [r for r in trained if r["modality"] == modality and r.get("tokenization") != "character"]
        claim = f"Trained Transformers are anisotropic ({modality})"
        if not rs:
            out.append(row(claim, GODEY, "", UNTESTED, f"no trained {modality} Transformer among the runs"))
            continue
        low = [r for r in rs if not level(r["mean_cosine"]) >= ANISOTROPIC_MIN]
        reason = "; ".join(_because(r, f"its mean cosine is {level(r['mean_cosine']):.2f}, under "
                                       f"{ANISOTROPIC_MIN:g}") for r in low)
        out.append(row(claim, GODEY, f"{_levels(rs)} ({measured_how})", DISAGREES if low else AGREES, reason))
    chars = [r for r in runs if r.get("tokenization") == "character"]
    claim = "Character-level Transformers (no subword frequencies) are anisotropic too"
    tc = [r for r in chars if r["role"] == "trained"]
    if not tc:
        ctrl = f" (only random-init controls ran: {_levels(chars)})" if chars else ""
        out.append(row(claim, GODEY, _levels(chars), UNTESTED,
                       f"no trained character-level model among the offline models{ctrl}"))
    else:
        low = [r for r in tc if not level(r["mean_cosine"]) >= ANISOTROPIC_MIN]
        out.append(row(claim, GODEY, _levels(tc), DISAGREES if low else AGREES,
                       "; ".join(_because(r, f"mean cosine {level(r['mean_cosine']):.2f}") for r in low)))
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(r["group"], []).append(r)
    for members in groups.values():
        t = [r for r in members if r["role"] == "trained"]
        c = [r for r in members if r["role"] == "control"]
        if not t or not c:
            continue
        t, c = t[0], c[0]
        lt, lc = level(t["mean_cosine"]), level(c["mean_cosine"])
        claim = f"Training makes {t['label']} more anisotropic than its random-init control"
        source = GODEY if t["family"] == "transformer" else f"{CONTROL} (a {t['family'].upper()}, not a Transformer)"
        ok = lt > lc
        reason = "" if ok else _because(t, f"its random-init control is already at {lc:.2f}")
        out.append(row(claim, source, f"trained {lt:.2f} vs control {lc:.2f} ({measured_how})",
                       AGREES if ok else DISAGREES, reason))
    out += drift_claims(drift)
    return out


def drift_claims(drift: dict | None) -> list[dict]:
    """The controlled experiment's two claims: drift makes the output anisotropic; drift sharpens attention."""
    c1 = "Queries and keys drifting along a common direction make the block's output anisotropic"
    c2 = "That drift allows sharper attention (lower attention entropy)"
    if drift is None:
        return [row(c1, GODEY_DRIFT, "", UNTESTED, "the drift experiment was not run"),
                row(c2, GODEY_DRIFT, "", UNTESTED, "the drift experiment was not run")]
    alphas = np.asarray(drift["alphas"], dtype=float)
    taus = np.asarray(drift["taus"], dtype=float)
    cos = np.asarray(drift["output_mean_cosine"], dtype=float)  # (alphas, taus)
    ent = np.asarray(drift["attention_entropy"], dtype=float)
    lo, hi = int(np.argmin(alphas)), int(np.argmax(alphas))
    c_lo, c_hi = float(cos[lo].mean()), float(cos[hi].mean())
    rise = c_hi - c_lo
    m1 = f"output mean cosine {c_lo:.2f} at alpha = {alphas[lo]:g}, {c_hi:.2f} at alpha = {alphas[hi]:g} (mean over tau)"
    r1 = "" if rise >= DRIFT_RISE_MIN else f"it rises by {rise:+.2f} only (rule: at least {DRIFT_RISE_MIN:g})"
    t = int(np.argmin(taus))
    e_lo, e_hi = float(ent[lo, t]), float(ent[hi, t])
    m2 = (f"attention entropy (H / log T) {e_lo:.2f} at alpha = {alphas[lo]:g}, {e_hi:.2f} at alpha = {alphas[hi]:g}"
          f" (tau = {taus[t]:g})")
    r2 = "" if e_hi < e_lo else ("the entropy rises with the drift: in a random block the drift alone makes "
                                 "attention flatter, not sharper")
    return [row(c1, GODEY_DRIFT, m1, AGREES if not r1 else DISAGREES, r1),
            row(c2, GODEY_DRIFT, m2, AGREES if not r2 else DISAGREES, r2)]


# ----------------------------------------------------------------------------- Ethayarajh
def relative_depth_interp(curve: Sequence[float], n_points: int) -> np.ndarray:
    """`curve` (layers 0..L) read at `n_points` evenly spaced relative depths 0..1 (linear interpolation)."""
    v = np.asarray(curve, dtype=float)
    x = np.linspace(0.0, 1.0, v.size) if v.size > 1 else np.zeros(1)
    return np.interp(np.linspace(0.0, 1.0, n_points), x, v)


def shape_r(ours: Sequence[float], published: Sequence[float]) -> float:
    """Pearson r between a published curve and ours read at the same relative depths (NaN if flat)."""
    p = np.asarray(published, dtype=float)
    o = relative_depth_interp(ours, p.size)
    if p.size < 3 or np.std(p) == 0 or np.std(o) == 0:
        return float("nan")
    return float(np.corrcoef(o, p)[0, 1])


def ethayarajh_claims(runs: Sequence[dict], published: Sequence[dict]) -> list[dict]:
    """Claims of Ethayarajh 2019 from runs (``model, label, note, analogue, curves: {metric: per layer}``)
    and the published curves (``model, metric, values``)."""
    out = []
    for r in runs:
        mc = np.asarray(r["curves"]["mean_cosine"], dtype=float)
        upper = mc[1:]
        worst = int(np.nanargmin(upper)) + 1 if upper.size else 0
        claim = f"Representations are anisotropic in every non-input layer ({r['label']})"
        ok = bool(upper.size) and float(np.nanmin(upper)) >= ANISOTROPIC_MIN
        out.append(row(claim, ETHAYARAJH, f"mean cosine {np.nanmin(upper):.2f} (layer {worst}) to "
                                          f"{np.nanmax(upper):.2f} over layers 1-{mc.size - 1}",
                       AGREES if ok else DISAGREES,
                       "" if ok else _because(r, f"layer {worst} is at {mc[worst]:.2f}, under {ANISOTROPIC_MIN:g}")))
        lo, hi = halves(mc)
        ok = hi > lo
        out.append(row(f"Anisotropy is higher in the upper layers ({r['label']})", ETHAYARAJH,
                       f"mean cosine: lower half {lo:.2f}, upper half {hi:.2f}", AGREES if ok else DISAGREES,
                       "" if ok else _because(r, "its upper layers are less anisotropic than its lower ones")))
        ss = r["curves"].get("self_similarity_adjusted")
        claim = f"Upper layers are more context-specific: lower self-similarity, adjusted for anisotropy ({r['label']})"
        if ss is None or not np.isfinite(np.asarray(ss, dtype=float)[1:]).any():
            out.append(row(claim, ETHAYARAJH, "", UNTESTED, "no token occurs in enough contexts to track"))
        else:
            lo, hi = halves(ss)
            ok = hi < lo
            out.append(row(claim, ETHAYARAJH, f"adjusted self-similarity: lower half {lo:.2f}, upper half {hi:.2f}",
                           AGREES if ok else DISAGREES,
                           "" if ok else _because(r, "its upper layers keep a word's vectors as similar across "
                                                     "contexts as the lower ones")))
    for p in published:
        if p["metric"] != "mean_cosine":
            continue
        like = [r for r in runs if r.get("analogue") == p["model"]]
        claim = f"The published {p['model']} anisotropy curve has the same shape on a comparable model"
        if not like:
            out.append(row(claim, ETHAYARAJH, "", UNTESTED, f"no run stands in for {p['model']}"))
            continue
        r = like[0]
        rr = shape_r(r["curves"]["mean_cosine"], p["values"])
        ok = np.isfinite(rr) and rr >= SHAPE_R_MIN
        out.append(row(claim, ETHAYARAJH, f"{r['label']} vs {p['model']}: Pearson r = {rr:.2f} over relative depth",
                       AGREES if ok else DISAGREES,
                       "" if ok else _because(r, f"r = {rr:.2f} is under {SHAPE_R_MIN:g}")))
    return out


# ----------------------------------------------------------------------------- Puccetti et al.
def puccetti_claims(runs: Sequence[dict], published: Sequence[dict]) -> list[dict]:
    """Claims of Puccetti et al. 2022 from runs (``model, label, note, d, norm_persistent,
    activation_persistent, freq: {outlier_abs_r, random_abs_r} per layer, ablation or None,
    ablation_note``) and the published dims (``model, dims, ours`` (None: model not offline), ``why``)."""
    out = []
    for r in runs:
        norm, act = list(r["norm_persistent"]), list(r["activation_persistent"])
        n, d = len(norm), int(r["d"])
        ok = 1 <= n <= max(2, FEW_DIMS_SHARE * d)
        why = ("no dim is a norm-parameter outlier in more than 3 layers" if n == 0 else
               f"{n} of {d} dims ({n / d:.0%}) are flagged, more than {FEW_DIMS_SHARE:.0%}")
        out.append(row(f"A few dims are LayerNorm-parameter outliers (3 sigma, > 3 layers) ({r['label']})", PUCCETTI,
                       f"{n} dims of {d}: {norm[:16]}{' …' if n > 16 else ''}", AGREES if ok else DISAGREES,
                       "" if ok else _because(r, why)))
        both = sorted(set(norm) & set(act))
        claim = f"The same dims are outliers of the hidden states ({r['label']})"
        if not norm:
            out.append(row(claim, PUCCETTI, f"activation outliers {act}", UNTESTED, "no norm-parameter outliers"))
        else:
            out.append(row(claim, PUCCETTI, f"in both: {both} (activation outliers: {act})",
                           AGREES if both else DISAGREES,
                           "" if both else _because(r, "no norm-parameter outlier is an activation outlier")))
        f = r.get("freq")
        claim = f"Outlier dims' magnitude tracks token frequency more than other dims ({r['label']})"
        if not f or not f.get("outlier_abs_r"):
            out.append(row(claim, PUCCETTI, "", UNTESTED, (f or {}).get("why", "no outlier dims to correlate")))
        else:
            o = np.asarray(f["outlier_abs_r"], dtype=float)
            z = np.asarray(f["random_abs_r"], dtype=float)
            above = int(np.sum(o > z))
            ok = above > o.size / 2
            out.append(row(claim, PUCCETTI, f"mean |r| with log frequency: outlier dims {np.nanmean(o):.2f}, random dims "
                                            f"{np.nanmean(z):.2f}; outliers above random in {above} of {o.size} layers",
                           AGREES if ok else DISAGREES,
                           "" if ok else _because(r, "its outlier dims track frequency no more than random dims")))
        ab = r.get("ablation")
        claim = f"Zeroing the outlier dims in every norm hurts the model far more than random dims ({r['label']})"
        if not ab:
            out.append(row(claim, PUCCETTI, "", UNTESTED, r.get("ablation_note") or "no ablation was run"))
        else:
            bar = ab["random_delta_mean"] + ABLATION_SIGMAS * (ab["random_delta_std"] or 0.0)
            ok = ab["delta"] > bar
            out.append(row(claim, PUCCETTI, f"loss {ab['delta']:+.2f} (dims {ab['dims']}) vs random "
                                            f"{ab['random_delta_mean']:+.2f} ± {ab['random_delta_std']:.2f}",
                           AGREES if ok else DISAGREES,
                           "" if ok else _because(r, f"Δ {ab['delta']:+.2f} is within {ABLATION_SIGMAS:g} std of "
                                                     "random dims")))
    for p in published:
        claim = f"{p['model']}'s outlier dims are {p['dims']}"
        if p.get("ours") is None:
            out.append(row(claim, PUCCETTI, "", UNTESTED, p.get("why") or f"{p['model']} is not among the offline models"))
            continue
        both = sorted(set(p["dims"]) & set(p["ours"]))
        out.append(row(claim, PUCCETTI, f"ours: {p['ours']}", AGREES if both else DISAGREES,
                       "" if both else "none of the published dims is flagged here"))
    return out


# ----------------------------------------------------------------------------- the outlier chain
def chain_claims(runs: Sequence[dict]) -> list[dict]:
    """Claims of the outlier chain from runs (``label, note, massive: [{layer, ratio, dim, position_class}],
    super_weights: [{block, module, row, col, value}], n_blocks, sink_rate, outlier_dims``)."""
    out = []
    for r in runs:
        m = [x for x in r["massive"] if x.get("ratio") is not None and np.isfinite(x["ratio"])]
        peak = max(m, key=lambda x: x["ratio"]) if m else None
        claim = f"A few activations are 100x or more the median |x| (massive activations) ({r['label']})"
        if peak is None:
            out.append(row(claim, SUN, "", UNTESTED, "no layer has a top-1/median ratio"))
            continue
        ok = peak["ratio"] >= MASSIVE_RATIO_MIN
        out.append(row(claim, SUN, f"top-1/median peaks at {peak['ratio']:,.0f}x (layer {peak['layer']}, dim {peak['dim']})",
                       AGREES if ok else DISAGREES,
                       "" if ok else _because(r, f"its largest activation is {peak['ratio']:.0f}x the median")))
        big = [x for x in m if x["ratio"] >= MASSIVE_RATIO_MIN]
        dims = sorted({int(x["dim"]) for x in big})
        claim = f"Massive activations sit in a few fixed dims across layers ({r['label']})"
        if not big:
            out.append(row(claim, SUN, "", UNTESTED, "no massive activation to place"))
        else:
            ok = len(dims) <= FEW_MASSIVE_DIMS
            out.append(row(claim, SUN, f"top-1 dims of the {len(big)} massive layers: {dims}", AGREES if ok else DISAGREES,
                           "" if ok else _because(r, f"{len(dims)} different dims hold them")))
            where = sorted({str(x.get("position_class")) for x in big})
            ok = bool(where) and all(w in SINK_POSITIONS for w in where)
            out.append(row(f"Massive activations sit at the first token or delimiters ({r['label']})", SUN,
                           f"positions: {', '.join(where)}", AGREES if ok else DISAGREES,
                           "" if ok else "some of the layers' largest activations sit on ordinary tokens"))
            od = set(int(d) for d in r.get("outlier_dims") or [])
            both = sorted(set(dims) & od)
            out.append(row(f"The massive dims are outlier dims of the hidden states ({r['label']})", CONTROL,
                           f"massive {dims}, outlier dims {sorted(od)[:16]}", AGREES if both else DISAGREES,
                           "" if both else _because(r, "no massive dim is a persistent outlier dim")))
        sw = r.get("super_weights") or []
        claim = f"A super weight in an early block's MLP output projection ({r['label']})"
        early = [w for w in sw if w["block"] < max(1, r["n_blocks"] // 4)]
        where = "; ".join(f"block {w['block']} {w['module']}[{w['row']}, {w['col']}] = {w['value']:.3g}" for w in sw[:4])
        out.append(row(claim, YU, where or "no candidate found", AGREES if early else DISAGREES,
                       "" if early else _because(r, "no super-weight candidate in the first quarter of its blocks"
                                                    if sw else "no super-weight candidate was found")))
        sr = r.get("sink_rate")
        claim = f"Attention sinks: many heads put most attention on the first token ({r['label']})"
        if sr is None or not np.isfinite(sr):
            out.append(row(claim, GU, "", UNTESTED, "no attention probabilities for this model"))
        else:
            ok = sr >= SINK_RATE_MIN
            out.append(row(claim, GU, f"sink rate (share of heads with alpha_1 > 0.3) {sr:.2f}", AGREES if ok else DISAGREES,
                           "" if ok else _because(r, f"only {sr:.0%} of its heads are sinks")))
    return out


def summary(claims: Sequence[dict]) -> dict:
    """How many claims agree, do not, and cannot be tested here."""
    return {v: sum(1 for c in claims if c["verdict"] == v) for v in VERDICTS}
