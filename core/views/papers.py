"""The Papers page's views: each paper's figure redrawn on the offline models, the published values beside
ours, and the claims table, from a reproduction's record (`core.studies.papers.run`). No I/O; every view is a
`View`, so the export path (PNG/SVG/PDF/HTML/CSV/JSON, manifest inside) applies as on any page.

x axes are relative depth (layer / last layer): the papers' models and ours differ in depth.
"""

from __future__ import annotations

import pandas as pd

from .. import __version__
from ..stats import registry as S
from ..studies.papers import claims as C
from . import figures as F
from .attention import drift_heatmap
from .common import View

MODALITY_TITLES = {"text": "Text (subword and character-level)", "image": "Vision (ViT and CNN)",
                   "audio": "Speech (Whisper encoder)"}
# Plain words, no emoji: a browser without an emoji font (Debian's chromium) draws emoji as empty boxes.
VERDICT_MARK = {C.AGREES: "agrees", C.DISAGREES: "does not agree", C.UNTESTED: "not testable here"}


def _manifest(rec: dict, view: str, runs=None) -> dict:
    runs = rec["runs"] if runs is None else runs
    return {"app": "anisotropy-workbench", "core_version": __version__, "view": view,
            "params": {"paper": rec["paper"], "settings": rec["settings"], "record": rec.get("key")},
            "runs": [r["manifest"] for r in runs]}


def _depth(n: int) -> list[float]:
    return [i / (n - 1) if n > 1 else 0.0 for i in range(n)]


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def _subtitle(rec: dict, runs) -> str:
    s = rec["settings"]
    ns = sorted({r["n_tokens"] for r in runs})
    n = f"{ns[0]:,}" if len(ns) == 1 else f"{ns[0]:,}-{ns[-1]:,}"
    return (f"{rec['citation'].split('(')[0].strip()} · redrawn on the offline models · {n} positions per run "
            f"(budget {s['max_tokens']:,}), seed {s['seed']}")


def _curve_view(rec: dict, runs: list[dict], metric: str, name: str, title: str, y_title: str,
                references=(), caption: str = "") -> View:
    groups = list(dict.fromkeys(r["group"] for r in runs))
    series, rows = [], []
    for r in runs:
        y = [_num(v) for v in r["curves"][metric]]
        x = _depth(len(y))
        control = r["role"] == "control"
        on = f" on {r['corpus']}" if r["role"] == "frequency" else ""
        series.append({"name": f"{r['label']}{on}{' (random init)' if control else ''}", "x": x, "y": y,
                       "color": groups.index(r["group"]), "dash": "dash" if control else "solid",
                       "symbol": "circle-open" if control else "circle",
                       "hover": [f"{F.esc(r['label'])}<br>layer {lay} (depth {d:.2f}): {v:.3f}"
                                 for lay, d, v in zip(r["layer_ids"], x, y)]})
        rows += [{"model": r["model"], "label": r["label"], "corpus": r["corpus"], "role": r["role"], "layer": lay,
                  "relative_depth": d, metric: v} for lay, d, v in zip(r["layer_ids"], x, y)]
    refs = []
    for c in references:
        n = len(c["values"])
        refs.append({"name": c["label"], "x": _depth(n), "y": list(c["values"]), "layers": c["layers"],
                     "estimator": c["estimator"]})
        rows += [{"model": c["model"], "label": c["label"], "corpus": "published", "role": "published",
                  "layer": lay, "relative_depth": d, metric: v} for lay, d, v in zip(c["layers"], _depth(n), c["values"])]
    fig = F.line_chart(series, refs, title=title, subtitle=F.esc(_subtitle(rec, runs)),
                       x_title="relative depth (layer / last layer; 0 = embeddings)", y_title=y_title, x_range=(-0.02, 1.02))
    return View(name, title, fig, pd.DataFrame(rows), _manifest(rec, name, runs), caption=caption)


def robust_text(c: dict) -> str:
    """A claim's robustness in one cell: "robust", "robust (verdict only: ...)", "not robust: why", or "" (not
    testable here, or not checked)."""
    word, why = c.get("robust") or "", c.get("robust_why") or ""
    if not word:
        return ""
    if word == C.ROBUST:
        return f"robust ({why})" if why else "robust"
    return f"{word}: {why}" if why else word


