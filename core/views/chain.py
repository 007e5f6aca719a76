"""The outlier chain on one depth axis, the sentence per link, and the ablations' before/after curves.

    chain_numbers(results, attention, ablations)   the numbers every figure and sentence reads
    chain_view(results, attention, ablations)      one shared depth axis (layer 0 = embeddings):
        top-1 / median |x| (log) with the super-weight blocks marked, the massive dim of each layer
        (outlier dim or not), first-position sink share and sink rate, mean cosine
    chain_sentences(numbers)                       one sentence per link, built from the numbers
    ablation_curves(ablations, results)            before/after curves of every ablation

Super weights and the sink rate come from the run's `chain` section (`core chain`, `analyze --chain`)
when it has one; the sink share from the run's attention statistics when they are computed. A link
that was not measured is said to be missing, never drawn as zero.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import figures as F
from .common import View, _manifest, as_results

BLOCKS_NOTE = ("Blocks are numbered from 0 here, as the model's module list numbers them (e.g. a LLaMA's "
               "layers.11.mlp.down_proj) and as Yu et al. name super weights: block b writes hidden state b + 1. "
               "The Attention page numbers blocks from 1, so that its block l writes hidden state l.")
MAX_DIM_ROWS = 12  # up to this many distinct top-1 dims: one row each on the massive-dim panel
MASSIVE_RATIO = 100.0  # Sun et al. 2024: a top-1 |x| > 100x the median is a massive activation
PANELS = ("top-1 / median |x| (log)", "massive dim (◆ = an outlier dim)", "sink share / sink rate", "mean cosine")
ABLATION_STATS = {"top1_median": ("top-1 / median |x|", True), "mean_cosine": ("mean cosine", False),
                  "outlier_count": ("3-sigma outlier dims", False), "sink_share": ("first-position sink share", False)}


def _f(v) -> float:
    return math.nan if v is None else float(v)


def chain_numbers(results, attention: dict | None = None, ablations: dict | None = None) -> dict:
    """Per layer and per link, what was measured (None where a link was not measured)."""
    r = as_results(results)
    raw = r.raw
    layers = [int(row["layer"]) for row in raw["layers"]]
    cos = [_f(row.get("mean_cosine")) for row in raw["layers"]]
    ma = {int(m["layer"]): m for m in raw["outliers"].get("massive_activations") or []}
    ratio = [_f(ma[l]["ratio"]) if l in ma else math.nan for l in layers]
    top_dim = [int(ma[l]["dims"][0]) if l in ma and ma[l].get("dims") else None for l in layers]
    act = raw["outliers"]["activation"]
    norm = raw["outliers"].get("norm_parameters") or {}
    outliers = sorted(set(act.get("persistent") or []) | set(norm.get("persistent") or []))
    chain = raw.get("chain") or {}
    sr = chain.get("sink_rate") or {}
    # the first-position share per block: the attention statistics' (queries after the first), else the chain
    # pass's mean alpha_1 over heads (every real query)
    sink_share = sr.get("first_position_share") or sr.get("alpha_first_mean")
    if attention and attention.get("layers"):
        sink_share = [float(np.mean(row["sink_first"])) if row.get("sink_first") else math.nan for row in attention["layers"]]
    massive_layers = [l for l, v in zip(layers, ratio) if np.isfinite(v) and v > MASSIVE_RATIO]
    first = massive_layers[0] if massive_layers else None
    return {"run": r.run_name, "modality": raw["manifest"].get("modality", "text"), "layers": layers,
            "mean_cosine": cos, "ratio": ratio, "top_dim": top_dim, "outlier_dims": outliers,
            "position_class": [ma[l].get("position_class") if l in ma else None for l in layers],
            "super_weights": chain.get("super_weights"), "sink_share": sink_share,
            "sink_rate": sr.get("rate"), "sink_rate_per_layer": sr.get("per_layer"), "sink_epsilon": sr.get("epsilon"),
            "first_massive_layer": first, "massive_dims": sorted({top_dim[layers.index(l)] for l in massive_layers}),
            "ablations": (ablations or {}).get("ablations"), "chain_measured": bool(chain)}


def chain_view(results, attention: dict | None = None, ablations: dict | None = None) -> View:
    n = chain_numbers(results, attention, ablations)
    r = as_results(results)
    x = n["layers"]
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05, subplot_titles=PANELS)
    fig.add_trace(go.Scatter(x=x, y=n["ratio"], mode="lines+markers", name="top-1 / median |x|",
                             line={"color": F.OKABE_ITO[0]},
                             hovertemplate="layer %{x}<br>top-1/median %{y:.4g}<extra></extra>"), row=1, col=1)
    fig.add_hline(y=MASSIVE_RATIO, line={"dash": "dot", "color": "grey"}, row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    inside = [d in n["outlier_dims"] for d in n["top_dim"]]
    dims = sorted({d for d in n["top_dim"] if d is not None})
    # a few dims: one evenly spaced row each (as numbers, neighbours such as DINOv2's 323 and 324 overprinted each
    # other's tick labels); many: a numeric axis with whole-number ticks
    few = len(dims) <= MAX_DIM_ROWS
    fig.add_trace(go.Scatter(x=x, y=[None if d is None else (str(d) if few else d) for d in n["top_dim"]],
                             mode="markers", name="top-1 dim",
                             marker={"symbol": ["diamond" if i else "circle-open" for i in inside], "size": 9,
                                     "color": [F.HIGHLIGHT if i else F.OKABE_ITO[1] for i in inside]},
                             text=["an outlier dim" if i else "not an outlier dim" for i in inside],
                             hovertemplate="layer %{x}: dim %{y} (%{text})<extra></extra>"), row=2, col=1)
    if n["sink_share"] is not None:
        fig.add_trace(go.Scatter(x=x[1:len(n["sink_share"]) + 1], y=n["sink_share"], mode="lines+markers",
                                 name="first-position sink share (block b at layer b+1)",
                                 line={"color": F.OKABE_ITO[2]}), row=3, col=1)
    if n["sink_rate_per_layer"]:
        fig.add_trace(go.Scatter(x=x[1:len(n["sink_rate_per_layer"]) + 1], y=n["sink_rate_per_layer"],
                                 mode="lines+markers", name=f"sink rate (heads with α₁ > {n['sink_epsilon']})",
                                 line={"color": F.OKABE_ITO[3], "dash": "dash"}), row=3, col=1)
    fig.add_trace(go.Scatter(x=x, y=n["mean_cosine"], mode="lines+markers", name="mean cosine",
                             line={"color": F.OKABE_ITO[4]}), row=4, col=1)
    sws = n["super_weights"] or []
    for sw in sws:  # block b's output is hidden layer b + 1
        fig.add_vline(x=int(sw["block"]) + 1, line={"dash": "dash", "color": F.HIGHLIGHT})
    if sws:
        # one marker per super weight on the top-1/median curve, its coordinates in the hover (written labels
        # overlapped the panel's title, the curve and each other where super weights sit in neighbouring blocks)
        at = [int(sw["block"]) + 1 for sw in sws]
        fig.add_trace(go.Scatter(
            x=at, y=[n["ratio"][x.index(a)] if a in x else None for a in at], mode="markers",
            name="super weight (dashed: block b writes layer b+1)",
            marker={"symbol": "star", "size": 14, "color": F.HIGHLIGHT, "line": {"width": 1, "color": "black"}},
            text=[F.esc(f"block {sw['block']} {sw['module']}[{sw['row']}, {sw['col']}]") for sw in sws],
            hovertemplate="super weight %{text}<br>layer %{x}: top-1/median %{y:.4g}<extra></extra>"), row=1, col=1)
    fig.update_yaxes(**({"type": "category", "categoryorder": "array", "categoryarray": [str(d) for d in dims]}
                        if few else {"tickformat": "d"}), row=2, col=1)
    missing = [w for w, ok in (("super weights (run core chain / analyze --chain)", n["chain_measured"]),
                               ("sink share (compute the attention statistics)", n["sink_share"] is not None)) if not ok]
    fig.update_xaxes(title_text="layer (0 = embeddings)", row=4, col=1)
    fig.update_layout(height=950, margin={"t": 130}, title={"text": F.esc("The outlier chain, layer by layer"),
                                         "subtitle": {"text": F.esc(
                                             f"{r.run_name} · N = {r.n_tokens:,} {_unit(n)}"
                                             + (f" · not measured: {'; '.join(missing)}" if missing else ""))}})
    df = pd.DataFrame({"layer": x, "top1_median": n["ratio"], "top_dim": n["top_dim"],
                       "top_dim_is_outlier": inside, "position_class": n["position_class"], "mean_cosine": n["mean_cosine"],
                       "sink_share": _pad(n["sink_share"], len(x)), "sink_rate": _pad(n["sink_rate_per_layer"], len(x))})
    sentences = chain_sentences(n)
    return View("chain", "The outlier chain", fig, df, _manifest("chain", {}, [results]),
                caption=" ".join(sentences[:1]), notes=[*sentences, BLOCKS_NOTE])


def _unit(n: dict) -> str:
    return {"image": "patches", "audio": "frames"}.get(n["modality"], "tokens")


def _pad(v, n: int) -> list:
    """A per-block list (block b at hidden layer b + 1) on the hidden layers' axis; None where not measured."""
    if not v:
        return [None] * n
    return [None] + [float(a) for a in v][: n - 1] + [None] * max(0, n - 1 - len(v))


