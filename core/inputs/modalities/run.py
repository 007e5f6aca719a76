"""The extraction of an image or audio run: corpus -> items -> the shared streaming extraction.

Called by `core.compute.pipeline` for runs whose corpus is not text. Everything after the forward pass
(statistics, sample, cache, results) is the text path's own code.
"""

from __future__ import annotations

import numpy as np

from ...base.errors import InputError
from . import MODAL_CORPORA, corpus_modality, load_clips, load_pictures
from .items import audio_items, image_items, position_meta


def check_pairing(model_modality: str, corpus_ident: str, model_label: str) -> str:
    """The corpus's modality, after checking that the model reads it."""
    cm = corpus_modality(corpus_ident)
    if cm != model_modality:
        raise InputError(f"{model_label} reads {model_modality}, but the corpus {corpus_ident!r} holds {cm}: "
                         f"pick a {model_modality} corpus (python -m core corpora lists them).")
    return cm


def load_payloads(modality: str, ident: str, cache_dir=None) -> list:
    """Pictures or clips of a corpus (before any model loads, so a bad corpus fails fast)."""
    got = load_pictures(ident) if modality == "image" else load_clips(ident, cache_dir)
    if not got:
        raise InputError(f"Corpus {ident!r} is empty.")
    return got


def build_items(modality: str, payloads: list, adapter, model, max_tokens: int, seed: int):
    if modality == "image":
        positions, prefix, grid = adapter.layout(model)
        unit = "cell" if hasattr(adapter, "channels") else "patch"  # a CNN's grid cells are not patches
        return image_items(payloads, positions, prefix, grid, max_tokens, seed, unit)
    return audio_items(payloads, max_tokens, seed)


def sample_metadata(items, arrays: dict) -> tuple[dict, dict]:
    """(extra arrays, meta) describing each sampled position: image + patch, or clip + time."""

    pm = position_meta(items, arrays["sample_window"], arrays["sample_position"])
    extra = {}
    if items.modality == "image":
        extra["sample_patch_row"] = np.asarray(pm["row"], dtype=np.int64)
        extra["sample_patch_col"] = np.asarray(pm["col"], dtype=np.int64)
        labels = ["CLS" if r < 0 else f"{items.unit} ({r},{c})" for r, c in zip(pm["row"], pm["col"])]
    else:
        extra["sample_time_s"] = np.asarray(pm["time_s"], dtype=np.float64)
        labels = [f"{t:.2f} s" for t in pm["time_s"]]
    return extra, {"sample_tokens": labels, "sample_context": pm["text"],
                   "sample_item": [items.names[int(w)] for w in arrays["sample_window"]]}


def corpus_manifest(ident: str, sha: str, items, modality: str) -> dict:
    from pathlib import Path

    entry = MODAL_CORPORA.get(ident)
    return {"id": ident if entry else Path(ident).name, "sha256": sha, "text_column": None, "modality": modality,
            "synthetic": bool(entry and entry.synthetic), "n_documents": items.n_documents,
            "n_windows": len(items.ids), "n_items": len(items.ids)}
