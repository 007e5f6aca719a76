"""The dashboard's views: results/stats in, a View (figure + its data + manifest) out.

A page calls one function here per view and shows `view.figure` / `view.data`; the export
module turns the same View into PNG/SVG/PDF/HTML/CSV/JSON with the manifest embedded. Inputs
are what the pipeline returns (results dicts, RunStats, projection dicts), so this module does
no I/O and is cheap to test on synthetic runs. Layer 0 is the embedding output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from . import __version__
from . import figures as F
from .analysis import cosine_contributions, mean_abs
from .metrics import pairwise_cosine_histogram
from .postprocess import PostProcess
from .reference import reference_curves, reference_outlier_dims
from .selection import METRICS, SAMPLE_METRICS

HIST_BINS = 100
HIST_MAX_PAIRS = 2_000_000  # pairs of the pairwise-cosine histogram (a stated subset of the sample)
TOP_CC = 20
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "star")


@dataclass
class View:
    """One figure (or table) with the data behind it and the manifest of the runs it shows."""

    name: str  # file-name stem, e.g. "layers_mean_cosine"
    title: str
    figure: object | None  # go.Figure, or None for a table-only view
    data: pd.DataFrame
    manifest: dict
    caption: str = ""
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- helpers
def corpus_label(results: dict) -> str:
    return corpus_display(str(results["manifest"]["corpus"].get("id", "?")))


def corpus_display(cid: str) -> str:
    """A corpus identifier for people: uploads (<sha256>.<ext>) become "uploaded <ext> (<sha[:8]>)"."""
    cid = cid.replace("\\", "/").rsplit("/", 1)[-1] if "/" in cid or "\\" in cid else cid
    stem = cid.split(".")[0]
    if len(stem) == 64 and all(ch in "0123456789abcdef" for ch in stem):  # an uploaded file
        return f"uploaded {cid.split('.')[-1]} ({stem[:8]})"
    return cid


def model_label(results: dict) -> str:
    return results["manifest"]["model"]["label"]


def run_name(results: dict) -> str:
    return f"{model_label(results)} · {corpus_label(results)}"


def n_layers(results: dict) -> int:
    return len(results["layers"])


def depth_of(results: dict, layer: int) -> float:
    L = max(n_layers(results) - 1, 1)
    return layer / L


def layer_at_depth(results: dict, depth: float) -> int:
    return int(round(float(depth) * (n_layers(results) - 1)))


def _n_tokens(results: dict) -> int:
    return int(results["manifest"]["tokens"]["analysed"])


def _n_sample(results: dict) -> int:
    return int(results["manifest"]["tokens"]["sample"])


def _manifest(view: str, params: dict, runs: Sequence[dict]) -> dict:
    uniq = {r["manifest"].get("cache_key", id(r)): r["manifest"] for r in runs}  # raw/post panels share a run
    return {"app": "anisotropy-workbench", "core_version": __version__, "view": view,
            "params": params, "runs": list(uniq.values())}


def _fmt_n(n: int) -> str:
    return f"{int(n):,}"


def _sizes(runs: Sequence[dict], what: str = "tokens") -> str:
    """"N = 20,039 tokens" or "N = 20,039 / 20,412 tokens (all-MiniLM / BERT)"."""
    ns = [_n_tokens(r) if what == "tokens" else _n_sample(r) for r in runs]
    if len(set(ns)) == 1:
        return f"{_fmt_n(ns[0])} {what}"
    return " / ".join(_fmt_n(n) for n in ns) + f" {what} (" + " / ".join(model_label(r) for r in runs) + ")"


def _corpora(runs: Sequence[dict]) -> str:
    return ", ".join(dict.fromkeys(corpus_label(r) for r in runs))


def _layer_dtick(n: int) -> int:
    return 1 if n <= 16 else 2


def _nan(v) -> float:
    return float("nan") if v is None else float(v)


def post_for(results: dict, post: PostProcess, drop_outliers: bool = False) -> PostProcess:
    """The post-processing for one model: `post`, with removed dims restricted to the model's d
    and, when `drop_outliers`, the model's own persistent activation outliers added."""
    d = int(results["manifest"]["model"].get("hidden_size") or 0)
    remove = {i for i in post.remove if not d or i < d}
    if drop_outliers:
        remove |= set(results["outliers"]["activation"]["persistent"])
    return PostProcess(center=post.center, zscore=post.zscore, abtt=post.abtt, whiten=post.whiten,
                       whiten_k=post.whiten_k, remove=tuple(sorted(remove)))


