"""Outliers page: mean |x_d| per dimension, across layers, cosine contributions, the two outlier
definitions, massive activations, the frequency link and the ablation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..base.config import CONFIG
from ..stats.assemble import cosine_contributions, mean_abs
from ..stats.kernels import top_contributions
from ..stats.outliers import sigma_rule, sigma_threshold
from ..stats.reference import reference_outlier_dims
from . import figures as F
from .common import Results, View, as_results, fmt_n, nan_if_none, view_manifest

SIGMA = f"{CONFIG.outlier_sigma:g}"


def _layer_outliers(res: Results, l: int) -> list[int]:
    return res.activation_outliers[l]


def outlier_bars(stats, results: dict, layer: int) -> View:
    """mean |x_d| for every dimension at `layer`, activation outliers highlighted."""
    results = as_results(results)
    m = mean_abs(stats)[layer]
    thr = sigma_threshold(m)  # the rule's own line (core.stats.outliers), not a re-derivation
    out = _layer_outliers(results, layer)
    L = results.n_layers - 1
    fig = F.dim_bars(m, out, threshold=thr, title=f"Mean |x_d| per dimension, layer {layer} of {L}",
                     subtitle=F.esc(f"{results.run_name} · N = {fmt_n(results.n_tokens)} tokens · "
                                    f"{len(out)} outlier dims (mean |x_d| > mean + {SIGMA} std over the {len(m)} dims)"),
                     y_title="mean |x_d| (hidden-state units)")
    df = pd.DataFrame({"model": results.model_label, "corpus": results.corpus_label, "layer": layer,
                       "dim": np.arange(len(m)), "mean_abs": m, "outlier": np.isin(np.arange(len(m)), out),
                       "threshold": thr, "n_tokens": results.n_tokens})
    return View(f"outlier_bars_layer{layer}", "Mean |x_d| per dimension", fig, df,
                view_manifest("outlier_bars", {"layer": layer}, [results]),
                caption=f"Mean absolute activation per dimension at layer {layer}; outliers: {out}.")


def outlier_heatmap(stats, results: dict) -> View:
    """Layers x dimensions: how many std above its layer's mean each dim's mean |x_d| lies."""
    results = as_results(results)
    m = mean_abs(stats)
    mu, sd = (np.asarray(v)[:, None] for v in zip(*(sigma_rule(row) for row in m)))
    z = (m - mu) / np.where(sd > 0, sd, 1.0)
    hover = np.vectorize(lambda a, b: f"mean |x_d| = {a:.3g}<br>{b:+.1f} std from the layer mean")(m, z)
    fig = F.heatmap(np.clip(z, 0, None), title="Outlier dimensions across layers",
                    subtitle=F.esc(f"{results.run_name} · N = {fmt_n(results.n_tokens)} tokens · colour: "
                                   f"(mean |x_d| - layer mean) / layer std, below 0 shown as 0; outlier rule: > {SIGMA}"),
                    x_title="dimension d", y_title="layer (0 = embeddings)", colorbar_title="std above<br>layer mean",
                    zmin=0, zmax=max(6.0, float(np.nanmax(z))), hover=hover)
    L1, d = m.shape
    df = pd.DataFrame({"model": results.model_label, "layer": np.repeat(np.arange(L1), d),
                       "dim": np.tile(np.arange(d), L1), "mean_abs": m.ravel(), "z": z.ravel()})
    return View("outlier_heatmap", "Outlier dimensions across layers", fig, df,
                view_manifest("outlier_heatmap", {}, [results]),
                caption="Per layer, each dimension's mean |x_d| in standard deviations above the layer mean.")


def cosine_contribution_bars(stats, results: dict, layer: int, top: int | None = None) -> View:
    """The dims contributing most to the mean cosine at `layer` (Timkey & van Schijndel 2021)."""
    results = as_results(results)
    top = CONFIG.top_k_contributions if top is None else int(top)
    cc = cosine_contributions(stats)[layer]
    ranked = top_contributions(cc, top)  # the ranking and shares of results.json (by |CC_d|)
    total = ranked["total"]
    order = np.asarray(ranked["dims"], dtype=np.int64)
    out = set(_layer_outliers(results, layer))
    share = cc / total if total != 0 else np.full_like(cc, np.nan)
    k3 = ranked["top3_share"]
    fig = F.ranked_bars([str(int(d)) for d in order], cc[order], [int(d) in out for d in order],
                        hover=[f"{share[d]:.1%} of the mean cosine" for d in order],
                        title=f"Cosine contribution of the top {len(order)} dimensions, layer {layer}",
                        subtitle=F.esc(f"{results.run_name} · N = {fmt_n(results.n_tokens)} tokens · mean cosine "
                                       f"{total:.4f} = sum over all {len(cc)} dims; top 3 by |CC_d| carry {k3:.0%}"),
                        x_title="dimension d (ranked by |CC_d|)", y_title="CC_d (contribution to mean cosine)")
    df = pd.DataFrame({"model": results.model_label, "layer": layer, "dim": np.arange(len(cc)), "cc": cc,
                       "share": share, "outlier": np.isin(np.arange(len(cc)), sorted(out)),
                       "n_tokens": results.n_tokens})
    return View(f"cosine_contribution_layer{layer}", "Cosine contribution by dimension", fig, df,
                view_manifest("cosine_contribution", {"layer": layer, "top": top}, [results]),
                caption=f"Per-dimension contributions CC_d to the mean cosine at layer {layer}; they sum to {total:.4f}.")


def outlier_definitions(results: dict) -> View:
    """Activation outliers vs LayerNorm-parameter outliers, layer by layer (Puccetti et al. 2022)."""
    results = as_results(results)
    o = results.outliers
    act = o["activation"]["per_layer"]
    norm = o.get("norm_parameters", {})
    L1 = len(act)
    d = int(results.model.get("hidden_size") or 0) or 1 + max((x for ds in act for x in ds), default=0)
    groups = [{"name": f"activation rule (mean |x_d| > mean + {SIGMA} std)",
               "layers": [l for l, ds in enumerate(act) for _ in ds],
               "dims": [x for ds in act for x in ds], "symbol": "circle", "color": F.OKABE_ITO[0], "size": 11}]
    rows = []
    offset = int(norm.get("layer_offset", 1))
    union = norm.get("union") or []
    if union:
        groups.append({"name": f"norm-parameter rule ({norm.get('kind') or 'norm'} weight/bias > {SIGMA} std)",
                       "layers": [b + offset for b, ds in enumerate(union) for _ in ds if 0 <= b + offset < L1],
                       "dims": [x for b, ds in enumerate(union) for x in ds if 0 <= b + offset < L1],
                       "symbol": "x-thin", "color": F.HIGHLIGHT, "size": 11, "line": 2.5})
    agree = {a["layer"]: a for a in o.get("agreement", [])}
    for l in range(L1):
        a = agree.get(l)
        rows.append({"model": results.model_label, "layer": l,
                     "activation": " ".join(map(str, act[l])),
                     "norm_parameters": " ".join(map(str, a["norm"])) if a else "",
                     "both": " ".join(map(str, a["intersection"])) if a else "",
                     "jaccard": nan_if_none(a["jaccard"]) if a else float("nan")})
    notes = []
    if "error" in norm:
        notes.append(f"Norm-parameter rule unavailable: {norm['error']}")
    elif norm.get("modules"):
        mods = norm["modules"]
        notes.append(f"Norm parameters read from {len(mods)} {norm.get('kind') or 'norm'} modules "
                     f"({norm.get('placement') or '?'}-norm): {mods[0]}" + (f" … {mods[-1]}" if len(mods) > 1 else "")
                     + f"; persistent (flagged in > {CONFIG.norm_persistence_blocks} blocks): "
                     + f"{norm.get('persistent') or 'none'}.")
    fig = F.dim_matrix(groups, title="Outlier dimensions: activation vs norm-parameter definitions",
                       subtitle=F.esc(f"{results.run_name} · N = {fmt_n(results.n_tokens)} tokens · norm block b "
                                      f"is drawn at hidden layer b + {offset} ({norm.get('placement') or '?'}-norm)"),
                       n_layers=L1, d=max(d, 1))
    return View("outlier_definitions", "Activation vs norm-parameter outliers", fig, pd.DataFrame(rows),
                view_manifest("outlier_definitions", {}, [results]),
                caption="Dims flagged per layer by the activation rule (circles) and the norm-parameter rule (crosses).",
                notes=notes)


def outlier_summary(results: dict) -> View:
    """Persistent outlier sets of both definitions, with the published dims as context (table)."""
    results = as_results(results)
    o = results.outliers
    norm = o.get("norm_parameters", {})
    rows = [{"source": f"this run: activation rule ({results.model_label})",
             "dims": " ".join(map(str, o["activation"]["persistent"])),
             "rule": o["activation"]["rule"]},
            {"source": f"this run: norm-parameter rule ({results.model_label})",
             "dims": " ".join(map(str, norm.get("persistent") or [])) if "error" not in norm else "n/a",
             "rule": norm.get("rule") or norm.get("error", "")}]
    for ref in reference_outlier_dims():
        rows.append({"source": f"published: {ref['model']} ({ref['paper']})", "dims": " ".join(map(str, ref["dims"])),
                     "rule": ref["estimator"]})
    return View("outlier_summary", "Persistent outlier dimensions", None, pd.DataFrame(rows),
                view_manifest("outlier_summary", {}, [results]),
                caption="Published dims belong to other models (different d): context, not a check of this run.")


def massive_activations(results: dict) -> View:
    """Sun et al.'s massive activations per layer: the table (top dims, the token and position holding
    the top-1 value, its position class, counts above 100x / 1000x the median) and top-1 / median on a
    log scale."""
    results = as_results(results)
    ma = results.outliers["massive_activations"]
    rows = []
    for m in ma:
        where = m.get("position_class")
        if m.get("patch_row") is not None:
            where = f"patch ({m['patch_row']}, {m['patch_col']})"
        elif m.get("frame") is not None:
            where = f"frame {m['frame']} ({m.get('time_s', 0):.2f} s)"
        rows.append({"layer": m["layer"], "top_dims": " ".join(map(str, m["dims"])),
                     "max_abs": " ".join(f"{v:.3g}" for v in m["values"]), "median_abs": nan_if_none(m["median_abs"]),
                     "ratio": nan_if_none(m["ratio"]), "token": m.get("token"), "position": m.get("position"),
                     "position_class": where, "dims_above_100x": m.get("dims_above_100x"),
                     "dims_above_1000x": m.get("dims_above_1000x"), "values_above_100x": m.get("values_above_100x"),
                     "values_above_1000x": m.get("values_above_1000x")})
    layers = [m["layer"] for m in ma]
    ratios = [nan_if_none(m["ratio"]) for m in ma]
    hover = [f"layer {m['layer']}: top-1 / median = {nan_if_none(m['ratio']):.4g}<br>dim {m['dims'][0] if m['dims'] else '-'}"
             + (f", {F.esc(str(m.get('token')))} at position {m.get('position')} ({m.get('position_class')})"
                if m.get("position") is not None else "") for m in ma]
    fig = F.line_chart([{"name": results.run_name, "x": layers, "y": ratios, "color": 0, "hover": hover}],
                       title="Massive activations: top-1 / median per layer",
                       subtitle=F.esc(f"{results.run_name} · top: max |x| over all {fmt_n(results.n_tokens)} "
                                      "analysed tokens; median: of |x| over the K x d values of the token sample"),
                       x_title="layer (0 = embeddings)", y_title="max |x| / median |x| (log scale)")
    fig.update_yaxes(type="log")
    return View("massive_activations", "Massive activations", fig, pd.DataFrame(rows),
                view_manifest("massive_activations", {}, [results]),
                caption="Largest max |x_d| per layer and its ratio to the median |x| of the sample (Sun et al. 2024); "
                        "the token and position holding the top-1 value, its position class, and how many dims "
                        "(over all tokens) and sample values lie above 100x and 1000x the median. Definitions: "
                        "docs/chain.md.")


def ablation_dims(results: dict) -> list[int]:
    """The dims the ablation zeroes by default: persistent outliers of either definition."""
    results = as_results(results)
    return results.outlier_dims


def ablation_view(ab: dict, results: dict, label: str = "outlier dims") -> View:
    """LM-loss change when the chosen dims are zeroed in every norm, vs random dims.

    label: the set's short name (views.set_label: "persistent outlier dims", "typed dims", ...)."""
    results = as_results(results)
    k = len(ab["dims"])
    items = [{"name": f"{label} zeroed ({k})", "value": ab["delta"], "color": F.HIGHLIGHT},
             {"name": f"random dims zeroed ({k} each, {len(ab['random_deltas'])} draws)",
              "value": ab["random_delta_mean"], "std": ab["random_delta_std"], "points": ab["random_deltas"],
              "color": F.OKABE_ITO[0]}]
    fig = F.delta_bars(items, title="LM loss when dimensions are zeroed in every norm",
                       subtitle=F.esc(f"{results.run_name} · held-out text: {fmt_n(ab.get('held_out_tokens', 0))} "
                                      f"tokens, {ab.get('held_out_documents', '?')} documents · baseline loss "
                                      f"{ab['baseline_loss']:.3f} nats/token · error bar: 1 std of the draws"),
                       y_title="Δ loss (nats/token)")
    rows = [{"ablation": label, "dims": " ".join(map(str, ab["dims"])), "loss": ab["ablated_loss"],
             "delta": ab["delta"]}]
    for rd, loss, dl in zip(ab["random_dims"], ab["random_losses"], ab["random_deltas"]):
        rows.append({"ablation": "random dims", "dims": " ".join(map(str, rd)), "loss": loss, "delta": dl})
    df = pd.DataFrame(rows).assign(baseline_loss=ab["baseline_loss"], n_tokens=ab.get("n_tokens"))
    sentence = ablation_sentence(ab, label)
    return View("ablation", "Ablation of outlier dimensions", fig, df,
                view_manifest("ablation", {"dims": ab["dims"], "set": label}, [results]),
                caption=f"Zeroing dims {ab['dims']}: Δloss {ab['delta']:+.4f} vs random {ab['random_delta_mean']:+.4f}. "
                        + sentence, notes=[sentence])