def chain_sentences(n: dict) -> list[str]:
    """One sentence per link of the chain, from the measured numbers (a missing link is said missing)."""
    out = []
    sws = n["super_weights"]
    first = n["first_massive_layer"]
    if sws is None:
        out.append("Super weights: not scanned for this run (run `python -m core chain` or `analyze --chain`).")
    elif not sws:
        out.append("Super weights: no block's MLP output projection spikes at both its input and its output.")
    for sw in sws or []:
        b, row = int(sw["block"]), int(sw["row"])
        li = b + 1
        rat = n["ratio"][li] if li < len(n["ratio"]) else math.nan
        dim_here = n["top_dim"][li] if li < len(n["top_dim"]) else None
        link = (f"dim {row} is the largest at hidden state {li} (×{rat:,.0f} the median)" if dim_here == row
                else f"the largest dim at hidden state {li} is {dim_here}, not {row} (×{rat:,.0f} the median)")
        out.append(f"Block {b}'s {sw['module']}[{row}, {sw['col']}] (value {_f(sw.get('value')):.3g}) → {link}"
                   f" → dim {row} {'is' if row in n['outlier_dims'] else 'is not'} an outlier dim.")
    if first is None:
        top = np.nanmax(n["ratio"]) if np.isfinite(n["ratio"]).any() else math.nan
        out.append(f"Massive activations: no layer's top-1 |x| exceeds {MASSIVE_RATIO:.0f}× its median "
                   f"(largest ratio ×{top:,.1f}).")
    else:
        k = n["layers"].index(first)
        dims = n["massive_dims"]
        inside = [d for d in dims if d in n["outlier_dims"]]
        pc = n["position_class"][k]
        out.append(f"Massive activations from hidden state {first} on (×{n['ratio'][k]:,.0f} the median, dim "
                   f"{n['top_dim'][k]}{f', at the {pc}' if pc else ''}); massive dims {dims}: "
                   f"{f'{inside} among' if inside else 'none of them among'} the run's outlier dims {n['outlier_dims']}.")
    if n["sink_share"] is not None:
        s = np.asarray(n["sink_share"], dtype=float)
        j = int(np.nanargmax(s))
        after = s[first:] if first is not None else s
        out.append(f"First-position sink share: largest in block {j}, which writes hidden state {j + 1} ({s[j]:.2f}); "
                   f"mean {np.nanmean(s):.2f} over all blocks"
                   + (f", {np.nanmean(after):.2f} from the first massive layer on." if first is not None and len(after) else "."))
    else:
        out.append("First-position sink share: not measured (compute the attention statistics on the Attention page).")
    if n["sink_rate"] is not None:
        out.append(f"Sink rate: {n['sink_rate']:.2f} of all heads give the first token α₁ > {n['sink_epsilon']}.")
    cos = np.asarray(n["mean_cosine"], dtype=float)
    if first is not None:
        k = n["layers"].index(first)
        out.append(f"Mean cosine: {np.nanmean(cos[:k]) if k else math.nan:.2f} before hidden state {first}, "
                   f"{np.nanmean(cos[k:]):.2f} from it on (last layer {cos[-1]:.2f}).")
    else:
        out.append(f"Mean cosine: {np.nanmin(cos):.2f} to {np.nanmax(cos):.2f} over the layers (last layer {cos[-1]:.2f}).")
    return out  # the ablations' sentences go with their own view (ablation_curves)