# ----------------------------------------------------------------------------- Layers page
def layer_curves(runs: Sequence[dict], metric: str = "mean_cosine", x_axis: str = "layer", reference: bool = True,
                 post_rows: Sequence[list[dict] | None] | None = None, post_labels: Sequence[str] | None = None) -> View:
    """Per-layer curve of `metric` for every run, with the CI band (mean_cosine), the
    post-processing what-if (dashed, sample metrics only) and the published curves (dotted)."""
    label, unit = METRICS[metric]
    depth = x_axis == "depth"
    series, rows, notes = [], [], []
    for i, res in enumerate(runs):
        L = max(n_layers(res) - 1, 1)
        layers = [r["layer"] for r in res["layers"]]
        xs = [l / L for l in layers] if depth else layers
        ys = [_nan(r.get(metric)) for r in res["layers"]]
        sample_metric = metric in SAMPLE_METRICS and metric != "mean_cosine"
        n_txt = f"K = {_fmt_n(_n_sample(res))} sampled tokens" if sample_metric else f"N = {_fmt_n(_n_tokens(res))} tokens"
        name = f"{run_name(res)} (N = {_fmt_n(_n_tokens(res))})"
        hover = [f"<b>{F.esc(run_name(res))}</b><br>layer {l} of {L} (depth {l / L:.2f})<br>{F.esc(label)} = {y:.4g}"
                 f"<br>{n_txt}" for l, y in zip(layers, ys)]
        band = None
        if metric == "mean_cosine":
            ci = [r.get("mean_cosine_ci") or [None, None] for r in res["layers"]]
            band = ([_nan(c[0]) for c in ci], [_nan(c[1]) for c in ci])
            hover = [h + f"<br>95% CI [{lo:.4g}, {hi:.4g}]" for h, lo, hi in zip(hover, *band)]
        series.append({"name": name, "x": xs, "y": ys, "color": i, "band": band, "hover": hover,
                       "band_name": "95% bootstrap CI" if band is not None and i == 0 else None, "group": name})
        for l, x, y in zip(layers, xs, ys):
            row = {"series": "measured", "model": model_label(res), "corpus": corpus_label(res), "layer": l,
                   "depth": l / L, metric: y, "n_tokens": _n_tokens(res), "n_sample": _n_sample(res)}
            if band is not None:
                row["ci_low"], row["ci_high"] = band[0][l], band[1][l]
            rows.append(row)
        prow = post_rows[i] if post_rows is not None and i < len(post_rows) else None
        if prow:
            plabel = (post_labels[i] if post_labels else None) or prow[0].get("post", "post-processed")
            if metric in SAMPLE_METRICS:
                key = SAMPLE_METRICS[metric]
                py = [_nan(r.get(key)) for r in prow]
                pname = f"{run_name(res)} after {plabel} (K = {_fmt_n(_n_sample(res))})"
                series.append({"name": pname, "x": xs, "y": py, "color": i, "dash": "dash", "symbol": "diamond",
                               "hover": [f"<b>{F.esc(run_name(res))}</b><br>after {F.esc(plabel)}<br>layer {l}"
                                         f"<br>{F.esc(label)} = {y:.4g} (sample of {_fmt_n(_n_sample(res))})"
                                         for l, y in zip(layers, py)]})
                for l, x, y in zip(layers, xs, py):
                    rows.append({"series": f"after {plabel}", "model": model_label(res), "corpus": corpus_label(res),
                                 "layer": l, "depth": l / L, metric: y, "n_tokens": _n_tokens(res),
                                 "n_sample": _n_sample(res)})
                if metric == "mean_cosine":
                    notes.append("After post-processing, mean cosine is measured on the token sample "
                                 f"(K = {_fmt_n(_n_sample(res))}), not on all N tokens.")
            else:
                notes.append(f"{label} is a corpus-level statistic: the post-processing what-if changes only the "
                             "sample metrics (mean cosine, PC1 ratio, effective rank, IsoScore, partition isotropy).")
    refs = []
    if reference:
        for c in reference_curves(metric):
            L = max(c["layers"]) or 1
            xs = [l / L for l in c["layers"]] if depth else c["layers"]
            refs.append({"name": c["label"], "x": xs, "y": c["values"], "estimator": c["estimator"]})
            for l, x, y in zip(c["layers"], xs, c["values"]):
                rows.append({"series": c["label"], "model": c["model"], "corpus": "published", "layer": l,
                             "depth": l / L, metric: y, "estimator": c["estimator"]})
        if refs:
            notes.append("Published curves use their authors' estimator (hover for it): context, not our measurement.")
    est = ("exact over all token pairs; band: 95% bootstrap CI over sequence groups" if metric == "mean_cosine"
           else f"on a sample of {_sizes(runs, 'sampled tokens')} per layer" if metric in SAMPLE_METRICS
           else "over all analysed tokens")
    subtitle = f"{F.esc(_corpora(runs))} · N = {F.esc(_sizes(runs))} per layer · {F.esc(est)}"
    fig = F.line_chart(series, refs, title=f"{label} by layer", subtitle=subtitle,
                       x_title="relative depth (layer / L; 0 = embeddings, 1 = last layer)" if depth
                       else "layer (0 = embeddings)", y_title=unit,
                       x_range=(-0.03, 1.03) if depth else None,
                       x_dtick=None if depth else _layer_dtick(max(n_layers(r) for r in runs)))
    return View(f"layers_{metric}", f"{label} by layer", fig, pd.DataFrame(rows),
                _manifest("layer_curves", {"metric": metric, "x_axis": x_axis, "reference": reference,
                                           "post": list(post_labels or [])}, runs),
                caption=f"{label} per layer; {est}. {_corpora(runs)}; N = {_sizes(runs)}.", notes=notes)


