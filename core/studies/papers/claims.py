"""The claims tables of the reproduced papers, computed from measured numbers (numpy only).

Each function takes the small measurement records that `core.studies.papers.run` keeps (per-layer curves,
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

from .evidence import beyond, decimals, disjoint, fmt

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


UNKNOWN = "unknown (nothing measured here explains it)"


def row(claim: str, source: str, measured: str, verdict: str, reason: str = "", context: str = "",
        margins: Sequence[dict] = ()) -> dict:
    """One claim. `reason` (a disagreement's) is composed of measured quantities only; `context` holds what is
    recorded about a model (FACTS prose), labelled as such, never the reason a verdict flips. `margins`: the
    compared quantities' intervals against their thresholds (`margin`), read by `robustness`."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    return {"claim": claim, "source": source, "measured": measured, "verdict": verdict, "reason": reason,
            "context": context, "margins": [m for m in margins if m is not None]}


def margin(what: str, ci: Sequence[float] | None, vs: float | Sequence[float] | None) -> dict | None:
    """A compared quantity `what`: its interval `ci` against a threshold (a number) or against the interval of
    the quantity it is compared with. None (dropped) when there is nothing to compare with."""
    if vs is None:
        return None
    vs = float(vs) if isinstance(vs, (int, float, np.floating)) else (None if vs is None else [float(x) for x in vs])
    return {"what": what, "ci": None if not ci or None in ci else [float(ci[0]), float(ci[1])], "vs": vs}


def straddles(m: dict) -> bool | None:
    """Whether a margin's interval straddles its threshold (or overlaps the interval it is compared with);
    None without an interval."""
    vs = m.get("vs")
    got = disjoint(m.get("ci"), vs) if isinstance(vs, (list, tuple)) else beyond(m.get("ci"), vs)
    return None if got is None else not got


# ----------------------------------------------------------------------------- robustness
ROBUST, NOT_ROBUST = "robust", "not robust"
ROBUST_RULE = ("robust: the verdict is the same at the main settings, at half the token budget and at the next seed "
               "(two budgets, two seeds), and at each of the three no 95% interval of a compared quantity straddles "
               "its threshold or overlaps the interval of the quantity it is compared with; a row whose quantities "
               "have no interval is judged on its verdicts alone and says so, as does one without an interval at one of "
               "the settings; a claim not testable here has no "
               "robustness")


def _ci_txt(ci: Sequence[float] | None) -> str:
    return "no interval" if not ci else fmt((ci[0] + ci[1]) / 2, ci).split(" ", 1)[1]


def robustness(rows: Sequence[dict], variant_rows: dict[str, Sequence[dict]]) -> list[dict]:
    """`rows` with `robust` ("robust", "not robust", "" when not testable) and `robust_why` (what made it not
    robust, or "verdict only" for a row without intervals), judged against the same claims computed at each
    variant's settings (`variant_rows`: {label: rows}) by `ROBUST_RULE`. A claim missing from a variant counts
    as a flip."""
    by = {tag: {r["claim"]: r for r in vr} for tag, vr in variant_rows.items()}
    out = []
    for r in rows:
        if r["verdict"] == UNTESTED:
            out.append({**r, "robust": "", "robust_why": ""})
            continue
        flips = [f"{by[t][r['claim']]['verdict'] if r['claim'] in by[t] else 'absent'} at {t}" for t in by
                 if by[t].get(r["claim"], {}).get("verdict") != r["verdict"]]
        seen = [("these settings", r)] + [(t, by[t][r["claim"]]) for t in by if r["claim"] in by[t]]
        wide, any_ci, bare = [], False, []
        for where, x in seen:
            ms = x.get("margins") or []
            if ms and all(m.get("ci") is None for m in ms):
                bare.append(where)  # this setting's quantities have no interval: judged on its verdict there
            for m in ms:
                s = straddles(m)
                any_ci = any_ci or s is not None
                if s:
                    vs = m["vs"]
                    what = f"{_ci_txt(vs)}" if isinstance(vs, list) else f"{vs:g}"
                    wide.append(f"{m['what']} {_ci_txt(m['ci'])} {'overlaps' if isinstance(vs, list) else 'straddles'} "
                                f"{what} at {where}")
        if flips:
            out.append({**r, "robust": NOT_ROBUST, "robust_why": "the verdict is " + "; ".join(flips)})
        elif wide:
            out.append({**r, "robust": NOT_ROBUST, "robust_why": "; ".join(wide)})
        else:
            why = ("verdict only: the same at every setting, no interval" if not any_ci else
                   f"no interval at {', '.join(bare)}: the verdict alone there" if bare else "")
            out.append({**r, "robust": ROBUST, "robust_why": why})
    return out