def _change(delta: float) -> str:
    return f"{'raises' if delta >= 0 else 'lowers'} the loss by"


def ablation_sentence(ab: dict, label: str = "outlier dims") -> str:
    """One sentence from the ablation's numbers, e.g. "Zeroing the 14 persistent outlier dims raises the loss
    by 8.7 nats/token (3.1 → 11.8); zeroing 14 random dims raises it by 0.32 ± 0.17 (mean ± std of 5 draws)."."""
    k, n = len(ab["dims"]), len(ab["random_deltas"])
    m, sd = ab["random_delta_mean"], ab["random_delta_std"]
    ratio = (f" The chosen dims' change is {abs(ab['delta'] / m):.0f} times the random dims' mean."
             if m and np.isfinite(m) and abs(ab["delta"] / m) >= 2 else "")
    dims = f" ({', '.join(map(str, ab['dims']))})" if k <= 8 else ""
    return (f"Zeroing the {k} {label}{dims} {_change(ab['delta'])} {abs(ab['delta']):.3g} nats/token "
            f"({ab['baseline_loss']:.3g} → {ab['ablated_loss']:.3g}); zeroing {k} random dims "
            f"{_change(m).replace('the loss', 'it')} {abs(m):.2g} ± {sd:.2g} (mean ± std of {n} draws).{ratio}")