METRIC_COLUMNS = ["mean_cosine", "mean_cosine_ci", "cross_sequence_cosine", "intra_sentence_similarity",
                  "intra_sentence_adjusted", "self_similarity", "self_similarity_adjusted", "mean_norm",
                  "sample_mean_cosine", "pc1_variance_ratio", "effective_rank", "isoscore", "partition_isotropy",
                  "n_tokens", "n_sample", "outlier_dims"]


def metric_table(runs: Sequence[dict]) -> View:
    """Every per-layer number of every run, one row per (model, layer)."""
    rows = []
    for res in runs:
        L = max(n_layers(res) - 1, 1)
        for r in res["layers"]:
            row = {"model": model_label(res), "corpus": corpus_label(res), "layer": r["layer"],
                   "depth": round(r["layer"] / L, 4)}
            for k in METRIC_COLUMNS:
                v = r.get(k)
                if k == "mean_cosine_ci":
                    lo, hi = (v or [None, None])
                    row["ci_low"], row["ci_high"] = _nan(lo), _nan(hi)
                elif k == "outlier_dims":
                    row["outlier_dims"] = " ".join(str(d) for d in (v or []))
                else:
                    row[k] = _nan(v) if k not in ("n_tokens", "n_sample") else int(v)
            rows.append(row)
    return View("layers_table", "Per-layer metrics", None, pd.DataFrame(rows), _manifest("metric_table", {}, runs),
                caption=f"All per-layer metrics. {_corpora(runs)}; N = {_sizes(runs)}; "
                        f"sample K = {_sizes(runs, 'sampled tokens')}.")


def pairwise_histogram(stats_list: Sequence, runs: Sequence[dict], layers: Sequence[int],
                       max_pairs: int = HIST_MAX_PAIRS) -> View:
    """Distribution of cos(x_i, x_j) over pairs of sampled tokens at one layer per run."""
    series, rows, parts = [], [], []
    for i, (st, res, l) in enumerate(zip(stats_list, runs, layers)):
        X = st.sample(l)
        h = pairwise_cosine_histogram(X, bins=HIST_BINS, max_pairs=max_pairs, seed=0)
        counts = np.asarray(h["counts"], dtype=float)
        width = float(h["edges"][1] - h["edges"][0])
        dens = counts / max(counts.sum(), 1) / width
        m_rows = int(round((1 + math.sqrt(1 + 8 * h["n_pairs"])) / 2))
        mean = _nan(res["layers"][l].get("sample_mean_cosine"))
        name = f"{run_name(res)}, layer {l}"
        series.append({"name": name, "edges": h["edges"], "density": dens, "color": i, "mean": mean})
        parts.append(f"{model_label(res)}: {_fmt_n(h['n_pairs'])} pairs of {_fmt_n(m_rows)} tokens"
                     + (f" (random subset of the K = {_fmt_n(len(X))} sample)" if m_rows < len(X) else " (the whole sample)"))
        centers = (h["edges"][:-1] + h["edges"][1:]) / 2
        for lo, c, n, dd in zip(h["edges"][:-1], centers, counts, dens):
            rows.append({"model": model_label(res), "corpus": corpus_label(res), "layer": l, "bin_low": float(lo),
                         "bin_high": float(lo + width), "bin_center": float(c), "count": int(n), "density": float(dd),
                         "n_pairs": int(h["n_pairs"]), "n_tokens_used": m_rows})
    subtitle = F.esc("; ".join(parts)) + " · dashed: exact mean over the sample"
    fig = F.histogram_lines(series, title="Pairwise cosine similarity of sampled tokens", subtitle=subtitle,
                            x_title="cos(x_i, x_j)")
    return View("pairwise_cosine_histogram", "Pairwise cosine similarity", fig, pd.DataFrame(rows),
                _manifest("pairwise_histogram", {"layers": list(map(int, layers)), "bins": HIST_BINS,
                                                 "max_pairs": max_pairs}, runs),
                caption="Histogram of pairwise cosines; " + "; ".join(parts) + ".")


