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
import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..stats import chain_rules as CS
from ..stats import registry as S
from . import figures as F
from .common import View, as_results, near_ties, tie_width, view_manifest

BLOCKS_NOTE = ("Blocks are numbered from 0 here, as the model's module list numbers them (e.g. a LLaMA's "
               "layers.11.mlp.down_proj) and as Yu et al. name super weights: block b writes hidden state b + 1. "
               "The Attention page numbers blocks from 1, so that its block l writes hidden state l.")
MAX_DIM_ROWS = 12  # up to this many distinct top-1 dims: one row each on the massive-dim panel
MASSIVE_RATIO = 100.0  # Sun et al. 2024: a top-1 |x| > 100x the median is a massive activation
PANELS = ("top-1 / median |x| (log)", "massive dim (◆ = an outlier dim)", "sink share / sink rate", "mean cosine")
CANDIDATE_MARKERS = (("amplifier", "triangle-up", F.OKABE_ITO[5]), ("eraser", "triangle-down", F.OKABE_ITO[6]),
                     ("unconfirmed", "x", "grey"))
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
            "super_weights": chain.get("super_weights"), "candidates": chain.get("super_weight_candidates"),
            "onset": chain.get("onset"), "probe_input": (chain.get("probe_states") or {}).get("input"),
            "n_blocks": len(layers) - 1, "sink_share": sink_share,
            "sink_rate": sr.get("rate"), "sink_rate_per_layer": sr.get("per_layer"), "sink_epsilon": sr.get("epsilon"),
            "first_massive_layer": first, "massive_dims": sorted({top_dim[layers.index(l)] for l in massive_layers}),
            "ablations": (ablations or {}).get("ablations"), "chain_measured": bool(chain)}


def statistics_of(results) -> list[str]:
    """The registry's per-layer statistics with a value at some layer of the run (menu order): what the last panel
    of `chain_view` can show."""
    rows = as_results(results).raw["layers"]
    return [k for k in S.picker() if any(np.isfinite(_f(row.get(k))) for row in rows)]


