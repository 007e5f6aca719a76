"""Compare page: activation outliers per layer by relative depth, and one summary row per model
(the per-layer curves and projections of the Compare page come from `layers` and `projection`)."""

from __future__ import annotations

import textwrap
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..base.config import CONFIG
from ..stats import registry as S
from ..stats.batching import document_groups
from ..stats.geometry import (
    CKA_BOOT,
    CKA_ESTIMATOR,
    CKA_HOVER,
    CKA_INTERVAL,
    cka_alignment,
    cka_interval,
    cka_positions,
    same_tokens,
    sample_groups,
)
from . import figures as F
from .common import View, as_results, ci_text, corpora_text, modality, near_ties, sizes_text, tie_width, view_manifest


def outlier_counts(runs: Sequence[dict]) -> View:
    """Activation outlier dims per layer as a share of the width d (models of different d compare), by
    relative depth, for every run; the counts are in the hover and the data."""
    runs = [as_results(r) for r in runs]
    series, rows = [], []
    for i, res in enumerate(runs):
        L = res.last_layer
        per = res.activation_outliers
        d = int(res.hidden_size or 0)
        xs = [l / L for l in range(len(per))]
        ns = [len(p) for p in per]
        ys = [100.0 * n / d if d else float("nan") for n in ns]
        hover = [f"<b>{F.esc(res.run_name)}</b><br>layer {l} of {L}<br>{n} of d = {d} dims ({y:.2f}%)"
                 for l, (n, y) in enumerate(zip(ns, ys))]
        series.append({"name": f"{res.run_name} (d = {d or '?'})", "x": xs, "y": ys, "color": i, "hover": hover})
        for l, (x, n, y) in enumerate(zip(xs, ns, ys)):
            rows.append({"model": res.model_label, "corpus": res.corpus_label, "layer": l, "depth": x,
                         "n_outlier_dims": n, "d": d, "share_of_d_percent": y, "dims": " ".join(map(str, per[l])),
                         "n_tokens": res.n_tokens})
    fig = F.line_chart(series, title="Activation outlier dimensions per layer, as a share of the width",
                       subtitle=F.esc(f"{corpora_text(runs)} · N = {sizes_text(runs)} · rule: mean |x_d| > mean + "
                                      f"{CONFIG.outlier_sigma:g} std · share = outlier dims / d (hover: the count)"),
                       x_title="relative depth (layer / L; 0 = embeddings, 1 = last layer)",
                       y_title="outlier dimensions (% of d)", x_range=(-0.03, 1.03))
    fig.update_yaxes(rangemode="tozero")
    return View("outlier_counts", "Outlier dimensions per layer", fig, pd.DataFrame(rows),
                view_manifest("outlier_counts", {}, runs),
                caption="Activation outliers per layer as a share of the width d, by relative depth.")


def comparison_sentence(runs: Sequence[dict], metric: str = "mean_cosine") -> str:
    """One sentence from the numbers of the compared curves: each run's value at the embeddings, the last
    layer and its peak (with its relative depth), then which run ends highest and lowest."""

    runs = [as_results(r) for r in runs]
    label = S.BY_KEY[metric].label if metric in S.BY_KEY else metric
    parts, last, kinds = [], [], []
    for res in runs:
        if not S.applies(metric, modality(res)):
            continue
        y = np.asarray(res.values(metric), dtype=float)
        if not np.isfinite(y).any():
            continue
        L = max(res.last_layer, 1)
        ties = near_ties(y)
        k = ties[0]
        peak = (f"peak {y[k]:.3g} at depth {k / L:.2f}" if len(ties) == 1 else
                f"peak a tie within {tie_width(y[k]):.2g} of {y[k]:.3g}, layers "
                f"{', '.join(str(i) for i in sorted(ties))} (depths {', '.join(f'{i / L:.2f}' for i in sorted(ties))})")
        parts.append(f"{res.run_name} goes from {y[0]:.3g} at the input to {y[-1]:.3g} at the last layer ({peak})")
        last.append((float(y[-1]), res.run_name))
        kinds.append((modality(res), res.corpus_label))
    if not parts:
        return ""
    out = f"{label} by relative depth: " + "; ".join(parts) + "."
    if len(last) >= 2:
        hi, lo = max(last), min(last)
        out += f" At the last layer {hi[1]} is highest ({hi[0]:.3g}) and {lo[1]} lowest ({lo[0]:.3g})"
        # the caveat only where it holds: runs of one modality on one corpus read the same text
        differ = [w for w, i in (("modality", 0), ("corpus", 1)) if len({k[i] for k in kinds}) > 1]
        out += (f"; the runs differ in {' and '.join(differ)}, so compare shapes more than values." if differ
                else ".")
    return out


