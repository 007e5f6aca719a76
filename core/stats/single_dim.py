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


# --------------------------------------------------------------------------- position confound
# In a causal LM without a BOS token the first position of every window carries huge activations
# in a few dims (attention sinks). The first tokens of documents are also a particular set of
# types, so a plain frequency link can be a first-position effect: these separate the two.
FIRST, SPECIAL, LATER = 0, 1, 2
POSITION_CLASSES = ("position 0", "special token", "later position")
TOP_POSITION_WARN = 0.5  # warn when more than this share of a dim's top tokens sit at one position


def position_classes(position: np.ndarray, special: np.ndarray | None = None) -> np.ndarray:
    """(K,) class of each sampled token: FIRST (position 0 of its window), SPECIAL (a special
    token elsewhere) or LATER."""
    pos = np.asarray(position)
    cls = np.full(pos.shape, LATER, dtype=np.int64)
    if special is not None:
        cls[np.asarray(special, dtype=bool)] = SPECIAL
    cls[pos == 0] = FIRST
    return cls


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 3 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def partial_r(f: np.ndarray, x: np.ndarray, groups: np.ndarray) -> float:
    """Pearson r of f and x given a categorical covariate: both residualised on the group means
    (the least-squares fit on group dummies), then correlated. NaN when undefined.

    >>> g = np.array([0, 0, 1, 1]); round(partial_r(np.array([1., 2, 11, 12]), np.array([1., 2, 5, 6]), g), 3)
    1.0
    """
    f, x, g = (np.asarray(v, dtype=float) for v in (f, x, groups))
    ok = np.isfinite(f) & np.isfinite(x)
    f, x, g = f[ok], x[ok], np.unique(g[ok], return_inverse=True)[1]
    if f.size < 3:
        return float("nan")
    n = np.bincount(g).astype(float)
    rf = f - (np.bincount(g, f) / n)[g]
    rx = x - (np.bincount(g, x) / n)[g]
    return _pearson(rf, rx)


def position_link(x_d: np.ndarray, log_f: np.ndarray, classes: np.ndarray) -> dict:
    """The frequency link of one dim on the sample three ways: plain r, r over later positions only
    (position 0 and special tokens excluded), and the partial r given the position class."""
    x = np.abs(np.asarray(x_d, dtype=float))
    f = np.asarray(log_f, dtype=float)[: len(x)]
    c = np.asarray(classes)[: len(x)]
    later = c == LATER
    return {"r": _pearson(f, x), "r_later": _pearson(f[later], x[later]), "partial_r": partial_r(f, x, c)}


def top_position_share(x_d: np.ndarray, position: np.ndarray, top: int = TOP_TOKENS) -> tuple[int, float]:
    """(the most common position among the `top` tokens with the largest |x_d|, its share of them)."""
    x = np.abs(np.asarray(x_d, dtype=float))
    order = np.argsort(-x, kind="stable")[:top]
    if not order.size:
        return -1, float("nan")
    vals, cnt = np.unique(np.asarray(position)[order], return_counts=True)
    j = int(np.argmax(cnt))
    return int(vals[j]), float(cnt[j] / order.size)


def position_report(sample: np.ndarray, log_f: np.ndarray, position: np.ndarray, special: np.ndarray | None,
                    dims, top: int = TOP_TOKENS) -> dict:
    """results.json's frequency["position"]: for every outlier dim and layer, the sample's plain r,
    r over later positions, partial r given the position class, and where its top tokens sit.

    sample : (L+1, K, d) the token sample's hidden states; log_f, position, special: (K,) per sampled token.
    """
    cls = position_classes(position, special)
    layers = []
    for l in range(sample.shape[0]):
        links = [position_link(sample[l, :, int(d)], log_f, cls) for d in dims]
        tops = [top_position_share(sample[l, :, int(d)], position, top) for d in dims]
        layers.append({"layer": l, "r_sample": [k["r"] for k in links], "r_later": [k["r_later"] for k in links],
                       "partial_r": [k["partial_r"] for k in links],
                       "top_position": [p for p, _ in tops], "top_position_share": [s for _, s in tops]})
    counts = np.bincount(cls, minlength=3)
    return {"outlier_dims": [int(d) for d in dims], "sample_size": int(len(cls)),
            "n_position0": int(counts[FIRST]), "n_special": int(counts[SPECIAL]), "top": int(top),
            "variable": "on the token sample: r_sample = Pearson r of log corpus frequency and |x_d|; r_later = the "
                        "same over later positions only (position 0 of each window and special tokens excluded); "
                        "partial_r = r given the position class (position 0 / special / later; both variables "
                        "residualised on the class means); top_position = the most common position among the "
                        f"{top} tokens with the largest |x_d|, top_position_share its share",
            "layers": layers}


def position_dominated(report: dict, threshold: float = TOP_POSITION_WARN) -> dict[int, int]:
    """{dim: its most common top-token position} for the dims whose top tokens sit mostly (> threshold)
    at one position in at least half of the layers."""
    layers = report.get("layers") or []
    out = {}
    for j, d in enumerate(report.get("outlier_dims") or []):
        hits = [l["top_position"][j] for l in layers if _finite_gt(l["top_position_share"][j], threshold)]
        if layers and len(hits) * 2 >= len(layers):
            vals, cnt = np.unique(hits, return_counts=True)
            out[int(d)] = int(vals[np.argmax(cnt)])
    return out


def _finite_gt(v, t) -> bool:
    return v is not None and np.isfinite(v) and v > t
