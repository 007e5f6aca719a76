"""Views of the frequency link and of one dimension drilled into (Outliers page).

`frequency_correlation`: the signed r of log frequency vs |x_d| per layer for every persistent
outlier dim, a distinct colour-and-marker per dim, the random dims' range as a band;
`frequency_r_table`: one row of r per dim. `dimension_*`: for one dim, its top-activating
tokens in context, |x_d| vs log frequency over the sample at one layer, and its signed r per
layer with a 95% interval against the other dims (core.stats.single_dim).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..base.config import CONFIG
from ..stats import single_dim as D
from ..studies.selection import typed_dims_for
from . import figures as F
from .common import (
    TOKEN_ID_WHY,
    View,
    as_results,
    fmt_n,
    layer_dtick,
    model_label,
    nan_if_none,
    not_applicable,
    readable_token,
    run_name,
    view_manifest,
)


def _n_tokens(results) -> int:
    return as_results(results).n_tokens

# The k dims with the strongest link get distinct colours (Okabe-Ito without black, kept for the dim
# drilled into, and without yellow, too faint on white) and markers; the others are thin grey lines.
HIGHLIGHT_K = 6
COLORS = tuple(c for c in F.OKABE_ITO if c not in ("#000000", "#F0E442"))
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")
OTHERS = "#9A9A9A"
BAND = "#7F7F7F"


def _style(j: int) -> dict:
    return {"color": COLORS[j % len(COLORS)], "symbol": SYMBOLS[j % len(SYMBOLS)]}


def outlier_set(results, which: str = "persistent", layer: int | None = None,
                typed: Sequence[int] = ()) -> tuple[list[int], str]:
    """(dims, a phrase naming them) of an outlier set: the run's persistent dims of either definition, the
    dims over the 3-sigma rule at `layer`, or the `typed` dims (checked against the model's width:
    InputError with what is wrong)."""
    res = as_results(results)
    if which == "typed":
        dims = typed_dims_for(typed, int(res.model.get("hidden_size") or 0))
        return dims, f"the {len(dims)} typed dim{'s' if len(dims) != 1 else ''} ({', '.join(map(str, dims))})"
    if which == "layer" and layer is not None:
        dims = list(res.activation_outliers[int(layer)])
        return dims, f"the {len(dims)} dims over the 3-sigma rule at layer {layer}"
    dims = res.outlier_dims
    return dims, (f"the {len(dims)} persistent outlier dims (3-sigma rule in >= "
                  f"{CONFIG.activation_persistence:.0%} of the layers, or the norm-parameter rule)")


def set_label(which: str, layer: int | None, n: int) -> str:
    """The set's short name in a sentence: "persistent outlier dims", "3-sigma dims of layer 15", "typed dims"."""
    s = "s" if n != 1 else ""
    return {"persistent": f"persistent outlier dim{s}", "layer": f"3-sigma dim{s} of layer {layer}",
            "typed": f"typed dim{s}"}.get(which, f"outlier dim{s}")


