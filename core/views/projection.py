"""Projection page: 2-D projections (PCA, UMAP) of the sampled tokens, with their context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..base.escape import shorten, visible
from ..inputs.corpora import META_PREFIX, metadata_kind
from . import figures as F
from .common import View, as_results, corpora_text, fmt_n, modality, view_manifest

MAX_CATEGORIES = len(F.CATEGORICAL)  # the most frequent values get a colour each; the others are grouped


def metadata_columns(tables: Sequence[pd.DataFrame]) -> list[str]:
    """The metadata columns of the panels' sample tables (a table corpus's other columns), in order."""
    return list(dict.fromkeys(c[len(META_PREFIX):] for t in tables for c in t.columns if c.startswith(META_PREFIX)))


def check_color(color_by: str, tables: Sequence[pd.DataFrame]) -> tuple[str, str | None]:
    """The colouring to draw, and a message when `color_by` (from a URL: hostile) names a metadata
    column that none of the runs' corpora has (then: log token frequency)."""
    if not color_by.startswith(META_PREFIX):
        return color_by, None
    col, cols = color_by[len(META_PREFIX):], metadata_columns(tables)
    if col in cols:
        return color_by, None
    have = (f"its columns besides the text: {', '.join(repr(shorten(visible(c), 40)) for c in cols)}" if cols
            else "only a table corpus (an uploaded CSV, TSV, JSONL or parquet) has metadata columns")
    return "log_frequency", (f"Colour by: the corpus has no column {shorten(visible(col), 60)!r} ({have}); "
                             "coloured by log token frequency instead.")


def _categories(values: list[np.ndarray]) -> tuple[list[str], bool]:
    """The categories that get a colour (most frequent first, over every panel), and whether others remain."""
    allv = pd.Series(np.concatenate(values) if values else [], dtype=object).dropna().astype(str)
    counts = allv.value_counts()
    order = sorted(counts.index, key=lambda v: (-counts[v], v))
    return order[:MAX_CATEGORIES], len(order) > MAX_CATEGORIES


def _as_number(v: np.ndarray) -> np.ndarray:
    return pd.to_numeric(pd.Series(v, dtype=object).astype(str).str.strip(), errors="coerce").to_numpy(dtype=float)


def _norm_token(t: str) -> str:
    return str(t).replace("##", "").replace("Ġ", "").replace("▁", "").strip().lower()


def _axis_titles(proj: dict) -> tuple[str, str]:
    if proj["method"] == "pca":
        ev = proj.get("explained_variance") or [float("nan")] * 2
        return f"PC1 ({ev[0]:.1%} of variance)", f"PC2 ({ev[1]:.1%} of variance)"
    return "UMAP 1 (arbitrary units)", "UMAP 2 (arbitrary units)"


def _num(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:.3g}"


def _rescale_measures(panels: list[dict], names: dict[str, str]) -> str:
    """Panels coloured by different measures (log corpus frequency for text, patch position for images, time in
    the clip for speech) share one colour bar: each measure is mapped onto 0-1 by its own range over the panels
    that show it (a log frequency of 10 was drawn as dark as patch 10 of 256). The data keep the raw values.
    Returns the note that says so."""
    spans = []
    for col, name in names.items():
        vals = np.concatenate([np.asarray(p["color"], dtype=float) for p in panels if p.get("measure") == col])
        ok = vals[np.isfinite(vals)]
        lo, hi = (float(ok.min()), float(ok.max())) if ok.size else (0.0, 1.0)
        for p in panels:
            if p.get("measure") == col:
                p["color"] = (np.asarray(p["color"], dtype=float) - lo) / (hi - lo if hi > lo else 1.0)
        spans.append(f"{name} {_num(lo)} to {_num(hi)}")
    return ("Colour: each panel's measure on its own range, 0 (lowest) to 1 (highest) over the panels that show it ("
            + "; ".join(spans) + "), since the measures differ in unit; the data export keeps the raw values.")


@dataclass(frozen=True)
class _Colouring:
    """How the points are coloured, decided once for all panels: by a measure (continuous), by document (discrete),
    by a corpus column (`meta`: continuous or categorical, with the categories `cats`) or by a search (highlight)."""

    color_by: str
    meta: str | None
    mode: str
    cats: list[str]
    more: bool  # more categories than colours: the rest are grouped as "other values"
    search: str
    q: str  # the search, normalised as tokens are


def _colouring(panels, color_by: str, search: str) -> _Colouring:
    meta = color_by[len(META_PREFIX):] if color_by.startswith(META_PREFIX) else None
    cats, more = [], False
    if meta is not None:
        present = [t.iloc[:len(pr["xy"])][color_by].to_numpy(dtype=object) for _, pr, t in panels if color_by in t]
        present_v = [v for v in present if pd.Series(v, dtype=object).notna().any()]
        kind = metadata_kind(np.concatenate(present_v)) if present_v else "categorical"
        mode = "continuous" if kind == "numeric" else "categorical"
        cats, more = _categories(present) if mode == "categorical" else ([], False)
    else:
        mode = {"log_frequency": "continuous", "position": "continuous", "document": "discrete",
                "search": "highlight"}[color_by]
    return _Colouring(color_by, meta, mode, cats, more, search, _norm_token(search))


