"""Views of the frequency link and of one dimension drilled into (Outliers page).

`frequency_correlation`: the signed r of log frequency vs |x_d| per layer for every persistent
outlier dim, a distinct colour-and-marker per dim, the random dims' range as a band;
`frequency_r_table`: one row of r per dim. `dimension_*`: for one dim, its top-activating
tokens in context, |x_d| vs log frequency over the sample at one layer, and its signed r per
layer with a 95% interval against the other dims (core.dimension).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .. import dimension as D
from .. import figures as F
from .common import (
    TOKEN_ID_WHY,
    View,
    _fmt_n,
    _layer_dtick,
    _manifest,
    _nan,
    as_results,
    model_label,
    not_applicable,
    run_name,
)


def _n_tokens(results) -> int:
    return as_results(results).n_tokens

# 8 colours x 5 markers x 3 dashes: no two of the (up to ~20) outlier lines look alike.
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x")
DASHES = ("solid", "dash", "dot")


def _style(j: int) -> dict:
    n = len(F.OKABE_ITO) - 1  # black is kept for the dim drilled into
    return {"color": F.OKABE_ITO[j % n], "symbol": SYMBOLS[(j // n) % len(SYMBOLS)],
            "dash": DASHES[(j // (n * len(SYMBOLS))) % len(DASHES)]}


def frequency_correlation(results: dict, R: np.ndarray | None = None) -> View:
    """Signed Pearson r of log token frequency vs |x_d| per layer: outlier dims vs random dims.

    R: the (L+1, d) r of every dim (analysis.frequency_r), for the baseline band; without it the
    band spans the stored random dims.
    """
    fr = as_results(results).frequency
    if "not_applicable" in fr:  # images, audio: no token ids
        return not_applicable("frequency_correlation", "Frequency correlation of outlier dims", [results], TOKEN_ID_WHY)
    dims = fr["outlier_dims"]
    L1 = len(fr["layers"])
    xs = list(range(L1))
    series, rows = [], []
    if R is not None:
        keep = np.setdiff1d(np.arange(R.shape[1]), dims)
        base = R[:, keep]
        what = f"other {len(keep)} dims"
    else:
        base = np.asarray([l["random_r"] for l in fr["layers"]], dtype=float)
        what = f"{len(fr['random_dims'])} random other dims"
    finite = np.where(np.isfinite(base), base, np.nan)
    lo = np.nanquantile(finite, D.BASELINE_Q[0], axis=1) if finite.size else np.full(L1, np.nan)
    hi = np.nanquantile(finite, D.BASELINE_Q[1], axis=1) if finite.size else np.full(L1, np.nan)
    series.append({"name": f"{what}: 5-95% of r", "x": xs, "y": list(lo), "color": F.MUTED, "band": (lo, hi),
                   "band_name": f"baseline: {what}, 5th-95th percentile of r", "band_only": True})
    for j, d in enumerate(dims):
        ys = [_nan(l["outlier_r"][j]) for l in fr["layers"]]
        sty = _style(j)
        series.append({"name": f"dim {d}", "x": xs, "y": ys, **sty,
                       "hover": [f"<b>dim {d}</b>, layer {l}<br>r = {y:+.3f}" for l, y in zip(xs, ys)]})
    for l in fr["layers"]:
        row = {"model": model_label(results), "layer": l["layer"], "baseline_mean_abs_r": _nan(l["baseline"]),
               "baseline_r_p05": float(lo[l["layer"]]), "baseline_r_p95": float(hi[l["layer"]])}
        for d, r in zip(dims, l["outlier_r"]):
            row[f"r_dim_{d}"] = _nan(r)
        rows.append(row)
    fig = F.line_chart(series, title="Outlier dimensions and token frequency (signed Pearson r)",
                       subtitle=F.esc(f"{run_name(results)} · N = {_fmt_n(_n_tokens(results))} tokens · r between "
                                      "log corpus frequency and |x_d| per layer (Puccetti et al. 2022) · grey band: "
                                      f"{what}"),
                       x_title="layer (0 = embeddings)", y_title="Pearson r (log frequency, |x_d|)",
                       x_dtick=_layer_dtick(L1))
    fig.add_hline(y=0, line=dict(color="black", width=0.8))
    # Legend under the plot, in columns: it never scrolls, and the baseline entry comes first.
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.16, yanchor="top"),
                      margin=dict(b=90 + 22 * ((len(dims) + 1) // 6)), height=F.HEIGHT + 22 * ((len(dims) + 1) // 6))
    notes = [] if dims else ["No persistent outlier dimensions in this run: only the baseline is drawn."]
    return View("frequency_correlation", "Frequency correlation of outlier dims", fig, pd.DataFrame(rows),
                _manifest("frequency_correlation", {"baseline": what}, [results]),
                caption=f"Signed r of log token frequency vs |x_d| for outlier dims {dims}; band: {what}.",
                notes=notes)


def frequency_r_table(results: dict, R: np.ndarray) -> View:
    """One row per outlier dim: its signed r over the layers in brief, and how often it beats the baseline."""
    if "not_applicable" in as_results(results).frequency:  # images, audio: no token ids
        return not_applicable("frequency_r_table", "Pearson r per outlier dimension", [results], TOKEN_ID_WHY)
    fr = as_results(results).frequency
    df = D.r_summary(R, fr["outlier_dims"], fr["random_dims"])
    df.insert(0, "model", model_label(results))
    return View("frequency_r_by_dim", "Pearson r per outlier dimension", None, df,
                _manifest("frequency_r_table", {}, [results]),
                caption="Per outlier dim: mean, most negative and most positive r over layers, the layer of the "
                        "largest |r| and the number of layers where |r| exceeds the random dims' mean |r|.")


def dimension_tokens(results: dict, x_d: np.ndarray, table: pd.DataFrame, dim: int, layer: int,
                     top: int = D.TOP_TOKENS) -> View:
    """The sampled tokens with the largest |x_d| at `layer`, in their context (a table)."""
    df = D.top_tokens(x_d, table, top).assign(dim=dim, layer=layer)
    return View(f"dim{dim}_top_tokens_layer{layer}", f"Top-activating tokens of dim {dim}", None, df,
                _manifest("dimension_tokens", {"dim": dim, "layer": layer, "top": top}, [results]),
                caption=f"The {len(df)} tokens of the K = {_fmt_n(len(x_d))} sample with the largest |x_{dim}| at "
                        f"layer {layer}, in context.")


def dimension_scatter(results: dict, x_d: np.ndarray, table: pd.DataFrame, dim: int, layer: int) -> View:
    """|x_d| against log corpus frequency over the token sample at one layer."""
    if "not_applicable" in as_results(results).frequency:  # images, audio: no token ids
        return not_applicable("dimension_scatter", "Frequency vs |x_d|", [results], TOKEN_ID_WHY)
    f, a, r = D.frequency_scatter(x_d, table)
    t = table.iloc[: len(a)]
    hover = [f"<b>{F.esc(tok)}</b><br>{F.esc(ctx)}<br>|x_{dim}| = {v:.3g} · corpus frequency {int(fq):,}"
             for tok, ctx, v, fq in zip(t["token"], t["context"], a, t["frequency"])]
    fig = F.scatter_xy(f, a, hover, title=f"|x_{dim}| vs token frequency, layer {layer}",
                       subtitle=F.esc(f"{run_name(results)} · K = {_fmt_n(len(a))} sampled tokens · Pearson r on "
                                      f"the sample = {r:+.3f}"),
                       x_title="log corpus frequency of the token", y_title=f"|x_{dim}| (hidden-state units)",
                       name=f"dim {dim}")
    df = pd.DataFrame({"model": model_label(results), "dim": dim, "layer": layer, "token": t["token"].to_numpy(),
                       "log_frequency": f, "abs_x_d": a, "context": t["context"].to_numpy()})
    return View(f"dim{dim}_frequency_scatter_layer{layer}", f"|x_{dim}| vs token frequency", fig, df,
                _manifest("dimension_scatter", {"dim": dim, "layer": layer}, [results]),
                caption=f"|x_{dim}| vs log corpus frequency at layer {layer}; r on the sample {r:+.3f}.")


def dimension_r(results: dict, R: np.ndarray, dim: int, outlier_dims: Sequence[int]) -> View:
    """Signed r per layer for one dim, its Fisher 95% interval, against the other dims' range."""
    if "not_applicable" in as_results(results).frequency:  # images, audio: no token ids
        return not_applicable("dimension_r", "Pearson r of one dimension by layer", [results], TOKEN_ID_WHY)
    n = _n_tokens(results)
    df = D.r_profile(R, dim, outlier_dims, n)
    xs = df["layer"].tolist()
    hover = [f"<b>dim {dim}</b>, layer {l}<br>r = {r:+.3f} [{lo:+.3f}, {hi:+.3f}]<br>other dims: {bl:+.3f} to "
             f"{bh:+.3f}<br>p vs the other dims = {p:.3g}"
             for l, r, lo, hi, bl, bh, p in zip(xs, df["r"], df["ci_low"], df["ci_high"], df["baseline_low"],
                                                df["baseline_high"], df["p_baseline"])]
    nb = int(df["n_baseline"].max()) if len(df) else 0
    series = [{"name": "other dims", "x": xs, "y": df["baseline_low"].tolist(), "color": F.OKABE_ITO[4],
               "band": (df["baseline_low"].tolist(), df["baseline_high"].tolist()),
               "band_name": f"baseline: {nb} other non-outlier dims, 5th-95th percentile", "band_only": True},
              {"name": f"dim {dim}", "x": xs, "y": df["r"].tolist(), "color": "#000000", "hover": hover,
               "band": (df["ci_low"].tolist(), df["ci_high"].tolist()), "band_name": "95% interval (Fisher z)"}]
    fig = F.line_chart(series, title=f"Dim {dim}: Pearson r with token frequency per layer",
                       subtitle=F.esc(f"{run_name(results)} · N = {_fmt_n(n)} tokens · r between log corpus "
                                      "frequency and |x_d| · interval: Fisher z, nominal (tokens repeat) · p: share "
                                      "of other dims with |r| at least as large"),
                       x_title="layer (0 = embeddings)", y_title="Pearson r (log frequency, |x_d|)",
                       x_dtick=_layer_dtick(len(xs)))
    fig.add_hline(y=0, line=dict(color="black", width=0.8))
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top"),
                      margin=dict(b=130), height=F.HEIGHT + 40)
    sig = int((df["p_baseline"] < 0.05).sum())
    df.insert(0, "model", model_label(results))
    return View(f"dim{dim}_frequency_r", f"Dim {dim}: r with token frequency per layer", fig, df,
                _manifest("dimension_r", {"dim": dim, "baseline": "other non-outlier dims"}, [results]),
                caption=f"Signed r of log frequency vs |x_{dim}| per layer with a Fisher-z 95% interval; baseline: "
                        f"5th-95th percentile of the other {nb} non-outlier dims; p = share of them with |r| >= |r_{dim}|.",
                notes=[f"|r| of dim {dim} is beyond 95% of the other dims (p < 0.05) at {sig} of {len(df)} layers "
                       "(hover a point for its r, interval and p)."])
