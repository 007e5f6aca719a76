"""Training dynamics: a series (the checkpoints of one training, analysed) in, Views out.

    metric_heatmap(series, metric)  layer x step heatmap of any per-layer metric
    cosine_curves(series)           mean cosine over steps, one line per layer
    outlier_counts(series)          how many persistent outlier dims each checkpoint has
    outlier_identity(series)        which dims, from which step on
    loss_curves(series)             training loss (logged) and held-out loss (at each checkpoint)
    qk_drift(series, stat)          query/key drift ||mu_Q|| / E||q||, ||mu_K|| / E||k|| or cos(mu_Q, mu_K)
                                    over steps, per block (mean over heads) and per head
    cka_to_final(series)            each layer's linear CKA with the same layer of the last checkpoint
    compare_runs(by_label, metric)  the last layer's metric over steps, runs overlaid (presets)
    summary(series) / compare_findings(...)  what the measured curves show, in sentences

Steps are log-spaced (0, 1, 2, 4, ...): the step axes are evenly spaced categories labelled with
the step, which is a log axis that keeps step 0. Layer 0 is the embedding output.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from ..base.integrity import describe_duplicate
from ..stats.geometry import CKA_HOVER
from ..studies.selection import METRICS
from . import figures as F
from .common import View, near_ties, not_applicable, tie_width, view_manifest

RISE = 0.1  # a change of mean cosine larger than this is called a rise/fall in the sentences
# The query/key statistics of core/studies/attention/ shown over training: key -> (label, what it is).
DRIFT_STATS = {
    "q_drift": ("query drift ‖μ_Q‖ / E‖q‖",
                "norm of the mean query over the mean query norm (0: queries cancel out, 1: all queries equal)"),
    "k_drift": ("key drift ‖μ_K‖ / E‖k‖", "norm of the mean key over the mean key norm"),
    "cos_mu_qk": ("cos(μ_Q, μ_K)", "signed cosine between the mean query and the mean key of each head"),
}


def _steps(series: dict) -> list[int]:
    return list(series["steps"])


def _tick_axis(fig, steps: Sequence[int], title: str = "training step (log-spaced checkpoints)") -> None:
    fig.update_xaxes(tickvals=list(range(len(steps))), ticktext=[f"{s:,}" for s in steps], title_text=title)


def log_step_axis(fig, steps: Sequence[int]) -> None:
    """A log step axis labelled at the checkpoints, step 0 (drawn at 0.5) as "0": Plotly's own log ticks
    labelled 0.5 as "5" and put 6, 7, 8, 9 between steps 0 and 1, where no checkpoint can be."""
    fig.update_xaxes(type="log", tickvals=[max(s, 0.5) for s in steps], ticktext=[f"{s:,}" for s in steps])


def _sub(series: dict, extra: str = "") -> str:
    r0 = series["results"][-1]["manifest"]
    n = r0["tokens"]["analysed"]
    rec = series["record"]
    s = rec.get("spec")
    what = (f"{s['arch']} {s['n_layers']}x{s['d_model']}, {s['tokenizer']} tokens" if s
            else f"hub revisions {', '.join(c['revision'] for c in rec.get('checkpoints', []))}")
    base = (f"{series['run']} · {what} · "
            f"analysed on {r0['corpus']['id']}, N = {n:,} tokens per checkpoint")
    return F.esc(base + (f" · {extra}" if extra else ""))


def _metric(series: dict, metric: str) -> np.ndarray:
    """(n_layers, n_steps) values of a per-layer metric (NaN where undefined)."""
    cols = [[math.nan if row.get(metric) is None else float(row[metric]) for row in res["layers"]]
            for res in series["results"]]
    return np.asarray(cols, dtype=float).T


def series_table(series: dict) -> pd.DataFrame:
    """One row per (step, layer) with every scalar metric."""
    rows = []
    for step, res in zip(_steps(series), series["results"]):
        for row in res["layers"]:
            rows.append({"run": series["run"], "step": step, "layer": row["layer"],
                         **{k: row.get(k) for k in METRICS}})
    return pd.DataFrame(rows)


def metric_heatmap(series: dict, metric: str = "mean_cosine") -> View:
    if metric not in METRICS:
        raise ValueError(f"Unknown metric {metric!r}; one of {', '.join(METRICS)}.")
    z = _metric(series, metric)
    steps = _steps(series)
    label, what = METRICS[metric]
    fig = F.heatmap(z, title=f"{label} by layer over training", subtitle=_sub(series, what),
                    x_title="training step", y_title="layer (0 = embeddings)", colorbar_title=F.esc(label))
    _tick_axis(fig, steps)
    fig.update_traces(hovertemplate="layer %{y}, step index %{x}<br>%{z:.4g}<extra></extra>")
    df = series_table(series)[["run", "step", "layer", metric]]
    return View(f"dynamics_heatmap_{metric}", f"{label} by layer over training", fig, df,
                view_manifest("dynamics_heatmap", {"metric": metric, "steps": steps}, series["results"]),
                caption=f"{label} of every layer (rows) at every checkpoint (columns).")


def cosine_curves(series: dict, metric: str = "mean_cosine") -> View:
    z = _metric(series, metric)
    steps = _steps(series)
    label, what = METRICS[metric]
    lines = [{"name": f"layer {l}" + (" (embeddings)" if l == 0 else ""), "x": list(range(len(steps))),
              "y": z[l].tolist(), "color": l,
              "hover": [f"layer {l}, step {s:,}<br>{label} = {v:.4g}" for s, v in zip(steps, z[l])]}
             for l in range(z.shape[0])]
    fig = F.line_chart(lines, title=f"{label} over training, per layer", subtitle=_sub(series, what),
                       x_title="training step", y_title=F.esc(label))
    _tick_axis(fig, steps)
    fig.update_yaxes(rangemode="tozero")  # from 0: an auto range zoomed on 0.85-0.93 makes any wiggle look large
    df = series_table(series)[["run", "step", "layer", metric]]
    return View(f"dynamics_curves_{metric}", f"{label} over training", fig, df,
                view_manifest("dynamics_curves", {"metric": metric}, series["results"]),
                caption=f"{label} at each checkpoint, one line per layer.")


def cka_to_final(series: dict) -> View:
    """Layer x step heatmap of each checkpoint's linear CKA with the last checkpoint, layer by layer (the same
    sampled tokens): 1 where a layer already represents the tokens as the trained model does."""
    sec = series.get("cka_to_final") or {}
    title = "CKA of each checkpoint with the final one, per layer"
    if not sec or sec.get("not_applicable"):
        return not_applicable("dynamics_cka_final", title, series["results"],
                              sec.get("not_applicable") or "not in this series (computed from this version on)")
    steps = _steps(series)
    z = np.asarray(sec["matrix"], dtype=float).T  # (layers, steps)
    fig = F.heatmap(z, title=title, subtitle=_sub(series, f"{sec['estimator']}, {sec['n_positions']} shared positions"),
                    x_title="training step", y_title="layer (0 = embeddings)", colorbar_title="CKA")
    _tick_axis(fig, steps)
    hover = np.asarray([[f"layer {l}, step {s:,}<br>CKA with the final checkpoint = {z[i, j]:.4f}<br><i>"
                         f"{F.esc(CKA_HOVER)}</i>" for j, s in enumerate(steps)] for i, l in enumerate(sec["layers"])],
                       dtype=object)
    fig.update_traces(customdata=hover, hovertemplate="%{customdata}<extra></extra>", zmin=0.0, zmax=1.0)
    rows = [{"run": series["run"], "step": s, "layer": l, "cka_to_final": z[i, j]}
            for j, s in enumerate(steps) for i, l in enumerate(sec["layers"])]
    return View("dynamics_cka_final", title, fig, pd.DataFrame(rows),
                view_manifest("dynamics_cka_final", {"steps": steps}, series["results"]),
                caption="Linear CKA between each layer of a checkpoint and the same layer of the last checkpoint, on "
                        f"the same {sec['n_positions']} sampled token positions ({sec['estimator']}).")


def _persistent(res: dict) -> list[int]:
    return sorted(int(d) for d in res["outliers"]["activation"]["persistent"])


def _norm_persistent(res: dict) -> list[int]:
    return sorted(int(d) for d in (res["outliers"].get("norm_parameters", {}).get("persistent") or []))


def outlier_counts(series: dict) -> View:
    steps = _steps(series)
    act = [len(_persistent(r)) for r in series["results"]]
    norm = [len(_norm_persistent(r)) for r in series["results"]]
    lines = [{"name": "activation outliers (mean |x_d| > 3 std, ≥ 25% of layers)", "x": list(range(len(steps))),
              "y": act, "color": 5},
             {"name": "norm-weight outliers (Puccetti: > 3 std, > 3 layers)", "x": list(range(len(steps))),
              "y": norm, "color": 0, "dash": "dash"}]
    fig = F.line_chart(lines, title="Persistent outlier dimensions over training", subtitle=_sub(series),
                       x_title="training step", y_title="number of dimensions")
    _tick_axis(fig, steps)
    df = pd.DataFrame({"run": series["run"], "step": steps, "activation_outliers": act,
                       "norm_outliers": norm,
                       "activation_dims": [",".join(map(str, _persistent(r))) for r in series["results"]],
                       "norm_dims": [",".join(map(str, _norm_persistent(r))) for r in series["results"]]})
    return View("dynamics_outlier_counts", "Persistent outlier dimensions over training", fig, df,
                view_manifest("dynamics_outlier_counts", {}, series["results"]),
                caption="How many dimensions each outlier rule flags at each checkpoint.")


def outlier_identity(series: dict) -> View:
    """Dims x steps: 1 where a dim is a persistent activation outlier at that checkpoint."""
    steps = _steps(series)
    per = [_persistent(r) for r in series["results"]]
    dims = sorted(set().union(*per)) if per else []
    z = np.asarray([[1.0 if d in p else 0.0 for p in per] for d in dims]) if dims else np.zeros((1, len(steps)))
    fig = F.heatmap(z, title="Which dimensions are persistent outliers, from when", subtitle=_sub(series),
                    x_title="training step", y_title="dimension", colorbar_title="outlier", zmin=0, zmax=1)
    _tick_axis(fig, steps)
    fig.update_yaxes(tickvals=list(range(len(dims))), ticktext=[str(d) for d in dims] or ["none"])
    fig.update_traces(hovertemplate="row %{y}, step index %{x}<br>outlier: %{z}<extra></extra>")
    first = {d: next(s for s, p in zip(steps, per) if d in p) for d in dims}
    df = pd.DataFrame({"run": series["run"], "dim": dims, "first_step": [first[d] for d in dims],
                       "n_checkpoints": [sum(d in p for p in per) for d in dims]})
    notes = [] if dims else ["No dimension is a persistent activation outlier at any checkpoint."]
    return View("dynamics_outlier_identity", "Persistent outlier dimensions by step", fig, df,
                view_manifest("dynamics_outlier_identity", {}, series["results"]),
                caption="Rows: dimensions flagged at some checkpoint; columns: checkpoints.", notes=notes)


def has_loss(series: dict) -> bool:
    """Whether the series has losses: a training made here does, a hub model's revisions do not."""
    return any("held_out_loss" in c for c in series["record"].get("checkpoints", []))