def chain_view(results, attention: dict | None = None, ablations: dict | None = None,
               statistic: str = "mean_cosine") -> View:
    """The chain on one depth axis; the last panel shows `statistic`, any per-layer statistic of the registry (the
    mean cosine by default)."""
    if statistic not in S.picker():
        raise ValueError(f"{statistic!r} is not a per-layer statistic of the registry")
    n = chain_numbers(results, attention, ablations)
    r = as_results(results)
    x = n["layers"]
    label = S.picker()[statistic][0]
    last = n["mean_cosine"] if statistic == "mean_cosine" else [_f(row.get(statistic)) for row in r.raw["layers"]]
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=PANELS[:3] + ((PANELS[3],) if statistic == "mean_cosine" else (label,)))
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
    fig.add_trace(go.Scatter(x=x, y=last, mode="lines+markers", name=PANELS[3] if statistic == "mean_cosine" else label,
                             line={"color": F.OKABE_ITO[4]}), row=4, col=1)
    if S.BY_KEY[statistic].figure.log_y:
        fig.update_yaxes(type="log", row=4, col=1)
    sws = n["super_weights"] or []
    for sw in sws:  # block b's output is hidden layer b + 1
        fig.add_vline(x=int(sw["block"]) + 1, line={"dash": "dash", "color": F.HIGHLIGHT})
    if sws:
        # one marker per super weight on the top-1/median curve, its coordinates in the hover (written labels
        # overlapped the panel's title, the curve and each other where super weights sit in neighbouring blocks)
        at = [int(sw["block"]) + 1 for sw in sws]
        fig.add_trace(go.Scatter(
            x=at, y=[n["ratio"][x.index(a)] if a in x else None for a in at], mode="markers",
            name="super weight, confirmed by ablation (dashed: block b writes layer b+1)",
            marker={"symbol": "star", "size": 14, "color": F.HIGHLIGHT, "line": {"width": 1, "color": "black"}},
            text=[F.esc(f"block {sw['block']} {sw['module']}[{sw['row']}, {sw['col']}]") for sw in sws],
            hovertemplate="super weight %{text}<br>layer %{x}: top-1/median %{y:.4g}<extra></extra>"), row=1, col=1)
    for cls, symbol, color in CANDIDATE_MARKERS:  # the candidates that zeroing did not confirm
        cs = [c for c in n.get("candidates") or [] if c["class"] == cls]
        if not cs:
            continue
        at = [int(c["block"]) + 1 for c in cs]
        fig.add_trace(go.Scatter(
            x=at, y=[n["ratio"][x.index(a)] if a in x else None for a in at], mode="markers",
            name=f"candidate: {cls}", marker={"symbol": symbol, "size": 12, "color": color,
                                               "line": {"width": 1, "color": "black"}},
            text=[F.esc(f"block {c['block']} {c['module']}[{c['row']}, {c['col']}]") for c in cs],
            hovertemplate=f"{cls} %{{text}}<br>layer %{{x}}: top-1/median %{{y:.4g}}<extra></extra>"), row=1, col=1)
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
                       "sink_share": _pad(n["sink_share"], len(x)), "sink_rate": _pad(n["sink_rate_per_layer"], len(x)),
                       **({} if statistic == "mean_cosine" else {statistic: last})})
    sentences = chain_sentences(n)
    return View("chain", "The outlier chain", fig, df, view_manifest("chain", {}, [results]),
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
    if n.get("candidates") is not None:
        out.extend(candidate_sentences(n))
    elif sws is None:
        out.append("Super weights: not scanned for this run (run `python -m core chain` or `analyze --chain`).")
    elif not sws:
        out.append("Super weights: no block's MLP output projection spikes at both its input and its output.")
    for sw in (sws or []) if n.get("candidates") is None else []:  # a chain section stored before issue 35
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
        where = (", at an ordinary token" if pc == "other" else f", at the {pc}") if pc else ""
        out.append(f"Massive activations from hidden state {first} on (×{n['ratio'][k]:,.0f} the median, dim "
                   f"{n['top_dim'][k]}{where}); massive dims {dims}: "
                   f"{f'{inside} among' if inside else 'none of them among'} the run's outlier dims {n['outlier_dims']}.")
    if n["sink_share"] is not None:
        s = np.asarray(n["sink_share"], dtype=float)
        ties = near_ties(s)
        j = ties[0]
        after = s[first:] if first is not None else s
        where = (f"largest in block {j}, which writes hidden state {j + 1} ({s[j]:.2f})" if len(ties) == 1 else
                 f"largest in a tie of blocks {', '.join(str(b) for b in sorted(ties))} (writing hidden states "
                 f"{', '.join(str(b + 1) for b in sorted(ties))}; {s[j]:.2f}, within "
                 f"{tie_width(s[j]):.2g} of the largest)")
        out.append(f"First-position sink share: {where}; "
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


CLASS_WORDS = {"confirmed": "a super weight, confirmed by ablation", "amplifier": "an amplifier, not a super weight",
               "eraser": "an eraser, not a super weight", "unconfirmed": "unconfirmed"}


def _x(v) -> str:
    """A ratio to the median as the sentences write it: ×14,477, ×89, ×4.4, ×0.41."""
    v = _f(v)
    return "×nan" if not np.isfinite(v) else f"×{v:,.0f}" if abs(v) >= 10 else f"×{v:.2g}"


def _state(i: int, n_blocks: int) -> str:
    """Hidden state i as the chain's sentences name it (the last block's is taken before the final norm)."""
    return f"hidden state {i}" + (" (before the final norm)" if i == n_blocks else "")


def candidate_sentence(c: dict, n_blocks: int, outlier_dims=()) -> str:
    """What zeroing one candidate alone on the probe did, indexed by the hidden state its block writes."""
    b, row = int(c["block"]), int(c["row"])
    i_in, i_out = b, b + 1
    head = (f"Block {b}'s {c['module']}[{row}, {c['col']}] (value {_f(c.get('value')):.3g}, found on the "
            f"{ {'both': 'corpus and the probe', 'corpus': 'corpus', 'probe': 'probe'}.get(c.get('found_on'), 'corpus')}): "
            f"{CLASS_WORDS.get(c['class'], c['class'])}. ")
    sign = c.get("sign") or {}
    writes = (f" it writes {sign['contribution']:+,.4g} to dim {row} at position {sign['token_position']}, where the "
              f"dim is {sign['dim_value_in']:+,.4g} before the block" if sign.get("contribution") is not None else "")
    moved = (f"from {_x(c['ratio_in'])} at {_state(i_in, n_blocks)} to {_x(c['ratio_out'])} at "
             f"{_state(i_out, n_blocks)}")
    if c.get("change") == "rises":
        body = (f"On the probe block {b} raises dim {row} {moved};{writes}; zeroed alone, {_state(i_out, n_blocks)} "
                f"is {_x(c['ratio_out_zeroed'])}: {c['share']:.0%} of the rise removed")
    elif c.get("change") == "falls":
        body = (f"On the probe dim {row} falls across block {b}, {moved};{writes}; zeroed alone, "
                f"{_state(i_out, n_blocks)} is {_x(c['ratio_out_zeroed'])}: {c['share']:.0%} of the fall undone")
    else:
        body = (f"On the probe dim {row} is not massive around block {b} ({_x(c['ratio_in'])} at {_state(i_in, n_blocks)}, "
                f"{_x(c['ratio_out'])} at {_state(i_out, n_blocks)}; zeroed: {_x(c['ratio_out_zeroed'])})")
    later = ""
    if c.get("peak_after") and abs(c["peak_after_zeroed"] - c["peak_after"]) > 0.1 * c["peak_after"] \
            and c["peak_after"] != c["ratio_out"]:
        later = (f"; the dim's largest ratio from {_state(i_out, n_blocks)} on goes {_x(c['peak_after'])} → "
                 f"{_x(c['peak_after_zeroed'])}")
    tail = "." if outlier_dims is None else f"; dim {row} {'is' if row in outlier_dims else 'is not'} an outlier dim."
    return head + body + later + tail


def candidate_sentences(n: dict) -> list[str]:
    """The candidates of the chain section, each zeroed alone on the probe, and the onset search."""
    cands = n.get("candidates") or []
    L = int(n.get("n_blocks") or 0)
    if not cands:
        out = ["Super weights: no block's MLP output projection spikes at both its input and its output "
               "(neither on the corpus nor on the probe)."]
    else:
        k = sum(c["class"] == "confirmed" for c in cands)
        out = [f"Super-weight candidates: {len(cands)}, each zeroed alone on the probe prompt; {k} confirmed "
               f"(zeroing removes most of the massive value its block writes), "
               + ", ".join(f"{sum(c['class'] == w for c in cands)} {w}" for w in ("amplifier", "eraser", "unconfirmed"))
               + ". Block b reads hidden state b and writes hidden state b + 1."]
        out += [candidate_sentence(c, L, n.get("outlier_dims")) for c in cands]
    on = n.get("onset")
    if on:
        out.append(onset_sentence(on, L))
    return out


def onset_sentence(on: dict, n_blocks: int) -> str:
    """Where the probe's massive dim first becomes massive and what writes it there."""
    d = on["dim"]
    if on.get("hidden_state") is None or on.get("block") is None:
        return f"Onset: {on.get('what', f'dim {d} has no onset on the probe')}."
    i, b = int(on["hidden_state"]), int(on["block"])
    r = on["ratios"]
    top = on["top_channels"][0] if on.get("top_channels") else None
    tw = on.get("top_weight") or {}
    mlp_share = on["mlp_part"] / on["change"] if on.get("change") else math.nan
    text = (f"Onset: on the probe dim {d} first exceeds {on['massive']:g}× the median at {_state(i, n_blocks)} "
            f"({_x(r[i])}; {_x(r[i - 1])} at hidden state {i - 1}), written by block {b}: at position "
            f"{on['token_position']} the dim goes {on['value_in']:+,.4g} → {on['value_out']:+,.4g}, of which the "
            f"block's {on['module']} writes {on['mlp_part']:+,.4g} ({mlp_share:.0%}) and the rest of the block "
            f"{on['rest_part']:+,.4g}")
    if top is not None:
        text += (f"; its largest contribution is {on['module']}[{d}, {top['col']}] = {top['weight']:.3g} × input "
                 f"{top['input']:+.3g} = {top['contribution']:+,.4g}"
                 + (f" ({top['share_of_mlp']:.0%} of the projection's)" if top.get("share_of_mlp") is not None else "")
                 + f"; zeroed alone, {_state(i, n_blocks)} is {_x(tw.get('ratio_out_zeroed', math.nan))}"
                 + (f" ({tw['share']:.0%} of the rise removed): {CLASS_WORDS.get(tw.get('class'), tw.get('class'))}"
                    if tw.get("share") is not None else ""))
    return text + "."


def ablation_sentence(key: str, a: dict) -> str:
    """What one ablation did, from its before/after numbers."""
    what = a["what"]
    if a.get("loss_before") is None:
        loss = "loss not applicable (no LM head, image or speech model)"
    else:
        loss = f"loss {a['loss_before']:.3f} → {a['loss_after']:.3f} ({a['loss_delta']:+.3g} nats/token)"
    tb, ta = np.asarray(a["top1_median_before"], float), np.asarray(a["top1_median_after"], float)
    cb, ca = np.asarray(a["mean_cosine_before"], float), np.asarray(a["mean_cosine_after"], float)
    # the peak as a share of its as-is value: the page quotes one peak, the run's (the held-out text's differs)
    peak = np.nanmax(ta) / np.nanmax(tb) if np.nanmax(tb) > 0 else math.nan
    control = a.get("control_of")
    return (f"{what[0].upper()}{what[1:]}: {loss}; largest top-1/median over the layers {peak:.0%} of its as-is value; "
            f"mean cosine (mean over layers) {np.nanmean(cb):.3f} → {np.nanmean(ca):.3f}"
            + (f"; control of {control.replace('_', ' ')}." if control and ":" not in control else "."))


def _held_out(ablations: dict) -> str:
    """The held-out text's one token count, the one its loss is averaged over."""
    n = (ablations.get("baseline") or {}).get("loss_tokens")
    return f"{n:,} held-out tokens (each with a next token)" if n else "held-out tokens"


def ablation_curves(ablations: dict, results, keys: tuple[str, ...] | None = None) -> View:
    """Before/after curves of every ablation (or of `keys`; default: all but the per-candidate ones, which
    `single_ablations` shows): one panel per statistic, on the layer axis."""
    r = as_results(results)
    ab = {k: a for k, a in ablations["ablations"].items() if (k in keys if keys is not None else ":" not in k)}
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
                      + ("not applicable" if loss in (None, "not applicable") else f"{loss} LM, averaged over "
                         f"{_held_out(ablations)}"))}})
    for key, a in ab.items():
        rows.append({"ablation": key, "statistic": "loss", "layer": None, "before": a["loss_before"], "after": a["loss_after"]})
    sentences = [ablation_sentence(k, a) for k, a in ab.items()]
    return View("chain_ablations", "Chain ablations", fig, pd.DataFrame(rows),
                view_manifest("chain_ablations", {"targets": ablations.get("targets")}, [results]),
                caption=sentences[0] if sentences else "", notes=sentences)


