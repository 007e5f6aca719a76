"""Compare page: activation outliers per layer by relative depth, and one summary row per model
(the per-layer curves and projections of the Compare page come from `layers` and `projection`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .. import figures as F
from .. import statistics as S
from ..config import CONFIG
from .common import View, _corpora, _manifest, _sizes, as_results, modality


def outlier_counts(runs: Sequence[dict]) -> View:
    """Activation outlier dims per layer as a share of the width d (models of different d compare), by
    relative depth, for every run; the counts are in the hover and the data."""
    runs = [as_results(r) for r in runs]
    series, rows = [], []
    for i, res in enumerate(runs):
        L = res.last_layer
        per = res.activation_outliers
        d = int(res.hidden_size or 0)
        xs = [l / L for l in range(len(per))]
        ns = [len(p) for p in per]
        ys = [100.0 * n / d if d else float("nan") for n in ns]
        hover = [f"<b>{F.esc(res.run_name)}</b><br>layer {l} of {L}<br>{n} of d = {d} dims ({y:.2f}%)"
                 for l, (n, y) in enumerate(zip(ns, ys))]
        series.append({"name": f"{res.run_name} (d = {d or '?'})", "x": xs, "y": ys, "color": i, "hover": hover})
        for l, (x, n, y) in enumerate(zip(xs, ns, ys)):
            rows.append({"model": res.model_label, "corpus": res.corpus_label, "layer": l, "depth": x,
                         "n_outlier_dims": n, "d": d, "share_of_d_percent": y, "dims": " ".join(map(str, per[l])),
                         "n_tokens": res.n_tokens})
    fig = F.line_chart(series, title="Activation outlier dimensions per layer, as a share of the width",
                       subtitle=F.esc(f"{_corpora(runs)} · N = {_sizes(runs)} · rule: mean |x_d| > mean + "
                                      f"{CONFIG.outlier_sigma:g} std · share = outlier dims / d (hover: the count)"),
                       x_title="relative depth (layer / L; 0 = embeddings, 1 = last layer)",
                       y_title="outlier dimensions (% of d)", x_range=(-0.03, 1.03))
    fig.update_yaxes(rangemode="tozero")
    return View("outlier_counts", "Outlier dimensions per layer", fig, pd.DataFrame(rows),
                _manifest("outlier_counts", {}, runs),
                caption="Activation outliers per layer as a share of the width d, by relative depth.")


def comparison_sentence(runs: Sequence[dict], metric: str = "mean_cosine") -> str:
    """One sentence from the numbers of the compared curves: each run's value at the embeddings, the last
    layer and its peak (with its relative depth), then which run ends highest and lowest."""

    runs = [as_results(r) for r in runs]
    label = S.BY_KEY[metric].label if metric in S.BY_KEY else metric
    parts, last = [], []
    for res in runs:
        if not S.applies(metric, modality(res)):
            continue
        y = np.asarray(res.values(metric), dtype=float)
        if not np.isfinite(y).any():
            continue
        L = max(res.last_layer, 1)
        k = int(np.nanargmax(y))
        parts.append(f"{res.run_name} goes from {y[0]:.3g} at the input to {y[-1]:.3g} at the last layer "
                     f"(peak {y[k]:.3g} at depth {k / L:.2f})")
        last.append((float(y[-1]), res.run_name))
    if not parts:
        return ""
    out = f"{label} by relative depth: " + "; ".join(parts) + "."
    if len(last) >= 2:
        hi, lo = max(last), min(last)
        out += (f" At the last layer {hi[1]} is highest ({hi[0]:.3g}) and {lo[1]} lowest ({lo[0]:.3g}); the "
                "runs differ in modality, corpus and estimator inputs, so compare shapes more than values.")
    return out


def compare_summary(runs: Sequence[dict]) -> View:
    runs = [as_results(r) for r in runs]
    rows = []
    for res in runs:
        m = res.manifest
        mc = np.asarray(res.values("mean_cosine"))
        norm = res.norm_parameters
        rows.append({
            "model": res.model_label, "corpus": res.corpus_label, "trained": m["model"].get("trained"),
            "layers (L)": res.n_layers - 1, "d": m["model"].get("hidden_size"),
            "params": m["model"].get("n_params"), "tokens analysed": res.n_tokens, "sample K": res.n_sample,
            "mean_cosine min": float(np.nanmin(mc)), "mean_cosine max": float(np.nanmax(mc)),
            "mean_cosine mean": float(np.nanmean(mc)), "argmax layer": int(np.nanargmax(mc)),
            "persistent outliers (activation)": " ".join(map(str, res.persistent_activation_outliers)),
            "persistent outliers (norm params)": " ".join(map(str, norm.get("persistent") or [])),
            "device": m.get("device"), "dtype": m.get("dtype"), "note": m["model"].get("note", ""),
        })
    return View("compare_summary", "Summary", None, pd.DataFrame(rows), _manifest("compare_summary", {}, runs),
                caption="One row per model: depth, width, tokens, mean-cosine range and persistent outliers.")