def loss_curves(series: dict) -> View:
    rec = series["record"]
    log = rec.get("log", [])
    ck = rec.get("checkpoints", [])
    lines = []
    if log:
        lines.append({"name": "training loss (logged mean)", "x": [e["step"] for e in log],
                      "y": [e["loss"] for e in log], "color": 0})
    lines.append({"name": "held-out loss (checkpoints)", "x": [max(c["step"], 0.5) for c in ck],
                  "y": [c["held_out_loss"] for c in ck], "color": 5,
                  "hover": [f"step {c['step']:,}<br>held-out loss {c['held_out_loss']:.4f}" for c in ck]})
    obj = "masked-token" if rec.get("objective") == "masked" else "next-token"
    fig = F.line_chart(lines, title=f"{obj.capitalize()} loss over training", x_title="training step (log; 0 shown at 0.5)",
                       y_title="cross-entropy (nats per token)",
                       subtitle=F.esc(f"{series['run']} · {rec['data']['held_out_tokens']:,} held-out tokens"))
    log_step_axis(fig, [c["step"] for c in ck])
    df = pd.DataFrame([{"run": series["run"], "step": e["step"], "kind": "train", "loss": e["loss"]} for e in log]
                      + [{"run": series["run"], "step": c["step"], "kind": "held_out", "loss": c["held_out_loss"]}
                         for c in ck])
    return View("dynamics_loss", "Loss over training", fig, df,
                view_manifest("dynamics_loss", {}, series["results"]),
                caption="Training loss as logged by the Trainer and held-out loss at every checkpoint.")