def ablation_sentence(key: str, a: dict) -> str:
    """What one ablation did, from its before/after numbers."""
    what = a["what"]
    if a.get("loss_before") is None:
        loss = "loss not applicable (no LM head, image or speech model)"
    else:
        loss = f"loss {a['loss_before']:.3f} → {a['loss_after']:.3f} ({a['loss_delta']:+.3g} nats/token)"
    tb, ta = np.asarray(a["top1_median_before"], float), np.asarray(a["top1_median_after"], float)
    cb, ca = np.asarray(a["mean_cosine_before"], float), np.asarray(a["mean_cosine_after"], float)
    return (f"{what[0].upper()}{what[1:]}: {loss}; largest top-1/median ×{np.nanmax(tb):,.0f} → ×{np.nanmax(ta):,.0f}; "
            f"mean cosine (mean over layers) {np.nanmean(cb):.3f} → {np.nanmean(ca):.3f}"
            + (f"; control of {a['control_of'].replace('_', ' ')}." if a.get("control_of") else "."))


def ablation_curves(ablations: dict, results, keys: tuple[str, ...] | None = None) -> View:
    """Before/after curves of every ablation (or of `keys`): one panel per statistic, on the layer axis."""
    r = as_results(results)
    ab = {k: a for k, a in ablations["ablations"].items() if keys is None or k in keys}
    fig = make_subplots(rows=2, cols=2, subplot_titles=[v[0] for v in ABLATION_STATS.values()],
                        horizontal_spacing=0.1, vertical_spacing=0.12)
    rows = []
    base = ablations["baseline"]
    for i, (stat, (label, log)) in enumerate(ABLATION_STATS.items()):
        rr, cc = divmod(i, 2)
        y0 = base.get(stat)
        if y0 is None:
            continue
        x0 = list(range(1, len(y0) + 1)) if stat == "sink_share" else list(range(len(y0)))
        fig.add_trace(go.Scatter(x=x0, y=y0, name="as is", legendgroup="as is", showlegend=i == 0,
                                 line={"color": "black", "width": 3}), row=rr + 1, col=cc + 1)
        for j, (key, a) in enumerate(ab.items()):
            y = a.get(f"{stat}_after")
            if y is None:
                continue
            dash = "dot" if a.get("control_of") else "solid"
            fig.add_trace(go.Scatter(x=x0, y=y, name=a["what"], legendgroup=key, showlegend=i == 0,
                                     line={"color": F.color(j), "dash": dash}), row=rr + 1, col=cc + 1)
            rows += [{"ablation": key, "statistic": stat, "layer": x, "before": b, "after": v}
                     for x, b, v in zip(x0, y0, y)]
        if log:
            fig.update_yaxes(type="log", row=rr + 1, col=cc + 1)
    loss = ablations.get("loss")
    title = F.esc("The chain ablated link by link: before / after")
    fig.update_layout(height=800, margin={"t": 130}, title={"text": title, "subtitle": {
        "text": F.esc(f"{r.run_name} · x: layer (sink share: block b at layer b+1) · dotted: controls · loss: "
                      + ("not applicable" if loss in (None, "not applicable") else f"{loss} LM, "
                         f"{ablations.get('held_out_tokens', 0):,} held-out tokens"))}})
    for key, a in ab.items():
        rows.append({"ablation": key, "statistic": "loss", "layer": None, "before": a["loss_before"], "after": a["loss_after"]})
    sentences = [ablation_sentence(k, a) for k, a in ab.items()]
    return View("chain_ablations", "Chain ablations", fig, pd.DataFrame(rows),
                _manifest("chain_ablations", {"targets": ablations.get("targets")}, [results]),
                caption=sentences[0] if sentences else "", notes=sentences)