def frequency_deciles(runs: Sequence[dict], layers: Sequence[int]) -> View:
    """Mean cosine among tokens of each corpus-frequency decile (1 = rarest), at one layer per run."""
    series, rows = [], []
    for i, (res, l) in enumerate(zip(runs, layers)):
        vals = [_nan(v) for v in res["layers"][l]["frequency_binned_cosine"]]
        fb = res.get("frequency_bins", {})
        ns = fb.get("n_tokens") or [None] * len(vals)
        rng = fb.get("log_freq_range") or [None] * len(vals)
        xs = list(range(1, len(vals) + 1))
        hover = [f"<b>{F.esc(run_name(res))}</b>, layer {l}<br>decile {x}: mean cos {v:.4g}<br>"
                 f"{_fmt_n(n or 0)} tokens in this bin"
                 + (f"<br>corpus frequency {math.exp(r[0]):,.0f} to {math.exp(r[1]):,.0f}"
                    if isinstance(r, (list, tuple)) and len(r) == 2 and None not in r else "")
                 for x, v, n, r in zip(xs, vals, ns, rng)]
        series.append({"name": f"{run_name(res)}, layer {l}", "x": xs, "y": vals, "color": i, "hover": hover})
        for x, v, n in zip(xs, vals, ns):
            rows.append({"model": model_label(res), "corpus": corpus_label(res), "layer": l, "decile": x,
                         "mean_cosine": v, "n_tokens": int(n or 0)})
    fig = F.line_chart(series, title="Mean cosine by token-frequency decile",
                       subtitle=F.esc(f"{_corpora(runs)} · N = {_sizes(runs)} split into 10 bins of equal token "
                                      "counts by the corpus frequency of the token type"),
                       x_title="frequency decile (1 = rarest, 10 = most frequent tokens)",
                       y_title="mean cos within the decile", x_range=(0.5, 10.5), x_dtick=1)
    return View("frequency_deciles", "Mean cosine by frequency decile", fig, pd.DataFrame(rows),
                _manifest("frequency_deciles", {"layers": list(map(int, layers))}, runs),
                caption=f"Mean cosine within each token-frequency decile; N = {_sizes(runs)}.")


# ----------------------------------------------------------------------------- Outliers page
def _layer_outliers(res: dict, l: int) -> list[int]:
    return list(res["outliers"]["activation"]["per_layer"][l])


def outlier_bars(stats, results: dict, layer: int) -> View:
    """mean |x_d| for every dimension at `layer`, activation outliers highlighted."""
    m = mean_abs(stats)[layer]
    thr = float(m.mean() + 3 * m.std())
    out = _layer_outliers(results, layer)
    L = n_layers(results) - 1
    fig = F.dim_bars(m, out, threshold=thr, title=f"Mean |x_d| per dimension, layer {layer} of {L}",
                     subtitle=F.esc(f"{run_name(results)} · N = {_fmt_n(_n_tokens(results))} tokens · "
                                    f"{len(out)} outlier dims (mean |x_d| > mean + 3 std over the {len(m)} dims)"),
                     y_title="mean |x_d| (hidden-state units)")
    df = pd.DataFrame({"model": model_label(results), "corpus": corpus_label(results), "layer": layer,
                       "dim": np.arange(len(m)), "mean_abs": m, "outlier": np.isin(np.arange(len(m)), out),
                       "threshold": thr, "n_tokens": _n_tokens(results)})
    return View(f"outlier_bars_layer{layer}", "Mean |x_d| per dimension", fig, df,
                _manifest("outlier_bars", {"layer": layer}, [results]),
                caption=f"Mean absolute activation per dimension at layer {layer}; outliers: {out}.")


def outlier_heatmap(stats, results: dict) -> View:
    """Layers x dimensions: how many std above its layer's mean each dim's mean |x_d| lies."""
    m = mean_abs(stats)
    mu, sd = m.mean(1, keepdims=True), m.std(1, keepdims=True)
    z = (m - mu) / np.where(sd > 0, sd, 1.0)
    hover = np.vectorize(lambda a, b: f"mean |x_d| = {a:.3g}<br>{b:+.1f} std from the layer mean")(m, z)
    fig = F.heatmap(np.clip(z, 0, None), title="Outlier dimensions across layers",
                    subtitle=F.esc(f"{run_name(results)} · N = {_fmt_n(_n_tokens(results))} tokens · colour: "
                                   "(mean |x_d| - layer mean) / layer std, below 0 shown as 0; outlier rule: > 3"),
                    x_title="dimension d", y_title="layer (0 = embeddings)", colorbar_title="std above<br>layer mean",
                    zmin=0, zmax=max(6.0, float(np.nanmax(z))), hover=hover)
    L1, d = m.shape
    df = pd.DataFrame({"model": model_label(results), "layer": np.repeat(np.arange(L1), d),
                       "dim": np.tile(np.arange(d), L1), "mean_abs": m.ravel(), "z": z.ravel()})
    return View("outlier_heatmap", "Outlier dimensions across layers", fig, df,
                _manifest("outlier_heatmap", {}, [results]),
                caption="Per layer, each dimension's mean |x_d| in standard deviations above the layer mean.")