def single_ablations(ablations: dict, results) -> View | None:
    """Each super-weight candidate zeroed alone, beside its own two controls and beside all candidates zeroed
    together: the loss change and the largest top-1/median over the layers (a share of its as-is value), on the
    held-out text. None when the ablations hold no per-candidate entry."""
    ab = ablations["ablations"]
    singles = [k for k in ab if k.startswith("single:")]
    if not singles:
        return None
    r = as_results(results)
    rows, notes = [], []

    def row(key: str, group: str, role: str) -> dict:
        a = ab[key]
        tb, ta = np.asarray(a["top1_median_before"], float), np.asarray(a["top1_median_after"], float)
        return {"candidate": group, "ablation": role, "key": key, "what": a["what"], "loss_delta": a["loss_delta"],
                "peak_share": float(np.nanmax(ta) / np.nanmax(tb)) if np.nanmax(tb) > 0 else math.nan,
                "mean_cosine_after": float(np.nanmean(np.asarray(a["mean_cosine_after"], float)))}

    for k in singles:
        _, b, rr, c = k.split(":")
        group = f"block {b} [{rr}, {c}]"
        got = [row(k, group, "zeroed alone")]
        got += [row(f"{kind}:{b}:{rr}:{c}", group, role) for kind, role in
                (("single_random", "a random weight of its matrix"), ("single_largest", "its largest other weight"))
                if f"{kind}:{b}:{rr}:{c}" in ab]
        rows += got
        notes.append(_single_sentence(got))
    if "super_weights" in ab:
        n = len(ab["super_weights"]["targets"])
        rows.append(row("super_weights", f"all {n} together", "zeroed together"))
        j = rows[-1]
        notes.append(f"All {n} corpus candidates zeroed together: "
                     + (f"loss {j['loss_delta']:+.3g} nats/token" if j["loss_delta"] is not None else "loss not applicable")
                     + f"; largest top-1/median {j['peak_share']:.0%} of its as-is value.")
    df = pd.DataFrame(rows)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss change (nats / token)",
                                                       "largest top-1 / median, share of its as-is value"),
                        horizontal_spacing=0.12)
    for j, role in enumerate(dict.fromkeys(df["ablation"])):
        part = df[df["ablation"] == role]
        for col, stat in ((1, "loss_delta"), (2, "peak_share")):
            fig.add_trace(go.Bar(x=part["candidate"], y=part[stat], name=role, legendgroup=role, showlegend=col == 1,
                                 marker={"color": F.color(j)}, text=part["what"].map(F.esc),
                                 hovertemplate="%{text}<br>%{y:.4g}<extra></extra>"), row=1, col=col)
    fig.update_layout(barmode="group", height=480, margin={"t": 130}, title={
        "text": F.esc("Each super-weight candidate zeroed alone, with its own controls"),
        "subtitle": {"text": F.esc(f"{r.run_name} · {_held_out(ablations)} · beside: all candidates together")}})
    return View("chain_single_ablations", "Super-weight candidates alone", fig, df,
                view_manifest("chain_single_ablations", {"targets": ablations.get("targets")}, [results]),
                caption=notes[0] if notes else "", notes=notes)