def level(curve: Sequence[float]) -> float:
    """Mean of a per-layer curve over the non-input layers 1..L (all layers when there is one)."""
    v = np.asarray(curve, dtype=float)
    v = v[1:] if v.size > 1 else v
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


def shared_share(raw_control: float, raw_without_shared: float) -> float:
    """The part of a control's mean cosine due to the input components it adds alike to every token: (as built -
    with them zeroed) / as built, both levels of the same draw. NaN when the control's level is not positive."""
    if not (np.isfinite(raw_control) and np.isfinite(raw_without_shared)) or raw_control <= 0:
        return float("nan")
    return float((raw_control - raw_without_shared) / raw_control)


def halves(curve: Sequence[float]) -> tuple[float, float]:
    """(mean of the lower half, mean of the upper half) of layers 1..L; the middle layer of an odd count
    goes to neither."""
    v = np.asarray(curve, dtype=float)[1:]
    h = v.size // 2
    if h == 0:
        return float("nan"), float("nan")
    return float(np.nanmean(v[:h])), float(np.nanmean(v[-h:]))


def _because(run: dict, text: str) -> str:
    """A disagreement's reason: the measured `text`, never the stored note (see `_context`)."""
    return text


def _context(*runs: dict) -> str:
    notes = [f"{r['label']} is {r['note']}" for r in runs if r.get("note")]
    return ("context (a recorded fact about the model, not a measurement): " + "; ".join(notes)) if notes else ""


def _lvl(r: dict, key: str = "mean_cosine") -> tuple[float, list | None]:
    """A run's level of `key` and its bootstrap interval (the record's `levels`, else the level of its curve)."""
    got = (r.get("levels") or {}).get(key)
    if got:
        return float(got["value"]), got.get("ci")
    curve = r.get(key) if key in r else (r.get("curves") or {}).get(key)
    return (level(curve), None) if curve is not None else (float("nan"), None)


def _k(ci) -> int:
    """Decimals an interval justifies (2 without one)."""
    return decimals(ci[0], ci[1]) if ci else 2


def _show(r: dict, key: str = "mean_cosine") -> str:
    v, ci = _lvl(r, key)
    return fmt(v, ci)


def _levels(runs: Sequence[dict]) -> str:
    return ", ".join(f"{r['label']} {_show(r)}" for r in runs)


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
        low = [r for r in rs if not _lvl(r)[0] >= ANISOTROPIC_MIN]
        reason = "; ".join(_because(r, f"its mean cosine is {_show(r)}, under {ANISOTROPIC_MIN:g}") for r in low)
        out.append(row(claim, GODEY, f"{_levels(rs)} ({measured_how}; rule: at least {ANISOTROPIC_MIN:g})",
                       DISAGREES if low else AGREES, reason,
                       margins=[margin(f"{r['label']}'s level", _lvl(r)[1], ANISOTROPIC_MIN) for r in rs]))
    chars = [r for r in runs if r.get("tokenization") == "character"]
    claim = "Character-level Transformers (no subword frequencies) are anisotropic too"
    tc = [r for r in chars if r["role"] == "trained"]
    if not tc:
        ctrl = f" (only random-init controls ran: {_levels(chars)})" if chars else ""
        out.append(row(claim, GODEY, _levels(chars), UNTESTED,
                       f"no trained character-level model among the offline models{ctrl}"))
    else:
        low = [r for r in tc if not _lvl(r)[0] >= ANISOTROPIC_MIN]
        out.append(row(claim, GODEY, _levels(tc), DISAGREES if low else AGREES,
                       "; ".join(_because(r, f"mean cosine {_show(r)}") for r in low),
                       margins=[margin(f"{r['label']}'s level", _lvl(r)[1], ANISOTROPIC_MIN) for r in tc]))
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(r["group"], []).append(r)
    for members in groups.values():
        t = [r for r in members if r["role"] == "trained"]
        c = [r for r in members if r["role"] == "control" and not r.get("noshared")]
        if not t or not c:
            continue
        out.append(_training_row(t[0], c[0], next((r for r in members if r.get("noshared")), None)))
    out += _near_isotropic_rows(runs)
    out += _frequency_rows(runs)
    out += drift_claims(drift)
    return out


