"""The chain's sections that come from a run's own statistics (no model): where massive activations
sit and where high-norm tokens sit. Numpy only; `stats` is a pipeline.RunStats.

Layer 0 is the embedding output, layers 1..L the block outputs (hidden_states order).
"""

from __future__ import annotations

import math

import numpy as np

from ..base.config import CONFIG
from . import chain_rules as C
from . import kernels as M
from . import registry as S


def _where(stats, position: int) -> dict:
    """Where a position of an item sits, for images (patch grid) and audio (frame); {} for text."""
    lay = stats.meta.get("position_layout") or {}
    if lay.get("modality") == "image" and lay.get("grid"):
        p = int(position) - int(lay.get("n_prefix", 0))
        cols = int(lay["grid"][1])
        return {"patch_row": p // cols, "patch_col": p % cols} if p >= 0 else {"patch_row": None, "patch_col": None}
    if lay.get("modality") == "audio":
        return {"frame": int(position), "time_s": round(int(position) * float(lay.get("frame_seconds") or 0.02), 3)}
    return {}


def _token(stats, tid: int) -> tuple[str | None, bool]:
    """(token string, is special) of a token id of a text run; (None, False) elsewhere."""
    if tid < 0 or stats.manifest.get("modality", "text") != "text":
        return None, False
    return (stats.meta.get("max_abs_tokens") or {}).get(str(int(tid))), int(tid) in set(stats.meta.get("special_ids")
                                                                                         or [])


def _place(stats, tid: int, pos: int) -> dict:
    tok, special = _token(stats, tid)
    if stats.manifest.get("modality", "text") == "text":
        cls = C.position_class(pos, tok, special) if pos >= 0 else None
    else:  # an item's position 0 is its CLS (images) or its first frame (audio)
        cls = None if pos < 0 else (C.POSITION_CLASSES[0] if pos == 0 else C.POSITION_CLASSES[3])
    return {"position": int(pos), "token_id": int(tid) if stats.manifest.get("modality", "text") == "text" else None,
            "token": tok, "position_class": cls, **_where(stats, pos)}


def massive_section(stats, top: int | None = None, medians: np.ndarray | None = None) -> list[dict]:
    """Per layer: Sun et al.'s massive activations with where they sit.

    ``layer``, ``top`` (max |x_td| over all analysed tokens and dims), ``dim`` (its dim), ``median``
    (median |x| over the K x d values of the layer's token sample), ``ratio`` = top / median,
    ``position`` / ``token_id`` / ``token`` / ``position_class`` of the token holding `top` (position in
    its window; image runs: ``patch_row``/``patch_col``, audio: ``frame``/``time_s``),
    ``dims_above_100x`` / ``dims_above_1000x`` (dims whose max over all analysed tokens exceeds 100 /
    1000 x the median), ``values_above_100x`` / ``values_above_1000x`` (values of the token sample that
    do), and ``top_dims``: the `top` largest dims (default CONFIG.massive_top), each {dim, value,
    position, token_id, token, position_class, ...}. Where-fields are null for a run whose statistics
    predate them. `medians`: the per-layer medians when the caller has them (core.stats.assemble does).
    """
    run = S.Run(stats)
    a = stats.arrays
    k = int(CONFIG.massive_top if top is None else top)
    tid_all, pos_all = a.get("max_abs_token_id"), a.get("max_abs_position")
    out = []
    for l in range(stats.n_layers):
        w = int(run.widths[l])
        row = np.asarray(a["max_abs"][l, :w], dtype=np.float64)
        X = run.sample(l)
        med, above = C.abs_summary(X, None if medians is None else medians[l]) if X.size else (math.nan, None)
        entry = {"layer": int(stats.layer_ids[l]), **C.massive_layer(row, med)}
        if above is not None:
            entry.update({f"values_above_{f:g}x": n for f, n in above.items()})
        dims = []
        for d in np.argsort(-row, kind="stable")[:k]:
            got = {"dim": int(d), "value": float(row[d])}
            if tid_all is not None:
                got.update(_place(stats, int(tid_all[l, d]), int(pos_all[l, d])))
            dims.append(got)
        if dims:
            first = dims[0]
            entry.update({f: first.get(f) for f in ("position", "token_id", "token", "position_class", "patch_row",
                                                     "patch_col", "frame", "time_s") if f in first})
        entry["top_dims"] = dims
        out.append(entry)
    return out


def high_norm_section(stats) -> list[dict]:
    """Per layer: Otsu's split of the sample's log-norms (`metrics.high_norm_split`) and where the
    high-norm tokens sit.

    ``layer``, ``threshold`` (norm; null without a split), ``separation``, ``share`` (= the
    registry's high_norm_share), ``n`` (high-norm tokens of the sample), ``K``, and ``where``: text:
    counts by position class; images: ``patch_grid`` (rows x cols counts over the patch grid) and
    ``cls`` (count at CLS); audio: ``frames`` ({frame index: count}, the 20 most frequent).
    """
    run = S.Run(stats)
    a = stats.arrays
    modality = stats.manifest.get("modality", "text")
    lay = stats.meta.get("position_layout") or {}
    pos = np.asarray(a.get("sample_position", np.zeros(0, dtype=np.int64)))
    tok_ids = np.asarray(a.get("sample_token_id", np.zeros(0, dtype=np.int64)))
    tokens = stats.meta.get("sample_tokens") or [None] * len(pos)
    special = np.asarray(stats.meta.get("sample_special") or np.zeros(len(pos), dtype=bool), dtype=bool)
    out = []
    for l in range(stats.n_layers):
        sp = M.high_norm_split(run.sample(l))
        mask = np.asarray(sp.pop("mask"))
        idx = np.flatnonzero(mask)
        where: dict = {}
        if modality == "text":
            counts = {c: 0 for c in C.POSITION_CLASSES}
            for i in idx:
                counts[C.position_class(int(pos[i]), tokens[i], bool(special[i]) if len(special) else False)] += 1
            where["position_classes"] = counts
            where["token_ids"] = sorted({int(tok_ids[i]) for i in idx})[:20]
        elif modality == "image" and lay.get("grid"):
            rows, cols = (int(v) for v in lay["grid"])
            grid = np.zeros((rows, cols), dtype=np.int64)
            p = pos[idx] - int(lay.get("n_prefix", 0))
            for q in p[p >= 0]:
                grid[q // cols, q % cols] += 1
            where["patch_grid"] = grid.tolist()
            where["cls"] = int((p < 0).sum())
        else:
            f, c = np.unique(pos[idx], return_counts=True)
            order = np.argsort(-c, kind="stable")[:20]
            where["frames"] = {str(int(f[i])): int(c[i]) for i in order}
        out.append({"layer": int(stats.layer_ids[l]), **sp, "n": int(len(idx)), "K": int(len(mask)), "where": where})
    return out