def _hover(t: pd.DataFrame, modal: bool, meta: str | None, mvals: np.ndarray) -> list[str]:
    """Each point's hover text: the token in its context (the image and its patch, or the clip and the time)."""
    if modal:
        hover = [f"<b>{F.esc(tok)}</b><br>{F.esc(ctx)}<br>source {doc} · position {pos}"
                 for tok, ctx, doc, pos in zip(t["token"], t["context"], t["document"], t["position"])]
    else:
        hover = [f"<b>{F.esc(tok)}</b><br>{F.esc(ctx)}<br>doc {doc} · position {pos} · corpus frequency {int(fq)}"
                 for tok, ctx, doc, pos, fq in zip(t["token"], t["context"], t["document"], t["position"],
                                                   t["frequency"])]
    if meta is not None:
        name = F.esc(shorten(visible(meta), 40))
        hover = [f"{h}<br>{name}: {'—' if pd.isna(v) else F.esc(shorten(str(v), 60))}" for h, v in zip(hover, mvals)]
    return hover


def _colour_panel(c: _Colouring, p: dict, t: pd.DataFrame, res, proj: dict, mvals: np.ndarray, modal: bool,
                  has_meta: bool, notes: list[str]) -> np.ndarray:
    """Set panel `p`'s colours (or groups, or search matches); returns which points match the search."""
    n = len(p["x"])
    match = np.zeros(n, dtype=bool)
    if c.meta is not None:
        if not has_meta:
            notes.append(f"{res.model_label} on {res.corpus_label}: its corpus has no column "
                         f"{shorten(visible(c.meta), 60)!r} (drawn grey).")
        if c.mode == "continuous":
            p["color"] = _as_number(mvals)
        else:
            sv = np.asarray([None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
                             for v in mvals], dtype=object)
            known = np.asarray([v in set(c.cats) for v in sv], dtype=bool)
            groups = [{"name": k, "mask": sv == k, "color": F.CATEGORICAL[i]} for i, k in enumerate(c.cats)]
            if c.more:
                groups.append({"name": "other values", "mask": ~known & (sv != None), "color": F.MUTED})  # noqa: E711
            groups.append({"name": "no value", "mask": sv == None, "color": F.MISSING})  # noqa: E711
            p["groups"] = groups
    elif c.mode == "continuous":
        col = c.color_by
        if modal and c.color_by == "log_frequency":  # colour by the metadata that exists
            col = "time_s" if "time_s" in t.columns else "position"
            cnn = t["token"].astype(str).str.startswith("cell").any()  # a CNN's 7x7 grid cells
            where = "time in the clip" if col == "time_s" else ("grid cell" if cnn else "patch") + " position"
            notes.append(f"{res.model_label}: no token frequency for {('audio' if col == 'time_s' else 'images')}"
                         f"; coloured by {where} instead.")
        p["color"] = t[col].to_numpy(dtype=float)
        p["measure"] = col  # which measure the colours are: read by _legend
    elif c.mode == "discrete":
        docs = t["document"].to_numpy()
        _, rank = np.unique(docs, return_inverse=True)
        p["color"] = [F.color(int(r)) for r in rank]
    else:
        match = np.asarray([bool(c.q) and _norm_token(tok) == c.q for tok in t["token"]])
        p["match"] = match
        notes.append(f"{res.model_label} ({proj['post']}): {int(match.sum())} of {n} sampled tokens match "
                     f"{c.search!r}." if c.q else "Type a token to highlight its occurrences.")
    return match


def _panel_rows(res, proj: dict, xy: np.ndarray, t: pd.DataFrame, match: np.ndarray, c: _Colouring,
                mvals: np.ndarray) -> pd.DataFrame:
    """The panel's points as the view's table."""
    row = pd.DataFrame({"model": res.model_label, "corpus": res.corpus_label, "layer": proj["layer"],
                        "method": proj["method"], "post": proj["post"], "x": xy[:, 0], "y": xy[:, 1],
                        "token": t["token"].to_numpy(), "context": t["context"].to_numpy(),
                        "document": t["document"].to_numpy(), "position": t["position"].to_numpy(),
                        "frequency": t["frequency"].to_numpy(), "match": match})
    if c.meta is not None:  # the colouring's values, under the column's own name (unless the table has it)
        row[c.meta if c.meta not in row.columns else c.color_by] = mvals
    return row


