"""Views of the Attention page (and Compare's attention curves): results + attention section in,
View (figure + data + manifest) out. No I/O; figures come from core.views.figures."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..base.escape import shorten, visible
from ..studies.attention import head_matrix, layer_means, link_matrix
from ..studies.drift import TARGET_NAMES, TARGET_WHAT, grid
from ..studies.papers.claims import drift_claims, drift_experiments
from . import figures as F
from .common import View, as_results, corpora_text, fmt_n, model_label, readable_token, run_name, view_manifest

# statistic -> (label, unit, diverging colour scale)
ATTN_STATS: dict[str, tuple[str, str, bool]] = {
    "entropy": ("Attention entropy", "H(a_q) / log(visible keys)", False),
    "sink_first": ("Attention to the first position", "mean attention share", False),
    "sink_special": ("Attention to special tokens", "mean attention share", False),
    "sink_special_not_first": ("Attention to special tokens after the first", "mean attention share", False),
    "cos_mu_qk": ("cos(mean query, mean key)", "cosine (signed)", True),
    "q_drift": ("Query drift ‖μ_Q‖ / E‖q‖", "ratio", False),
    "k_drift": ("Key drift ‖μ_K‖ / E‖k‖", "ratio", False),
    "q_mean_cosine": ("Mean cosine among queries", "mean pairwise cosine", True),
    "k_mean_cosine": ("Mean cosine among keys", "mean pairwise cosine", True),
    "mean_term_share": ("Share of the mean logit carried by the mean terms", "share", True),
}
HEATMAP_STATS = ("entropy", "sink_first", "sink_special", "cos_mu_qk", "q_drift", "k_drift")
CURVE_STATS = ("entropy", "sink_first", "sink_special", "cos_mu_qk", "q_drift", "k_drift", "q_mean_cosine",
               "mean_term_share")
# Statistics bounded by [0, 1]: their curves span 0 to 1 (an auto range zoomed to 0.85-0.93 looked like a change)
UNIT_RANGE = ("entropy", "sink_first", "sink_special", "sink_special_not_first", "q_drift", "k_drift")
PRE_ROTARY = "q, k are the projection outputs before any rotary position embedding"


def _queries(res: dict, sec: dict) -> str:
    pol = sec.get("special_tokens") or as_results(res).manifest["tokens"].get("special_tokens", "exclude")
    return f"queries: analysed positions (special tokens {pol}d), padding masked"


def _sec_manifest(view: str, params: dict, runs: Sequence[dict], secs: Sequence[dict]) -> dict:
    m = view_manifest(view, params, runs)
    m["attention"] = [{k: s.get(k) for k in ("code", "config", "run_key", "n_blocks", "n_heads", "n_kv_heads",
                                             "head_dim", "causal", "projections", "outlier_dims", "random_dims",
                                             "special_tokens")} for s in secs]
    return m


def _heads_label(sec: dict) -> str:
    if sec["n_kv_heads"] != sec["n_heads"]:
        return f"{sec['n_heads']} query heads on {sec['n_kv_heads']} key/value heads"
    return f"{sec['n_heads']} heads"


def _head_labels(H: int) -> dict:
    """Heads numbered from 1, as blocks are (column h of the arrays is head h + 1)."""
    return {"x_labels": [str(h + 1) for h in range(H)], "x_angle": 0}


def head_heatmap(res: dict, sec: dict, key: str) -> View:
    """Blocks x heads heatmap of one per-head statistic."""
    label, unit, div = ATTN_STATS[key]
    z = head_matrix(sec, key)
    L, H = z.shape
    hover = np.asarray([[f"block {l + 1}, head {h + 1}<br>{F.esc(label)} = {z[l, h]:.4g}" for h in range(H)]
                        for l in range(L)], dtype=object)
    qk = key in ("cos_mu_qk", "q_drift", "k_drift", "q_mean_cosine", "k_mean_cosine", "mean_term_share")
    sub = (f"{F.esc(run_name(res))} · N = {fmt_n(as_results(res).n_tokens)} analysed tokens · {_heads_label(sec)} · "
           + F.esc(PRE_ROTARY if qk else _queries(res, sec)))
    fig = F.heat_panels([{"z": z, "title": "", "x_title": "head (1 = first)", "y_title": "block (1 = first)",
                          "y_labels": [str(l + 1) for l in range(L)], **_head_labels(H), "hover": hover}],
                        title=f"{label} per block and head", subtitle=sub, colorbar_title=unit,
                        zmin=-1.0 if div and key != "mean_term_share" else None,
                        zmax=1.0 if div and key != "mean_term_share" else None, diverging=div)
    rows = [{"model": model_label(res), "block": l + 1, "head": h + 1, key: z[l, h]} for l in range(L) for h in range(H)]
    return View(f"attention_{key}", f"{label} per block and head", fig, pd.DataFrame(rows),
                _sec_manifest("attention_heatmap", {"statistic": key}, [res], [sec]),
                caption=f"{label} ({unit}) per block and head; {PRE_ROTARY if qk else _queries(res, sec)}.")


LINK_SUMMARIES = {  # how the link grid summarises the tracked dims of each kind, per block and head
    "mean_abs": "mean |r|",
    "strongest": "r of the strongest dim",
    "mean": "mean r (signed)",
}


def link_grid(res: dict, sec: dict, key_set: str = "excluded", summary: str = "mean_abs") -> View:
    """Puccetti's outlier link: Pearson r between |x_d| and received attention, blocks x heads, the
    outlier dims beside the random dims, each summarised over its dims by `summary` (LINK_SUMMARIES):
    mean |r| (default: a signed mean lets dims of opposite signs cancel), the signed r of the dim with
    the largest |r|, or the signed mean."""
    if summary not in LINK_SUMMARIES:
        raise ValueError(f"unknown summary {summary!r}: one of {sorted(LINK_SUMMARIES)}")
    outl, rand = sec["outlier_dims"], sec["random_dims"]
    ro = link_matrix(sec, key_set, "outlier_r")  # (L, H, D_o)
    rr = link_matrix(sec, key_set, "random_r")
    L, H = ro.shape[:2]
    how = LINK_SUMMARIES[summary]
    notes = []
    panels, rows = [], []
    for name, r, dims in (("outlier dims", ro, outl), ("random non-outlier dims", rr, rand)):
        best = np.full((L, H), -1)
        if not dims:
            notes.append(f"No {name}: that panel is empty.")
            z = np.full((L, H), np.nan)
        elif not np.isfinite(r).any():
            z = np.full((L, H), np.nan)
        else:
            with np.errstate(all="ignore"):
                if summary == "mean_abs":
                    z = np.nanmean(np.abs(r), axis=2)
                elif summary == "mean":
                    z = np.nanmean(r, axis=2)
                else:
                    a = np.where(np.isfinite(r), np.abs(r), -1.0)
                    best = a.argmax(axis=2)
                    z = np.take_along_axis(r, best[..., None], axis=2)[..., 0]
        hover = np.asarray([[f"block {l + 1}, head {h + 1}<br>{how} = {z[l, h]:.3f}"
                             + (f" (dim {dims[best[l, h]]})" if best[l, h] >= 0 else "") + "<br>"
                             + "<br>".join(f"dim {d}: r = {r[l, h, j]:.3f}" for j, d in enumerate(dims[:12]))
                             for h in range(H)] for l in range(L)], dtype=object)
        panels.append({"z": z, "title": f"{name} ({len(dims)}): {how}", "x_title": "head (1 = first)",
                       "y_title": "block (1 = first)", "y_labels": [str(l + 1) for l in range(L)], **_head_labels(H),
                       "hover": hover})
        for l in range(L):
            for h in range(H):
                for j, d in enumerate(dims):
                    rows.append({"model": model_label(res), "key_positions": f"special tokens {key_set}",
                                 "kind": name, "block": l + 1, "head": h + 1, "dim": d, "r": r[l, h, j]})
    n_keys = sec["layers"][0]["link"][key_set]["n_keys"] if sec["layers"] else 0
    sub = (f"{F.esc(run_name(res))} · Pearson r between |x_d| (residual stream the block reads) and the attention "
           f"each key position receives · {fmt_n(n_keys)} key positions, special tokens {key_set} · {how} "
           f"over each panel's dims")
    signed = summary != "mean_abs"
    fig = F.heat_panels(panels, title="Outlier link (Puccetti et al.): |x_d| vs received attention", subtitle=sub,
                        colorbar_title="Pearson r" if signed else "|Pearson r|", zmin=-1 if signed else 0, zmax=1,
                        diverging=signed)
    return View(f"attention_link_{key_set}_{summary}", "Outlier link: |x_d| vs received attention", fig,
                pd.DataFrame(rows), _sec_manifest("attention_link", {"key_positions": key_set, "summary": summary},
                                                  [res], [sec]),
                caption=f"Pearson r per block and head between |x_d| and the received attention S_t, over key "
                        f"positions with special tokens {key_set}, summarised as {how} over the dims of each "
                        f"panel; outlier dims {outl}, random dims {rand}. The CSV has every dim's r.",
                notes=notes)


def link_table(res: dict, sec: dict) -> View:
    """Per block: mean and max |r| of the outlier dims against the random dims' mean |r|."""
    rows = []
    for ks in ("included", "excluded"):
        ro, rr = np.abs(link_matrix(sec, ks, "outlier_r")), np.abs(link_matrix(sec, ks, "random_r"))
        for l in range(ro.shape[0]):
            with np.errstate(all="ignore"):
                rows.append({"block": l + 1, "special tokens": ks,
                             "outlier mean |r|": float(np.nanmean(ro[l])) if np.isfinite(ro[l]).any() else None,
                             "outlier max |r|": float(np.nanmax(ro[l])) if np.isfinite(ro[l]).any() else None,
                             "random mean |r|": float(np.nanmean(rr[l])) if np.isfinite(rr[l]).any() else None})
    return View("attention_link_table", "Outlier link by block", None, pd.DataFrame(rows),
                _sec_manifest("attention_link_table", {}, [res], [sec]))


