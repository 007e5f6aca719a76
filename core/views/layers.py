"""Layers page: per-layer curves, the table of every per-layer number, the pairwise-cosine
histogram of the sample and the mean cosine by frequency decile."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from ..base.config import CONFIG
from ..stats import registry as S
from ..stats.geometry import CKA_HOVER
from ..stats.kernels import pairwise_cosine_histogram
from ..stats.reference import ENGLISH_CORPORA, ENGLISH_SHARE_MIN, LEGACY_ENGLISH_WORDS_MIN, reference_curves
from ..studies.selection import METRICS, SAMPLE_METRICS
from . import figures as F
from .common import (
    TOKEN_ID_WHY,
    Results,
    View,
    as_results,
    ci_text,
    cka_bounds,
    corpora_text,
    fmt_n,
    layer_dtick,
    modality,
    nan_if_none,
    not_applicable,
    sizes_text,
    view_manifest,
)
from .lens import lens_why


def layer_curves(runs: Sequence[dict], metric: str = "mean_cosine", x_axis: str = "layer", reference: bool = True,
                 post_rows: Sequence[list[dict] | None] | None = None, post_labels: Sequence[str] | None = None) -> View:
    """Per-layer curve of `metric` for every run, with the CI band (mean_cosine), the
    post-processing what-if (dashed, sample metrics only) and the published curves (dotted)."""
    runs = [as_results(r) for r in runs]
    label, unit = METRICS[metric]
    stat = S.BY_KEY[metric]
    depth = x_axis == "depth"
    series, rows, notes = [], [], []
    for i, res in enumerate(runs):
        if not S.applies(metric, modality(res)):
            notes.append(f"{res.run_name}: {label} is not applicable ({TOKEN_ID_WHY}).")
            continue
        if stat.kind == "lens" and lens_why(res) is not None:
            notes.append(f"{res.run_name}: {label} is not applicable ({lens_why(res)}).")
            continue
        L = res.last_layer
        layers = [r["layer"] for r in res.layers]
        xs = [l / L for l in layers] if depth else layers
        ys = res.values(metric)
        sample_metric = stat.kind == "sample"
        n_txt = f"K = {fmt_n(res.n_sample)} sampled tokens" if sample_metric else f"N = {fmt_n(res.n_tokens)} tokens"
        name = f"{res.run_name} (N = {fmt_n(res.n_tokens)})"
        definition = F.esc(S.short(metric))
        hover = [f"<b>{F.esc(res.run_name)}</b><br>layer {l} of {L} (depth {l / L:.2f})<br>{F.esc(label)} = {y:.4g}"
                 f"<br>{n_txt}<br><i>{definition}</i>" for l, y in zip(layers, ys)]
        band = None
        if stat.interval is not None:
            band = res.ci(metric)
            hover = [h + f"<br>95% CI [{lo:.4g}, {hi:.4g}]" for h, lo, hi in zip(hover, *band)]
        series.append({"name": name, "x": xs, "y": ys, "color": i, "band": band, "hover": hover,
                       "band_name": "95% bootstrap CI" if band is not None and i == 0 else None, "group": name})
        for l, x, y in zip(layers, xs, ys):
            row = {"series": "measured", "model": res.model_label, "corpus": res.corpus_label, "layer": l,
                   "depth": l / L, metric: y, "n_tokens": res.n_tokens, "n_sample": res.n_sample}
            if band is not None:
                row["ci_low"], row["ci_high"] = band[0][l], band[1][l]
            rows.append(row)
        if stat.baseline:  # the same metric on an isotropic Gaussian of the same K and d
            iso = res.values(f"{metric}_isotropic")
            if any(v == v for v in iso):
                iname = f"{res.run_name}: isotropic Gaussian, same K and d"
                series.append({"name": iname, "x": xs, "y": iso, "color": i, "dash": "dot", "symbol": "circle-open",
                               "hover": [f"<b>{F.esc(res.run_name)}</b><br>{F.esc(label)} of an isotropic Gaussian "
                                         f"sample of the same size (K = {fmt_n(res.n_sample)}) and width "
                                         f"(d = {res.hidden_size}) = {v:.4g}" for v in iso]})
                for l, y in zip(layers, iso):
                    rows.append({"series": "isotropic baseline", "model": res.model_label, "corpus": res.corpus_label,
                                 "layer": l, "depth": l / L, metric: y, "n_sample": res.n_sample})
                if i == 0:
                    notes.append("Dotted: the same metric for an isotropic Gaussian sample of the same K and d "
                                 "(finite samples are biased; compare each model with its own line).")
        prow = post_rows[i] if post_rows is not None and i < len(post_rows) else None
        if prow:
            plabel = (post_labels[i] if post_labels else None) or prow[0].get("post", "post-processed")
            if metric in SAMPLE_METRICS:
                key = SAMPLE_METRICS[metric]
                py = [nan_if_none(r.get(key)) for r in prow]
                pname = f"{res.run_name} after {plabel} (K = {fmt_n(res.n_sample)})"
                series.append({"name": pname, "x": xs, "y": py, "color": i, "dash": "dash", "symbol": "diamond",
                               "hover": [f"<b>{F.esc(res.run_name)}</b><br>after {F.esc(plabel)}<br>layer {l}"
                                         f"<br>{F.esc(label)} = {y:.4g} (sample of {fmt_n(res.n_sample)})"
                                         for l, y in zip(layers, py)]})
                for l, x, y in zip(layers, xs, py):
                    rows.append({"series": f"after {plabel}", "model": res.model_label, "corpus": res.corpus_label,
                                 "layer": l, "depth": l / L, metric: y, "n_tokens": res.n_tokens,
                                 "n_sample": res.n_sample})
                if stat.sample_twin:
                    notes.append(f"After post-processing, {label.lower()} is measured on the token sample "
                                 f"(K = {fmt_n(res.n_sample)}), not on all N tokens.")
            else:
                notes.append(f"{label} is a corpus-level statistic: the post-processing what-if changes only the "
                             f"sample metrics ({', '.join(_sample_labels())}).")
    refs = []
    if reference:
        shown, hidden = published_for(runs, metric)
        notes += hidden
        for c in shown:
            L = max(c["layers"]) or 1
            xs = [l / L for l in c["layers"]] if depth else c["layers"]
            refs.append({"name": c["label"], "x": xs, "y": c["values"], "estimator": c["estimator"],
                         "layers": list(c["layers"])})
            for l, x, y in zip(c["layers"], xs, c["values"]):
                rows.append({"series": c["label"], "model": c["model"], "corpus": "published", "layer": l,
                             "depth": l / L, metric: y, "estimator": c["estimator"]})
        if refs:
            notes.append("Published curves use their authors' estimator (hover for it): context, not our measurement.")
    if not series and not refs:  # never an empty chart: say why
        return not_applicable(f"layers_{metric}", f"{label} by layer", runs,
                              " ".join(n.split(": ", 1)[-1] for n in dict.fromkeys(notes)) or "no run has it")
    est = S.estimate(metric, sizes_text(runs, "sampled tokens"))
    subtitle = f"{F.esc(corpora_text(runs))} · N = {F.esc(sizes_text(runs))} per layer · {F.esc(est)}"
    fig = F.line_chart(series, refs, title=f"{label} by layer", subtitle=subtitle,
                       x_title="relative depth (layer / L; 0 = embeddings, 1 = last layer)" if depth
                       else "layer (0 = embeddings)", y_title=unit,
                       x_range=(-0.03, 1.03) if depth else None,
                       x_dtick=None if depth else layer_dtick(max(r.n_layers for r in runs)))
    if stat.figure.log_y or stat.figure.y_range:
        fig.update_yaxes(type="log" if stat.figure.log_y else None, range=stat.figure.y_range)
    return View(f"layers_{metric}", f"{label} by layer", fig, pd.DataFrame(rows),
                view_manifest("layer_curves", {"metric": metric, "x_axis": x_axis, "reference": reference,
                                           "post": list(post_labels or [])}, runs),
                caption=f"{label} per layer; {est}. {corpora_text(runs)}; N = {sizes_text(runs)}.", notes=notes)


def _sample_labels() -> list[str]:
    """What the what-if changes: the exact statistics with a sample twin, and the other sample statistics."""
    twins = {s.sample_twin for s in S.STATISTICS if s.sample_twin}
    return ([s.label for s in S.STATISTICS if s.sample_twin]
            + [s.label for s in S.STATISTICS if s.kind == "sample" and s.scalar and s.key not in twins])


METRIC_COLUMNS = S.table_columns()  # every per-layer column of the Numbers table (core.stats.registry)


def metric_table(runs: Sequence[dict]) -> View:
    """Every per-layer number of every run, one row per (model, layer)."""
    runs = [as_results(r) for r in runs]
    rows = []
    for res in runs:
        L = res.last_layer
        for r in res.layers:
            row = {"model": res.model_label, "corpus": res.corpus_label, "layer": r["layer"],
                   "depth": round(r["layer"] / L, 4)}
            for k in METRIC_COLUMNS:
                v = r.get(k)
                kind = S.BY_KEY[k].kind if k in S.BY_KEY else None
                if k.endswith("_ci"):
                    lo, hi = (v or [None, None])
                    row["ci_low"], row["ci_high"] = nan_if_none(lo), nan_if_none(hi)
                elif kind == "per-dim":
                    row[k] = " ".join(str(d) for d in (v or []))
                else:
                    row[k] = int(v) if kind == "count" else nan_if_none(v)
            rows.append(row)
    return View("layers_table", "Per-layer metrics", None, pd.DataFrame(rows), view_manifest("metric_table", {}, runs),
                caption=f"All per-layer metrics. {corpora_text(runs)}; N = {sizes_text(runs)}; "
                        f"sample K = {sizes_text(runs, 'sampled tokens')}.")


def pairwise_histogram(stats_list: Sequence, runs: Sequence[dict], layers: Sequence[int],
                       max_pairs: int | None = None) -> View:
    """Distribution of cos(x_i, x_j) over pairs of sampled tokens at one layer per run."""
    runs = [as_results(r) for r in runs]
    max_pairs = CONFIG.hist_max_pairs if max_pairs is None else int(max_pairs)
    series, rows, parts = [], [], []
    for i, (st, res, l) in enumerate(zip(stats_list, runs, layers)):
        X = st.sample(l)
        h = pairwise_cosine_histogram(X, bins=CONFIG.hist_bins, max_pairs=max_pairs, seed=0)
        counts = np.asarray(h["counts"], dtype=float)
        width = float(h["edges"][1] - h["edges"][0])
        dens = counts / max(counts.sum(), 1) / width
        m_rows = int(round((1 + math.sqrt(1 + 8 * h["n_pairs"])) / 2))
        mean = res.value(l, "sample_mean_cosine")
        name = f"{res.run_name}, layer {l}"
        series.append({"name": name, "edges": h["edges"], "density": dens, "color": i, "mean": mean})
        parts.append(f"{res.model_label}: {fmt_n(h['n_pairs'])} pairs of {fmt_n(m_rows)} tokens"
                     + (f" (random subset of the K = {fmt_n(len(X))} sample)" if m_rows < len(X) else " (the whole sample)"))
        centers = (h["edges"][:-1] + h["edges"][1:]) / 2
        for lo, c, n, dd in zip(h["edges"][:-1], centers, counts, dens):
            rows.append({"model": res.model_label, "corpus": res.corpus_label, "layer": l, "bin_low": float(lo),
                         "bin_high": float(lo + width), "bin_center": float(c), "count": int(n), "density": float(dd),
                         "n_pairs": int(h["n_pairs"]), "n_tokens_used": m_rows})
    subtitle = F.esc("; ".join(parts)) + " · dashed: exact mean over the sample"
    fig = F.histogram_lines(series, title="Pairwise cosine similarity of sampled tokens", subtitle=subtitle,
                            x_title="cos(x_i, x_j)")
    return View("pairwise_cosine_histogram", "Pairwise cosine similarity", fig, pd.DataFrame(rows),
                view_manifest("pairwise_histogram", {"layers": list(map(int, layers)), "bins": CONFIG.hist_bins,
                                                 "max_pairs": max_pairs}, runs),
                caption="Histogram of pairwise cosines; " + "; ".join(parts) + ".")


def frequency_deciles(runs: Sequence[dict], layers: Sequence[int]) -> View:
    """Mean cosine among tokens of each corpus-frequency decile (1 = rarest), at one layer per run."""
    runs = [as_results(r) for r in runs]
    skipped = [r.run_name for r in runs if modality(r) != "text"]
    keep = [(r, l) for r, l in zip(runs, layers) if modality(r) == "text"]
    if not keep:
        return not_applicable("frequency_deciles", "Mean cosine by frequency decile", runs, TOKEN_ID_WHY)
    runs, layers = [r for r, _ in keep], [l for _, l in keep]
    series, rows = [], []
    for i, (res, l) in enumerate(zip(runs, layers)):
        vals = [nan_if_none(v) for v in res.layers[l]["frequency_binned_cosine"]]
        fb = res.frequency_bins
        ns = fb.get("n_tokens") or [None] * len(vals)
        rng = fb.get("log_freq_range") or [None] * len(vals)
        xs = list(range(1, len(vals) + 1))
        hover = [f"<b>{F.esc(res.run_name)}</b>, layer {l}<br>decile {x}: mean cos {v:.4g}<br>"
                 f"{fmt_n(n or 0)} tokens in this bin"
                 + (f"<br>corpus frequency {math.exp(r[0]):,.0f} to {math.exp(r[1]):,.0f}"
                    if isinstance(r, (list, tuple)) and len(r) == 2 and None not in r else "")
                 for x, v, n, r in zip(xs, vals, ns, rng)]
        series.append({"name": f"{res.run_name}, layer {l}", "x": xs, "y": vals, "color": i, "hover": hover})
        for x, v, n in zip(xs, vals, ns):
            rows.append({"model": res.model_label, "corpus": res.corpus_label, "layer": l, "decile": x,
                         "mean_cosine": v, "n_tokens": int(n or 0)})
    fig = F.line_chart(series, title="Mean cosine by token-frequency decile",
                       subtitle=F.esc(f"{corpora_text(runs)} · N = {sizes_text(runs)} split into 10 bins of equal token "
                                      "counts by the corpus frequency of the token type"),
                       x_title="frequency decile (1 = rarest, 10 = most frequent tokens)",
                       y_title="mean cos within the decile", x_range=(0.5, 10.5), x_dtick=1)
    return View("frequency_deciles", "Mean cosine by frequency decile", fig, pd.DataFrame(rows),
                view_manifest("frequency_deciles", {"layers": list(map(int, layers))}, runs),
                caption=f"Mean cosine within each token-frequency decile; N = {sizes_text(runs)}.",
                notes=[f"Not shown (not applicable, no token ids): {', '.join(skipped)}"] if skipped else [])


# Ethayarajh (2019) measured English text with these models: a curve is drawn when at least one run is
# English text read by a model of its family (the model's class name starts with the prefix).
REFERENCE_FAMILIES = {"bert-base-cased": ("Bert", "BERT"), "gpt2": ("GPT2", "GPT-2")}


def _reference_reason(res: Results, ref_model: str) -> str | None:
    """Why a published curve does not apply to this run (None when it does)."""
    m = res.manifest
    if modality(res) != "text":
        return f"{res.run_name} reads {modality(res)} inputs"
    corpus = m.get("corpus") or {}
    share = corpus.get("english_share")
    if str(corpus.get("id")) not in ENGLISH_CORPORA:
        if share is None:
            return f"the language of {res.corpus_label} is unknown (run made before it was measured)"
        if corpus.get("english_detection") is None:  # a run made before: the share of common English words
            if not share >= LEGACY_ENGLISH_WORDS_MIN:
                return (f"{res.corpus_label} is not English ({share:.0%} of its words are common English words; "
                        f"English prose has ~40%)")
        elif not share >= ENGLISH_SHARE_MIN:
            return f"{res.corpus_label} is not English (English in {share:.0%} of its text)"
    prefix, family = REFERENCE_FAMILIES.get(ref_model, ("", ref_model))
    cls = str(m["model"].get("model_class") or "")
    if prefix and not cls.startswith(prefix):
        return f"{res.model_label} is not a {family} model"
    return None


def published_for(runs: Sequence[Results], metric: str) -> tuple[list[dict], list[str]]:
    """(the published curves of `metric` that apply to at least one run, a note per curve hidden with why)."""
    shown, notes = [], []
    for c in reference_curves(metric):
        why = [_reference_reason(r, c["model"]) for r in runs]
        if any(w is None for w in why):
            shown.append(c)
        else:
            notes.append(f"{c['label']} hidden: it was measured on English text with {c['model']}, and "
                         + "; ".join(dict.fromkeys(w for w in why if w)) + ".")
    return shown, notes


def cka_heatmap(runs: Sequence[dict]) -> View:
    """Layers x layers linear CKA within each run (results.json's `cka`): one panel per run, one colour scale."""
    runs = [as_results(r) for r in runs]
    panels, rows, parts, est = [], [], [], ""
    for res in runs:
        sec = res.raw.get("cka")
        if not sec:
            continue
        est = sec["estimator"]
        z = np.asarray(sec["matrix"], dtype=float)
        ids = [int(x) for x in sec["layers"]]
        lo, hi, ci_note = cka_bounds(sec, z.shape)
        hover = np.asarray([[f"{F.esc(res.model_label)}<br>layer {ids[i]} vs layer {ids[j]}<br>CKA = {z[i, j]:.4f}"
                             f"{ci_text(lo[i, j], hi[i, j])}<br><i>{F.esc(CKA_HOVER)}</i>"
                             for j in range(len(ids))] for i in range(len(ids))], dtype=object)
        panels.append({"z": z, "title": res.run_name, "x_title": "layer (0 = embeddings)",
                       "y_title": "layer (0 = embeddings)" if not panels else "",
                       "x_labels": [str(x) for x in ids], "y_labels": [str(x) for x in ids], "x_angle": 0, "hover": hover})
        parts.append(f"{res.model_label}: {sec['positions']}{ci_note}")
        rows += [{"model": res.model_label, "corpus": res.corpus_label, "layer_a": ids[i], "layer_b": ids[j],
                  "cka": float(z[i, j]), "cka_low": float(lo[i, j]), "cka_high": float(hi[i, j]),
                  "n_positions": int(sec["n_positions"])}
                 for i in range(len(ids)) for j in range(len(ids))]
    if not panels:
        return not_applicable("layers_cka", "Linear CKA between layers", runs,
                              "no CKA in these results (computed from this version on; a run with fewer than 4 "
                              "sampled tokens has none).")
    sub = F.esc(f"{est}; " + "; ".join(parts))
    fig = F.heat_panels(panels[:4], title="Linear CKA between layers (the same token positions in every layer)",
                        subtitle=sub, colorbar_title="CKA", zmin=0.0, zmax=1.0)
    return View("layers_cka", "Linear CKA between layers", fig, pd.DataFrame(rows), view_manifest("cka_heatmap", {}, runs),
                caption=f"Similarity of the representations of two layers on the same tokens: 1 = the same up to a "
                        f"rotation and scale, 0 = unrelated. {est}; " + "; ".join(parts) + ".")