def frequency_correlation(results: dict, R: np.ndarray | None = None, dims: Sequence[int] | None = None,
                          set_name: str | None = None, position: dict | None = None) -> View:
    """Signed Pearson r of log token frequency vs |x_d| per layer: outlier dims vs random dims.

    R: the (L+1, d) r of every dim (analysis.frequency_r), for the baseline band; without it the
    band spans the stored random dims. dims: the outlier set drawn (default: results' persistent dims;
    another set needs R). The HIGHLIGHT_K dims with the largest |r| are coloured, the others grey.
    """
    fr = as_results(results).frequency
    if "not_applicable" in fr:  # images, audio: no token ids
        return not_applicable("frequency_correlation", "Frequency correlation of outlier dims", [results], TOKEN_ID_WHY)
    stored = dims is None or R is None or list(dims) == list(fr["outlier_dims"])
    dims = list(fr["outlier_dims"]) if stored else [int(d) for d in dims]
    L1 = len(fr["layers"])
    xs = list(range(L1))
    rs = ([[nan_if_none(l["outlier_r"][j]) for l in fr["layers"]] for j in range(len(dims))] if stored
          else [[nan_if_none(v) for v in R[:, d]] for d in dims])
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
    series.append({"name": f"{what}: 5-95% of r", "x": xs, "y": list(lo), "color": BAND, "band": (lo, hi),
                   "band_alpha": 0.35, "band_edge": True,
                   "band_name": f"baseline: {what}, 5th-95th percentile of r", "band_only": True})
    peak = [np.nanmax(np.abs(y)) if np.isfinite(y).any() else -1.0 for y in map(np.asarray, rs)]
    order = sorted(range(len(dims)), key=lambda j: -peak[j])
    top = order[:HIGHLIGHT_K]
    for rank, j in enumerate(order):  # legend: the highlighted dims first, strongest first
        d, ys = dims[j], rs[j]
        sty = (_style(rank) | {"width": 2.4} if j in top
               else {"color": OTHERS, "symbol": "circle", "width": 1.1, "marker_size": 4, "opacity": 0.8})
        series.append({"name": f"dim {d}", "x": xs, "y": ys, **sty,
                       "hover": [f"<b>dim {d}</b>, layer {l}<br>r = {y:+.3f}" for l, y in zip(xs, ys)]})
    for l in range(L1):
        row = {"model": model_label(results), "layer": fr["layers"][l]["layer"],
               "baseline_mean_abs_r": nan_if_none(fr["layers"][l]["baseline"]),
               "baseline_r_p05": float(lo[l]), "baseline_r_p95": float(hi[l])}
        for d, ys in zip(dims, rs):
            row[f"r_dim_{d}"] = ys[l]
        rows.append(row)
    grey = f" · {len(dims) - len(top)} weaker dims in grey" if len(dims) > len(top) else ""
    fig = F.line_chart(series, title="Outlier dimensions and token frequency (signed Pearson r)",
                       subtitle=F.esc(f"{run_name(results)} · N = {fmt_n(_n_tokens(results))} tokens · r between "
                                      "log corpus frequency and |x_d| per layer (Puccetti et al. 2022) · grey band: "
                                      f"{what}{grey}"),
                       x_title="layer (0 = embeddings)", y_title="Pearson r (log frequency, |x_d|)",
                       x_dtick=layer_dtick(L1))
    fig.add_hline(y=0, line=dict(color="black", width=0.8))
    # Legend under the plot, in columns: it never scrolls, and the baseline entry comes first.
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.16, yanchor="top"),
                      margin=dict(b=90 + 22 * ((len(dims) + 1) // 6)), height=F.HEIGHT + 22 * ((len(dims) + 1) // 6))
    notes = [f"Outlier set: {set_name or outlier_set(results)[1]}."]
    notes += [] if dims else ["No outlier dimensions in this set: only the baseline is drawn."]
    notes += position_notes(results, position if position is not None else (fr.get("position") if stored else None))
    return View("frequency_correlation", "Frequency correlation of outlier dims", fig, pd.DataFrame(rows),
                view_manifest("frequency_correlation", {"baseline": what, "dims": dims}, [results]),
                caption=f"Signed r of log token frequency vs |x_d| for outlier dims {dims}; band: {what}.",
                notes=notes)


FREQUENCY_COLUMNS = {
    "dim": "the outlier dimension",
    "mean_r": "signed Pearson r of log corpus frequency and |x_d| over all analysed tokens, averaged over layers",
    "min_r": "its most negative value over the layers", "max_r": "its most positive value over the layers",
    "peak_layer": "the layer where |r| is largest", "r_at_peak": "r at that layer",
    "layers_above_baseline": "layers where |r| exceeds the random dims' mean |r|",
    "r_sample": "r at the peak layer on the token sample (the scatter's r)",
    "r_later": "the same with position 0 of each window and special tokens left out",
    "partial_r": "r given the position class (position 0 / special / later): both variables minus their class means",
    "top_position": "the most common position among the dim's top-20 tokens at the peak layer, and its share",
}


def position_notes(results, pos: dict | None = None) -> list[str]:
    """A warning per dim whose top-activating tokens sit mostly at one position (the first, usually).
    pos: a position report (default: results.json's, of the persistent dims)."""
    pos = pos or as_results(results).frequency.get("position")
    if not pos:
        return []
    hit = D.position_dominated(pos)
    if not hit:
        return []
    at = ", ".join(f"{d} (position {p})" for d, p in hit.items())
    return [f"The top-{pos['top']} tokens of dims {at} sit mostly (> {D.TOP_POSITION_WARN:.0%}) at one position in "
            "most layers: their frequency link may be a position effect (position 0 of a causal LM without a BOS "
            "token is an attention sink). Compare r with r_later and partial_r, which leave position 0 out or hold "
            "it fixed."]


def position_for(stats, results, dims: Sequence[int]) -> dict | None:
    """The position-adjusted link of `dims` (results.json's frequency["position"] when they are its dims,
    else computed on the run's token sample)."""
    fr = as_results(results).frequency
    pos = fr.get("position")
    if pos and list(pos["outlier_dims"]) == list(dims):
        return pos
    a = stats.arrays
    if "not_applicable" in fr or a["sample"].shape[1] < 3:
        return None
    special = stats.meta.get("sample_special")
    rep = D.position_report(a["sample"], np.log(np.maximum(a["sample_freq"], 1)), a["sample_position"],
                            None if special is None else np.asarray(special, dtype=bool), list(dims))
    for l, i in zip(rep["layers"], stats.layer_ids):  # row -> model layer, as in results.json
        l["layer"] = int(i)
    return rep


def frequency_r_table(results: dict, R: np.ndarray, dims: Sequence[int] | None = None,
                      position: dict | None = None) -> View:
    """One row per outlier dim: its signed r over the layers in brief, how often it beats the baseline,
    and at its peak layer the sample's r with position 0 and special tokens excluded and held fixed.

    dims: the outlier set (default: results' persistent dims); position: its position report
    (`position_for`; default: results.json's, when the dims are its own)."""
    if "not_applicable" in as_results(results).frequency:  # images, audio: no token ids
        return not_applicable("frequency_r_table", "Pearson r per outlier dimension", [results], TOKEN_ID_WHY)
    fr = as_results(results).frequency
    dims = list(fr["outlier_dims"]) if dims is None else [int(d) for d in dims]
    df = D.r_summary(R, dims, fr["random_dims"])
    pos = position if position is not None else fr.get("position")
    if pos and list(pos["outlier_dims"]) != dims:
        pos = None
    if pos and len(df):
        col = {d: j for j, d in enumerate(pos["outlier_dims"])}
        by_layer = {l["layer"]: l for l in pos["layers"]}
        for key in ("r_sample", "r_later", "partial_r"):
            df[key] = [nan_if_none(by_layer[p][key][col[d]]) if p in by_layer and d in col else float("nan")
                       for d, p in zip(df["dim"], df["peak_layer"])]
        df["top_position"] = [f"{by_layer[p]['top_position'][col[d]]} ({by_layer[p]['top_position_share'][col[d]]:.0%})"
                              if p in by_layer and d in col else "" for d, p in zip(df["dim"], df["peak_layer"])]
    df.insert(0, "model", model_label(results))
    n0 = f"; the sample holds {pos['n_position0']} tokens at position 0 of {pos['sample_size']}" if pos else ""
    notes = position_notes(results, pos) if pos else []
    return View("frequency_r_by_dim", "Pearson r per outlier dimension", None, df,
                view_manifest("frequency_r_table", {"dims": dims}, [results]),
                caption="Columns: " + "; ".join(f"{k}: {v}" for k, v in FREQUENCY_COLUMNS.items() if k in df.columns)
                        + n0 + ".",
                notes=notes)


def dimension_tokens(results: dict, x_d: np.ndarray, table: pd.DataFrame, dim: int, layer: int,
                     top: int = D.TOP_TOKENS) -> View:
    """The sampled tokens with the largest |x_d| at `layer`, in their context (a table)."""
    df = D.top_tokens(x_d, table, top).assign(dim=dim, layer=layer)
    df["token"] = [readable_token(t) for t in df["token"]]  # ĠPolish -> " Polish"
    return View(f"dim{dim}_top_tokens_layer{layer}", f"Top-activating tokens of dim {dim}", None, df,
                view_manifest("dimension_tokens", {"dim": dim, "layer": layer, "top": top}, [results]),
                caption=f"The {len(df)} tokens of the K = {fmt_n(len(x_d))} sample with the largest |x_{dim}| at "
                        f"layer {layer}, in context.")


def dimension_scatter(results: dict, x_d: np.ndarray, table: pd.DataFrame, dim: int, layer: int) -> View:
    """|x_d| against log corpus frequency over the token sample at one layer, each point marked by its
    position class (position 0 of its window / special token / later), with the link three ways."""
    if "not_applicable" in as_results(results).frequency:  # images, audio: no token ids
        return not_applicable("dimension_scatter", "Frequency vs |x_d|", [results], TOKEN_ID_WHY)
    f, a, r = D.frequency_scatter(x_d, table)
    t = table.iloc[: len(a)]
    special = t["special"].to_numpy(dtype=bool) if "special" in t.columns else None
    cls = D.position_classes(t["position"].to_numpy(), special)
    link = D.position_link(x_d, f, cls)
    hover = [f"<b>{F.esc(readable_token(tok))}</b> (position {int(p)})<br>{F.esc(ctx)}<br>|x_{dim}| = {v:.3g} · corpus frequency "
             f"{int(fq):,}" for tok, ctx, v, fq, p in zip(t["token"], t["context"], a, t["frequency"], t["position"])]
    n = np.bincount(cls, minlength=3)
    groups = [{"name": f"later positions ({n[D.LATER]:,})", "mask": cls == D.LATER, "color": F.OKABE_ITO[0]},
              {"name": f"special tokens ({n[D.SPECIAL]:,})", "mask": cls == D.SPECIAL, "color": F.OKABE_ITO[2],
               "symbol": "square", "size": 7, "opacity": 0.9},
              {"name": f"position 0 of a window ({n[D.FIRST]:,})", "mask": cls == D.FIRST, "color": F.HIGHLIGHT,
               "symbol": "diamond", "size": 8, "opacity": 0.9}]
    fig = F.scatter_xy(f, a, hover, title=f"|x_{dim}| vs token frequency, layer {layer}",
                       subtitle=F.esc(f"{run_name(results)} · K = {fmt_n(len(a))} sampled tokens · Pearson r "
                                      f"{r:+.3f}; later positions only {link['r_later']:+.3f}; given the position "
                                      f"class {link['partial_r']:+.3f}"),
                       x_title="log corpus frequency of the token", y_title=f"|x_{dim}| (hidden-state units)",
                       name=f"dim {dim}", groups=groups)
    df = pd.DataFrame({"model": model_label(results), "dim": dim, "layer": layer, "token": t["token"].to_numpy(),
                       "position": t["position"].to_numpy(), "position_class": np.asarray(D.POSITION_CLASSES)[cls],
                       "log_frequency": f, "abs_x_d": a, "context": t["context"].to_numpy()})
    p, share = D.top_position_share(x_d, t["position"].to_numpy())
    notes = []
    if np.isfinite(share) and share > D.TOP_POSITION_WARN:
        notes.append(f"{share:.0%} of dim {dim}'s top-{D.TOP_TOKENS} tokens at layer {layer} sit at position {p}: the "
                     f"plain r ({r:+.3f}) may be a position effect; with position 0 and special tokens left out r = "
                     f"{link['r_later']:+.3f}, given the position class {link['partial_r']:+.3f}.")
    return View(f"dim{dim}_frequency_scatter_layer{layer}", f"|x_{dim}| vs token frequency", fig, df,
                view_manifest("dimension_scatter", {"dim": dim, "layer": layer}, [results]),
                caption=f"|x_{dim}| vs log corpus frequency at layer {layer}; r on the sample {r:+.3f}, over later "
                        f"positions {link['r_later']:+.3f}, partial r given the position class {link['partial_r']:+.3f}.",
                notes=notes)


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
                       subtitle=F.esc(f"{run_name(results)} · N = {fmt_n(n)} tokens · r between log corpus "
                                      "frequency and |x_d| · interval: Fisher z, nominal (tokens repeat) · p: share "
                                      "of other dims with |r| at least as large"),
                       x_title="layer (0 = embeddings)", y_title="Pearson r (log frequency, |x_d|)",
                       x_dtick=layer_dtick(len(xs)))
    fig.add_hline(y=0, line=dict(color="black", width=0.8))
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top"),
                      margin=dict(b=130), height=F.HEIGHT + 40)
    sig = int((df["p_baseline"] < 0.05).sum())
    df.insert(0, "model", model_label(results))
    return View(f"dim{dim}_frequency_r", f"Dim {dim}: r with token frequency per layer", fig, df,
                view_manifest("dimension_r", {"dim": dim, "baseline": "other non-outlier dims"}, [results]),
                caption=f"Signed r of log frequency vs |x_{dim}| per layer with a Fisher-z 95% interval; baseline: "
                        f"5th-95th percentile of the other {nb} non-outlier dims; p = share of them with |r| >= |r_{dim}|.",
                notes=[f"|r| of dim {dim} is beyond 95% of the other dims (p < 0.05) at {sig} of {len(df)} layers "
                       "(hover a point for its r, interval and p)."])