def _training_row(t: dict, c: dict, ns: dict | None) -> dict:
    """"Training makes X more anisotropic than its control", judged like-for-like: against the control without
    its shared input where one ran (its construction removed), else the control itself; the centred values
    (blind to any vector added to every token) beside, and a disagreement between the two said."""
    claim = f"Training makes {t['label']} more anisotropic than its random-init control"
    source = GODEY if t["family"] == "transformer" else f"{CONTROL} (a {t['family'].upper()}, not a Transformer)"
    used = ns or c
    (lt, ci_t), (lu, ci_u), (lc, _) = _lvl(t), _lvl(used), _lvl(c)
    ok = lt > lu
    which = (f"the control without its shared input ({used['label']}: its token-type table zeroed)" if ns else
             f"the control as built ({c['label']})")
    measured = f"trained {_show(t)} vs {which} {_show(used)}"
    if ns:
        share = shared_share(lc, lu)
        measured += f"; as built {_show(c)}, shared-input share {share:.0%}"
    ct, cc = _lvl(t, "centred_mean_cosine")[0], _lvl(used, "centred_mean_cosine")[0]
    centred_ok = None
    if np.isfinite(ct) and np.isfinite(cc):
        measured += f"; centred: trained {_show(t, 'centred_mean_cosine')} vs control {_show(used, 'centred_mean_cosine')}"
        centred_ok = ct > cc
    measured += " (mean over the non-input layers; 95% bootstrap intervals)"
    parts = []
    if not ok:
        if ns is None and np.isfinite(cc) and lc > 0 and abs(cc) < 0.1 * lc:
            parts.append(f"the control's centred value ({cc:.3f}) is near 0: its {lc:.2f} is a vector shared by all "
                         "its tokens, not a spread of directions")
        elif ns is not None:
            parts.append(f"the control without its shared input is still at {lu:.2f}")
    if centred_ok is not None and centred_ok != ok:
        parts.append(f"raw and centred disagree: centred, the trained model is {'above' if centred_ok else 'not above'} "
                     "the control")
    if disjoint(ci_t, ci_u) is False:
        parts.append("the two intervals overlap: not resolved at this budget")
    reason = "; ".join(parts) if parts else ("" if ok else UNKNOWN)
    return row(claim, source, measured, AGREES if ok else DISAGREES, reason, _context(t),
               margins=[margin("the trained level", ci_t, ci_u)])


def _near_isotropic_rows(runs: Sequence[dict]) -> list[dict]:
    """Godey et al.: untrained Transformers are close to isotropic. Judged on the controls that add nothing alike
    to every token (the -noshared variants, and controls whose init adds nothing shared: `shared` == "nothing")."""
    out = []
    for r in runs:
        if r["role"] != "control" or r.get("family") != "transformer":
            continue
        if not (r.get("noshared") or r.get("shared") == "nothing"):
            continue
        v, ci = _lvl(r)
        ok = v < ANISOTROPIC_MIN
        mc = np.asarray(r.get("mean_cosine") if "mean_cosine" in r else r["curves"]["mean_cosine"], dtype=float)
        last = float(mc[-1]) if mc.size else float("nan")
        why = "" if ok else (f"its mean cosine rises with depth to {last:.2f} at the last layer" if mc.size > 2 and
                             last > mc[1] + ANISOTROPIC_MIN else UNKNOWN)
        out.append(row(f"Untrained Transformers are close to isotropic ({r['label']})", GODEY,
                       f"mean cosine {_show(r)} (non-input layers; rule: under {ANISOTROPIC_MIN:g}); "
                       f"centred {_show(r, 'centred_mean_cosine')}", AGREES if ok else DISAGREES, why,
                       margins=[margin("the level", ci, ANISOTROPIC_MIN)]))
    return out


def _frequency_rows(runs: Sequence[dict]) -> list[dict]:
    """Godey et al.: anisotropy is not explained by token frequency alone. A trained model on `uniform-random`
    (token ids drawn uniformly: no frequency structure) stays anisotropic; beside its wiki-en run."""
    out = []
    for f in runs:
        if f["role"] != "frequency":
            continue
        wiki = next((r for r in runs if r["model"] == f["model"] and r["role"] == "trained"), None)
        v, ci = _lvl(f)
        ok = v >= ANISOTROPIC_MIN
        measured = f"{f['corpus']} {_show(f)}" + (f" vs {wiki['corpus']} {_show(wiki)}" if wiki else "")
        out.append(row(f"Anisotropy is not explained by token frequency alone ({f['label']})", GODEY,
                       measured + f" (rule: still at least {ANISOTROPIC_MIN:g} without frequency structure)",
                       AGREES if ok else DISAGREES, "" if ok else UNKNOWN,
                       margins=[margin(f"the {f['corpus']} level", ci, ANISOTROPIC_MIN)]))
    return out