def attention_curves(pairs: Sequence[tuple[dict, dict]], key: str, x_axis: str = "block") -> View:
    """Mean over heads of a per-head statistic, by block or relative depth (block / L), one line per run."""
    label, unit, _ = ATTN_STATS[key]
    depth = x_axis == "depth"
    series, rows = [], []
    for i, (res, sec) in enumerate(pairs):
        ys = layer_means(sec, key)
        L = len(ys)
        blocks = list(range(1, L + 1))
        xs = [b / L for b in blocks] if depth else blocks
        name = f"{run_name(res)} ({_heads_label(sec)})"
        series.append({"name": name, "x": xs, "y": ys, "color": i,
                       "hover": [f"<b>{F.esc(run_name(res))}</b><br>block {b} of {L}<br>{F.esc(label)} = {y:.4g}"
                                 f" (mean over heads)" for b, y in zip(blocks, ys)]})
        rows += [{"model": model_label(res), "block": b, "depth": b / L, key: y} for b, y in zip(blocks, ys)]
    runs = [p[0] for p in pairs]
    qk = key in ("cos_mu_qk", "q_drift", "k_drift", "q_mean_cosine", "k_mean_cosine", "mean_term_share")
    sub = f"{F.esc(corpora_text(runs))} · mean over heads · " + F.esc(
        PRE_ROTARY if qk else "queries: analysed positions, padding masked")
    fig = F.line_chart(series, title=f"{label} by {'relative depth' if depth else 'block'}", subtitle=sub,
                       x_title="relative depth (block / L)" if depth else "block (1 = first)", y_title=unit,
                       x_range=(-0.03, 1.03) if depth else None)
    if key in UNIT_RANGE:
        fig.update_yaxes(range=[0, 1.02])
    return View(f"attention_curve_{key}", f"{label} by {'relative depth' if depth else 'block'}", fig,
                pd.DataFrame(rows),
                _sec_manifest("attention_curves", {"statistic": key, "x_axis": x_axis}, runs, [p[1] for p in pairs]),
                caption=f"{label} ({unit}), mean over heads, per block"
                        + (" (x = block / L: the last block at 1)." if depth else "."))