def has_attention(series: dict) -> bool:
    """Whether the series carries each checkpoint's attention statistics (`analyze_series(attention=True)`)."""
    att = series.get("attention")
    return bool(att) and len(att) == len(series["results"]) and all(a.get("layers") for a in att)


def _drift(series: dict, stat: str) -> np.ndarray:
    """(n_steps, n_blocks, n_heads) values of a per-head query/key statistic (NaN where undefined)."""
    return np.asarray([[[math.nan if v is None else float(v) for v in row[stat]] for row in a["layers"]]
                       for a in series["attention"]], dtype=float)


def qk_drift(series: dict, stat: str = "q_drift") -> View:
    """A query/key statistic of the attention issue over training: one line per block (mean over
    heads), and each head dotted."""
    if stat not in DRIFT_STATS:
        raise ValueError(f"Unknown statistic {stat!r}; one of {', '.join(DRIFT_STATS)}.")
    if not has_attention(series):
        raise ValueError("This series has no attention statistics: analyse it with attention=True.")
    label, what = DRIFT_STATS[stat]
    v = _drift(series, stat)
    steps = _steps(series)
    n_steps, n_blocks, n_heads = v.shape
    x = list(range(n_steps))
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(v, axis=2) if np.isfinite(v).any() else np.full((n_steps, n_blocks), np.nan)
    lines, rows = [], []
    for b in range(n_blocks):
        lines.append({"name": f"block {b + 1} (mean of {n_heads} heads)", "x": x, "y": mean[:, b].tolist(), "color": b,
                      "group": f"block {b + 1}",
                      "hover": [f"block {b + 1}, step {s:,}<br>{label} = {m:.4g} (mean over heads)"
                                for s, m in zip(steps, mean[:, b])]})
        for h in range(n_heads if n_heads > 1 else 0):
            lines.append({"name": f"block {b + 1} head {h + 1}", "x": x, "y": v[:, b, h].tolist(), "color": b,
                          "dash": "dot", "group": f"block {b + 1}",
                          "hover": [f"block {b + 1}, head {h + 1}, step {s:,}<br>{label} = {val:.4g}"
                                    for s, val in zip(steps, v[:, b, h])]})
        rows += [{"run": series["run"], "step": s, "block": b + 1, "head": h + 1, stat: v[j, b, h]}
                 for j, s in enumerate(steps) for h in range(n_heads)]
    fig = F.line_chart(lines, title=f"{label} over training", subtitle=_sub(series, what),
                       x_title="training step", y_title=F.esc(label))
    _tick_axis(fig, steps)
    # the statistic's whole range (a ratio in [0, 1], a cosine in [-1, 1]), not an auto zoom on 0.85-0.93
    fig.update_yaxes(range=[-1.02, 1.02] if stat == "cos_mu_qk" else [0, 1.02])
    return View(f"dynamics_{stat}", f"{label} over training", fig, pd.DataFrame(rows),
                view_manifest("dynamics_qk", {"statistic": stat, "steps": steps}, series["results"]),
                caption=f"{label} at each checkpoint: block l reads hidden state l-1; q and k as the projections "
                        "output them (before any rotary embedding), over the analysed positions. Solid: mean over "
                        "heads; dotted: each head.")


