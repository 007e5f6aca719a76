"""One hidden dimension drilled into: Puccetti et al. (2022)'s evidence for a single dim d.

- the tokens of the sample where |x_d| is largest, in their context;
- |x_d| against the log corpus frequency of the token, over the sample, at one layer;
- the signed Pearson r of log frequency vs |x_d| per layer over all analysed tokens, with a
  Fisher-z 95% interval, against the distribution of r over the other (non-outlier) dimensions
  of the same layer (the random-dimension baseline) and the empirical p-value it gives.

Pure numpy/pandas on arrays the pipeline already returns (the sample and `analysis.frequency_r`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

Z95 = 1.959963984540054  # two-sided 95% normal quantile
TOP_TOKENS = 20
BASELINE_Q = (0.05, 0.95)  # the band of the other dims' r drawn as the baseline


def fisher_ci(r: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Fisher-z interval of a Pearson r over n pairs (assumes independent pairs: a nominal interval
    when tokens repeat). NaN when r is undefined or n < 4.

    >>> lo, hi = fisher_ci(0.5, 103)
    >>> round(lo, 3), round(hi, 3)
    (0.339, 0.632)
    """
    if not np.isfinite(r) or n < 4:
        return float("nan"), float("nan")
    rc = min(max(float(r), -0.999999), 0.999999)
    a, s = math.atanh(rc), z / math.sqrt(n - 3)
    return math.tanh(a - s), math.tanh(a + s)


def r_profile(R: np.ndarray, dim: int, outlier_dims, n_tokens: int) -> pd.DataFrame:
    """Per layer: the signed r of `dim`, its 95% interval, and the baseline of the other dims.

    Parameters
    ----------
    R : (L+1, d) Pearson r of log frequency vs |x_d| per layer and dim (NaN where undefined).
    dim : the dimension drilled into.
    outlier_dims : dims left out of the baseline (the persistent outliers), besides `dim` itself.
    n_tokens : the number of analysed tokens each r is computed over.

    Returns
    -------
    One row per layer: ``layer, r, ci_low, ci_high, baseline_low, baseline_high`` (the 5th and
    95th percentiles of the other dims' r), ``baseline_mean_abs_r``, ``n_baseline`` and
    ``p_baseline``, the share of baseline dims whose |r| reaches |r_dim| (with the +1 correction).
    """
    R = np.asarray(R, dtype=float)
    L1, d = R.shape
    if not 0 <= int(dim) < d:
        raise ValueError(f"dim must be in [0, {d}), got {dim}")
    keep = np.ones(d, dtype=bool)
    keep[[int(i) for i in outlier_dims if 0 <= int(i) < d]] = False
    keep[int(dim)] = False
    rows = []
    for l in range(L1):
        r = float(R[l, dim])
        base = R[l, keep]
        base = base[np.isfinite(base)]
        lo, hi = fisher_ci(r, n_tokens)
        if base.size and np.isfinite(r):
            p = float((1 + np.sum(np.abs(base) >= abs(r))) / (1 + base.size))
            q = np.quantile(base, BASELINE_Q)
        else:
            p, q = float("nan"), (float("nan"), float("nan"))
        rows.append({"layer": l, "dim": int(dim), "r": r, "ci_low": lo, "ci_high": hi,
                     "baseline_low": float(q[0]), "baseline_high": float(q[1]),
                     "baseline_mean_abs_r": float(np.abs(base).mean()) if base.size else float("nan"),
                     "n_baseline": int(base.size), "p_baseline": p, "n_tokens": int(n_tokens)})
    return pd.DataFrame(rows)


def top_tokens(x_d: np.ndarray, table: pd.DataFrame, top: int = TOP_TOKENS) -> pd.DataFrame:
    """The `top` sampled tokens with the largest |x_d|, with their context and corpus frequency.

    x_d : (K,) the dim's values over the token sample at one layer; table: the sample table
    (token, context, document, position, frequency), row k describing sample token k.
    """
    x = np.asarray(x_d, dtype=float)
    order = np.argsort(-np.abs(x), kind="stable")[:top]
    t = table.iloc[order]
    return pd.DataFrame({"rank": np.arange(1, len(order) + 1), "token": t["token"].to_numpy(),
                         "context": t["context"].to_numpy(), "x_d": x[order],
                         "corpus_frequency": t["frequency"].to_numpy(), "document": t["document"].to_numpy(),
                         "position": t["position"].to_numpy()})


def frequency_scatter(x_d: np.ndarray, table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, float]:
    """(log corpus frequency, |x_d|, Pearson r) over the token sample at one layer."""
    x = np.abs(np.asarray(x_d, dtype=float))
    f = np.log(np.maximum(table["frequency"].to_numpy(dtype=float)[: len(x)], 1.0))
    ok = np.isfinite(x) & np.isfinite(f)
    r = float(np.corrcoef(f[ok], x[ok])[0, 1]) if ok.sum() > 2 and x[ok].std() > 0 and f[ok].std() > 0 \
        else float("nan")
    return f, x, r


def r_summary(R: np.ndarray, dims, baseline_dims) -> pd.DataFrame:
    """One row per dim: its signed r at every layer summarised (mean, most negative, most positive,
    the layer of the largest |r|) and in how many layers |r| beats the baseline's mean |r|."""
    R = np.asarray(R, dtype=float)
    base = np.nanmean(np.abs(R[:, list(baseline_dims)]), axis=1) if len(baseline_dims) else np.full(len(R), np.nan)
    rows = []
    for d in dims:
        r = R[:, int(d)]
        ok = np.isfinite(r)
        if not ok.any():
            rows.append({"dim": int(d), "mean_r": float("nan"), "min_r": float("nan"), "max_r": float("nan"),
                         "peak_layer": -1, "r_at_peak": float("nan"), "layers_above_baseline": 0})
            continue
        peak = int(np.nanargmax(np.abs(np.where(ok, r, np.nan))))
        rows.append({"dim": int(d), "mean_r": float(np.nanmean(r)), "min_r": float(np.nanmin(r)),
                     "max_r": float(np.nanmax(r)), "peak_layer": peak, "r_at_peak": float(r[peak]),
                     "layers_above_baseline": int(np.sum(np.abs(r[ok]) > base[ok]))})
    return pd.DataFrame(rows)