MAP_LABELS = 96  # token labels per axis of the attention map: every one up to this many positions
TWIN_KEY_LABELS = 32  # key (column) labels of each of two maps side by side: more overlap at 9 px


def _map_layout(n: int) -> tuple[int, int]:
    """(tick label font size, figure height) of an n x n token map: every token labelled, kept apart."""
    return (11, max(620, 260 + 13 * n)) if n <= 32 else (9, max(620, 260 + 11 * n))


def _nth(k: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(k, f"{k}th")


def window_documents(sec: dict, n_windows: int) -> list[dict]:
    """The run's windows grouped by document, in corpus order, for the viewer's pickers:
    [{"doc": corpus index, "start": first words, "windows": [the run's window indices, in order]}].
    A section without the document index (an older one) gives one entry per window."""
    wd = sec.get("window_docs")
    if not isinstance(wd, list) or len(wd) != n_windows:
        return [{"doc": None, "start": "", "windows": [w]} for w in range(n_windows)]
    starts = {e.get("doc"): str(e.get("start") or "") for e in sec.get("documents") or [] if isinstance(e, dict)}
    by_doc: dict[int, list[int]] = {}
    for w, d in enumerate(wd):
        by_doc.setdefault(int(d), []).append(w)
    return [{"doc": d, "start": starts.get(d, ""), "windows": ws} for d, ws in sorted(by_doc.items())]


def document_label(entry: dict) -> str:
    """'document 3 · 4 windows · "The first words…"' (plain text: control characters made visible)."""
    if entry["doc"] is None:
        return f"window {entry['windows'][0]}"
    n = len(entry["windows"])
    head = f"document {entry['doc']} · {n} window{'s' if n != 1 else ''}"
    return visible(f"{head} · “{entry['start']}”" if entry["start"] else head)


def window_label(entry: dict, k: int) -> str:
    """'window 2 of 4 (run window 17)': the k-th (0-based) window of a document."""
    ws = entry["windows"]
    return f"window {k + 1} of {len(ws)} (run window {ws[k]})"


def _where(maps: dict) -> str:
    """'document 3 “The first words…”, window 2 of 4 (run window 17)' of an attention_maps result."""
    w = maps["window"]
    if "doc_window" not in maps:
        return f"window {w} (document {maps['document']})"
    start = shorten(maps.get("doc_start") or "", 40)
    name = f"document {maps['document']}" + (f" “{start}”" if start else "")
    return f"{name}, window {maps['doc_window'] + 1} of {maps['doc_windows']} (run window {w})"


def attention_map_pair(res: dict, maps: dict, block: int, head: int) -> View:
    """One window's attention map at (block, head) beside the same map with the outlier dims zeroed.
    Labels show each token's text (`readable_token`); the data keep the tokenizer's tokens too."""
    raw = [str(t) for t in maps["tokens"]]
    toks = [readable_token(t) for t in raw]
    n = len(toks)
    a, z = maps["maps"][block - 1, head], maps["zeroed"][block - 1, head]
    et = [F.esc(t) for t in toks]

    def hover(m):
        return np.asarray([[f"query {i} {et[i]}<br>key {j} {et[j]}<br>attention {m[i, j]:.4f}" for j in range(n)]
                           for i in range(n)], dtype=object)

    dims = maps["dims"]
    # Every token labels its row (the viewer shows at most attention_viewer_tokens = 64 positions): a
    # smaller font above 32 and a figure that grows with n keep them apart; the twin panel's rows are
    # the same tokens, so only the first panel labels them. Columns: every token where they fit (one
    # panel across the page, or two side by side up to 32 keys), else every k-th; the hover names each
    # cell's query and key token.
    x_cap = MAP_LABELS if not maps["dims"] else TWIN_KEY_LABELS
    x_step = max(1, -(-n // x_cap))
    ticks = {"x_labels": toks, "y_labels": toks, "y_max_labels": MAP_LABELS, "x_max_labels": x_cap,
             "label_size": _map_layout(n)[0], "x_angle": -90, "reverse_y": True}
    panels = [{"z": a, "title": "as computed", "x_title": "key position", "y_title": "query position",
               "hover": hover(a), **ticks}]
    notes = []
    if dims:
        # a short title (a list of 14 dims ran into the other panel's): the dims are in the subtitle
        panels.append({"z": z, "title": f"{len(dims)} outlier dims zeroed", "x_title": "key position",
                       "y_title": "", "hover": hover(z), "y_ticks": False, **ticks})
    else:
        notes.append("This run has no persistent outlier dims: there is nothing to zero.")
    shown = f"first {n} of {maps['n_positions']} positions" if maps["n_positions"] > n else f"{n} positions"
    sub = f"{F.esc(run_name(res))} · {F.esc(_where(maps))} · {shown} · block {block}, head {head + 1}"
    if dims:
        sub += f" · right: dims {', '.join(map(str, dims))} zeroed in every norm"
    # One colour scale for both maps, from 0 to the largest entry of either (a 0-1 scale leaves a map
    # that is not dominated by one sink almost uniformly dark).
    top = float(np.nanmax([np.nanmax(a), np.nanmax(z) if dims and np.isfinite(z).any() else 0.0]))
    top = top if np.isfinite(top) and top > 0 else 1.0
    sub += f" · colour scale 0 to {top:.3g} (the largest entry of {'either map' if dims else 'the map'})"
    if x_step > 1:
        sub += f" · key labels: every {_nth(x_step)} (hover a cell for its query and key tokens)"
    fig = F.heat_panels(panels, title="Attention map of one window", subtitle=sub, colorbar_title="attention",
                        zmin=0.0, zmax=top, height=_map_layout(n)[1])
    rows = [{"query": i, "query_token": raw[i], "query_text": toks[i], "key": j, "key_token": raw[j],
             "key_text": toks[j], "attention": float(a[i, j]),
             "attention_zeroed": float(z[i, j]) if dims else None} for i in range(n) for j in range(n)]
    return View(f"attention_map_w{maps['window']}_b{block}_h{head}", "Attention map of one window", fig,
                pd.DataFrame(rows), view_manifest("attention_map", {"window": maps["window"], "block": block, "head": head,
                                                               "zeroed_dims": dims}, [res]),
                caption=f"Attention probabilities of {_where(maps)}, block {block}, head {head + 1}; right: "
                        f"the same with dims {dims} zeroed in every norm (the ablation).", notes=notes)


def attention_map_change(res: dict, maps: dict, block: int, head: int) -> View:
    """The change the ablation makes to one window's map at (block, head): the map with the outlier
    dims zeroed minus the map as computed, on a diverging scale symmetric about 0 (blue: less
    attention once the dims are zeroed, red: more). None of it when the run has no outlier dims."""
    toks = [readable_token(t) for t in maps["tokens"]]
    n = len(toks)
    dims = maps["dims"]
    a, z = maps["maps"][block - 1, head], maps["zeroed"][block - 1, head]
    d = (z - a) if dims else np.full_like(a, np.nan)
    et = [F.esc(t) for t in toks]
    hover = np.asarray([[f"query {i} {et[i]}<br>key {j} {et[j]}<br>as computed {a[i, j]:.4f}<br>zeroed {z[i, j]:.4f}"
                         f"<br>change {d[i, j]:+.4f}" for j in range(n)] for i in range(n)], dtype=object)
    top = float(np.nanmax(np.abs(d))) if np.isfinite(d).any() else 0.0
    top = top if top > 0 else 1.0
    # One panel across the page: every token labels its row and its column.
    panel = {"z": d, "title": "", "x_title": "key position", "y_title": "query position", "hover": hover,
             "x_labels": toks, "y_labels": toks, "max_labels": MAP_LABELS, "label_size": _map_layout(n)[0],
             "x_angle": -90, "reverse_y": True}
    biggest = np.unravel_index(np.nanargmax(np.abs(d)), d.shape) if np.isfinite(d).any() else None
    sub = (f"{F.esc(run_name(res))} · {F.esc(_where(maps))} · block {block}, head {head + 1} · zeroed minus as computed "
           f"(outlier dims {dims}) · colour scale ±{top:.3g} (the largest change)")
    if biggest is not None:
        i, j = (int(x) for x in biggest)
        sub += f" · largest: query {i} {et[i]} → key {j} {et[j]}, {d[i, j]:+.3g}"
    fig = F.heat_panels([panel], title="Change in attention when the outlier dims are zeroed", subtitle=sub,
                        colorbar_title="Δ attention", zmin=-top, zmax=top, diverging=True,
                        height=_map_layout(n)[1])
    rows = [{"query": i, "query_token": toks[i], "key": j, "key_token": toks[j], "change": float(d[i, j])}
            for i in range(n) for j in range(n)]
    return View(f"attention_change_w{maps['window']}_b{block}_h{head}",
                "Change in attention when the outlier dims are zeroed", fig, pd.DataFrame(rows),
                view_manifest("attention_change", {"window": maps["window"], "block": block, "head": head,
                                               "zeroed_dims": dims}, [res]),
                caption=f"Attention with dims {dims} zeroed in every norm minus attention as computed, "
                        f"{_where(maps)}, block {block}, head {head + 1} (rows of a whole window sum to 0).",
                notes=[] if dims else ["This run has no persistent outlier dims: there is nothing to zero."])


DRIFT_STATS = {"output_mean_cosine": ("Output mean cosine", "mean cosine of the block output, all token pairs"),
               "output_within_sequence_cosine": ("Output mean cosine within a sequence",
                                                 "mean cosine of the block output, pairs of one sequence"),
               "attention_entropy": ("Attention entropy", "H / log T"),
               "input_mean_cosine": ("Input mean cosine", "mean cosine of the block's input")}
DRIFT_PANELS = ("query_key", "input")  # the isolated experiment beside its named baseline


def _drift_notes(result: dict, key: str) -> list[str]:
    """What the other isolated targets show, from their numbers: key drift alone, query drift alone."""
    exps = drift_experiments(result)
    out = []
    if "key" in exps and key in exps["key"]:
        z = grid(result, key, "key")
        out.append(f"Key drift alone (not drawn): {key.replace('_', ' ')} moves by at most {np.max(np.abs(z - z[0])):.1e} "
                   "over the alphas: a vector added to every key adds the same number to each logit of a query, "
                   "which the softmax removes.")
    if "query" in exps and "query_key" in exps and key in exps["query"]:
        diff = float(np.max(np.abs(grid(result, key, "query") - grid(result, key, "query_key"))))
        out.append(f"Query drift alone (not drawn) gives the same {key.replace('_', ' ')} as query and key drift to "
                   f"{diff:.1e}: only the queries' drift reaches the attention.")
    return out


def drift_heatmap(result: dict, key: str) -> View:
    """The controlled experiment: alpha (rows) x tau (columns) heatmaps of one measured quantity, the isolated
    query/key drift beside the input-drift baseline (a result from before the isolated experiment: the
    baseline alone, said so)."""
    label, unit = DRIFT_STATS[key]
    s = result["spec"]
    al, ta = s["alphas"], s["taus"]
    exps = drift_experiments(result)
    targets = [t for t in DRIFT_PANELS if t in exps and key in exps[t]]
    panels, rows = [], []
    for t in targets:
        z = grid(result, key, t)
        name = TARGET_NAMES[t]
        hover = np.asarray([[f"{F.esc(name)}<br>alpha = {a:g}, tau = {tau:g}<br>{F.esc(label)} = {z[i, j]:.4f}"
                             for j, tau in enumerate(ta)] for i, a in enumerate(al)], dtype=object)
        panels.append({"z": z, "title": name, "x_title": "temperature tau (logits / tau)",
                       "y_title": "drift norm alpha" if not panels else "", "x_labels": [f"{x:g}" for x in ta],
                       "y_labels": [f"{a:g}" for a in al], "hover": hover, "x_angle": 0,
                       **({"y_ticks": False} if panels else {})})
        rows += [{"experiment": name, "target": t, "alpha": a, "tau": tau, key: z[i, j]}
                 for i, a in enumerate(al) for j, tau in enumerate(ta)]
    bias = "with PyTorch's default biases" if s.get("biases", True) else "bias-free"
    sub = (f"random pre-norm block ({bias}), d = {s['d']}, {s['heads']} heads, seed {s['seed']} · inputs g ~ N(0, I/d); "
           f"alpha = drift norm / RMS norm of what it is added to · {fmt_n(result['n_tokens'])} tokens in "
           f"{s['n_seq']} sequences of {s['seq_len']}")
    fig = F.heat_panels(panels, title=f"Controlled experiment: {label.lower()}", subtitle=sub, colorbar_title=unit,
                        height=460)
    m = {"app": "anisotropy-workbench", "view": "drift_experiment", "params": {"statistic": key}, "runs": [],
         "drift_spec": s, "code": result.get("code"), "config": result.get("config")}
    notes = _drift_notes(result, key)
    if "query_key" not in targets:
        notes.insert(0, "This result has only the input-drift baseline (computed before the isolated query/key "
                        "experiment existed): it cannot show the query/key mechanism. Run the experiment again.")
    what = "; ".join(f"{TARGET_NAMES[t]}: {TARGET_WHAT[t]}" for t in targets)
    return View(f"drift_{key}", f"Controlled experiment: {label.lower()}", fig, pd.DataFrame(rows), m,
                caption=f"{label} ({unit}) for each drift norm alpha and temperature tau. {what}. {result['block']}.",
                notes=notes)


def drift_findings(result: dict) -> View:
    """What the controlled experiment shows, as the claims table's rows (`core.studies.papers.claims.drift_claims`): Godey
    et al.'s claims judged on the isolated query/key drift, the key-only control and the input-drift baseline."""
    s = result["spec"]
    rows = drift_claims({**result, "alphas": s["alphas"], "taus": s["taus"]})
    m = {"app": "anisotropy-workbench", "view": "drift_findings", "params": {}, "runs": [], "drift_spec": s,
         "code": result.get("code"), "config": result.get("config")}
    return View("drift_findings", "What the controlled experiment shows", None, pd.DataFrame(rows), m,
                caption="Verdicts computed from the grids below (rules in core/studies/papers/claims.py): the mechanism is "
                        "judged on the isolated experiment only; input drift is a baseline.")
