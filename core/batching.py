"""Batches of token windows: their order, their padding, one padded batch. Numpy only.

One function pads a batch (`pad_batch`) for the extraction, the ablation and the benchmarks.

    >>> ids, att = pad_batch([np.array([5, 6, 7]), np.array([8])], pad_id=0)
    >>> ids.tolist(), att.tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def pad_batch(seqs: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad `seqs` (1-D int arrays) to the longest: (input_ids, attention_mask), (B, T) int64."""
    T = max(len(s) for s in seqs)
    ids = np.full((len(seqs), T), pad_id, dtype=np.int64)
    att = np.zeros((len(seqs), T), dtype=np.int64)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = s
        att[r, :len(s)] = 1
    return ids, att


def plan_batches(windows, batch_size: int) -> list[np.ndarray]:
    """Windows sorted by length (longest first) cut into batches: little padding, stable order."""
    lengths = np.asarray([len(w) for w in windows.ids])
    order = np.argsort(-lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def padding_fraction(windows, batches: list[np.ndarray]) -> float:
    """Padded positions / all positions of `batches`."""
    lengths = np.asarray([len(w) for w in windows.ids])
    padded = sum(len(b) * lengths[b].max() for b in batches)
    return float(1 - lengths.sum() / padded) if padded else 0.0