def cosine_contribution_bars(stats, results: dict, layer: int, top: int = TOP_CC) -> View:
    """The dims contributing most to the mean cosine at `layer` (Timkey & van Schijndel 2021)."""
    cc = cosine_contributions(stats)[layer]
    total = float(cc.sum())
    order = np.argsort(-np.abs(cc), kind="stable")[:top]
    out = set(_layer_outliers(results, layer))
    share = cc / total if total != 0 else np.full_like(cc, np.nan)
    k3 = float(np.sort(cc)[::-1][:3].sum() / total) if total != 0 else float("nan")
    fig = F.ranked_bars([str(int(d)) for d in order], cc[order], [int(d) in out for d in order],
                        hover=[f"{share[d]:.1%} of the mean cosine" for d in order],
                        title=f"Cosine contribution of the top {len(order)} dimensions, layer {layer}",
                        subtitle=F.esc(f"{run_name(results)} · N = {_fmt_n(_n_tokens(results))} tokens · mean cosine "
                                       f"{total:.4f} = sum over all {len(cc)} dims; top 3 carry {k3:.0%}"),
                        x_title="dimension d (ranked by |CC_d|)", y_title="CC_d (contribution to mean cosine)")
    df = pd.DataFrame({"model": model_label(results), "layer": layer, "dim": np.arange(len(cc)), "cc": cc,
                       "share": share, "outlier": np.isin(np.arange(len(cc)), sorted(out)),
                       "n_tokens": _n_tokens(results)})
    return View(f"cosine_contribution_layer{layer}", "Cosine contribution by dimension", fig, df,
                _manifest("cosine_contribution", {"layer": layer, "top": top}, [results]),
                caption=f"Per-dimension contributions CC_d to the mean cosine at layer {layer}; they sum to {total:.4f}.")


def outlier_definitions(results: dict) -> View:
    """Activation outliers vs LayerNorm-parameter outliers, layer by layer (Puccetti et al. 2022)."""
    o = results["outliers"]
    act = o["activation"]["per_layer"]
    norm = o.get("norm_parameters", {})
    L1 = len(act)
    d = int(results["manifest"]["model"].get("hidden_size") or 0) or 1 + max((x for ds in act for x in ds), default=0)
    groups = [{"name": "activation rule (mean |x_d| > mean + 3 std)", "layers": [l for l, ds in enumerate(act) for _ in ds],
               "dims": [x for ds in act for x in ds], "symbol": "circle", "color": F.OKABE_ITO[0], "size": 11}]
    rows = []
    offset = int(norm.get("layer_offset", 1))
    union = norm.get("union") or []
    if union:
        groups.append({"name": f"norm-parameter rule ({norm.get('kind') or 'norm'} weight/bias > 3 std)",
                       "layers": [b + offset for b, ds in enumerate(union) for _ in ds if 0 <= b + offset < L1],
                       "dims": [x for b, ds in enumerate(union) for x in ds if 0 <= b + offset < L1],
                       "symbol": "x-thin", "color": F.HIGHLIGHT, "size": 11, "line": 2.5})
    agree = {a["layer"]: a for a in o.get("agreement", [])}
    for l in range(L1):
        a = agree.get(l)
        rows.append({"model": model_label(results), "layer": l,
                     "activation": " ".join(map(str, act[l])),
                     "norm_parameters": " ".join(map(str, a["norm"])) if a else "",
                     "both": " ".join(map(str, a["intersection"])) if a else "",
                     "jaccard": _nan(a["jaccard"]) if a else float("nan")})
    notes = []
    if "error" in norm:
        notes.append(f"Norm-parameter rule unavailable: {norm['error']}")
    elif norm.get("modules"):
        mods = norm["modules"]
        notes.append(f"Norm parameters read from {len(mods)} {norm.get('kind') or 'norm'} modules "
                     f"({norm.get('placement') or '?'}-norm): {mods[0]}" + (f" … {mods[-1]}" if len(mods) > 1 else "")
                     + f"; persistent (flagged in > 3 blocks): {norm.get('persistent') or 'none'}.")
    fig = F.dim_matrix(groups, title="Outlier dimensions: activation vs norm-parameter definitions",
                       subtitle=F.esc(f"{run_name(results)} · N = {_fmt_n(_n_tokens(results))} tokens · norm block b "
                                      f"is drawn at hidden layer b + {offset} ({norm.get('placement') or '?'}-norm)"),
                       n_layers=L1, d=max(d, 1))
    return View("outlier_definitions", "Activation vs norm-parameter outliers", fig, pd.DataFrame(rows),
                _manifest("outlier_definitions", {}, [results]),
                caption="Dims flagged per layer by the activation rule (circles) and the norm-parameter rule (crosses).",
                notes=notes)


