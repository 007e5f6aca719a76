"""Compare page: activation outliers per layer by relative depth, and one summary row per model
(the per-layer curves and projections of the Compare page come from `layers` and `projection`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .. import figures as F
from ..config import CONFIG
from .common import View, _corpora, _manifest, _sizes, as_results


def outlier_counts(runs: Sequence[dict]) -> View:
    """Number of activation outlier dims per layer, by relative depth, for every run."""
    runs = [as_results(r) for r in runs]
    series, rows = [], []
    for i, res in enumerate(runs):
        L = res.last_layer
        per = res.activation_outliers
        xs = [l / L for l in range(len(per))]
        ys = [len(p) for p in per]
        series.append({"name": f"{res.run_name} (d = {res.hidden_size or '?'})",
                       "x": xs, "y": ys, "color": i})
        for l, (x, y) in enumerate(zip(xs, ys)):
            rows.append({"model": res.model_label, "corpus": res.corpus_label, "layer": l, "depth": x,
                         "n_outlier_dims": y, "dims": " ".join(map(str, per[l])), "n_tokens": res.n_tokens})
    fig = F.line_chart(series, title="Activation outlier dimensions per layer",
                       subtitle=F.esc(f"{_corpora(runs)} · N = {_sizes(runs)} · rule: mean |x_d| > mean + "
                                      f"{CONFIG.outlier_sigma:g} std"),
                       x_title="relative depth (layer / L; 0 = embeddings, 1 = last layer)",
                       y_title="number of outlier dimensions", x_range=(-0.03, 1.03))
    return View("outlier_counts", "Outlier dimensions per layer", fig, pd.DataFrame(rows),
                _manifest("outlier_counts", {}, runs), caption="Count of activation outliers per layer by relative depth.")


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