def peak_layers(y) -> str:
    """The layer of a curve's largest value, or "tie: a, b" when others are within the tie tolerance
    (`common.near_ties`): no argmax picks one of near-equal layers."""
    ties = near_ties(y)
    if not ties:
        return ""
    return str(ties[0]) if len(ties) == 1 else "tie: " + ", ".join(str(i) for i in sorted(ties))


def compare_summary(runs: Sequence[dict]) -> View:
    runs = [as_results(r) for r in runs]
    rows = []
    for res in runs:
        m = res.manifest
        mc = np.asarray(res.values("mean_cosine"))
        norm = res.norm_parameters
        rows.append({
            "model": res.model_label, "corpus": res.corpus_label, "trained": m["model"].get("trained"),
            "layers (L)": res.n_layers - 1, "d": m["model"].get("hidden_size"),
            "params": m["model"].get("n_params"), "tokens analysed": res.n_tokens, "sample K": res.n_sample,
            "mean_cosine min": float(np.nanmin(mc)), "mean_cosine max": float(np.nanmax(mc)),
            "mean_cosine mean": float(np.nanmean(mc)), "peak layer": peak_layers(mc),
            "persistent outliers (activation)": " ".join(map(str, res.persistent_activation_outliers)),
            "persistent outliers (norm params)": " ".join(map(str, norm.get("persistent") or [])),
            "device": m.get("device"), "dtype": m.get("dtype"), "note": m["model"].get("note", ""),
        })
    return View("compare_summary", "Summary", None, pd.DataFrame(rows), view_manifest("compare_summary", {}, runs),
                caption="One row per model: depth, width, tokens, mean-cosine range and persistent outliers.")


def _shared_documents(stats_a, stats_b) -> tuple[np.ndarray | None, str]:
    """(the documents sampled in both runs, sorted; or None) and why not: runs of one corpus file whose samples
    share at least 4 documents (their windows and tokens may differ: another tokenizer, budget or seed)."""
    ma, mb = stats_a.manifest, stats_b.manifest
    if (ma.get("corpus") or {}).get("sha256") != (mb.get("corpus") or {}).get("sha256"):
        return None, "the two runs read different corpora"
    a, b = stats_a.arrays.get("sample_doc"), stats_b.arrays.get("sample_doc")
    if a is None or b is None:
        return None, "a run's sample has no document ids"
    docs = np.intersect1d(np.asarray(a), np.asarray(b))
    if len(docs) < 4:
        return None, f"only {len(docs)} documents are sampled in both runs (at least 4 are needed)"
    return docs, ""


def _document_means(stats, docs: np.ndarray) -> list[np.ndarray]:
    """Per layer, (len(docs), d) the mean of each document's sampled vectors."""
    doc = np.asarray(stats.arrays["sample_doc"])
    row = np.searchsorted(docs, doc)
    keep = (row < len(docs)) & (docs[np.minimum(row, len(docs) - 1)] == doc)
    counts = np.bincount(row[keep], minlength=len(docs)).astype(np.float64)
    out = []
    for l in range(stats.n_layers):
        X = np.asarray(stats.sample(l), dtype=np.float64)[keep]
        sums = np.zeros((len(docs), X.shape[1]))
        np.add.at(sums, row[keep], X)
        out.append(sums / counts[:, None])
    return out


