"""The logit lens of causal LMs (results.json's `logit_lens_*` per layer and its `logit_lens` section):
KL to the output, entropy and top-1 agreement by layer (Layers, Compare side by side), and the most
frequent lens top-1 tokens per layer. Runs without the lens are named with the reason."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from ..stats import registry as S
from . import figures as F
from .common import View, as_results, fmt_n, not_applicable, view_manifest

LENS_KEYS = ("logit_lens_kl", "logit_lens_entropy", "logit_lens_top1_agreement")
TITLE = "Logit lens by layer"


def lens_why(res) -> str | None:
    """Why a run has no lens values (None when it has them)."""
    res = as_results(res)
    sec = res.raw.get("logit_lens") or {}
    if sec.get("not_applicable"):
        return sec["not_applicable"]
    if not sec:
        return "no logit lens in these results (computed from this version on)"
    return None


def lens_curves(runs: Sequence[dict], x_axis: str = "layer") -> View:
    """KL(final || lens), entropy and top-1 agreement by layer (or relative depth), one line per run."""
    runs = [as_results(r) for r in runs]
    have = [r for r in runs if lens_why(r) is None]
    notes = [f"{r.run_name}: not applicable: {lens_why(r)}." for r in runs if lens_why(r) is not None]
    if not have:
        return not_applicable("layers_logit_lens", TITLE, runs, "; ".join(
            dict.fromkeys(f"{r.run_name}: {lens_why(r)}" for r in runs)))
    depth = x_axis == "depth"
    panels = [{"title": S.BY_KEY[k].label.replace("Logit lens: ", ""), "y_title": S.BY_KEY[k].axis, "series": [],
               "y_range": S.BY_KEY[k].figure.y_range} for k in LENS_KEYS]
    rows, parts = [], []
    for i, res in enumerate(runs):
        if res not in have:
            continue
        sec = res.raw["logit_lens"]
        L = res.last_layer
        layers = [r["layer"] for r in res.layers]
        xs = [l / L for l in layers] if depth else layers
        parts.append(f"{res.model_label}: {sec['positions']}")
        for p, k in zip(panels, LENS_KEYS):
            d = S.DEFINITIONS[k]
            ys = res.values(k)
            hover = [f"<b>{F.esc(res.run_name)}</b><br>layer {l} of {L} (depth {l / L:.2f})<br>{F.esc(S.BY_KEY[k].label)}"
                     f" = {y:.4g}<br>n = {fmt_n(sec['n_positions'])} positions<br><i>{F.esc(d.short)}</i>"
                     f"<br>{F.esc(d.paper)}" for l, y in zip(layers, ys)]
            p["series"].append({"name": res.run_name, "x": xs, "y": ys, "color": i, "hover": hover})
        for r in res.layers:
            rows.append({"model": res.model_label, "corpus": res.corpus_label, "layer": r["layer"],
                         "depth": r["layer"] / L, **{k: r.get(k) for k in LENS_KEYS},
                         "n_positions": int(sec["n_positions"])})
    sub = F.esc("the model's own final norm and unembedding on each layer's hidden states; " + "; ".join(parts))
    fig = F.line_panels(panels, title=TITLE, subtitle=sub,
                        x_title="relative depth (layer / L)" if depth else "layer (0 = embeddings)")
    return View("layers_logit_lens", TITLE, fig, pd.DataFrame(rows), view_manifest("lens_curves", {"x_axis": x_axis}, runs),
                caption="Each layer read as a prediction with the model's own final norm and unembedding (logit lens, "
                        "nostalgebraist 2020): KL from the model's output distribution (nats, 0 at the last layer), "
                        "entropy of the lens (nats), and the share of positions whose top token is already the "
                        "output's. " + "; ".join(parts) + ".",
                notes=notes)


def lens_tokens(runs: Sequence[dict], top: int = 5) -> View:
    """The most frequent lens top-1 tokens of every layer (decoded text, with their count), run by run."""
    runs = [as_results(r) for r in runs]
    have = [r for r in runs if lens_why(r) is None]
    if not have:
        return not_applicable("layers_logit_lens_tokens", "Logit lens: most frequent top-1 tokens", runs,
                              "; ".join(dict.fromkeys(f"{r.run_name}: {lens_why(r)}" for r in runs)))
    rows = []
    for res in have:
        sec = res.raw["logit_lens"]
        for l, toks in zip(sec.get("layers", [r["layer"] for r in res.layers]), sec["top_tokens"]):
            rows.append({"model": res.model_label, "layer": int(l), "positions": int(sec["n_positions"]),
                         "top-1 tokens (count)": " · ".join(f"{t['text']!r} ({t['count']})" for t in toks[:top])})
    return View("layers_logit_lens_tokens", "Logit lens: most frequent top-1 tokens", None, pd.DataFrame(rows),
                view_manifest("lens_tokens", {"top": top}, runs),
                caption="Per layer, the tokens that the lens most often predicts first (decoded text, with the number "
                        "of sampled positions where each is the lens's top-1).")