DRIFT_C1 = "Queries and keys drifting along a common direction make the block's output anisotropic"
DRIFT_C2 = "That drift allows sharper attention (lower attention entropy)"
DRIFT_KEY_ONLY = "A drift of the keys alone leaves attention and output unchanged (a constant per query)"
DRIFT_BASELINE = ("Baseline, input drift: a vector shared by every input token makes the block's output anisotropic "
                  "(anisotropic inputs, not the query/key mechanism)")
KEY_ONLY_TOL = 1e-9  # "unchanged": no measured number of the key-only experiment moves more than this


def drift_experiments(drift: dict | None) -> dict:
    """{target: grids} of a drift record; a record from before the isolated experiment (flat grids of
    inputs g + alpha u) holds the input-drift baseline only."""
    if not drift:
        return {}
    if "experiments" in drift:
        return dict(drift["experiments"])
    if "output_mean_cosine" in drift:
        return {"input": {k: drift[k] for k in ("output_mean_cosine", "attention_entropy", "input_mean_cosine")
                          if k in drift}}
    return {}


def _axis(drift: dict, name: str) -> np.ndarray:
    return np.asarray(drift.get(name) or (drift.get("spec") or {}).get(name) or [], dtype=float)


def drift_claims(drift: dict | None) -> list[dict]:
    """The controlled experiment's claims. Godey et al.'s two (query/key drift makes the output anisotropic;
    it sharpens attention) are judged on the isolated experiment only (``query_key``: the inputs and the
    values stay isotropic); the key-only experiment and the input-drift baseline get rows of their own, so
    anisotropic inputs are never read as the mechanism. `drift`: ``alphas, taus`` and ``experiments``
    ({target: {output_mean_cosine, output_within_sequence_cosine, attention_entropy: alphas x taus,
    input_mean_cosine: per alpha}}); None when the experiment was not run."""
    exps = drift_experiments(drift)
    if not exps:
        why = "the drift experiment was not run"
        return [row(c, GODEY_DRIFT if c in (DRIFT_C1, DRIFT_C2) else CONTROL, "", UNTESTED, why)
                for c in (DRIFT_C1, DRIFT_C2, DRIFT_KEY_ONLY, DRIFT_BASELINE)]
    alphas, taus = _axis(drift, "alphas"), _axis(drift, "taus")
    lo, hi = int(np.argmin(alphas)), int(np.argmax(alphas))
    span = f"alpha = {alphas[lo]:g} → {alphas[hi]:g}"
    out = []
    qk = exps.get("query_key")
    if qk is None:
        why = ("the isolated query/key experiment was not run: this record has only input drift, a baseline whose "
               "inputs are anisotropic by construction, which cannot test the query/key mechanism")
        out += [row(DRIFT_C1, GODEY_DRIFT, "", UNTESTED, why), row(DRIFT_C2, GODEY_DRIFT, "", UNTESTED, why)]
    else:
        cos = np.asarray(qk["output_mean_cosine"], dtype=float)  # (alphas, taus)
        rises = cos[hi] - cos[lo]
        t = int(np.argmax(rises))
        rise = float(rises[t])
        rci = (qk.get("output_mean_cosine_rise_ci") or [None] * cos.shape[1])[t]
        m1 = (f"isolated (inputs and values isotropic): output mean cosine {cos[lo, t]:.2f} → {cos[hi, t]:.2f}, "
              f"{span}, tau = {taus[t]:g} (the largest rise over tau: {fmt(rise, rci)}, 95% interval over the "
              f"sequences; rule: at least {DRIFT_RISE_MIN:g})")
        r1 = ""
        within = qk.get("output_within_sequence_cosine")
        w_txt = ""
        if within is not None:
            w = np.asarray(within, dtype=float)
            tw = int(np.argmax(w[hi] - w[lo]))
            w_txt = (f"; within one sequence {w[lo, tw]:.2f} → {w[hi, tw]:.2f} (tau = {taus[tw]:g})")
            m1 += w_txt
        if rise < DRIFT_RISE_MIN:
            r1 = f"over all token pairs it rises by {rise:+.2f} at most (rule: at least {DRIFT_RISE_MIN:g})"
            if within is not None and float(np.max(w[hi] - w[lo])) >= DRIFT_RISE_MIN:
                r1 += ("; the pairs of one sequence rise by "
                       f"{float(np.max(w[hi] - w[lo])):+.2f}: the drift makes the tokens of a sequence alike "
                       "(they attend to the same keys), not the tokens of different sequences")
        out.append(row(DRIFT_C1, GODEY_DRIFT, m1, DISAGREES if r1 else AGREES, r1,
                       margins=[margin("the largest rise", rci, DRIFT_RISE_MIN)]))
        ent = np.asarray(qk["attention_entropy"], dtype=float)
        lower = ent[hi] < ent[lo]
        t0 = int(np.argmin(taus))
        m2 = (f"isolated: attention entropy (H / log T) {ent[lo, t0]:.2f} → {ent[hi, t0]:.2f} at tau = {taus[t0]:g}, "
              f"{span}; lower at {int(lower.sum())} of {lower.size} temperatures")
        r2 = "" if lower.all() else (
            f"the entropy does not fall at tau = {', '.join(f'{x:g}' for x in taus[~lower])}: there the drift leaves "
            "attention as flat or flatter")
        out.append(row(DRIFT_C2, GODEY_DRIFT, m2, DISAGREES if r2 else AGREES, r2))
    key = exps.get("key")
    if key is None:
        out.append(row(DRIFT_KEY_ONLY, CONTROL, "", UNTESTED, "the key-only experiment was not run"))
    else:
        moved = max(float(np.max(np.abs(np.asarray(key[q], dtype=float) - np.asarray(key[q], dtype=float)[lo])))
                    for q in ("output_mean_cosine", "attention_entropy"))
        ok = moved <= KEY_ONLY_TOL
        out.append(row(DRIFT_KEY_ONLY, CONTROL, f"largest change of output mean cosine or entropy, {span}: {moved:.1e}",
                       AGREES if ok else DISAGREES,
                       "" if ok else f"the key-only drift moves a measured number by {moved:.1e} (rule: at most "
                                     f"{KEY_ONLY_TOL:g})"))
    base = exps.get("input")
    if base is None:
        out.append(row(DRIFT_BASELINE, CONTROL, "", UNTESTED, "the input-drift baseline was not run"))
    else:
        bc = np.asarray(base["output_mean_cosine"], dtype=float)
        b_lo, b_hi = float(bc[lo].mean()), float(bc[hi].mean())
        m = f"output mean cosine {b_lo:.2f} → {b_hi:.2f}, {span} (mean over tau)"
        inp = base.get("input_mean_cosine")
        if inp is not None:
            iv = np.asarray(inp, dtype=float).reshape(len(alphas), -1)[:, 0]
            m += f"; the inputs themselves {iv[lo]:.2f} → {iv[hi]:.2f}"
        rise = b_hi - b_lo
        bci = base.get("output_mean_cosine_rise_mean_ci")
        m += f"; rise {fmt(rise, bci)} (95% interval over the sequences; rule: at least {DRIFT_RISE_MIN:g})"
        out.append(row(DRIFT_BASELINE, CONTROL, m, AGREES if rise >= DRIFT_RISE_MIN else DISAGREES,
                       "" if rise >= DRIFT_RISE_MIN else f"it rises by {rise:+.2f} only (rule: at least "
                                                         f"{DRIFT_RISE_MIN:g})",
                       margins=[margin("the rise", bci, DRIFT_RISE_MIN)]))
    return out


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
        ev = r.get("evidence") or {}
        lay = ev.get("layers") or [None] * mc.size
        upper = mc[1:]
        worst = int(np.nanargmin(upper)) + 1 if upper.size else 0
        best = int(np.nanargmax(upper)) + 1 if upper.size else 0
        claim = f"Representations are anisotropic in every non-input layer ({r['label']})"
        ok = bool(upper.size) and float(np.nanmin(upper)) >= ANISOTROPIC_MIN
        measured = (f"mean cosine {fmt(mc[worst], lay[worst])} (layer {worst}, the lowest) to {fmt(mc[best], lay[best])} "
                    f"(layer {best}) over layers 1-{mc.size - 1} (rule: every layer at least {ANISOTROPIC_MIN:g})")
        out.append(row(claim, ETHAYARAJH, measured, AGREES if ok else DISAGREES,
                       "" if ok else _because(r, f"layer {worst} is at {fmt(mc[worst], lay[worst])}, under "
                                                 f"{ANISOTROPIC_MIN:g}"),
                       margins=[margin("the lowest layer's mean cosine", ev.get("min"), ANISOTROPIC_MIN)]))
        lo, hi = halves(mc)
        ok = hi > lo
        dci = ev.get("halves_diff")
        out.append(row(f"Anisotropy is higher in the upper layers ({r['label']})", ETHAYARAJH,
                       f"mean cosine: lower half {lo:.{_k(dci)}f}, upper half {hi:.{_k(dci)}f}; upper minus lower "
                       f"{fmt(hi - lo, dci)}", AGREES if ok else DISAGREES,
                       "" if ok else _because(r, "its upper layers are less anisotropic than its lower ones"),
                       margins=[margin("upper minus lower half", dci, 0.0)]))
        ss = r["curves"].get("self_similarity_adjusted")
        claim = f"Upper layers are more context-specific: lower self-similarity, adjusted for anisotropy ({r['label']})"
        if ss is None or not np.isfinite(np.asarray(ss, dtype=float)[1:]).any():
            out.append(row(claim, ETHAYARAJH, "", UNTESTED, "no token occurs in enough contexts to track"))
        else:
            lo, hi = halves(ss)
            ok = hi < lo
            out.append(row(claim, ETHAYARAJH, f"adjusted self-similarity: lower half {lo:.2f}, upper half {hi:.2f} "
                                              "(no interval: the statistic is not bootstrapped)",
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
        ci = ((r.get("evidence") or {}).get("shape_r") or {}).get(p["model"])
        ok = np.isfinite(rr) and rr >= SHAPE_R_MIN
        out.append(row(claim, ETHAYARAJH, f"{r['label']} vs {p['model']}: Pearson r = {fmt(rr, ci)} over relative depth "
                                          f"(rule: at least {SHAPE_R_MIN:g}; the interval resamples our curve only)",
                       AGREES if ok else DISAGREES,
                       "" if ok else _because(r, f"r = {fmt(rr, ci)} is under {SHAPE_R_MIN:g}"),
                       margins=[margin("r", ci, SHAPE_R_MIN)]))
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
                       f"{n} dims of {d}: {norm[:16]}{' …' if n > 16 else ''} (read from the norm weights: exact, "
                       "no sample, so no interval)", AGREES if ok else DISAGREES,
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
            fe = (r.get("evidence") or {}).get("frequency") or {}
            ci_n, ci_d = fe.get("layers_above"), fe.get("mean_diff")
            n_txt = f" (95% interval on the token sample: {ci_n[0]:.0f}-{ci_n[1]:.0f})" if ci_n else " (no interval)"
            d_txt = f"; outlier minus random {fmt(float(np.nanmean(o - z)), ci_d)}" if ci_d else ""
            out.append(row(claim, PUCCETTI, f"mean |r| with log frequency: outlier dims {np.nanmean(o):.2f}, random dims "
                                            f"{np.nanmean(z):.2f}{d_txt}; outliers above random in {above} of {o.size} "
                                            f"layers{n_txt} (rule: more than half)",
                           AGREES if ok else DISAGREES,
                           "" if ok else _because(r, "its outlier dims track frequency no more than random dims"),
                           margins=[margin("layers where the outliers are above", ci_n, o.size / 2)]))
        ab = r.get("ablation")
        claim = f"Zeroing the outlier dims in every norm hurts the model far more than random dims ({r['label']})"
        if not ab:
            out.append(row(claim, PUCCETTI, "", UNTESTED, r.get("ablation_note") or "no ablation was run"))
        else:
            bar = ab["random_delta_mean"] + ABLATION_SIGMAS * (ab["random_delta_std"] or 0.0)
            ok = ab["delta"] > bar
            rd = [float(x) for x in ab.get("random_deltas") or []]
            spread = f", {len(rd)} draws from {min(rd):+.2f} to {max(rd):+.2f}" if rd else ""
            out.append(row(claim, PUCCETTI, f"loss {ab['delta']:+.2f} (dims {ab['dims']}) vs random "
                                            f"{ab['random_delta_mean']:+.2f} ± {ab['random_delta_std']:.2f}{spread} "
                                            f"(rule: above their mean + {ABLATION_SIGMAS:g} std = {bar:+.2f}; the "
                                            "interval is the random draws' spread: the ablation keeps mean losses only)",
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