def outlier_summary(results: dict) -> View:
    """Persistent outlier sets of both definitions, with the published dims as context (table)."""
    o = results["outliers"]
    norm = o.get("norm_parameters", {})
    rows = [{"source": f"this run: activation rule ({model_label(results)})",
             "dims": " ".join(map(str, o["activation"]["persistent"])),
             "rule": o["activation"]["rule"]},
            {"source": f"this run: norm-parameter rule ({model_label(results)})",
             "dims": " ".join(map(str, norm.get("persistent") or [])) if "error" not in norm else "n/a",
             "rule": norm.get("rule") or norm.get("error", "")}]
    for ref in reference_outlier_dims():
        rows.append({"source": f"published: {ref['model']} ({ref['paper']})", "dims": " ".join(map(str, ref["dims"])),
                     "rule": ref["estimator"]})
    return View("outlier_summary", "Persistent outlier dimensions", None, pd.DataFrame(rows),
                _manifest("outlier_summary", {}, [results]),
                caption="Published dims belong to other models (different d): context, not a check of this run.")


def massive_activations(results: dict) -> View:
    rows = [{"layer": m["layer"], "top_dims": " ".join(map(str, m["dims"])),
             "max_abs": " ".join(f"{v:.3g}" for v in m["values"]), "median_abs": _nan(m["median_abs"]),
             "ratio": _nan(m["ratio"])} for m in results["outliers"]["massive_activations"]]
    return View("massive_activations", "Massive activations", None, pd.DataFrame(rows),
                _manifest("massive_activations", {}, [results]),
                caption="Largest max |x_d| per layer and its ratio to the median |x| of the sample (Sun et al. 2024).")