# ----------------------------------------------------------------------------- over training (Dynamics)
# The thresholds whose first crossing Dynamics reports, one per link.
THRESHOLDS = {"top1_median": MASSIVE_RATIO,  # a massive activation somewhere (Sun et al. 2024)
              "super_weight": MASSIVE_RATIO,  # a weight > 100x its matrix's median |w|
              "sink_rate": 0.1,  # a tenth of all heads give the first token alpha_1 > 0.3 (Gu et al. 2025)
              "high_norm_share": 0.0}  # high-norm tokens appear at some layer (Otsu's split separates two groups)
SINK_EPS = 0.3


def _sink_rate(att: dict | None) -> float:
    """Gu et al.'s Sink^eps from a checkpoint's attention section: the share of all heads (every
    block) whose alpha_1 (`alpha_first`: per window the mean over every real query of the attention to
    position 0, then the mean over windows) exceeds eps = 0.3. NaN when a block lacks alpha_1 (an
    attention section stored before it was measured): the first-position share of the analysed
    queries (`sink_first`) is another quantity and is not used in its place."""
    if not att or not att.get("layers") or any(not row.get("alpha_first") for row in att["layers"]):
        return math.nan
    a = np.asarray([h for row in att["layers"] for h in row["alpha_first"]], dtype=float)
    return float(np.mean(a > SINK_EPS))


def _super_magnitude(res: dict) -> float:
    sws = (res.get("chain") or {}).get("super_weights")
    if not sws:
        return math.nan
    mags = [_f(s.get("ratio_to_median") or (s.get("magnitude") or {}).get("ratio_to_median")) for s in sws]
    return float(np.nanmax(mags)) if np.isfinite(mags).any() else math.nan