def cka_across(stats_a, res_a: dict, stats_b, res_b: dict) -> View:
    """Linear CKA (unbiased HSIC) between every layer of run A and every layer of run B, with the depth
    alignment (for each layer of A, the layer of B of highest CKA): on the same token positions when both
    runs read the same tokens; else, for runs of one corpus, at the document level (each document's mean
    sampled vector, labelled so: tokens of different tokenizers are never paired); else not comparable."""
    ra, rb = as_results(res_a), as_results(res_b)
    ok, why = same_tokens(stats_a, stats_b)
    name, title = "compare_cka", "Linear CKA between the layers of two runs"
    level = "token"
    if ok:
        idx = cka_positions(int(stats_a.arrays["sample"].shape[1]))
        Xa = [np.asarray(stats_a.sample(l), dtype=np.float64)[idx] for l in range(stats_a.n_layers)]
        Xb = [np.asarray(stats_b.sample(l), dtype=np.float64)[idx] for l in range(stats_b.n_layers)]
        n_what = f"{len(idx)} shared token positions"
        groups, no_ci = sample_groups(stats_a, idx)
    else:
        docs, doc_why = _shared_documents(stats_a, stats_b)
        if docs is None:
            rows = [{"run_a": ra.run_name, "run_b": rb.run_name, "status": "not comparable"}]
            msg = f"Not comparable at the token level: {why}; nor at the document level: {doc_why}."
            return View(name, title, None, pd.DataFrame(rows), {"view": name, "not_comparable": msg},
                        caption=msg, notes=[msg])
        level, idx = "document", docs
        Xa, Xb = _document_means(stats_a, docs), _document_means(stats_b, docs)
        n_what = f"{len(docs)} documents (each one's mean sampled vector; tokens of the two runs are never paired)"
        why = f"the same documents (token level impossible: {why})"
        groups, no_ci = document_groups(docs, int(stats_a.manifest.get("seed", 0)), CONFIG.bootstrap_groups), ""
    got = cka_interval(Xa, groups if groups is not None else np.zeros(len(idx), dtype=np.int64), Xb,
                       n_boot=CKA_BOOT if groups is not None else 0)
    C, lo, hi = got["matrix"], got["low"], got["high"]
    if got["n_groups"] >= 2:
        ci_note = f"; {CKA_INTERVAL}, {got['n_groups']} groups of run A"
    else:
        ci_note = f"; no interval: {no_ci or 'the rows fall in fewer than two groups of documents'}"
    ia, ib = [int(x) for x in stats_a.layer_ids], [int(x) for x in stats_b.layer_ids]
    al = cka_alignment(C, lo, hi)
    bj = al["best"]
    best = [ib[j] if j is not None else None for j in bj]
    ties = [[ib[k] for k in t] for t in al["ties"]]
    hover = np.asarray([[f"A layer {ia[i]} vs B layer {ib[j]}<br>CKA = {C[i, j]:.4f}{ci_text(lo[i, j], hi[i, j])}"
                         f"<br><i>{F.esc(CKA_HOVER)}</i>"
                         for j in range(len(ib))]
                        for i in range(len(ia))], dtype=object)
    line_note = ("dots: for each layer of A, the layer of B of highest CKA (a bar: the layers within "
                 f"{al['tie']:g} or the interval of it, a near-tie)" if al["degenerate"] is None else
                 f"no alignment line: the layers of {al['degenerate']} are indistinguishable (the box says by how much)")
    fig = F.heat_panels([{"z": C, "title": "", "x_title": f"B: {rb.run_name} — layer", "y_title": f"A: {ra.run_name} — layer",
                          "x_labels": [str(x) for x in ib], "y_labels": [str(x) for x in ia], "x_angle": 0, "hover": hover}],
                        title=("Linear CKA between the layers of A and B (the same tokens)" if level == "token" else
                               "Document-level linear CKA between the layers of A and B (mean vector per document)"),
                        subtitle=F.esc(f"{CKA_ESTIMATOR}; {n_what}{ci_note} · {line_note}; dotted: equal relative depth"),
                        colorbar_title="CKA", zmin=0.0, zmax=1.0)
    if al["degenerate"] is None:
        xs = [ib.index(b) if b is not None else None for b in best]
        idx_ties = al["ties"]
        fig.add_trace(go.Scatter(
            x=xs, y=list(range(len(ia))), mode="markers+lines",
            marker=dict(color="white", size=7, line=dict(color="black", width=1),
                        symbol=["circle-open" if len(t) > 1 else "circle" for t in idx_ties]),
            line=dict(color="white", width=1),
            error_x=dict(type="data", symmetric=False, color="white", thickness=1.5, width=3,
                         array=[(max(t) - x) if x is not None and t else 0 for x, t in zip(xs, idx_ties)],
                         arrayminus=[(x - min(t)) if x is not None and t else 0 for x, t in zip(xs, idx_ties)]),
            name="best layer of B", showlegend=False, hoverinfo="text",
            hovertext=[(f"A layer {ia[i]}: best B layer {best[i]}, CKA = {C[i, j]:.4f}{ci_text(lo[i, j], hi[i, j])}"
                        + (f"<br>near-tie: B layers {', '.join(map(str, ties[i]))} (within {al['tie']:g} or the interval)"
                           if len(ties[i]) > 1 else ""))
                       if j is not None else
                       f"A layer {ia[i]}: no best layer (CKA spreads by only {al['spread'][i]:.3f} over B's layers)"
                       for i, j in enumerate(bj)]))
    else:  # the figure says why there is no line, on the figure itself
        text = "<br>".join(F.esc(t) for t in textwrap.wrap("No alignment line: " + al["why"] + ".", 60))
        fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, align="center",
                           bgcolor="rgba(255,255,255,0.85)", font=dict(size=12, color="black"))
    fig.add_trace(go.Scatter(  # the alignment of equal relative depth, to read the dots against
        x=[0, len(ib) - 1], y=[0, len(ia) - 1], mode="lines", line=dict(color="#BBBBBB", width=1, dash="dot"),
        name="equal relative depth", hovertemplate="equal relative depth<extra></extra>", showlegend=False))
    rows = [{"run_a": ra.run_name, "run_b": rb.run_name, "level": level, "layer_a": ia[i], "layer_b": ib[j],
             "cka": float(C[i, j]), "cka_low": float(lo[i, j]), "cka_high": float(hi[i, j]),
             "best_layer_b_for_a": best[i] if al["degenerate"] is None else None,
             "best_ties_b": " ".join(map(str, ties[i])) if al["degenerate"] is None else "",
             "spread_over_b": al["spread"][i], "n_rows": int(len(idx))}
            for i in range(len(ia)) for j in range(len(ib))]

    def _match(i: int, a: int, b, j) -> str:
        if j is None:
            return f"{a}→none (spread {al['spread'][i]:.3f})"
        b = "-".join(map(str, ties[i])) + " (tie)" if len(ties[i]) > 1 else str(b)
        return f"{a}→{b}" + (f" ({C[i, j]:.3f} [{lo[i, j]:.3f}, {hi[i, j]:.3f}])" if np.isfinite(lo[i, j]) else "")
    matches = ("Best layer of B for each layer of A (CKA and interval): "
               + ", ".join(_match(i, a, b, j) for i, (a, b, j) in enumerate(zip(ia, best, bj))) + "."
               if al["degenerate"] is None else f"No depth alignment: {al['why']}.")
    return View(name, title, fig, pd.DataFrame(rows),
                view_manifest("cka_across", {"level": level, "rows": int(len(idx)), "estimator": CKA_ESTIMATOR,
                                         "interval": CKA_INTERVAL if got["n_groups"] >= 2 else None,
                                         "n_groups": got["n_groups"], "alignment_degenerate": al["degenerate"],
                                         "spread_min": al["spread_min"], "tie": al["tie"]},
                          [res_a, res_b]),
                caption=f"{'Document-level l' if level == 'document' else 'L'}inear CKA between each layer of A "
                        f"({ra.run_name}) and of B ({rb.run_name}) on {why}; {CKA_ESTIMATOR}{ci_note}. {matches}",
                notes=[f"No depth alignment: {al['why']}."] if al["degenerate"] else [])