def statistics_of(rec: dict) -> list[str]:
    """The registry's per-layer statistics that the record's runs carry (menu order): what `statistic_view` draws."""
    keys = [k for k in S.picker() if any(k in r["curves"] for r in rec["runs"])]
    return [k for k in keys if any(_num(v) == _num(v) for r in rec["runs"] for v in r["curves"].get(k) or [])]


def statistic_view(rec: dict, key: str) -> View:
    """Any per-layer statistic of the registry, by relative depth, for every run of the reproduction."""
    if key not in S.picker():
        raise ValueError(f"{key!r} is not a per-layer statistic of the registry")
    label, axis = S.picker()[key]
    runs = [r for r in rec["runs"] if key in r["curves"]]
    return _curve_view(rec, runs, key, f"{rec['paper']}_stat_{key}", f"{label} by layer: every run", axis,
                       caption=S.short(key))


def claims_view(rec: dict) -> View:
    """The claims table, computed from the record's numbers (`core.studies.papers.run.claims_of`)."""
    rows = [{"claim": c["claim"], "source": c["source"], "what we measured": c["measured"],
             "verdict": VERDICT_MARK[c["verdict"]], "robust": robust_text(c), "reason": c["reason"],
             "context": c.get("context", "")}
            for c in rec["claims"]]
    s = C.summary(rec["claims"])
    cap = (f"{s[C.AGREES]} claims agree, {s[C.DISAGREES]} do not, {s[C.UNTESTED]} cannot be tested with the offline "
           f"models. Verdicts are computed from the numbers (rules in core/studies/papers/claims.py).")
    rob = rec.get("robustness")
    if rob:
        n = sum(1 for c in rec["claims"] if c.get("robust") == C.ROBUST)
        tested = sum(1 for c in rec["claims"] if c.get("robust"))
        cap += (f" {n} of {tested} tested verdicts are robust, checked at "
                f"{', '.join(v['label'] for v in rob['variants'])} ({rob['rule']}).")
    else:
        cap += " Robustness was not checked for this record (a variant's own record, or one from before the check)."
    return View(f"{rec['paper']}_claims", f"{rec['title']}: the claims", None, pd.DataFrame(rows),
                _manifest(rec, "claims"), caption=cap)


def runs_table(rec: dict) -> View:
    """Every run of the reproduction: model, corpus, role, positions, the mean cosine from layer 0 to the last."""
    rows = [{"model": r["label"], "id": r["model"], "corpus": r["corpus"], "role": r["role"], "positions": r["n_tokens"],
             "mean cosine, layer 0 → last": " ".join(f"{_num(v):.2f}" for v in r["curves"]["mean_cosine"])}
            for r in rec["runs"]]
    return View(f"{rec['paper']}_runs", "The runs", None, pd.DataFrame(rows), _manifest(rec, "runs"),
                caption="Each run is an ordinary analysis (same cache key as `python -m core analyze` with these "
                        "settings): the other pages open it too.")


# ----------------------------------------------------------------------------- Godey et al.
def godey_views(rec: dict) -> list[View]:
    out = []
    for modality, title in MODALITY_TITLES.items():
        runs = [r for r in rec["runs"] if r["modality"] == modality]
        if runs:
            out.append(_curve_view(rec, runs, "mean_cosine", f"godey_{modality}",
                                   f"Mean cosine by layer: {title}", "mean cosine similarity",
                                   caption="Solid: trained; dashed: the same configuration with random weights."))
    if rec.get("drift"):
        out += [drift_heatmap(rec["drift"], k) for k in ("output_mean_cosine", "output_within_sequence_cosine",
                                                          "attention_entropy")
                if k != "output_within_sequence_cosine" or "experiments" in rec["drift"]]
    return out


# ----------------------------------------------------------------------------- Ethayarajh
def ethayarajh_views(rec: dict) -> list[View]:
    pub = rec.get("published", [])
    return [
        _curve_view(rec, rec["runs"], "mean_cosine", "ethayarajh_anisotropy", "Anisotropy: mean cosine between words",
                    "mean cosine similarity", [c for c in pub if c["metric"] == "mean_cosine"],
                    caption="Published curves: Ethayarajh's estimator (random word pairs of the STS sentences); ours is "
                            "exact over all pairs of the corpus."),
        _curve_view(rec, rec["runs"], "self_similarity_adjusted", "ethayarajh_self_similarity",
                    "Self-similarity adjusted for anisotropy", "self-similarity − mean cosine",
                    caption="Mean cosine between a word's occurrences in different contexts, minus the layer's mean "
                            "cosine (lower: more context-specific)."),
        _curve_view(rec, rec["runs"], "intra_sentence_similarity", "ethayarajh_intra_sentence",
                    "Intra-sentence similarity", "mean cos(word, its sentence's mean)",
                    [c for c in pub if c["metric"] == "intra_sentence_similarity"]),
    ]