def compare_runs(by_label: dict[str, dict], metric: str = "mean_cosine", layer: str = "last") -> View:
    """One metric over steps for several runs (a preset's runs), at the last (or middle) layer."""
    label, what = METRICS[metric]
    lines, rows = [], []
    for i, (name, ser) in enumerate(by_label.items()):
        z = _metric(ser, metric)
        l = z.shape[0] - 1 if layer == "last" else z.shape[0] // 2
        steps = _steps(ser)
        lines.append({"name": f"{name} (layer {l})", "x": [max(s, 0.5) for s in steps], "y": z[l].tolist(), "color": i})
        rows += [{"run": ser["run"], "label": name, "step": s, "layer": l, metric: v} for s, v in zip(steps, z[l])]
    fig = F.line_chart(lines, title=f"{label} over training: runs compared", x_title="training step (log; 0 shown at 0.5)",
                       y_title=F.esc(label), subtitle=F.esc(f"{layer} layer of each run · {what}"))
    log_step_axis(fig, sorted({s for ser in by_label.values() for s in _steps(ser)}))
    results = [r for ser in by_label.values() for r in ser["results"]]
    return View(f"dynamics_compare_{metric}", f"{label} over training, compared", fig, pd.DataFrame(rows),
                view_manifest("dynamics_compare", {"metric": metric, "layer": layer}, results),
                caption=f"{label} of the {layer} layer at every checkpoint, runs overlaid.")


