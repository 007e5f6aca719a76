"""Untrained controls over several seeds: the spread of the seeds drawn as a band on the layer curves."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from . import figures as F
from .common import View, as_results, view_manifest


def add_seed_bands(view: View, runs: Sequence, controls: Sequence[Sequence], metric: str, x_axis: str) -> View:
    """The layer-curve view with, for each run that has other seeds (`controls[i]`: their results), a
    band from the smallest to the largest value over all its seeds (the run itself included)."""
    if view.figure is None:  # a not-applicable view stays one (no empty chart)
        return view
    extra_rows, notes, added = [], [], []
    fig = go.Figure(view.figure)
    for i, (res, extra) in enumerate(zip(runs, controls)):
        if not extra:
            continue
        allr = [as_results(res)] + [as_results(e) for e in extra]
        if len({r.n_layers for r in allr}) != 1:
            continue
        Y = np.asarray([[np.nan if v is None else float(v) for v in r.values(metric)] for r in allr], dtype=float)
        if np.isnan(Y).all():
            continue
        lo, hi = np.nanmin(Y, axis=0), np.nanmax(Y, axis=0)
        n = Y.shape[1]
        last = max(n - 1, 1)
        xs = [l / last for l in range(n)] if x_axis == "depth" else list(range(n))
        c = F.color(i)
        name = f"{allr[0].run_name}: {len(allr)} seeds (min-max)"
        fig.add_trace(go.Scatter(x=xs + xs[::-1], y=list(hi) + list(lo[::-1]), mode="lines", fill="toself",
                                 fillcolor=F.rgba(c, 0.10), line=dict(color=c, width=0.8, dash="dot"), name=F.esc(name),
                                 hoverinfo="skip"))
        seeds = [r.model_label for r in allr]
        for l in range(n):  # one row per layer: the band as min/max columns, each seed's value beside them
            extra_rows.append({"series": f"seed band: {allr[0].model_label}", "model": allr[0].model_label,
                               "corpus": allr[0].corpus_label, "layer": l, "depth": l / last,
                               f"{metric}_seed_min": float(lo[l]), f"{metric}_seed_max": float(hi[l]),
                               "n_seeds": len(allr), "seed_runs": " | ".join(seeds),
                               f"{metric}_per_seed": " ".join(f"{v:.6g}" for v in Y[:, l])})
        notes.append(f"{allr[0].model_label}: {len(allr)} random initialisations (seeds); the band spans their "
                     f"smallest to largest {metric.replace('_', ' ')} per layer.")
        added += [e for e in extra]
    if not added:
        return view

    man = view_manifest(view.manifest.get("view", "layer_curves"), {**view.manifest.get("params", {}), "seed_band": True},
                    list(runs) + added)
    return View(view.name, view.title, fig, pd.concat([view.data, pd.DataFrame(extra_rows)], ignore_index=True), man,
                caption=view.caption + " Bands: the untrained controls over their seeds (min-max).",
                notes=view.notes + notes)