def _single_sentence(got: list[dict]) -> str:
    def loss(x):
        return "loss not applicable" if x["loss_delta"] is None else f"loss {x['loss_delta']:+.3g} nats/token"

    head, controls = got[0], got[1:]
    return (f"{head['what'][0].upper()}{head['what'][1:]}: {loss(head)}, largest top-1/median {head['peak_share']:.0%} "
            "of its as-is value" + "".join(f"; {c['ablation']}: {loss(c)}, {c['peak_share']:.0%}" for c in controls) + ".")


def candidates_view(results) -> View | None:
    """The super-weight candidates, each zeroed alone on the probe: a table indexed by the hidden state each block
    writes (the last before the final norm). None without candidates."""
    r = as_results(results)
    chain = r.raw.get("chain") or {}
    cands = chain.get("super_weight_candidates")
    if not cands:
        return None
    L = len(r.raw["layers"]) - 1
    rows = [{"block": c["block"], "writes": _state(int(c["block"]) + 1, L), "weight": f"{c['module']}[{c['row']}, {c['col']}]",
             "value": round(float(c["value"]), 4), "found on": c.get("found_on"), "class": c["class"],
             "ratio in (probe)": _x(c["ratio_in"]), "ratio out (probe)": _x(c["ratio_out"]),
             "out, zeroed": _x(c["ratio_out_zeroed"]),
             "share": "" if c.get("share") is None else f"{c['share']:.0%} of the " + (
                 "rise removed" if c["change"] == "rises" else "fall undone")}
            for c in cands]
    note = ("Each candidate zeroed alone on the probe prompt"
            + (f" ({F.esc(str((chain.get('probe_states') or {}).get('input')))})" if chain.get("probe_states") else "")
            + f": confirmed (a super weight) when zeroing removes ≥ {CS.CONFIRM_SHARE:.0%} of the rise of its dim across "
              f"its block, amplifier at {CS.EFFECT_SHARE:.0%}-{CS.CONFIRM_SHARE:.0%}, eraser when the ratio falls across "
              f"the block and zeroing undoes ≥ {CS.EFFECT_SHARE:.0%} of the fall.")
    return View("chain_candidates", "Super-weight candidates, confirmed by ablation", None, pd.DataFrame(rows),
                view_manifest("chain_candidates", {}, [results]), caption=note, notes=[note])


