"""The evidence behind a claim's numbers (numpy only): intervals of a curve's level and the precision they justify.

A claim compares *levels*: the mean of a per-layer curve over the non-input layers 1..L (`claims.level`).
Its interval is a percentile bootstrap over groups of documents, the one of DESIGN.md's `mean_cosine_ci`,
with one set of group weights per replicate shared by every layer, so that a replicate's level is the mean
of that replicate's layers (layers of one run are not independent; averaging the layers' own bounds would
not be the interval of the mean).

- `level_interval` (exact mean cosine): the run's per-group sums (`group_sum_u`, `group_n`, `group_u_sq`).
- `centred_level_interval` (centred mean cosine, on the token sample): the sample's rows grouped by their
  document; the sample's mean vector is held fixed across replicates (it is the statistic's own centring).
- `fmt` / `decimals`: a value printed with as many decimals as its interval's half-width justifies.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np

from ...stats import kernels as M

BOOT_SEED = 35  # one seed for every layer: the same group weights in each (the level's replicates)


def _quantiles(reps: np.ndarray, level: float) -> tuple[float, float] | None:
    reps = reps[np.isfinite(reps)]
    if reps.size < 2:
        return None
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(reps, [a, 1.0 - a])
    return float(lo), float(hi)


def level_interval(
    group_sum_u: np.ndarray, group_n: np.ndarray, group_u_sq: np.ndarray | None = None, n_boot: int = 1000, level: float = 0.95
) -> tuple[float, float] | None:
    """Bootstrap interval of the mean over layers 1..L of `mean_cosine` (all layers when there is one).

    group_sum_u: (L+1, G, d) per-layer per-group sums of u; group_n: (G,); group_u_sq: (L+1, G) or None.
    None with fewer than two non-empty groups."""
    S = np.asarray(group_sum_u, dtype=float)
    layers = range(1, S.shape[0]) if S.shape[0] > 1 else range(S.shape[0])
    reps = []
    for layer in layers:
        q = None if group_u_sq is None else np.asarray(group_u_sq, dtype=float)[layer]
        r = M.mean_cosine_replicates(S[layer], group_n, n_boot=n_boot, seed=BOOT_SEED, group_u_sq=q)
        if r.size == 0:
            return None
        reps.append(r)
    return _quantiles(np.nanmean(np.stack(reps), axis=0), level)


def centred_group_sums(X: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group sums of the centred unit vectors of the sample X (K, d) (centred on the sample's mean),
    the group sizes and the per-group sums of their squared norms (0 for a row equal to the mean)."""
    X = np.asarray(X, dtype=float)
    Y = X - X.mean(axis=0)
    nrm = np.linalg.norm(Y, axis=1)
    U = Y / np.where(nrm > 0, nrm, 1.0)[:, None]
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    G = int(g.max()) + 1 if g.size else 0
    S = np.zeros((G, X.shape[1]))
    np.add.at(S, g, U)
    return S, np.bincount(g, minlength=G).astype(float), np.bincount(g, weights=(U * U).sum(1), minlength=G)


def centred_level_interval(
    samples: Sequence[np.ndarray], groups: np.ndarray, n_boot: int = 1000, level: float = 0.95
) -> tuple[float, float] | None:
    """Bootstrap interval of the mean over layers 1..L of `centred_mean_cosine`, resampling the sample's
    documents (`groups`: one id per sampled row, the same rows in every layer). None with fewer than two."""
    layers = range(1, len(samples)) if len(samples) > 1 else range(len(samples))
    reps = []
    for layer in layers:
        S, n, q = centred_group_sums(samples[layer], groups)
        r = M.mean_cosine_replicates(S, n, n_boot=n_boot, seed=BOOT_SEED, group_u_sq=q)
        if r.size == 0:
            return None
        reps.append(r)
    return _quantiles(np.nanmean(np.stack(reps), axis=0), level) if reps else None


def decimals(lo: float | None, hi: float | None, default: int = 2, most: int = 4) -> int:
    """Decimals that an interval [lo, hi] justifies: those of its half-width's first significant digit
    (half-width 0.04 -> 2, 0.004 -> 3), at least 1, at most `most`; `default` without an interval."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return default
    half = abs(hi - lo) / 2.0
    if half <= 0:
        return most
    return int(min(most, max(1, -math.floor(math.log10(half)))))


def fmt(value: float, ci: Sequence[float] | None = None, default: int = 2) -> str:
    """`value [lo, hi]` at the precision the interval justifies; `value` alone (default decimals) without one."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    if not ci or ci[0] is None or ci[1] is None:
        return f"{value:.{default}f}"
    k = decimals(ci[0], ci[1], default)
    return f"{value:.{k}f} [{ci[0]:.{k}f}, {ci[1]:.{k}f}]"


