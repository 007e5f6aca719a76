"""The outlier chain's rules (issue 24), numpy only: where massive activations sit, super-weight
candidates, the LLM.int8 outlier rule, the sink rate, and the overlap of outlier sets.

- Massive activations (Sun et al. 2024): per layer, the largest max_t |x_{t,d}| against the median
  of |x| (over the K x d values of that layer's token sample), the token and position that carry it,
  and its position class (`position_class`).
- Super weights (Yu et al. 2024, arXiv 2411.07191): per block, the largest |input| and |output| channel
  of the MLP's output projection; a candidate is W[argmax out, argmax in] in a block where both spike
  against the median block (`super_weight_candidates`).
- Confirmation by ablation (Yu et al. define a super weight as the weight whose removal suppresses the
  massive activation): `dim_ratios` of the probe's hidden states with and without the weight, and
  `classify_candidate` ("confirmed", "amplifier", "eraser", "unconfirmed"); `onset`: the first hidden
  state where a dim is massive.
- LLM.int8 outlier features (Dettmers et al. 2022): |x| >= 6 on the inputs of the attention and MLP
  projections, in at least 25% of the layers and 6% of the positions (`int8_outliers`).
- Sink rate (Gu et al. 2025, "When Attention Sink Emerges"): alpha_1 = mean over the queries of the
  attention paid to the first token; Sink^eps = share of heads (all layers) with alpha_1 > eps = 0.3
  (`sink_rate`).

What touches a model (hooks, weights) is in core/studies/chain/.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Iterable

import numpy as np

__all__ = ["POSITION_CLASSES", "position_class", "is_delimiter", "count_above", "abs_values", "abs_median",
           "abs_summary", "massive_layer",
           "SPIKE_FACTOR", "super_weight_candidates", "weight_magnitude", "CONFIRM_SHARE", "EFFECT_SHARE",
           "dim_ratios", "classify_candidate", "onset", "INT8_THRESHOLD", "INT8_LAYER_SHARE",
           "INT8_POSITION_SHARE", "int8_outliers", "SINK_EPSILON", "alpha_first", "sink_rate", "set_overlap",
           "MASSIVE_FACTORS"]

POSITION_CLASSES = ("first position", "BOS/special", "delimiter/punctuation", "other")
MASSIVE_FACTORS = (100.0, 1000.0)  # "how many values exceed 100x and 1000x the median" (Sun et al. 2024)
SPIKE_FACTOR = 5.0  # a block's largest |input| (|output|) spikes when it is > 5x the median block's
INT8_THRESHOLD = 6.0  # Dettmers et al. 2022: magnitude >= 6
INT8_LAYER_SHARE = 0.25  # ... in >= 25% of the layers
INT8_POSITION_SHARE = 0.06  # ... at >= 6% of the positions
SINK_EPSILON = 0.3  # Gu et al. 2025's epsilon

_MARKERS = ("Ġ", "▁", "##", "Ċ", "ĉ", "</w>")  # BPE / SentencePiece / WordPiece word and newline markers


def is_delimiter(token: str | None) -> bool:
    """Whether a token string is a delimiter: after removing the tokenizers' word markers (Ġ, ▁, ##,
    the newline mark Ċ) and whitespace, nothing but punctuation or symbols is left, or nothing at all
    (a newline or a space token).

    >>> [is_delimiter(t) for t in ("Ġ.", ",", "Ċ", "Ġthe", "##s", "\\n")]
    [True, True, True, False, False, True]
    """
    if token is None:
        return False
    s = str(token)
    for m in _MARKERS:
        s = s.replace(m, "")
    s = "".join(s.split())
    return all(unicodedata.category(ch)[0] in "PS" for ch in s)


def position_class(position: int, token: str | None = None, special: bool = False) -> str:
    """The position class of a token (Sun et al. 2024 find massive activations at the first position,
    at BOS/special tokens and at delimiters): "first position" (position 0 of its window: it wins over
    the others), "BOS/special", "delimiter/punctuation" (`is_delimiter`), else "other".

    >>> position_class(0, "Hello"), position_class(5, "<s>", special=True), position_class(3, "Ġ."), position_class(3, "Ġcat")
    ('first position', 'BOS/special', 'delimiter/punctuation', 'other')
    """
    if int(position) == 0:
        return POSITION_CLASSES[0]
    if special:
        return POSITION_CLASSES[1]
    if is_delimiter(token):
        return POSITION_CLASSES[2]
    return POSITION_CLASSES[3]


def count_above(values: np.ndarray, median: float, factor: float) -> int:
    """How many of `values` (|x|, any shape) exceed `factor` x `median` (0 when the median is not positive).

    >>> count_above(np.array([1.0, 1.0, 150.0, 2000.0]), 1.0, 100.0)
    2
    """
    if not median > 0:
        return 0
    return int(np.count_nonzero(np.asarray(values) > np.float64(factor * median)))  # compared in float64


def abs_values(X: np.ndarray) -> np.ndarray:
    """|X| flattened, in float32 when that is exact (a stored token sample is float32; the statistics read it
    as float64): half the memory traffic for `abs_median` and `count_above`, the same numbers."""
    X = np.asarray(X)
    a = np.abs(X.ravel())
    if a.dtype == np.float32:
        return a
    a32 = a.astype(np.float32)
    return a32 if np.array_equal(a32, a) else a


def abs_median(a: np.ndarray) -> float:
    """The exact median of the non-negative values `a` (from `abs_values`), as np.median gives it.

    For float32 values a radix select: the bit patterns of non-negative floats sort as the floats, so a
    histogram of their top 16 bits finds the bin holding each middle value, and only that bin is partitioned
    (a third of np.median's time on a 5,000 x 576 sample).

    >>> a = abs_values(np.random.default_rng(0).normal(size=(400, 7)).astype(np.float32))
    >>> abs_median(a) == float(np.median(a.astype(np.float64)))
    True
    """
    n = a.size
    if n == 0:
        return math.nan
    if a.dtype != np.float32 or n < 4096:
        return float(np.median(a.astype(np.float64)))
    hi = a.view(np.uint32) >> 16
    cum = np.cumsum(np.bincount(hi, minlength=1 << 16))

    def kth(k: int) -> float:  # the k-th smallest (from 0)
        b = int(np.searchsorted(cum, k, side="right"))
        lo = int(cum[b - 1]) if b else 0
        return float(np.partition(a[hi == b], k - lo)[k - lo])

    k1, k2 = (n - 1) // 2, n // 2
    return kth(k1) if k1 == k2 else (kth(k1) + kth(k2)) / 2


def abs_summary(X: np.ndarray, median: float | None = None) -> tuple[float, dict[float, int]]:
    """The median of |X| over all its values and how many exceed each of MASSIVE_FACTORS x it, from one
    |X| buffer (`median`: when the caller has it)."""
    a = abs_values(X)
    med = abs_median(a) if median is None else float(median)
    return med, {f: count_above(a, med, f) for f in MASSIVE_FACTORS}


def massive_layer(max_abs: np.ndarray, median: float, sample_abs: np.ndarray | None = None) -> dict:
    """One layer's massive-activation summary: top-1 max |x_d| and its dim, the median, their ratio,
    how many dims have a max above 100x / 1000x the median (over all analysed tokens), and, when
    `sample_abs` (|x| of the layer's token sample, (K, d)) is given, how many of the sample's values do.

    >>> m = massive_layer(np.array([1.0, 900.0, 3.0]), 2.0, np.array([[1.0, 900.0, 3.0], [1.0, 1.0, 1.0]]))
    >>> m["top"], m["dim"], m["ratio"], m["dims_above_100x"], m["values_above_1000x"]
    (900.0, 1, 450.0, 1, 0)
    """
    row = np.asarray(max_abs, dtype=np.float64)
    dim = int(np.argmax(row)) if row.size else -1
    top = float(row[dim]) if row.size else math.nan
    med = float(median)
    out = {"top": top, "dim": dim, "median": med, "ratio": top / med if med > 0 else math.inf}
    for f in MASSIVE_FACTORS:
        out[f"dims_above_{f:g}x"] = count_above(row, med, f)
    if sample_abs is not None:
        for f in MASSIVE_FACTORS:
            out[f"values_above_{f:g}x"] = count_above(sample_abs, med, f)
    return out


# --------------------------------------------------------------------------- super weights
def super_weight_candidates(max_in: np.ndarray, max_out: np.ndarray, factor: float = SPIKE_FACTOR) -> list[dict]:
    """Blocks whose MLP output projection sees a spike at both its input and its output.

    Parameters
    ----------
    max_in : (B, d_in) per block, max over positions of |input channel c| of the output projection.
    max_out : (B, d_out) per block, max over positions of |output channel r|.
    factor : a block spikes when its largest value is more than `factor` times the median over blocks
        of the blocks' largest values (input and output each).

    Returns
    -------
    One dict per candidate block, in block order: ``block``, ``row`` (argmax output channel),
    ``col`` (argmax input channel), ``max_in``, ``max_out``, ``in_spike`` and ``out_spike`` (each the
    ratio to the median block). The weight itself is W[row, col] (W as nn.Linear stores it: out x in).

    >>> mi = np.ones((4, 8)); mi[1, 5] = 50.0
    >>> mo = np.ones((4, 6)); mo[1, 2] = 80.0
    >>> [(c["block"], c["row"], c["col"]) for c in super_weight_candidates(mi, mo)]
    [(1, 2, 5)]
    """
    mi, mo = np.asarray(max_in, dtype=np.float64), np.asarray(max_out, dtype=np.float64)
    if mi.ndim != 2 or mo.ndim != 2 or len(mi) != len(mo):
        raise ValueError(f"max_in and max_out must be (blocks, channels) with the same blocks; got {mi.shape}, {mo.shape}")
    if len(mi) == 0:
        return []
    top_in, top_out = mi.max(1), mo.max(1)
    med_in, med_out = float(np.median(top_in)), float(np.median(top_out))
    out = []
    for b in range(len(mi)):
        si = top_in[b] / med_in if med_in > 0 else math.inf
        so = top_out[b] / med_out if med_out > 0 else math.inf
        if si > factor and so > factor:
            out.append({"block": b, "row": int(np.argmax(mo[b])), "col": int(np.argmax(mi[b])),
                        "max_in": float(top_in[b]), "max_out": float(top_out[b]), "in_spike": float(si),
                        "out_spike": float(so)})
    return out


def weight_magnitude(W: np.ndarray, row: int, col: int) -> dict:
    """How W[row, col] stands against the other weights of its matrix: its value, |w| / median |W|,
    |w| / the largest |W| elsewhere, and its rank by |W| (1 = the largest).

    >>> W = np.ones((3, 4)); W[1, 2] = -40.0
    >>> weight_magnitude(W, 1, 2)
    {'value': -40.0, 'ratio_to_median': 40.0, 'ratio_to_max_other': 40.0, 'rank': 1}
    """
    A = np.abs(np.asarray(W, dtype=np.float64))
    w = float(W[row, col])
    others = A.copy()
    others[row, col] = -np.inf
    med = float(np.median(A))
    mx = float(others.max()) if A.size > 1 else math.nan
    return {"value": w, "ratio_to_median": abs(w) / med if med > 0 else math.inf,
            "ratio_to_max_other": abs(w) / mx if mx > 0 else math.inf, "rank": int(np.count_nonzero(A > abs(w))) + 1}


# --------------------------------------------------------------------------- confirmation by ablation
CONFIRM_SHARE = 0.5  # confirmed: zeroing the weight removes at least half of its dim's rise across its block
EFFECT_SHARE = 0.1  # amplifier / eraser: zeroing it moves its block's change of the dim by at least a tenth
CLASSES = ("confirmed", "amplifier", "eraser", "unconfirmed")


def dim_ratios(states: list[np.ndarray], dim: int) -> np.ndarray:
    """Per hidden state (a (T, d) array each; state i = the output of block i - 1, state 0 the block-0 input),
    max_t |h[t, dim]| / the median |h| over all its T x d values.

    >>> h = np.ones((2, 3)); h[1, 2] = -50.0
    >>> dim_ratios([h, 2 * h], 2).tolist()
    [50.0, 50.0]
    """
    out = []
    for h in states:
        a = np.abs(np.asarray(h, dtype=np.float64))
        med = float(np.median(a)) if a.size else math.nan
        out.append(float(a[:, int(dim)].max() / med) if med > 0 else math.inf)
    return np.asarray(out)


def classify_candidate(before: np.ndarray, after: np.ndarray, block: int, massive: float = 100.0,
                       confirm: float = CONFIRM_SHARE, effect: float = EFFECT_SHARE) -> dict:
    """What zeroing one weight of block `block` did to its dim, on one input (the probe).

    `before`, `after`: `dim_ratios` of the dim without and with the weight zeroed, per hidden state
    (block b reads state b and writes state b + 1; the last block's state is taken before any final
    norm). Returns ``class`` and the evidence: ``ratio_in`` (state b), ``ratio_out`` (state b + 1),
    ``ratio_out_zeroed``, ``peak_after`` / ``peak_after_zeroed`` (the largest ratio from state b + 1 on),
    and ``share``:
    - the block raises the dim to a massive value (ratio_out >= `massive` > ratio_in): share = the part of
      the rise that zeroing removes; "confirmed" (a super weight, Yu et al. 2024) when >= `confirm`,
      "amplifier" when >= `effect` (it adds to a massive value that does not depend on it), else
      "unconfirmed";
    - the dim is massive at the block's input and the ratio falls across it: share = the part of the fall
      that zeroing undoes; "eraser" when >= `effect`, else "unconfirmed";
    - otherwise (not massive around the block): "unconfirmed", share None.

    >>> classify_candidate(np.array([1.0, 2.0, 900.0, 800.0]), np.array([1.0, 2.0, 30.0, 25.0]), 1)["class"]
    'confirmed'
    >>> classify_candidate(np.array([1.0, 900.0, 50.0]), np.array([1.0, 900.0, 700.0]), 1)["class"]
    'eraser'
    """
    b = int(block)
    before, after = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    r_in, r_out, z_out = float(before[b]), float(before[b + 1]), float(after[b + 1])
    got = {"hidden_state_in": b, "hidden_state_out": b + 1, "ratio_in": r_in, "ratio_out": r_out,
           "ratio_out_zeroed": z_out, "peak_after": float(before[b + 1:].max()),
           "peak_after_zeroed": float(after[b + 1:].max()), "share": None, "change": None}
    if r_out >= massive and r_out > r_in:
        share = (r_out - z_out) / (r_out - r_in)
        cls = "confirmed" if share >= confirm else "amplifier" if share >= effect else "unconfirmed"
        got.update({"change": "rises", "share": float(share), "class": cls})
    elif r_in >= massive and r_out < r_in:
        share = (z_out - r_out) / (r_in - r_out)
        got.update({"change": "falls", "share": float(share), "class": "eraser" if share >= effect else "unconfirmed"})
    else:
        got["class"] = "unconfirmed"
    return got


def onset(ratios: np.ndarray, massive: float = 100.0) -> int | None:
    """The first hidden state whose ratio reaches `massive` (None when none does).

    >>> onset(np.array([3.0, 40.0, 318.0, 900.0]))
    2
    """
    r = np.asarray(ratios, dtype=np.float64)
    hit = np.flatnonzero(r >= massive)
    return int(hit[0]) if hit.size else None


# --------------------------------------------------------------------------- LLM.int8 outliers
def int8_outliers(counts: np.ndarray, n_positions: np.ndarray, threshold: float = INT8_THRESHOLD,
                  layer_share: float = INT8_LAYER_SHARE, position_share: float = INT8_POSITION_SHARE) -> dict:
    """Dettmers et al. 2022's outlier features from counts of large values.

    Parameters
    ----------
    counts : (L, d) per layer (block) and hidden dim, the positions at which |x_d| >= `threshold`
        on the input of a projection.
    n_positions : (L,) the positions counted per layer.

    Returns
    -------
    ``{"per_layer": [[dims] per layer], "dims": [dims], "share": (L, d) list}``: a dim is flagged in a
    layer when |x_d| >= threshold at >= `position_share` of its positions; it is an outlier feature
    when flagged in >= `layer_share` of the layers (ceil, at least 1).

    >>> c = np.zeros((8, 3)); c[:2, 1] = 10; c[0, 2] = 10
    >>> int8_outliers(c, np.full(8, 100))["dims"]
    [1]
    """
    c = np.asarray(counts, dtype=np.float64)
    n = np.asarray(n_positions, dtype=np.float64).reshape(-1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, c / np.maximum(n, 1), 0.0)
    flagged = share >= position_share
    need = max(1, math.ceil(layer_share * len(c)))
    dims = [int(d) for d in np.flatnonzero(flagged.sum(0) >= need)]
    return {"per_layer": [[int(d) for d in np.flatnonzero(f)] for f in flagged], "dims": dims,
            "share": share.tolist()}


# --------------------------------------------------------------------------- sink rate
def alpha_first(A: np.ndarray, n_real: np.ndarray | None = None) -> np.ndarray:
    """Gu et al.'s alpha_1 per window and head: the mean over queries i >= 0 (every real query) of
    A[i, 0], the attention paid to the first position.

    A: (B, H, T, T) attention probabilities (queries x keys); n_real: (B,) real positions of each
    window (the first n_real queries count; default T). Returns (B, H).

    >>> A = np.zeros((1, 1, 3, 3)); A[0, 0, :, 0] = [1.0, 0.5, 0.0]
    >>> alpha_first(A).round(3).tolist()
    [[0.5]]
    """
    A = np.asarray(A, dtype=np.float64)
    B, H, T, _ = A.shape
    n = np.full(B, T) if n_real is None else np.asarray(n_real)
    mask = (np.arange(T)[None, :] < n[:, None]).astype(np.float64)  # (B, T) real queries
    return np.einsum("bht,bt->bh", A[:, :, :, 0], mask) / np.maximum(n, 1)[:, None]


def sink_rate(alpha: np.ndarray, eps: float = SINK_EPSILON) -> dict:
    """Sink^eps (Gu et al. 2025): the share of heads of all layers whose alpha_1 exceeds eps.

    alpha: (L, H), alpha_1 per layer and head (mean over windows). Returns ``rate`` (all layers),
    ``per_layer`` (share of each layer's heads), ``epsilon``, ``n_heads``.

    >>> sink_rate(np.array([[0.9, 0.1], [0.4, 0.2]]))["rate"]
    0.5
    """
    a = np.asarray(alpha, dtype=np.float64)
    above = a > eps
    return {"epsilon": float(eps), "rate": float(above.mean()) if a.size else math.nan,
            "per_layer": above.mean(1).tolist() if a.size else [], "n_heads": int(a.size)}


# --------------------------------------------------------------------------- overlap
def set_overlap(sets: dict[str, Iterable[int]]) -> dict:
    """The overlap of named sets of dims: each set, every pairwise intersection and Jaccard index
    (None when both are empty), and the intersection of all.

    >>> o = set_overlap({"a": [1, 2], "b": [2, 3], "c": [2]})
    >>> o["all"], o["pairs"][0]["intersection"], o["pairs"][0]["jaccard"]
    ([2], [2], 0.3333333333333333)
    """
    named = {k: sorted({int(x) for x in v}) for k, v in sets.items()}
    keys = list(named)
    pairs = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            A, B = set(named[a]), set(named[b])
            pairs.append({"a": a, "b": b, "intersection": sorted(A & B),
                          "jaccard": len(A & B) / len(A | B) if A | B else None})
    allset = set.intersection(*(set(v) for v in named.values())) if named else set()
    return {"sets": named, "pairs": pairs, "all": sorted(allset)}
