"""Outlier dimensions: activation outliers, norm-parameter outliers, frequency (numpy rules).

After Puccetti, Rogers, Drozd & Dell'Orletta 2022, "Outlier Dimensions that Disrupt
Transformers Are Driven by Frequency" (3-sigma rule on LayerNorm weights/biases, persistent
when flagged in more than 3 layers; correlation of |h_d| with log token frequency; LM loss
when the outlier dimensions are zeroed), with the activation rule of the design
(m_d = mean_t |x_{t,d}| > mean(m) + 3 std(m)) and the "massive activations" view of
Sun, Chen, Kolter & Liu 2024.

Layer 0 is the embedding output, layers 1..L the block outputs (``hidden_states`` order);
block b (0-based) produces hidden layer b + 1.

Numpy only: these rules work on statistics already extracted (cheap, cache-friendly). What
touches a model (finding its norms, reading their parameters, zeroing dims, the LM-loss
ablation) is in core/compute/ablation.py.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from ..base.config import CONFIG

# --------------------------------------------------------------------------- numpy: activations


def _as_2d(a: Any, name: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_layers, d_model); got shape {arr.shape}")
    return arr


def sigma_rule(v: np.ndarray) -> tuple[float, float]:
    """The 3-sigma rule's reference for one vector: (mean, population std) over its finite entries.

    A value x is an outlier when ``x - mean > sigma * std`` (one-sided, activations) or
    ``|x - mean| > sigma * std`` (two-sided, norm parameters), sigma = ``CONFIG.outlier_sigma``.
    With n values, the largest possible deviation is
    ``sqrt(n - 1)`` std, so the rule cannot fire for n <= 10 at sigma 3.

    >>> sigma_rule(np.array([1.0, 1.0, 4.0, 2.0]))
    (2.0, 1.224744871391589)
    """
    v = np.asarray(v, dtype=np.float64)
    finite = v[np.isfinite(v)]
    if finite.size < 2:
        return float("nan"), float("nan")
    return float(finite.mean()), float(finite.std())


def sigma_threshold(v: np.ndarray, sigma: float | None = None) -> float:
    """mean + sigma std of `v` (see `sigma_rule`): the line the activation rule draws."""
    mu, sd = sigma_rule(v)
    return mu + (CONFIG.outlier_sigma if sigma is None else sigma) * sd


def _sigma_flags(v: np.ndarray, sigma: float | None = None, two_sided: bool = False) -> list[int]:
    """Indices of v more than `sigma` std above its mean (or away from it, if two_sided)."""
    sigma = CONFIG.outlier_sigma if sigma is None else sigma
    v = np.asarray(v, dtype=np.float64)
    mu, sd = sigma_rule(v)
    if not sd > 0:  # a constant vector (e.g. a freshly initialised LayerNorm) has no outliers
        return []
    dev = np.abs(v - mu) if two_sided else v - mu
    return [int(i) for i in np.flatnonzero(np.isfinite(v) & (dev > sigma * sd))]


def activation_outliers(mean_abs: np.ndarray) -> list[list[int]]:
    """Per layer, the dims whose mean |activation| is an outlier (3-sigma rule).

    Parameters
    ----------
    mean_abs : (L, d) array, m_{l,d} = mean_t |x_{t,d}| at layer l (layer 0 = embeddings).

    Returns
    -------
    One sorted list of dims per layer: d with m_d > mean(m) + 3 std(m), mean and (population)
    std taken over the d dimensions of that layer.

    With 20 dims at 1.0 and one at 9.0 the rule fires (for d <= 10 it never can, since no value
    lies more than sqrt(d - 1) std from the mean):

    >>> m = np.ones((2, 20)); m[:, 3] = 9.0
    >>> activation_outliers(m)
    [[3], [3]]
    """
    m = _as_2d(mean_abs, "mean_abs")
    return [_sigma_flags(row) for row in m]


def persistent_dims(flags: list[list[int]], min_layers: int) -> list[int]:
    """Dims flagged in at least `min_layers` of the per-layer lists, sorted."""
    counts: dict[int, int] = {}
    for layer in flags:
        for d in set(layer):
            counts[int(d)] = counts.get(int(d), 0) + 1
    return sorted(d for d, c in counts.items() if c >= min_layers)


def persistent_activation_outliers(flags: list[list[int]]) -> list[int]:
    """Activation outliers flagged in >= 25% of the layers (ceil(0.25 L), at least 1)."""
    return persistent_dims(flags, max(1, math.ceil(CONFIG.activation_persistence * len(flags))))


def run_outlier_dims(outliers: dict) -> list[int]:
    """The outlier dims of a run: the persistent dims of either definition (activation rule and
    norm-parameter rule), sorted. `outliers` is ``results["outliers"]`` (see `analysis`).

    >>> run_outlier_dims({"activation": {"persistent": [7, 2]}, "norm_parameters": {"persistent": [2, 9]}})
    [2, 7, 9]
    >>> run_outlier_dims({"activation": {"persistent": [5]}, "norm_parameters": {"error": "none"}})
    [5]
    """
    norm = outliers.get("norm_parameters") or {}
    return sorted(set(outliers["activation"]["persistent"]) | set(norm.get("persistent") or []))


def massive_activations(
    max_abs: np.ndarray, median_abs: np.ndarray | None = None, top: int | None = None
) -> list[dict]:
    """Per layer, the dims with the largest max |x_d| and how far above typical they are.

    After Sun et al. 2024, "Massive Activations in Large Language Models".

    Parameters
    ----------
    max_abs : (L, d) array, max_t |x_{t,d}| at layer l.
    median_abs : (L,) array, the median of |x| over the sample's values at layer l. When None,
        the median of the layer's row of `max_abs` stands in for it.
    top : how many dims to report per layer.

    Returns
    -------
    One dict per layer: ``layer``, ``dims`` (top dims, largest first), ``values`` (their max
    |x|), ``median_abs``, ``ratio`` = max |x| / median_abs (inf when the median is 0).
    """
    mx = _as_2d(max_abs, "max_abs")
    n_layers, d = mx.shape
    if median_abs is None:
        med = np.median(mx, axis=1)
    else:
        med = np.asarray(median_abs, dtype=np.float64).reshape(-1)
        if med.shape != (n_layers,):
            raise ValueError(f"median_abs must have shape ({n_layers},); got {med.shape}")
    k = max(0, min(int(CONFIG.massive_top if top is None else top), d))
    out = []
    for layer, row in enumerate(mx):
        order = np.argsort(-row, kind="stable")[:k]
        peak = float(row.max()) if d else float("nan")
        m = float(med[layer])
        ratio = peak / m if m > 0 else float("inf")
        out.append(
            {
                "layer": layer,
                "dims": [int(i) for i in order],
                "values": [float(row[i]) for i in order],
                "median_abs": m,
                "ratio": ratio,
            }
        )
    return out


# ---------------------------------------------------------------- numpy: norm-parameter rule


def norm_param_outliers(weights: np.ndarray, biases: np.ndarray | None = None) -> dict:
    """Puccetti et al.'s outlier dimensions from the norm parameters of each block.

    Parameters
    ----------
    weights : (B, d) array, the norm weight (gain) vector of each block.
    biases : (B, d) array or None (RMSNorm has no bias).

    Returns
    -------
    ``{"weight": [[dims] per block], "bias": [[dims] per block] or None,
    "union": [[dims] per block], "persistent": [dims]}``: a dim is flagged in a block when its
    weight (bias) lies more than 3 std from that vector's mean, in either direction; it is
    persistent when flagged (in the union) in more than 3 blocks.
    """
    w = _as_2d(weights, "weights")
    w_flags = [_sigma_flags(row, two_sided=True) for row in w]
    b_flags = None
    if biases is not None:
        b = _as_2d(biases, "biases")
        if b.shape != w.shape:
            raise ValueError(f"biases shape {b.shape} != weights shape {w.shape}")
        b_flags = [_sigma_flags(row, two_sided=True) for row in b]
    union = [
        sorted(set(wf) | set(b_flags[i] if b_flags is not None else ()))
        for i, wf in enumerate(w_flags)
    ]
    return {
        "weight": w_flags,
        "bias": b_flags,
        "union": union,
        "persistent": persistent_dims(union, CONFIG.norm_persistence_blocks + 1),
    }


def agreement(
    act_flags: list[list[int]], norm_flags: list[list[int]], layer_offset: int = 1
) -> list[dict]:
    """Per block b, overlap of activation outliers at hidden layer b + offset and norm outliers.

    offset 1 pairs block b with its output (post-norm models, BERT); a pre-norm model's input
    norm reads hidden layer b (offset 0; `norm_parameters` returns the right one).

    Returns one dict per block with a matching layer: ``block``, ``layer``, ``activation``,
    ``norm``, ``intersection`` (sorted dims), ``jaccard`` = |A & N| / |A | N| (None when both
    sets are empty: no outliers on either side is no evidence of agreement).
    """
    out = []
    for b, nf in enumerate(norm_flags):
        layer = b + layer_offset
        if not 0 <= layer < len(act_flags):
            continue
        a, n = set(act_flags[layer]), set(nf)
        inter, uni = a & n, a | n
        out.append(
            {
                "block": b,
                "layer": layer,
                "activation": sorted(a),
                "norm": sorted(n),
                "intersection": sorted(inter),
                "jaccard": len(inter) / len(uni) if uni else None,
            }
        )
    return out


def frequency_correlation(
    r: np.ndarray, outlier_dims: list[int], n_random: int | None = None, seed: int = 0
) -> dict:
    """Correlation of |x_d| with log token frequency: outlier dims vs random other dims.

    Parameters
    ----------
    r : (L, d) array, per layer the Pearson r between log frequency and |x_{t,d}| for every
        dim (NaN where undefined, e.g. a constant dim).
    outlier_dims : the dims to report.
    n_random : how many random non-outlier dims form the baseline (fewer if fewer exist).
    seed : the draw's seed; the same random dims serve every layer.

    Returns
    -------
    ``{"outlier_dims", "random_dims", "layers": [{"layer", "outlier_r" (aligned with
    outlier_dims), "random_r", "baseline" (mean |r| of the random dims, NaN ignored)}]}``.
    """
    rr = _as_2d(r, "r")
    d = rr.shape[1]
    dims = check_dims(outlier_dims, d, allow_empty=True)
    pool = np.setdiff1d(np.arange(d), dims)
    rng = np.random.default_rng(seed)
    k = min(int(CONFIG.frequency_random_dims if n_random is None else n_random), pool.size)
    rand = sorted(int(i) for i in rng.choice(pool, size=k, replace=False)) if k > 0 else []
    layers = []
    for layer, row in enumerate(rr):
        rand_r = row[rand] if rand else np.array([])
        finite = rand_r[np.isfinite(rand_r)]
        layers.append(
            {
                "layer": layer,
                "outlier_r": [float(row[i]) for i in dims],
                "random_r": [float(v) for v in rand_r],
                "baseline": float(np.abs(finite).mean()) if finite.size else float("nan"),
            }
        )
    return {"outlier_dims": dims, "random_dims": rand, "layers": layers}


def check_dims(dims: Iterable[int], d: int, allow_empty: bool = False) -> list[int]:
    out = sorted({int(i) for i in dims})
    if not out and not allow_empty:
        raise ValueError("dims is empty: give at least one dimension")
    bad = [i for i in out if not 0 <= i < d]
    if bad:
        raise ValueError(f"dims {bad} out of range for d_model={d}")
    return out