def _span(lo, hi, fmt: str) -> str:
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}-{format(hi, fmt)}"


def _ranges(layers: list[int]) -> str:
    """[12, 13, 14, 20] -> "12-14, 20"."""
    out, start = [], None
    for i, v in enumerate(layers):
        if start is None:
            start = v
        if i + 1 == len(layers) or layers[i + 1] != v + 1:
            out.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)


def high_norm_view(results) -> View | None:
    """The chain section's high-norm tokens (Darcet et al. 2024; Otsu's split of the sample's log-norms, counted
    where it separates two groups): per layer how many of the sample's tokens lie above it, by position class
    (text) or in all (images, audio). None without a chain section."""
    r = as_results(results)
    hn = (r.raw.get("chain") or {}).get("high_norm")
    if not hn:
        return None
    x = [int(h["layer"]) for h in hn]
    classes = list(((hn[0].get("where") or {}).get("position_classes") or {}).keys())
    fig = go.Figure()
    rows = []
    if classes:
        for j, cls in enumerate(classes):
            y = [int(((h.get("where") or {}).get("position_classes") or {}).get(cls, 0)) for h in hn]
            fig.add_trace(go.Bar(x=x, y=y, name=cls, marker={"color": F.color(j)}))
    else:
        fig.add_trace(go.Bar(x=x, y=[int(h["n"]) for h in hn], name="high-norm tokens", marker={"color": F.color(0)}))
    for h in hn:
        rows.append({"layer": h["layer"], "n": h["n"], "K": h["K"], "share": h["share"], "separation": h["separation"],
                     "threshold": h["threshold"],
                     **{f"at_{c}": ((h.get("where") or {}).get("position_classes") or {}).get(c) for c in classes}})
    K = max(int(h["K"]) for h in hn)
    found = [h for h in hn if h["n"]]
    if found:
        share = [float(h["share"]) for h in found]
        where = {c: sum(int(((h.get("where") or {}).get("position_classes") or {}).get(c, 0)) for h in found)
                 for c in classes}
        total = sum(where.values())
        at = (", " + ", ".join(f"{v / total:.0%} at the {c}" if c != "other" else f"{v / total:.0%} at ordinary tokens"
                               for c, v in where.items() if v) if total else "")
        counts = [int(h["n"]) for h in found]
        note = (f"High-norm tokens (Otsu's split of the log-norms, separation ≥ 0.8): at layers "
                f"{_ranges([int(h['layer']) for h in found])}, {_span(min(share), max(share), '.1%')} of the sample "
                f"({_span(min(counts), max(counts), ',')} of {K:,} tokens){at}.")
    else:
        sep = [float(h["separation"]) for h in hn]
        note = (f"High-norm tokens: none; Otsu's split of the log-norms separates no two groups at any layer "
                f"(separation {_span(min(sep), max(sep), '.2f')} < 0.8).")
    fig.update_layout(barmode="stack", height=380, margin={"t": 110}, xaxis_title="layer (0 = embeddings)",
                      yaxis_title=f"tokens of the sample (K = {K:,})", title={
                          "text": F.esc("High-norm tokens, layer by layer"),
                          "subtitle": {"text": F.esc(f"{r.run_name} · Otsu's split, counted where separation ≥ 0.8")}})
    return View("chain_high_norm", "High-norm tokens", fig, pd.DataFrame(rows),
                view_manifest("chain_high_norm", {}, [results]), caption=note, notes=[note])