def published_curves_table(rec: dict) -> View:
    """Each published value beside ours at the same relative depth (linear interpolation between our layers)."""
    rows = []
    for c in rec.get("published", []):
        n = len(c["values"])
        for r in rec["runs"]:
            ours = C.relative_depth_interp([_num(v) for v in r["curves"][c["metric"]]], n)
            for lay, d, pv, ov in zip(c["layers"], _depth(n), c["values"], ours):
                rows.append({"metric": c["metric"], "published model": c["model"], "layer": lay,
                             "relative depth": round(d, 3), "published": pv, "ours": float(ov), "our model": r["label"]})
    return View(f"{rec['paper']}_published", "Published values beside ours", None, pd.DataFrame(rows),
                _manifest(rec, "published"),
                caption="Ours read at the published layer's relative depth. The estimators differ (random pairs of STS "
                        "sentences there, all pairs of the corpus here).")


# ----------------------------------------------------------------------------- Puccetti et al.
def puccetti_views(rec: dict) -> list[View]:
    out = []
    series, rows = [], []
    for i, r in enumerate(rec["runs"]):
        f = r.get("freq") or {}
        if not f.get("outlier_abs_r"):
            continue
        x = _depth(len(r["layer_ids"]))
        xs = [x[r["layer_ids"].index(lay)] for lay in f["layers"]]
        series.append({"name": f"{r['label']}: outlier dims {f['outlier_dims']}", "x": xs, "y": f["outlier_abs_r"],
                       "color": i})
        series.append({"name": f"{r['label']}: {len(f['random_dims'])} random dims", "x": xs, "y": f["random_abs_r"],
                       "color": i, "dash": "dot", "symbol": "circle-open"})
        rows += [{"model": r["label"], "layer": lay, "relative_depth": d, "outlier_mean_abs_r": o, "random_mean_abs_r": z}
                 for lay, d, o, z in zip(f["layers"], xs, f["outlier_abs_r"], f["random_abs_r"])]
    if series:
        title = "Outlier dims and token frequency: mean |r| of |x_d| with log frequency"
        fig = F.line_chart(series, title=title, subtitle=F.esc(_subtitle(rec, rec["runs"])),
                           x_title="relative depth (layer / last layer; 0 = embeddings)", y_title="mean |Pearson r|",
                           x_range=(-0.02, 1.02))
        out.append(View("puccetti_frequency", title, fig, pd.DataFrame(rows), _manifest(rec, "puccetti_frequency"),
                        caption="Solid: the outlier dims; dotted: random non-outlier dims of the same model."))
    abl = [r for r in rec["runs"] if r.get("ablation")]
    if abl:
        items, rows = [], []
        for i, r in enumerate(abl):
            ab = r["ablation"]
            items.append({"name": f"{r['label']}: {len(ab['dims'])} outlier dims", "value": ab["delta"],
                          "color": F.HIGHLIGHT})
            items.append({"name": f"{r['label']}: random dims ({len(ab['random_deltas'])} draws)",
                          "value": ab["random_delta_mean"], "std": ab["random_delta_std"], "points": ab["random_deltas"],
                          "color": F.OKABE_ITO[0]})
            rows.append({"model": r["label"], "dims": " ".join(map(str, ab["dims"])), "baseline_loss": ab["baseline_loss"],
                         "ablated_loss": ab["ablated_loss"], "delta": ab["delta"],
                         "random_delta_mean": ab["random_delta_mean"], "random_delta_std": ab["random_delta_std"],
                         "held_out_tokens": ab.get("held_out_tokens")})
        title = "LM loss when the outlier dims are zeroed in every norm, vs random dims"
        fig = F.delta_bars(items, title=title, subtitle=F.esc(_subtitle(rec, abl) + " · error bar: 1 std of the draws"),
                           y_title="Δ loss (nats/token)")
        out.append(View("puccetti_ablation", title, fig, pd.DataFrame(rows), _manifest(rec, "puccetti_ablation", abl)))
    return out