# ----------------------------------------------------------------------------- sentences
def summary(series: dict) -> dict:
    """The numbers the sentences are made of, read from the measured results."""
    steps = _steps(series)
    mc = _metric(series, "mean_cosine")
    res = series["results"]
    last = res[-1]
    per = [_persistent(r) for r in res]
    first_outlier = next((s for s, p in zip(steps, per) if p), None)
    freq = last.get("frequency", {})
    ck = [c for c in series["record"].get("checkpoints", []) if "held_out_loss" in c]
    out = {
        "run": series["run"], "steps": steps,
        "mean_cosine_first": mc[:, 0].tolist(), "mean_cosine_last": mc[:, -1].tolist(),
        "max_layer_mean_cosine_last": float(np.nanmax(mc[:, -1])),
        "peak": _peak(mc, steps),
        "persistent_outliers_last": per[-1], "first_outlier_step": first_outlier,
        "held_out_loss_first": ck[0]["held_out_loss"] if ck else None,
        "held_out_loss_last": ck[-1]["held_out_loss"] if ck else None,
        "frequency": _freq_summary(freq),
        "qk": _qk_summary(series) if has_attention(series) else None,
        "duplicates": list(series.get("duplicates") or []),
    }
    out["findings"] = [describe_duplicate(d) for d in out["duplicates"]] + _findings(out)
    return out


def _peak(mc: np.ndarray, steps: list[int]) -> dict:
    """Where mean cosine was highest over the whole run (layer, step, value), and `ties`: every (layer, step)
    within the tie tolerance of it (`common.near_ties`), the peak first; more than one: the peak is a tie."""
    got = near_ties(mc)
    cells = [np.unravel_index(i, mc.shape) for i in got]
    l, j = cells[0]
    return {"layer": int(l), "step": int(steps[j]), "value": float(mc[l, j]),
            "ties": [{"layer": int(a), "step": int(steps[b]), "value": float(mc[a, b])} for a, b in cells]}


def _qk_summary(series: dict) -> dict:
    """Per block (mean over heads) query/key drift and cos(mu_Q, mu_K) at the first and last checkpoint."""
    out = {}
    for stat in DRIFT_STATS:
        v = _drift(series, stat)
        with np.errstate(invalid="ignore"):
            m = np.nanmean(v, axis=2) if np.isfinite(v).any() else np.full(v.shape[:2], np.nan)
        out[stat] = {"first": m[0].tolist(), "last": m[-1].tolist()}
    return out


def _freq_summary(freq: dict) -> dict | None:
    """Largest |r| (log frequency vs |x_d|) of an outlier dim, against the mean |r| of random dims
    at the same layer (the frequency section of results.json)."""
    best = None
    for row in freq.get("layers") or []:
        vals = [abs(v) for v in row.get("outlier_r") or [] if v is not None and v == v]
        if vals and (best is None or max(vals) > best["outlier_abs_r"]):
            best = {"layer": row.get("layer"), "outlier_abs_r": max(vals), "baseline_abs_r": row.get("baseline")}
    return best