def disjoint(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    """Whether two intervals do not overlap (None when either is missing)."""
    if not a or not b or None in (a[0], a[1], b[0], b[1]):
        return None
    return a[1] < b[0] or b[1] < a[0]


def beyond(ci: Sequence[float] | None, threshold: float) -> bool | None:
    """Whether an interval lies wholly on one side of `threshold` (None without an interval)."""
    if not ci or ci[0] is None or ci[1] is None:
        return None
    return ci[0] > threshold or ci[1] < threshold


# ----------------------------------------------------------------------------- derived quantities of a curve
def curve_replicates(
    group_sum_u: np.ndarray, group_n: np.ndarray, group_u_sq: np.ndarray | None = None, n_boot: int = 1000
) -> np.ndarray | None:
    """(n_boot, L+1) bootstrap replicates of the per-layer `mean_cosine` curve, one set of group weights per
    replicate shared by every layer (`BOOT_SEED`): a function of the curve (its minimum, a difference of
    halves, a correlation with a published curve) applied to each row is that function's replicate.
    None with fewer than two non-empty groups."""
    S = np.asarray(group_sum_u, dtype=float)
    reps = []
    for layer in range(S.shape[0]):
        q = None if group_u_sq is None else np.asarray(group_u_sq, dtype=float)[layer]
        r = M.mean_cosine_replicates(S[layer], group_n, n_boot=n_boot, seed=BOOT_SEED, group_u_sq=q)
        if r.size == 0:
            return None
        reps.append(r)
    return np.stack(reps, axis=1)


def replicate_interval(reps: np.ndarray | None, fn, level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of `fn(row)` over the rows of a curve's replicates (None without them)."""
    if reps is None or len(reps) == 0:
        return None
    return _quantiles(np.asarray([fn(row) for row in np.asarray(reps)], dtype=float), level)


def _weighted_abs_r(x: np.ndarray, f: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(n_boot, D) Pearson r of |x_d| with f under each row of token weights W (n_boot, K); x (K, D)."""
    a = np.abs(x)
    n = W.sum(1, keepdims=True)
    mf, ma = (W @ f)[:, None] / n, (W @ a) / n
    cov = (W @ (a * f[:, None])) / n - mf * ma
    vf = (W @ (f * f))[:, None] / n - mf * mf
    va = (W @ (a * a)) / n - ma * ma
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.sqrt(np.maximum(vf, 0) * np.maximum(va, 0))


def frequency_above_replicates(
    sample: np.ndarray, log_freq: np.ndarray, groups: np.ndarray, outlier_dims: Sequence[int], random_dims: Sequence[int],
    n_boot: int = 1000,
) -> np.ndarray | None:
    """(n_boot, L+1) per replicate and layer, the mean |r| (|x_d| against log frequency, on the token sample) of
    the outlier dims minus that of the random dims: Puccetti et al.'s comparison, resampling the sample's
    documents (`groups`, one id per sampled row). None with fewer than two documents or no dims."""
    X = np.asarray(sample, dtype=float)
    f = np.asarray(log_freq, dtype=float)
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    G = int(g.max()) + 1 if g.size else 0
    o, z = [int(d) for d in outlier_dims], [int(d) for d in random_dims]
    if G < 2 or not o or not z:
        return None
    rng = np.random.default_rng(BOOT_SEED)
    W = rng.multinomial(G, np.full(G, 1.0 / G), size=n_boot).astype(float)[:, g]  # (n_boot, K): a token's doc's copies
    out = np.empty((n_boot, X.shape[0]))
    with warnings.catch_warnings():  # a constant dim's r is NaN, and a layer of them all NaN: left NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        for layer in range(X.shape[0]):
            r = np.abs(_weighted_abs_r(X[layer][:, o + z], f, W))
            out[:, layer] = np.nanmean(r[:, : len(o)], axis=1) - np.nanmean(r[:, len(o):], axis=1)
    return out