def outlier_dims_table(rec: dict) -> View:
    """Norm-parameter and activation outlier dims of each run, and the published dims beside them."""
    rows = [{"model": r["label"], "source": "measured here", "norm-parameter outliers": " ".join(map(str, r["norm_persistent"])),
             "activation outliers": " ".join(map(str, r["activation_persistent"]))} for r in rec["runs"]]
    for p in rec.get("published", []):
        rows.append({"model": p["model"], "source": "published (Puccetti et al. 2022)",
                     "norm-parameter outliers": " ".join(map(str, p["dims"])),
                     "activation outliers": "" if p["ours"] is None else "ours: " + " ".join(map(str, p["ours"]))})
    return View("puccetti_dims", "Outlier dimensions: published and measured", None, pd.DataFrame(rows),
                _manifest(rec, "puccetti_dims"),
                caption="Published dims are 0-based indices of BERT-base / RoBERTa-base, not of the offline models.")


# ----------------------------------------------------------------------------- the outlier chain
def chain_views(rec: dict) -> list[View]:
    out, series, rows = [], [], []
    for i, r in enumerate(rec["runs"]):
        m = [x for x in r.get("massive", []) if x.get("ratio") is not None]
        x = _depth(len(r["layer_ids"]))
        xs = [x[r["layer_ids"].index(e["layer"])] for e in m]
        series.append({"name": r["label"], "x": xs, "y": [e["ratio"] for e in m], "color": i,
                       "hover": [f"layer {e['layer']}: {e['ratio']:,.0f}x, dim {e['dim']}, {e.get('position_class')}"
                                 for e in m]})
        rows += [{"model": r["label"], "layer": e["layer"], "relative_depth": d, "top1_over_median": e["ratio"],
                  "dim": e["dim"], "position_class": e.get("position_class")} for e, d in zip(m, xs)]
    title = "Massive activations: the largest |x| of each layer over the median"
    fig = F.line_chart(series, title=title, subtitle=F.esc(_subtitle(rec, rec["runs"])),
                       x_title="relative depth (layer / last layer; 0 = embeddings)", y_title="top-1 / median (log)",
                       x_range=(-0.02, 1.02))
    fig.update_yaxes(type="log")
    out.append(View("chain_massive", title, fig, pd.DataFrame(rows), _manifest(rec, "chain_massive")))
    sr = [(r, r.get("alpha_first_mean")) for r in rec["runs"] if r.get("alpha_first_mean")]
    if sr:
        series = [{"name": r["label"], "x": list(range(1, len(a) + 1)), "y": a, "color": i} for i, (r, a) in enumerate(sr)]
        title = "Attention to the first token: mean alpha_1 over heads, by block"
        fig = F.line_chart(series, title=title, subtitle=F.esc(_subtitle(rec, rec["runs"])), x_title="block (1 = first)",
                           y_title="mean attention to the first token")
        rows = [{"model": r["label"], "block": b + 1, "alpha_first_mean": v} for r, a in sr for b, v in enumerate(a)]
        out.append(View("chain_sinks", title, fig, pd.DataFrame(rows), _manifest(rec, "chain_sinks")))
    return out


def paper_views(rec: dict) -> dict[str, list[View]]:
    """{"figures", "published", "claims", "runs"}: every view of a reproduction's record."""
    name = rec["paper"]
    figs = {"godey": godey_views, "ethayarajh": ethayarajh_views, "puccetti": puccetti_views,
            "chain": chain_views}[name](rec)
    published = ([published_curves_table(rec)] if name == "ethayarajh" else
                 [outlier_dims_table(rec)] if name == "puccetti" else [])
    return {"figures": figs, "published": published, "claims": [claims_view(rec)], "runs": [runs_table(rec)]}


def headline(rec: dict) -> str:
    """One line: how many claims agree, and how long the reproduction took."""
    s = C.summary(rec["claims"])
    t = rec.get("timing", {}).get("wall_s")
    took = f" in {t:.0f} s" if t is not None else ""
    rob = rec.get("robustness")
    more = f" (each again at {' and at '.join(v['label'] for v in rob['variants'])})" if rob else ""
    n = sum(1 for c in rec["claims"] if c.get("robust") == C.ROBUST)
    robust = f"; {n} of {s[C.AGREES] + s[C.DISAGREES]} verdicts robust" if rob else ""
    return (f"{len(rec['runs'])} runs{more}{took}: {s[C.AGREES]} claims agree, {s[C.DISAGREES]} do not, "
            f"{s[C.UNTESTED]} not testable here{robust}.")