def _findings(s: dict) -> list[str]:
    steps = s["steps"]
    first, last = np.asarray(s["mean_cosine_first"]), np.asarray(s["mean_cosine_last"])
    L = len(last) - 1
    out = []
    if s["held_out_loss_first"] is not None:
        out.append(f"Held-out loss went from {s['held_out_loss_first']:.3f} at step 0 to "
                   f"{s['held_out_loss_last']:.3f} at step {steps[-1]:,}.")
    delta = last - first
    ties = near_ties(last)
    top = ties[0]
    most = (f"the most anisotropic layer at the end is layer {top} ({last[top]:.3f})" if len(ties) == 1 else
            f"the most anisotropic layers at the end are a tie: layers {', '.join(str(i) for i in sorted(ties))} "
            f"({', '.join(f'{last[i]:.3f}' for i in sorted(ties))}, within {tie_width(last[top]):.2g})")
    out.append(f"Mean cosine of the last layer ({L}) went from {first[-1]:.3f} to {last[-1]:.3f}; {most}.")
    pk = s["peak"]
    pties = pk.get("ties") or [pk]
    if len(pties) > 1 and any(t["step"] != pk["step"] for t in pties):
        out.append("The highest mean cosine of the run is a tie between "
                   + ", ".join(f"layer {t['layer']} at step {t['step']:,} ({t['value']:.3f})" for t in pties[:6])
                   + (f" and {len(pties) - 6} more" if len(pties) > 6 else "")
                   + ": no single checkpoint is its peak.")
    elif pk["step"] != steps[-1] and pk["value"] - last[pk["layer"]] > RISE:
        out.append(f"Anisotropy was transient: layer {pk['layer']} peaked at {pk['value']:.3f} at step "
                   f"{pk['step']:,}, then fell to {last[pk['layer']]:.3f} by step {steps[-1]:,}.")
    rising = [l for l in range(len(delta)) if delta[l] > RISE]
    if rising:
        out.append(f"Layers whose mean cosine rose by more than {RISE}: {', '.join(map(str, rising))}.")
    else:
        out.append(f"No layer's mean cosine rose by more than {RISE} during training.")
    if s["first_outlier_step"] is None:
        out.append("No persistent activation outlier dimension appeared at any checkpoint.")
    else:
        out.append(f"Persistent activation outlier dims first appear at step {s['first_outlier_step']:,}; at the "
                   f"end: {s['persistent_outliers_last'] or 'none'}.")
    qk = s.get("qk")
    if qk:
        b = len(qk["q_drift"]["last"])
        out.append(f"Query/key drift of the last block ({b}, mean over heads) from step 0 to step {steps[-1]:,}: "
                   f"||μ_Q||/E||q|| {qk['q_drift']['first'][-1]:.3f} → {qk['q_drift']['last'][-1]:.3f}, "
                   f"||μ_K||/E||k|| {qk['k_drift']['first'][-1]:.3f} → {qk['k_drift']['last'][-1]:.3f}, "
                   f"cos(μ_Q, μ_K) {qk['cos_mu_qk']['first'][-1]:+.3f} → {qk['cos_mu_qk']['last'][-1]:+.3f}.")
    f = s.get("frequency")
    if f and f.get("baseline_abs_r") is not None:
        out.append(f"Frequency link at the end: the strongest outlier dim has |r| = {f['outlier_abs_r']:.2f} "
                   f"with log token frequency (layer {f['layer']}), random dims {f['baseline_abs_r']:.2f}.")
    return out


def compare_findings(summaries: dict[str, dict]) -> list[str]:
    """Sentences comparing the runs of a preset, from their summaries."""
    out = []
    for name, s in summaries.items():
        out += [f"{name}: {line}" for line in s["findings"]]
    if len(summaries) == 2:
        (a, sa), (b, sb) = summaries.items()
        rise = {n: sm["max_layer_mean_cosine_last"] - float(np.nanmax(sm["mean_cosine_first"]))
                for n, sm in summaries.items()}
        rose = [n for n, r in rise.items() if r > RISE]
        verdict = ("both became more anisotropic than at initialisation" if len(rose) == 2 else
                   f"only {rose[0]} became more anisotropic than at initialisation" if rose else
                   "neither became more anisotropic than at initialisation")
        out.append(f"Highest layer mean cosine at the end: {a} {sa['max_layer_mean_cosine_last']:.3f} "
                   f"({rise[a]:+.3f} from the most anisotropic layer at step 0), {b} "
                   f"{sb['max_layer_mean_cosine_last']:.3f} ({rise[b]:+.3f}): {verdict} (threshold +{RISE}).")
        na, nb = len(sa["persistent_outliers_last"]), len(sb["persistent_outliers_last"])
        out.append(f"Persistent activation outlier dims at the end: {a} {na}, {b} {nb}.")
    return out