def int8_view(results) -> View | None:
    """The chain section's LLM.int8 outlier features (Dettmers et al. 2022) beside the run's other outlier sets:
    each set, their pairwise intersections and Jaccard indices, and what is in all. A table; None without a chain
    section."""
    r = as_results(results)
    io = (r.raw.get("chain") or {}).get("int8_outliers")
    if not io:
        return None
    sets = io["overlap"]["sets"]
    names = {"int8": "LLM.int8 rule", "activation_3sigma": "persistent 3-sigma activation outliers",
             "norm_parameters": "persistent norm-parameter outliers"}
    rows = [{"set": names.get(k, k), "dims": ", ".join(map(str, v)) or "none", "n": len(v)} for k, v in sets.items()]
    for p in io["overlap"]["pairs"]:
        rows.append({"set": f"{names.get(p['a'], p['a'])} ∩ {names.get(p['b'], p['b'])}",
                     "dims": ", ".join(map(str, p["intersection"])) or "none", "n": len(p["intersection"]),
                     "jaccard": p["jaccard"]})
    rows.append({"set": "in all", "dims": ", ".join(map(str, io["overlap"]["all"])) or "none",
                 "n": len(io["overlap"]["all"])})
    sites = io.get("sites") or {}
    per_site = "; ".join(f"{'attention' if k == 'attention' else 'MLP'} input: {v['dims'] or 'none'}"
                         for k, v in sites.items())
    note = (f"LLM.int8 rule (|x| ≥ {io['threshold']:g} at ≥ {io['position_share']:.0%} of the positions in ≥ "
            f"{io['layer_share']:.0%} of the blocks): dims {io['dims'] or 'none'}"
            + (f" ({per_site})" if per_site else "") + "; "
            + "; ".join(f"{names.get(k, k)} {v or 'none'}" for k, v in sets.items() if k != "int8")
            + f"; in all: {io['overlap']['all'] or 'none'}.")
    return View("chain_int8", "LLM.int8 outliers and the other outlier sets", None, pd.DataFrame(rows),
                view_manifest("chain_int8", {"rule": io.get("rule")}, [results]), caption=note, notes=[note])


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
    # a family without attention (Mamba, RWKV, an LSTM): the sink rate is not applicable, with the series' reason
    na = {"sink_rate": series["attention_note"]} if series.get("attention_note") and not measured["sink_rate"] else {}
    return {"steps": steps, "values": vals, "first_step": first, "measured": measured, "not_applicable": na}


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
        if k in c.get("not_applicable", {}):  # said in the panel, not left as an empty chart
            fig.add_annotation(text=_wrap(c["not_applicable"][k]), showarrow=False, xref="x domain",
                               yref="y domain", x=0.5, y=0.5, row=rr + 1, col=cc + 1)
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
                view_manifest("dynamics_chain", {"thresholds": THRESHOLDS}, series["results"]),
                caption=" ".join(lines), notes=lines)


def _wrap(text: str, width: int = 48) -> str:
    """A long note, escaped and broken into lines for a panel's annotation."""
    return "<br>".join(textwrap.wrap(F.esc(text), width))


def chain_dynamics_sentences(c: dict) -> list[str]:
    out = []
    for k, label in DYN_LABELS.items():
        name = label.split(" (")[0]
        if k in c.get("not_applicable", {}):
            out.append(f"{name[0].upper()}{name[1:]}: {c['not_applicable'][k]}.")
            continue
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
