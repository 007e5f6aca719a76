"""Token windows planned for the extraction: the positions analysed, the bootstrap group of each document, the
batches' order, their padding, one padded batch. Numpy only.

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


def analysed_masks(windows, special_policy: str) -> list[np.ndarray]:
    """Positions analysed: all but the special ones (unless included); never a position that does
    not exist (`valid` of modality items, e.g. audio frames past the end of a clip, whatever the policy)."""
    if special_policy == "include":
        masks = [np.ones(len(w), dtype=bool) for w in windows.ids]
    else:
        masks = [~s for s in windows.special]
    valid = getattr(windows, "valid", None)
    return masks if valid is None else [m & v for m, v in zip(masks, valid)]


def document_groups(docs: np.ndarray, seed: int, n_groups: int) -> np.ndarray:
    """The bootstrap group of each document index in `docs`: every document, with all its windows, is dealt into one
    of `n_groups` groups (seeded with the run's seed), so that the bootstrap resamples whole documents. The
    extraction deals its windows with it (core.compute.extract), the CKA interval its sampled tokens
    (core.stats.geometry.sample_groups): Generator.integers draws in order, so a document's group does not depend on
    which other documents are asked (the first max(docs) + 1 draws are those made for all the run's documents)."""
    docs = np.asarray(docs, dtype=np.int64)
    if len(docs) == 0:
        return docs
    return np.random.default_rng([int(seed), 1]).integers(0, int(n_groups), size=int(docs.max()) + 1)[docs]


OPEN_DOCS = 64  # documents whose windows may be in flight at once (bounds the per-document sums)


def plan_batches(windows, batch_size: int) -> list[np.ndarray]:
    """The batches of window indices, in processing order.

    Documents cut into several windows come first, in blocks of `OPEN_DOCS` documents: the full
    windows of the block's documents, then their last (shortest) windows sorted by length; so at
    most `OPEN_DOCS` documents are open at once (their sums per document stay bounded, see
    `core.compute.extract`) and the short tails are batched together (little padding). Then the
    one-window documents, longest first. Stable order.
    """
    lengths = np.asarray([len(w) for w in windows.ids])
    doc = np.asarray(windows.doc)
    docs, inv, counts = np.unique(doc, return_inverse=True, return_counts=True)
    order: list[np.ndarray] = []
    multi = np.flatnonzero(counts > 1)
    by_doc = np.split(np.argsort(inv, kind="stable"), np.cumsum(counts)[:-1])  # windows of each document
    for lo in range(0, len(multi), OPEN_DOCS):
        body, tails = [], []
        for j in multi[lo:lo + OPEN_DOCS]:
            w = by_doc[j]
            w = w[np.argsort(-lengths[w], kind="stable")]
            body.append(w[:-1])
            tails.append(w[-1])
        tails = np.asarray(tails, dtype=np.int64)
        order += body + [tails[np.argsort(-lengths[tails], kind="stable")]]
    single = np.flatnonzero(counts[inv] == 1)
    order.append(single[np.argsort(-lengths[single], kind="stable")])
    flat = np.concatenate(order).astype(np.int64) if order else np.zeros(0, dtype=np.int64)
    return [flat[i:i + batch_size] for i in range(0, len(flat), batch_size)]


def padding_fraction(windows, batches: list[np.ndarray]) -> float:
    """Padded positions / all positions of `batches`."""
    lengths = np.asarray([len(w) for w in windows.ids])
    padded = sum(len(b) * lengths[b].max() for b in batches)
    return float(1 - lengths.sum() / padded) if padded else 0.0