def frequency_correlation(results: dict) -> View:
    """|Pearson r| of log token frequency vs |x_d| per layer: outlier dims vs random dims."""
    fr = results["frequency"]
    dims = fr["outlier_dims"]
    series, rows = [], []
    L1 = len(fr["layers"])
    for j, d in enumerate(dims):
        ys = [abs(_nan(l["outlier_r"][j])) for l in fr["layers"]]
        series.append({"name": f"outlier dim {d}", "x": list(range(L1)), "y": ys, "color": j % len(F.OKABE_ITO),
                       "symbol": SYMBOLS[(j // len(F.OKABE_ITO)) % len(SYMBOLS)]})  # never two identical lines
    base_y = [_nan(l["baseline"]) for l in fr["layers"]]
    series.append({"name": f"{len(fr['random_dims'])} random other dims (mean |r|)", "x": list(range(L1)), "y": base_y,
                   "color": F.REFERENCE, "dash": "dash", "symbol": "square"})
    for l in fr["layers"]:
        row = {"model": model_label(results), "layer": l["layer"], "baseline_mean_abs_r": _nan(l["baseline"])}
        for d, r in zip(dims, l["outlier_r"]):
            row[f"r_dim_{d}"] = _nan(r)
        rows.append(row)
    fig = F.line_chart(series, title="Outlier dimensions track token frequency",
                       subtitle=F.esc(f"{run_name(results)} · N = {_fmt_n(_n_tokens(results))} tokens · Pearson r "
                                      "between log corpus frequency and |x_d| (Puccetti et al. 2022)"),
                       x_title="layer (0 = embeddings)", y_title="|Pearson r|", x_dtick=_layer_dtick(L1))
    notes = [] if dims else ["No persistent outlier dimensions in this run: only the random baseline is drawn."]
    return View("frequency_correlation", "Frequency correlation of outlier dims", fig, pd.DataFrame(rows),
                _manifest("frequency_correlation", {}, [results]),
                caption=f"|r| of log token frequency vs |x_d| for outlier dims {dims} and a random baseline.", notes=notes)


def ablation_dims(results: dict) -> list[int]:
    """The dims the ablation zeroes by default: persistent outliers of either definition."""
    o = results["outliers"]
    return sorted(set(o["activation"]["persistent"]) | set(o.get("norm_parameters", {}).get("persistent") or []))


def ablation_view(ab: dict, results: dict) -> View:
    """LM-loss change when the outlier dims are zeroed in every norm, vs random dims."""
    k = len(ab["dims"])
    items = [{"name": f"outlier dims zeroed ({k})", "value": ab["delta"], "color": F.HIGHLIGHT},
             {"name": f"random dims zeroed ({k} each, {len(ab['random_deltas'])} draws)",
              "value": ab["random_delta_mean"], "std": ab["random_delta_std"], "points": ab["random_deltas"],
              "color": F.OKABE_ITO[0]}]
    fig = F.delta_bars(items, title="LM loss when dimensions are zeroed in every norm",
                       subtitle=F.esc(f"{run_name(results)} · held-out text: {_fmt_n(ab.get('held_out_tokens', 0))} "
                                      f"tokens, {ab.get('held_out_documents', '?')} documents · baseline loss "
                                      f"{ab['baseline_loss']:.3f} nats/token · error bar: 1 std of the draws"),
                       y_title="Δ loss (nats/token)")
    rows = [{"ablation": "outlier dims", "dims": " ".join(map(str, ab["dims"])), "loss": ab["ablated_loss"],
             "delta": ab["delta"]}]
    for rd, loss, dl in zip(ab["random_dims"], ab["random_losses"], ab["random_deltas"]):
        rows.append({"ablation": "random dims", "dims": " ".join(map(str, rd)), "loss": loss, "delta": dl})
    df = pd.DataFrame(rows).assign(baseline_loss=ab["baseline_loss"], n_tokens=ab.get("n_tokens"))
    return View("ablation", "Ablation of outlier dimensions", fig, df,
                _manifest("ablation", {"dims": ab["dims"]}, [results]),
                caption=f"Zeroing dims {ab['dims']}: Δloss {ab['delta']:+.4f} vs random {ab['random_delta_mean']:+.4f}.")


# ----------------------------------------------------------------------------- Projection page
def _norm_token(t: str) -> str:
    return str(t).replace("##", "").replace("Ġ", "").replace("▁", "").strip().lower()


def _axis_titles(proj: dict) -> tuple[str, str]:
    if proj["method"] == "pca":
        ev = proj.get("explained_variance") or [float("nan")] * 2
        return f"PC1 ({ev[0]:.1%} of variance)", f"PC2 ({ev[1]:.1%} of variance)"
    return "UMAP 1 (arbitrary units)", "UMAP 2 (arbitrary units)"


def projection(panels: Sequence[tuple[dict, dict, pd.DataFrame]], color_by: str = "log_frequency",
               search: str = "") -> View:
    """2-D projections of sampled tokens, one panel per (results, projection, sample table).

    Panels may be raw vs post-processed of one run (side by side) or several runs at the same
    relative depth. Hover shows the token in its context.
    """
    q = _norm_token(search)
    mode = {"log_frequency": "continuous", "position": "continuous", "document": "discrete",
            "search": "highlight"}[color_by]
    out_panels, rows, notes, parts = [], [], [], []
    for res, proj, table in panels:
        xy = np.asarray(proj["xy"], dtype=float)
        n = len(xy)
        t = table.iloc[:n]
        hover = [f"<b>{F.esc(tok)}</b><br>{F.esc(ctx)}<br>doc {doc} · position {pos} · corpus frequency {int(fq)}"
                 for tok, ctx, doc, pos, fq in zip(t["token"], t["context"], t["document"], t["position"], t["frequency"])]
        xt, yt = _axis_titles(proj)
        L = n_layers(res) - 1
        title = f"{model_label(res)}, layer {proj['layer']}/{L}, {proj['post']}"
        p = {"title": title, "x": xy[:, 0], "y": xy[:, 1], "hover": hover, "x_title": xt, "y_title": yt}
        match = np.zeros(n, dtype=bool)
        if mode == "continuous":
            p["color"] = t[color_by].to_numpy(dtype=float)
        elif mode == "discrete":
            docs = t["document"].to_numpy()
            _, rank = np.unique(docs, return_inverse=True)
            p["color"] = [F.color(int(r)) for r in rank]
        else:
            match = np.asarray([bool(q) and _norm_token(tok) == q for tok in t["token"]])
            p["match"] = match
            notes.append(f"{model_label(res)} ({proj['post']}): {int(match.sum())} of {n} sampled tokens match "
                         f"{search!r}." if q else "Type a token to highlight its occurrences.")
        out_panels.append(p)
        parts.append(f"{model_label(res)}: K = {_fmt_n(n)} of N = {_fmt_n(_n_tokens(res))} tokens")
        rows.append(pd.DataFrame({"model": model_label(res), "corpus": corpus_label(res), "layer": proj["layer"],
                                  "method": proj["method"], "post": proj["post"], "x": xy[:, 0], "y": xy[:, 1],
                                  "token": t["token"].to_numpy(), "context": t["context"].to_numpy(),
                                  "document": t["document"].to_numpy(), "position": t["position"].to_numpy(),
                                  "frequency": t["frequency"].to_numpy(), "match": match}))
    first = panels[0][1]
    method = "PCA" if first["method"] == "pca" else "UMAP (" + ", ".join(f"{k}={v}" for k, v in first["params"].items()) + ")"
    ctitle = {"log_frequency": "log corpus<br>frequency", "position": "position in<br>sequence"}.get(color_by, "")
    runs = [p[0] for p in panels]
    fig = F.scatter_panels(out_panels, title=f"{method} of sampled token representations",
                           subtitle=F.esc(" · ".join(dict.fromkeys(parts)) + f" · {_corpora(runs)} · colour: "
                                          + (f"tokens matching {search!r}" if color_by == "search"
                                             else color_by.replace("_", " "))),
                           color_mode=mode, color_title=ctitle)
    if mode == "discrete":
        notes.append("Colours cycle over documents (8 colours): hover a point for its document.")
    layers = "-".join(str(p[1]["layer"]) for p in panels)
    return View(f"projection_{first['method']}_layer{layers}", "Projection of sampled tokens", fig,
                pd.concat(rows, ignore_index=True),
                _manifest("projection", {"method": first["method"], "params": first["params"], "color": color_by,
                                         "search": search, "layers": [p[1]["layer"] for p in panels],
                                         "post": [p[1]["post"] for p in panels]}, runs),
                caption=f"{method} of the token sample; " + "; ".join(dict.fromkeys(parts)) + ".", notes=notes)


# ----------------------------------------------------------------------------- Compare page
def outlier_counts(runs: Sequence[dict]) -> View:
    """Number of activation outlier dims per layer, by relative depth, for every run."""
    series, rows = [], []
    for i, res in enumerate(runs):
        L = max(n_layers(res) - 1, 1)
        per = res["outliers"]["activation"]["per_layer"]
        xs = [l / L for l in range(len(per))]
        ys = [len(p) for p in per]
        series.append({"name": f"{run_name(res)} (d = {res['manifest']['model'].get('hidden_size', '?')})",
                       "x": xs, "y": ys, "color": i})
        for l, (x, y) in enumerate(zip(xs, ys)):
            rows.append({"model": model_label(res), "corpus": corpus_label(res), "layer": l, "depth": x,
                         "n_outlier_dims": y, "dims": " ".join(map(str, per[l])), "n_tokens": _n_tokens(res)})
    fig = F.line_chart(series, title="Activation outlier dimensions per layer",
                       subtitle=F.esc(f"{_corpora(runs)} · N = {_sizes(runs)} · rule: mean |x_d| > mean + 3 std"),
                       x_title="relative depth (layer / L; 0 = embeddings, 1 = last layer)",
                       y_title="number of outlier dimensions", x_range=(-0.03, 1.03))
    return View("outlier_counts", "Outlier dimensions per layer", fig, pd.DataFrame(rows),
                _manifest("outlier_counts", {}, runs), caption="Count of activation outliers per layer by relative depth.")


def compare_summary(runs: Sequence[dict]) -> View:
    rows = []
    for res in runs:
        m = res["manifest"]
        mc = np.asarray([_nan(r["mean_cosine"]) for r in res["layers"]])
        norm = res["outliers"].get("norm_parameters", {})
        rows.append({
            "model": model_label(res), "corpus": corpus_label(res), "trained": m["model"].get("trained"),
            "layers (L)": n_layers(res) - 1, "d": m["model"].get("hidden_size"),
            "params": m["model"].get("n_params"), "tokens analysed": _n_tokens(res), "sample K": _n_sample(res),
            "mean_cosine min": float(np.nanmin(mc)), "mean_cosine max": float(np.nanmax(mc)),
            "mean_cosine mean": float(np.nanmean(mc)), "argmax layer": int(np.nanargmax(mc)),
            "persistent outliers (activation)": " ".join(map(str, res["outliers"]["activation"]["persistent"])),
            "persistent outliers (norm params)": " ".join(map(str, norm.get("persistent") or [])),
            "device": m.get("device"), "dtype": m.get("dtype"), "note": m["model"].get("note", ""),
        })
    return View("compare_summary", "Summary", None, pd.DataFrame(rows), _manifest("compare_summary", {}, runs),
                caption="One row per model: depth, width, tokens, mean-cosine range and persistent outliers.")