def _panel(c: _Colouring, res, proj: dict, table: pd.DataFrame, notes: list[str]) -> tuple[dict, pd.DataFrame, str]:
    """One panel of the figure, its rows of the table and its part of the subtitle."""
    res = as_results(res)
    xy = np.asarray(proj["xy"], dtype=float)
    n = len(xy)
    t = table.iloc[:n]
    modal = "item" in t.columns  # an image or audio run: no tokens, no frequency
    has_meta = c.meta is not None and c.color_by in t.columns
    mvals = t[c.color_by].to_numpy(dtype=object) if has_meta else np.full(n, None, dtype=object)
    xt, yt = _axis_titles(proj)
    L = res.n_layers - 1
    # the corpus too: Compare's panels of one model on two corpora (or of several runs) were titled alike
    title = f"{res.model_label} · {res.corpus_label}, layer {proj['layer']}/{L}, {proj['post']}"
    p = {"title": title, "x": xy[:, 0], "y": xy[:, 1], "hover": _hover(t, modal, c.meta, mvals), "x_title": xt,
         "y_title": yt}
    match = _colour_panel(c, p, t, res, proj, mvals, modal, has_meta, notes)
    part = f"{res.model_label}: K = {fmt_n(n)} of N = {fmt_n(res.n_tokens)} tokens"
    return p, _panel_rows(res, proj, xy, t, match, c, mvals), part


def _legend(c: _Colouring, panels, out_panels: list[dict], notes: list[str]) -> tuple[str, str]:
    """(the colour bar's title, what the subtitle says the colour is)."""
    titles = {"log_frequency": "log corpus<br>frequency", "position": "position in<br>sequence",
              "time_s": "time in<br>the clip (s)"}
    used = [p["measure"] for p in out_panels if "measure" in p]
    if c.meta is not None:
        ctitle = F.esc(shorten(visible(c.meta), 24))
        colour = f"corpus column {shorten(visible(c.meta), 40)!r}" + (" (numeric)" if c.mode == "continuous" else "")
        if c.mode == "categorical" and c.more:
            notes.append(f"Column {shorten(visible(c.meta), 60)!r}: the {MAX_CATEGORIES} most frequent values have a "
                         "colour each; the others are grey ('other values').")
    elif c.color_by == "log_frequency" and used and set(used) != {"log_frequency"}:  # image/audio panels among them
        if any(modality(p[0]) == "image" for p in panels):
            titles["position"] = "patch<br>position"
        colour = " / ".join(titles[k].replace("<br>", " ") for k in dict.fromkeys(used))
        if len(set(used)) > 1:  # measures in different units: each on its own range, or one scale darkens the others
            ctitle = "each measure,<br>low → high"
            notes.append(_rescale_measures(out_panels, {k: titles[k].replace("<br>", " ") for k in used}))
        else:
            ctitle = titles[used[0]]
    else:
        ctitle = titles.get(c.color_by, "")
        colour = c.color_by.replace("_", " ")
    return ctitle, colour


def projection(panels: Sequence[tuple[dict, dict, pd.DataFrame]], color_by: str = "log_frequency",
               search: str = "") -> View:
    """2-D projections of sampled tokens, one panel per (results, projection, sample table).

    Panels may be raw vs post-processed of one run (side by side) or several runs at the same
    relative depth. Hover shows the token in its context.
    """
    c = _colouring(panels, color_by, search)
    out_panels, rows, notes, parts = [], [], [], []
    for res, proj, table in panels:
        p, row, part = _panel(c, res, proj, table, notes)
        out_panels.append(p)
        rows.append(row)
        parts.append(part)
    first = panels[0][1]
    method = "PCA" if first["method"] == "pca" else "UMAP (" + ", ".join(f"{k}={v}" for k, v in first["params"].items()) + ")"
    ctitle, colour = _legend(c, panels, out_panels, notes)
    runs = [as_results(p[0]) for p in panels]
    fig = F.scatter_panels(out_panels, title=f"{method} of sampled token representations",
                           subtitle=F.esc(" · ".join(dict.fromkeys(parts)) + f" · {corpora_text(runs)} · colour: "
                                          + (f"tokens matching {search!r}" if color_by == "search"
                                             else colour)),
                           color_mode=c.mode, color_title=ctitle)
    if c.mode == "discrete":
        notes.append("Colours cycle over documents (8 colours): hover a point for its document.")
    layers = "-".join(str(p[1]["layer"]) for p in panels)
    return View(f"projection_{first['method']}_layer{layers}", "Projection of sampled tokens", fig,
                pd.concat(rows, ignore_index=True),
                view_manifest("projection", {"method": first["method"], "params": first["params"], "color": color_by,
                                         "search": search, "layers": [p[1]["layer"] for p in panels],
                                         "post": [p[1]["post"] for p in panels]}, runs),
                caption=f"{method} of the token sample; " + "; ".join(dict.fromkeys(parts)) + ".", notes=notes)
