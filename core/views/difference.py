"""Compare page: the difference of two runs' mean cosine per layer, with its bootstrap interval.

Runs of one model on two corpora share their layers; runs of models of different depths are
matched by relative depth (each layer of the shallower run with the nearest layer of the deeper).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..stats import kernels as M
from . import figures as F
from .common import View, as_results, fmt_n, layer_at_depth, n_layers, run_name, view_manifest


def _n_tokens(results) -> int:
    return as_results(results).n_tokens

N_BOOT = 1000


def mean_cosine_difference(stats_a, res_a: dict, stats_b, res_b: dict, n_boot: int = N_BOOT,
                           x_axis: str | None = None) -> View:
    """mean_cosine(A) - mean_cosine(B) per layer with a 95% bootstrap interval over sequence groups.

    x_axis: "depth" (relative depth, as the curves above it on Compare) or "layer"; None: layer when the
    two runs have the same depth, else depth."""
    La, Lb = n_layers(res_a), n_layers(res_b)
    same = La == Lb
    short, (sa, ra), (sb, rb) = (La <= Lb), (stats_a, res_a), (stats_b, res_b)
    base = res_a if short else res_b
    L = max(n_layers(base) - 1, 1)
    ga, gb = sa.arrays, sb.arrays
    rows = []
    for l in range(n_layers(base)):
        depth = l / L
        la = l if short else layer_at_depth(ra, depth)
        lb = layer_at_depth(rb, depth) if short else l
        d, lo, hi = M.mean_cosine_diff_ci(ga["group_sum_u"][la], ga["group_n"], gb["group_sum_u"][lb], gb["group_n"],
                                          n_boot=n_boot, seed=l, a_group_u_sq=ga["group_u_sq"][la],
                                          b_group_u_sq=gb["group_u_sq"][lb])
        rows.append({"depth": depth, "layer_a": la, "layer_b": lb, "difference": d, "ci_low": lo, "ci_high": hi,
                     "excludes_zero": bool(np.isfinite(lo) and (lo > 0 or hi < 0))})
    df = pd.DataFrame(rows)
    by_layer = same if x_axis is None else (x_axis == "layer" and same)
    xs = df["layer_a"].tolist() if by_layer else df["depth"].tolist()
    name_a, name_b = run_name(res_a), run_name(res_b)
    hover = [f"layer {a} vs {b}<br>difference {d:+.4f}<br>95% CI [{lo:+.4f}, {hi:+.4f}]"
             for a, b, d, lo, hi in zip(df["layer_a"], df["layer_b"], df["difference"], df["ci_low"], df["ci_high"])]
    series = [{"name": "A - B", "x": xs, "y": df["difference"].tolist(), "color": "#000000", "hover": hover,
               "band": (df["ci_low"].tolist(), df["ci_high"].tolist()), "band_name": "95% bootstrap CI"}]
    fig = F.line_chart(series, title="Difference in mean cosine (A - B) by layer",
                       subtitle=F.esc(f"A: {name_a} (N = {fmt_n(_n_tokens(res_a))}) · B: {name_b} "
                                      f"(N = {fmt_n(_n_tokens(res_b))}) · band: 95% percentile bootstrap, each run "
                                      f"resampled by groups of sequences, {n_boot} draws"
                                      + ("" if same else " · layers matched by relative depth")),
                       x_title="layer (0 = embeddings)" if by_layer else
                       "relative depth (layer / L; 0 = embeddings, 1 = last layer)",
                       y_title="mean cos(A) − mean cos(B)", x_range=None if by_layer else (-0.03, 1.03))
    fig.add_hline(y=0, line=dict(color="black", width=0.8, dash="dot"))
    df.insert(0, "run_b", name_b)
    df.insert(0, "run_a", name_a)
    k = int(df["excludes_zero"].sum())
    return View("mean_cosine_difference", "Difference in mean cosine", fig, df,
                view_manifest("mean_cosine_difference", {"n_boot": n_boot, "matched_by": "layer" if same else "depth"},
                          [res_a, res_b]),
                caption=f"mean cosine of A ({name_a}) minus B ({name_b}) per layer with a 95% bootstrap interval; "
                        f"the interval excludes 0 at {k} of {len(df)} layers.",
                notes=[f"The interval excludes 0 at {k} of {len(df)} layers."])
