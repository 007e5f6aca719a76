"""The streaming sums of a run, declared once: name, shape, where it is made, how it reduces and merges.

Every array that `core.compute.extract` accumulates over the analysed tokens (or counts from their ids) is one
`Sum` in `SUMS`. What reads the declaration:

- the allocation of the device accumulators (`core.compute.extract`: `shape`, `fill`);
- the merge of two shards' arrays (`core.compute.extract.merge_stats`: `merge`);
- the torchrun reduction (`core.compute.ranks.Group.reduce`: `reduce`, via `reduce_op`);
- the synthetic layout of the view tests (tests/synthetic.py checks its arrays against `SUMS`);
- the exported key lists (`SUM_KEYS`, `MAX_KEYS`, `ARGMAX_KEYS`), which tests and the cache read.

Shapes are written in symbols (or fixed sizes, as ints): `L` the layers kept, `d` the width (the model's
hidden size; a CNN's widest stage), `G` the bootstrap groups (`CONFIG.bootstrap_groups`), `I` the tracked
self-similarity ids, `F` the frequency bins (`CONFIG.freq_bins`); `()` is one number for the run.

Most forward sums are made by the fused kernel `core.compute.extract._accumulate` (one pass shares x, u and |x|
between them). A new one gives `add`: a function of one chunk's `Tokens` that returns the chunk's
contribution at one layer, written with array operators and methods (`+ - * / ~ > .sum .mean [...]`) and
`Tokens.xp` (`where`, `stack`), so it runs on torch tensors in the extraction and on numpy arrays in tests
and the synthetic layout. A new streaming statistic is then its `Sum` here, its registry entry (core/stats/registry.py), its
kernel (core/stats/kernels.py) and its test. Numpy only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import kernels as M

__all__ = ["Sum", "Tokens", "SUMS", "BY_NAME", "SUM_KEYS", "MAX_KEYS", "ARGMAX_KEYS", "FORWARD", "COUNTS", "ADDED",
           "shape_of", "reduce_op", "merge", "check_layout"]

SOURCES = ("forward", "count", "final")
# sum: added; max: the larger; argmax: where the max of `of` sits (the side whose `of` is larger);
# order: a transient key of the extraction (each max's place in the plan's order), never leaves the device
MERGES = ("sum", "max", "argmax", "order")


@dataclass(frozen=True)
class Tokens:
    """One chunk of one layer's hidden states, as an `add` function reads it (torch on the device, numpy in tests).

    x: (..., d) float64, zero at every position that is not analysed; norm: (...,) ||x_t||; mask: (...,) bool,
    the analysed positions; width: the layer's real width (a CNN stage's channels; the rest of d is padding);
    xp: the array module of x (torch or numpy), for what operators do not say (`xp.where`, `xp.stack`).
    """

    x: Any
    norm: Any
    mask: Any
    width: int
    xp: Any = np


@dataclass(frozen=True)
class Sum:
    """One streaming array of a run.

    shape: its axes in symbols (see the module's doc); "L" first for a per-layer sum.
    source: "forward" (accumulated from the hidden states, on the device), "count" (from the token ids, no model:
    `core.compute.extract._counts`), "final" (made from forward arrays once the run ends: where each max sits).
    merge: "sum", "max", "argmax" (taken from the shard whose `of` is larger), "order" (transient).
    fill: the initial value of a forward accumulator.
    add: the contribution of one chunk at one layer (`Tokens` -> array of `shape` without "L"); None for the sums
    of the fused kernel.
    """

    name: str
    shape: tuple[str | int, ...]
    source: str = "forward"
    merge: str = "sum"
    doc: str = ""
    fill: float = 0.0
    of: str | None = None
    add: Callable[[Tokens], Any] | None = None

    def __post_init__(self):
        if self.source not in SOURCES or self.merge not in MERGES:
            raise ValueError(f"sum {self.name!r}: source {self.source!r} / merge {self.merge!r} unknown")
        if self.merge == "argmax" and self.of is None:
            raise ValueError(f"sum {self.name!r}: an argmax names the maximum it follows (of=...)")
        if self.add is not None and (self.source != "forward" or self.shape[:1] != ("L",)):
            raise ValueError(f"sum {self.name!r}: only a per-layer forward sum has an `add`")

    @property
    def transient(self) -> bool:
        """Made and used on the device only: not among the run's arrays."""
        return self.merge == "order" or (self.source == "forward" and self.merge == "argmax")


# ----------------------------------------------------------------------------- the declaration
SUMS: tuple[Sum, ...] = (
    # counts: from the analysed tokens' ids, no model (core.compute.extract._counts)
    Sum("n", (), "count", doc="analysed tokens"),
    Sum("n_seq", (), "count", doc="windows with at least one analysed token"),
    Sum("sum_doc_n_sq", (), "count", doc="sum over documents of (analysed tokens)^2"),
    Sum("group_n", ("G",), "count", doc="analysed tokens per bootstrap group"),
    Sum("sum_f", (), "count", doc="sum of log corpus frequency"),
    Sum("sum_f2", (), "count", doc="sum of (log corpus frequency)^2"),
    Sum("id_counts", ("I",), "count", doc="occurrences of each tracked id"),
    Sum("id_seq_n_sq", ("I",), "count", doc="per tracked id, sum over sequences of (occurrences in it)^2"),
    Sum("bin_n", ("F",), "count", doc="analysed tokens per frequency bin"),
    # forward: the fused kernel core.compute.extract._accumulate
    Sum("group_sum_u", ("L", "G", "d"), doc="sum of u = x / ||x|| per bootstrap group"),
    Sum("group_u_sq", ("L", "G"), doc="sum of ||u||^2 per bootstrap group (1 per token, 0 for a zero state)"),
    Sum("sum_u_sq", ("L", "d"), doc="sum of u_d^2"),
    Sum("sum_doc_sq", ("L",), doc="sum over documents of ||sum of u over the document||^2"),
    Sum("sum_norm", ("L",), doc="sum of ||x||"),
    Sum("sum_x", ("L", "d"), doc="sum of x"),
    Sum("sum_abs", ("L", "d"), doc="sum of |x_d|"),
    Sum("sum_abs2", ("L", "d"), doc="sum of x_d^2"),
    Sum("max_abs", ("L", "d"), merge="max", doc="max of |x_d|"),
    Sum("max_abs_at", ("L", "d"), merge="argmax", of="max_abs", fill=-1.0,
        doc="global analysed index of the token holding max_abs (-1: none)"),
    Sum("max_abs_key", ("L", "d"), merge="order", fill=float("inf"),
        doc="that token's place in the plan's order (ties go to the first)"),
    Sum("sum_f_abs", ("L", "d"), doc="sum of log frequency x |x_d|"),
    Sum("intra_sum", ("L",), doc="sum over sequences of mean_t cos(x_t, sequence mean)"),
    Sum("intra_n", ("L",), doc="sequences in intra_sum"),
    Sum("id_sum_u", ("L", "I", "d"), doc="sum of u per tracked id"),
    Sum("id_seq_sq", ("L", "I"), doc="per tracked id, sum over sequences of ||sum of its u in the sequence||^2"),
    Sum("bin_sum_u", ("L", "F", "d"), doc="sum of u per frequency bin"),
    Sum("bin_u_sq", ("L", "F"), doc="sum of ||u||^2 per frequency bin"),
    # forward, outside the fused kernel (an `add` each)
    Sum("sum_token_kurtosis", ("L", 2), add=lambda t: t.xp.stack(M.token_kurtosis_sums(t.x[..., :t.width])),
        doc="[sum over tokens of the kurtosis of x_t across dims, tokens with one] (metrics.token_kurtosis_sums)"),
    # final: where each max |x_d| sits (core.compute.extract._finalise), merged with the side holding the larger max
    Sum("max_abs_token_id", ("L", "d"), "final", merge="argmax", of="max_abs", doc="token id at max_abs"),
    Sum("max_abs_position", ("L", "d"), "final", merge="argmax", of="max_abs", doc="its position in its window"),
)
BY_NAME: dict[str, Sum] = {s.name: s for s in SUMS}
if len(BY_NAME) != len(SUMS):
    raise RuntimeError("two streaming sums share a name")

FORWARD: tuple[Sum, ...] = tuple(s for s in SUMS if s.source == "forward")
COUNTS: tuple[Sum, ...] = tuple(s for s in SUMS if s.source == "count")
ADDED: tuple[Sum, ...] = tuple(s for s in FORWARD if s.add is not None)  # those outside the fused kernel
# The run's arrays that merge by addition, by max, and by following a max (the order of SUMS).
SUM_KEYS: tuple[str, ...] = tuple(s.name for s in SUMS if s.merge == "sum")
MAX_KEYS: tuple[str, ...] = tuple(s.name for s in SUMS if s.merge == "max")
ARGMAX_KEYS: tuple[str, ...] = tuple(s.name for s in SUMS if s.merge == "argmax" and not s.transient)


def shape_of(s: Sum, dims: dict[str, int]) -> tuple[int, ...]:
    """The concrete shape of `s` for the sizes `dims` ({"L": ..., "d": ..., "G": ..., "I": ..., "F": ...})."""
    return tuple(int(dims[a]) if isinstance(a, str) else int(a) for a in s.shape)


def reduce_op(name: str) -> str:
    """How torchrun combines the ranks' accumulator `name`, "max" or "sum" (the sample, whose rows each come from
    one rank, and any array that is not a declared sum add up)."""
    s = BY_NAME.get(name)
    return "max" if s is not None and s.merge == "max" else "sum"


def merge(a: dict, b: dict) -> dict:
    """Two shards' arrays merged by the declaration (exact for sums and maxima). Arrays that are not declared
    sums (the sample, the plan's constants) are a's; an argmax pair is merged only when both sides hold it."""
    out = dict(a)
    for s in SUMS:
        if s.transient or s.name not in a or s.name not in b:
            continue
        if s.merge == "sum":
            out[s.name] = a[s.name] + b[s.name]
        elif s.merge == "max":
            out[s.name] = np.maximum(a[s.name], b[s.name])
    for s in SUMS:
        if s.merge == "argmax" and not s.transient and s.name in a and s.name in b:
            out[s.name] = np.where(b[s.of] > a[s.of], b[s.name], a[s.name])
    return out


def check_layout(arrays: dict, dims: dict[str, int], *, positions: bool = True) -> None:
    """Raise ValueError unless `arrays` holds every non-transient sum with its declared shape (the final argmax
    arrays only when `positions`)."""
    bad = []
    for s in SUMS:
        if s.transient or (s.source == "final" and not positions):
            continue
        if s.name not in arrays:
            bad.append(f"{s.name} missing")
        elif np.shape(arrays[s.name]) != shape_of(s, dims):
            bad.append(f"{s.name} {np.shape(arrays[s.name])} != {shape_of(s, dims)}")
    if bad:
        raise ValueError("arrays do not follow core.stats.sums.SUMS: " + "; ".join(bad))