def chain_over_training(series: dict) -> dict:
    """Per checkpoint: the largest top-1/median over layers, the super weight's magnitude (|w| / median |W|,
    from the checkpoint's chain section), the sink rate (from its attention statistics) and the largest
    high-norm share over layers; and the first step at which each crosses its threshold (THRESHOLDS)."""
    steps = list(series["steps"])
    att = series.get("attention") or [None] * len(steps)
    vals = {"top1_median": [], "super_weight": [], "sink_rate": [], "high_norm_share": []}
    for res, a in zip(series["results"], att):
        ratios = [_f(m.get("ratio")) for m in res["outliers"].get("massive_activations") or []]
        vals["top1_median"].append(float(np.nanmax(ratios)) if np.isfinite(ratios).any() else math.nan)
        vals["super_weight"].append(_super_magnitude(res))
        vals["sink_rate"].append(_sink_rate(a))
        hn = [_f(row.get("high_norm_share")) for row in res["layers"]]
        vals["high_norm_share"].append(float(np.nanmax(hn)) if np.isfinite(hn).any() else math.nan)
    first = {k: next((s for s, v in zip(steps, vs) if np.isfinite(v) and v > THRESHOLDS[k]), None)
             for k, vs in vals.items()}
    measured = {k: bool(np.isfinite(vs).any()) for k, vs in vals.items()}
    return {"steps": steps, "values": vals, "first_step": first, "measured": measured}


DYN_LABELS = {"top1_median": "largest top-1 / median |x| (log)", "super_weight": "super weight |w| / median |W| (log)",
              "sink_rate": f"sink rate (heads with α₁ > {SINK_EPS})", "high_norm_share": "largest high-norm share"}


def chain_dynamics(series: dict) -> View:
    """The chain's links over training: one panel per link, the threshold dotted, its first crossing marked."""
    c = chain_over_training(series)
    steps = c["steps"]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[DYN_LABELS[k] for k in c["values"]],
                        horizontal_spacing=0.1, vertical_spacing=0.15)
    x = list(range(len(steps)))
    for i, (k, vs) in enumerate(c["values"].items()):
        rr, cc = divmod(i, 2)
        fig.add_trace(go.Scatter(x=x, y=vs, mode="lines+markers", name=DYN_LABELS[k], line={"color": F.color(i)},
                                 text=[f"step {s:,}" for s in steps],
                                 hovertemplate="%{text}<br>%{y:.4g}<extra></extra>"), row=rr + 1, col=cc + 1)
        fig.add_hline(y=THRESHOLDS[k] if THRESHOLDS[k] > 0 else 0, line={"dash": "dot", "color": "grey"},
                      row=rr + 1, col=cc + 1)
        if c["first_step"][k] is not None:
            fig.add_vline(x=steps.index(c["first_step"][k]), line={"dash": "dash", "color": F.HIGHLIGHT},
                          row=rr + 1, col=cc + 1)
        if k in ("top1_median", "super_weight"):
            fig.update_yaxes(type="log", row=rr + 1, col=cc + 1)
        fig.update_xaxes(tickvals=x, ticktext=[f"{s:,}" for s in steps], row=rr + 1, col=cc + 1)
    fig.update_layout(height=700, margin={"t": 130}, showlegend=False, title={
        "text": F.esc("The outlier chain over training"),
        "subtitle": {"text": F.esc(f"{series['run']} · x: training step (checkpoints, evenly spaced) · dotted: threshold"
                                   " · dashed: first crossing")}})
    df = pd.DataFrame({"step": steps, **c["values"]})
    lines = chain_dynamics_sentences(c)
    return View("dynamics_chain", "The outlier chain over training", fig, df,
                _manifest("dynamics_chain", {"thresholds": THRESHOLDS}, series["results"]),
                caption=" ".join(lines), notes=lines)


def chain_dynamics_sentences(c: dict) -> list[str]:
    out = []
    for k, label in DYN_LABELS.items():
        name = label.split(" (")[0]
        if not c["measured"][k]:
            why = {"super_weight": "no checkpoint has a chain section (core chain)",
                   "sink_rate": "the series has no attention statistics"}.get(k, "not in these results")
            out.append(f"{name[0].upper()}{name[1:]}: not measured ({why}).")
            continue
        vs = np.asarray(c["values"][k], dtype=float)
        s = c["first_step"][k]
        out.append(f"{name[0].upper()}{name[1:]}: {vs[0]:.3g} at step {c['steps'][0]:,}, {vs[-1]:.3g} at step "
                   f"{c['steps'][-1]:,}; " + (f"first above {THRESHOLDS[k]:g} at step {s:,}." if s is not None
                                               else f"never above {THRESHOLDS[k]:g}."))
    return out
