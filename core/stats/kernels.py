"""Anisotropy metrics: pure numpy kernels behind a small validated API.

Two families:

* **Streaming** metrics take float64 sums accumulated over the whole corpus for ONE layer
  (``u_t = x_t / ||x_t||``; ``sum_u`` is the sum of ``u_t`` over the analysed tokens). They are
  exact: ``mean_cosine`` is the mean cosine over all ordered pairs ``i != j``, obtained from
  ``||sum u||^2 = sum_{i,j} u_i . u_j`` in O(N d).
* **Sample** metrics take ``X`` of shape ``(K, d)``: K sampled token positions of one layer
  (layer 0 = embeddings). core.stats.registry composes them, sharing one decomposition per layer.

Public functions validate their inputs (plain ``ValueError`` with the shapes); the ``_kernels``
trust theirs. Nothing here imports torch or streamlit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "group_weights",
    "mean_cosine",
    "cross_sequence_cosine",
    "cosine_contribution",
    "top_contributions",
    "self_similarity",
    "self_similarity_per_id",
    "intra_sentence_similarity",
    "intra_sentence_sums",
    "mean_cosine_ci",
    "mean_cosine_replicates",
    "mean_cosine_diff_ci",
    "frequency_binned_cosine",
    "pearson_from_sums",
    "pc1_variance_ratio",
    "effective_rank",
    "isoscore",
    "partition_isotropy",
    "pairwise_cosine_histogram",
    "high_norm_share",
    "high_norm_split",
    "sample_mean_cosine",
    "centred_mean_cosine",
]


# --------------------------------------------------------------------------- validation


def _vector(a: Any, name: str, d: int | None = None) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (d,), got shape {a.shape}")
    if d is not None and a.shape[0] != d:
        raise ValueError(f"{name} must have shape ({d},), got {a.shape}")
    return a


def _matrix(a: Any, name: str, rows: int | None = None, cols: int | None = None) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if rows is not None and a.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows, got shape {a.shape}")
    if cols is not None and a.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns, got shape {a.shape}")
    return a


def as_count(n: Any, name: str = "n") -> int:
    if isinstance(n, (bool, np.bool_)) or not float(n).is_integer() or n < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {n!r}")
    return int(n)


def as_sample(X: Any, min_rows: int = 2) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] < 1:
        raise ValueError(f"X must be a 2-D (n_tokens, d_model) array, got shape {X.shape}")
    if X.shape[0] < min_rows:
        raise ValueError(f"X needs at least {min_rows} rows (tokens), got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError(f"X of shape {X.shape} contains NaN or inf")
    return X


# --------------------------------------------------------------------------- streaming


def _pair_mean(sq_norm: np.ndarray | float, n: np.ndarray | float, diag=None) -> np.ndarray:
    """(||S||^2 - diag) / (n (n - 1)) elementwise; nan where n < 2.

    ``diag = sum_t ||u_t||^2`` is n unless some hidden states are exactly zero: a zero vector has
    no direction, its ``u`` is 0 and its cosine with any token counts as 0 (DESIGN.md).
    """
    sq_norm = np.asarray(sq_norm, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    diag = n if diag is None else np.asarray(diag, dtype=np.float64)
    denom = n * (n - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (sq_norm - diag) / denom
    return np.where(n >= 2, out, np.nan)


def mean_cosine(sum_u: np.ndarray, n: int, sum_u_sq: float | None = None) -> float:
    """Mean cosine similarity over all ordered token pairs ``i != j`` (exact, streaming).

    The anisotropy measure of Ethayarajh (2019) and Godey et al. (2023, "Is Anisotropy
    Inherent to Transformers?"), computed exactly instead of on random pairs:
    ``(||sum_t u_t||^2 - n) / (n (n - 1))`` with ``u_t = x_t / ||x_t||``.

    Parameters
    ----------
    sum_u : ndarray of shape (d,)
        Sum of the unit-normalised hidden states of one layer.
    n : int
        Number of tokens summed.
    sum_u_sq : float, optional
        ``sum_t ||u_t||^2``: n, less the tokens whose hidden state is exactly zero (their cosine
        with any token counts as 0). Default n.

    Returns
    -------
    float
        Mean cosine in [-1/(n-1), 1]; nan when ``n < 2``.

    Examples
    --------
    >>> U = np.eye(3)                      # three orthogonal tokens
    >>> mean_cosine(U.sum(0), 3)
    0.0
    """
    s = _vector(sum_u, "sum_u")
    return float(_pair_mean(s @ s, as_count(n), sum_u_sq))


def cross_sequence_cosine(sum_u: np.ndarray, n: int, sum_seq_sq: float, sum_n_sq: float) -> float:
    """Mean cosine over pairs of tokens from *different documents* (different contexts).

    Removes the within-context similarity from ``mean_cosine``:
    ``(||S||^2 - sum_D ||S_D||^2) / (n^2 - sum_D n_D^2)``, ``S_D`` the sum of ``u`` over
    document ``D`` (all its windows: two windows of one document are not different contexts;
    cf. Ethayarajh 2019's random-word baseline). The same formula gives the mean over pairs from
    different sequences when the sums are taken per sequence.

    Parameters
    ----------
    sum_u : ndarray of shape (d,)
        Sum of ``u_t`` over all tokens.
    n : int
        Number of tokens.
    sum_seq_sq : float
        ``sum_D ||S_D||^2`` over documents.
    sum_n_sq : float
        ``sum_D n_D^2``.

    Returns
    -------
    float
        nan when there are no cross-sequence pairs (single sequence or ``n == 0``).
    """
    s = _vector(sum_u, "sum_u")
    n = as_count(n)
    denom = float(n) ** 2 - float(sum_n_sq)
    if denom <= 0:
        return math.nan
    return float((s @ s - float(sum_seq_sq)) / denom)


def cosine_contribution(sum_u: np.ndarray, sum_u_sq: np.ndarray, n: int) -> np.ndarray:
    """Per-dimension contribution to ``mean_cosine`` (Timkey & van Schijndel 2021).

    ``CC_d = (S_d^2 - Q_d) / (n (n - 1))`` with ``S = sum_t u_t`` and ``Q_d = sum_t u_{t,d}^2``;
    ``CC.sum() == mean_cosine(sum_u, n)`` exactly (since ``sum_d Q_d = n``). A "rogue"
    dimension is one whose ``CC_d`` carries most of the total.

    Parameters
    ----------
    sum_u, sum_u_sq : ndarray of shape (d,)
        Sums of ``u_t`` and of ``u_t ** 2`` (elementwise).
    n : int
        Number of tokens.

    Returns
    -------
    ndarray of shape (d,)
        All nan when ``n < 2``.
    """
    s = _vector(sum_u, "sum_u")
    q = _vector(sum_u_sq, "sum_u_sq", s.shape[0])
    n = as_count(n)
    if n < 2:
        return np.full(s.shape, np.nan)
    return (s * s - q) / (n * (n - 1.0))


def top_contributions(cc: np.ndarray, k: int = 10) -> dict:
    """The ``k`` dimensions with the largest cosine contribution and their shares.

    Dimensions are ordered by ``|cc|`` descending (a dimension that *lowers* the mean cosine a
    lot is reported too, with a negative share), the same order as the figure's bars.
    ``share_d = cc_d / sum(cc)``; ``top1_share`` / ``top3_share`` are the summed shares of the first
    one / three dimensions of that order. When the mean cosine is close to 0
    the shares are ill-conditioned (a small total divides them): they are still returned,
    finite, but can exceed 1 or be negative; read them together with the mean cosine. When
    ``sum(cc) == 0`` (or ``cc`` is not finite) the shares are nan.

    Parameters
    ----------
    cc : ndarray of shape (d,)
        Output of :func:`cosine_contribution`.
    k : int
        Number of dimensions to report (clipped to d).

    Returns
    -------
    dict
        ``dims`` (list[int]), ``cc`` (list[float]), ``share`` (list[float]),
        ``top1_share``, ``top3_share`` (float), ``total`` (float, = mean cosine).
    """
    cc = _vector(cc, "cc")
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    k = min(int(k), cc.shape[0])
    total = float(cc.sum())
    finite = bool(np.isfinite(cc).all())
    full = np.argsort(-np.abs(cc), kind="stable") if finite else np.arange(cc.shape[0])
    order = full[:k]
    denom = total if (finite and total != 0) else math.nan
    top = cc[order]
    ranked = cc[full]  # top1/top3 shares do not depend on k
    return {
        "dims": [int(i) for i in order],
        "cc": [float(v) for v in top],
        "share": [float(v / denom) for v in top],
        "top1_share": float(ranked[:1].sum() / denom),
        "top3_share": float(ranked[:3].sum() / denom),
        "total": total,
    }


def self_similarity_per_id(
    id_sum_u: np.ndarray, id_counts: np.ndarray, id_seq_sq: np.ndarray, id_seq_n_sq: np.ndarray
) -> np.ndarray:
    """Self-similarity of each token id over its occurrences in *different* sequences (Ethayarajh 2019).

    For a token id with ``c`` occurrences whose unit vectors sum to ``S``, and ``S_s``, ``c_s``
    the same per sequence, the mean cosine over pairs of occurrences from different sequences
    (different contexts) is ``(||S||^2 - sum_s ||S_s||^2) / (c^2 - sum_s c_s^2)``.

    Parameters
    ----------
    id_sum_u : ndarray of shape (M, d)
        Per-id sums of ``u_t``.
    id_counts : ndarray of shape (M,)
        Occurrences of each id.
    id_seq_sq : ndarray of shape (M,)
        Per id, ``sum_s ||S_s||^2`` over the sequences it occurs in.
    id_seq_n_sq : ndarray of shape (M,)
        Per id, ``sum_s c_s^2``.

    Returns
    -------
    ndarray of shape (M,)
        nan for an id that occurs in fewer than two sequences.

    Examples
    --------
    >>> S = np.array([[2.0, 0.0]])            # two occurrences of one id, both along e_1 ...
    >>> self_similarity_per_id(S, [2], [2.0], [2.0])   # ... in two different sequences
    array([1.])
    """
    S = _matrix(id_sum_u, "id_sum_u")
    c = _vector(id_counts, "id_counts", S.shape[0])
    q = _vector(id_seq_sq, "id_seq_sq", S.shape[0])
    c2 = _vector(id_seq_n_sq, "id_seq_n_sq", S.shape[0])
    denom = c * c - c2
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (np.einsum("md,md->m", S, S) - q) / denom
    return np.where(denom > 0, out, np.nan)


def self_similarity(
    id_sum_u: np.ndarray, id_counts: np.ndarray, id_seq_sq: np.ndarray, id_seq_n_sq: np.ndarray
) -> float:
    """Self-similarity (Ethayarajh 2019): the unweighted mean over the tracked token ids of
    :func:`self_similarity_per_id` (pairs of occurrences in different sequences).

    The extraction tracks the most frequent ids among those occurring in at least
    ``CONFIG.min_contexts`` distinct sequences (``core.base.config``).

    Returns
    -------
    float
        nan when no id has a pair of occurrences in different sequences.
    """
    per_id = self_similarity_per_id(id_sum_u, id_counts, id_seq_sq, id_seq_n_sq)
    keep = np.isfinite(per_id)
    return float(per_id[keep].mean()) if keep.any() else math.nan


def intra_sentence_sums(seq_sum_u, seq_sum_x, seq_n):
    """Kernel of :func:`intra_sentence_similarity`: (sum over sequences of the per-sequence value,
    number of sequences counted), from per-sequence sums of a batch.

    Written with operators only, so the same code runs on numpy arrays and on torch tensors (the
    extraction calls it on the device, batch by batch, and adds the two outputs up): a sequence
    counts when ``n_s ||S_s^x|| > 0``.
    """
    dot = (seq_sum_u * seq_sum_x).sum(-1)
    den = seq_n * ((seq_sum_x * seq_sum_x).sum(-1)) ** 0.5
    ok = den > 0
    vals = dot / (den + ~ok)  # den + 1 where the sequence does not count (its value is dropped)
    return (vals * ok).sum(), ok.sum()


def token_kurtosis_sums(x):
    """Kernel of :func:`mean_token_kurtosis`: (sum over tokens of kurt_t, number of tokens counted) of the
    hidden states x (..., w), one token per row of the last axis.

    kurt_t = m4 / m2^2 with m_k = mean_d (x_td - mean_d x_td)^k: Pearson's kurtosis of the token's w values
    across dimensions (Elhage et al. 2023): about 3 (3 (w - 1) / (w + 1)) for a Gaussian vector, and
    (w^2 - 3w + 3) / (w - 1), about w - 2, when one dimension holds all of it. A token whose values are all
    equal (a padded position, a zero or a constant state) has no kurtosis and is not counted. Operators only,
    as :func:`intra_sentence_sums`: the extraction runs it on torch tensors, chunk by chunk (core.stats.sums), and
    adds the two outputs up.
    """
    mu = x.mean(-1)
    c = x - mu[..., None]
    c = c * c
    m2 = c.mean(-1)
    c *= c
    m4 = c.mean(-1)
    ok = m2 > 1e-20 * (m2 + mu * mu)  # not 0 up to rounding (a constant state's centred values are ~1e-16 of it)
    vals = m4 / (m2 * m2 + ~ok)  # m2^2 + 1 where the token does not count (its value is dropped)
    return (vals * ok).sum(), ok.sum()


def mean_token_kurtosis(sum_kurtosis: float, n_counted: float) -> float:
    """Mean over tokens of the kurtosis of each token's values across dimensions (:func:`token_kurtosis_sums`);
    NaN when no token counts.

    >>> x = np.array([[1.0, -1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 4.0]])
    >>> mean_token_kurtosis(*token_kurtosis_sums(x))  # 1 (two values, equally often) and 7/3 (one dim holds it)
    1.6666666666666667
    """
    return float(sum_kurtosis / n_counted) if n_counted > 0 else math.nan


def intra_sentence_similarity(
    seq_sum_u: np.ndarray, seq_sum_x: np.ndarray, seq_n: np.ndarray
) -> float:
    """Intra-sentence similarity (Ethayarajh 2019) from per-sequence sums.

    Mean over sequences of ``mean_t cos(x_t, xbar_s)``, ``xbar_s`` the mean hidden state of
    sequence ``s``. Since ``cos(x_t, xbar) = u_t . xbar / ||xbar||``, the inner mean equals
    ``(S_s^u . S_s^x) / (n_s ||S_s^x||)``. The extraction streams the same computation
    (:func:`intra_sentence_sums`) batch by batch.

    Parameters
    ----------
    seq_sum_u : ndarray of shape (Nseq, d)
        Per-sequence sums of ``u_t``.
    seq_sum_x : ndarray of shape (Nseq, d)
        Per-sequence sums of ``x_t``.
    seq_n : ndarray of shape (Nseq,)
        Tokens per sequence; sequences with ``n_s == 0`` (or a zero mean vector) are skipped.

    Returns
    -------
    float
        nan when no sequence has tokens.

    Examples
    --------
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])  # one sequence of two orthogonal tokens
    >>> round(intra_sentence_similarity(X.sum(0, keepdims=True), X.sum(0, keepdims=True), np.array([2.0])), 4)
    0.7071
    """
    U = _matrix(seq_sum_u, "seq_sum_u")
    Xs = _matrix(seq_sum_x, "seq_sum_x", U.shape[0], U.shape[1])
    n = _vector(seq_n, "seq_n", U.shape[0])
    total, count = intra_sentence_sums(U, Xs, n)
    return float(total / count) if count else math.nan


def _replicate_mean_cosine(W: np.ndarray, S: np.ndarray, gn: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Kernel of :func:`mean_cosine_replicates`: the statistic of each row of group weights ``W`` (b, G).

    A replicate holds ``w_g`` copies of group g. Pairs of tokens from different groups weigh
    ``w_g w_h``; pairs within a group weigh ``w_g`` (pairs inside one copy; the copies of a group
    are not paired with each other, nor a token with itself). With ``s_g = ||S_g||^2``::

        (||sum_g w_g S_g||^2 - sum_g w_g^2 s_g + sum_g w_g (s_g - Q_g))
        / ((sum_g w_g n_g)^2 - sum_g w_g^2 n_g^2 + sum_g w_g (n_g^2 - n_g))

    nan where a replicate has no pair.
    """
    Sb = W @ S  # (b, d)
    W2 = W * W
    s = np.einsum("gd,gd->g", S, S)
    Nb = W @ gn
    num = np.einsum("bd,bd->b", Sb, Sb) - W2 @ s + W @ (s - q)
    denom = Nb * Nb - W2 @ (gn * gn) + W @ (gn * gn - gn)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, num / denom, np.nan)


def group_weights(rng: np.random.Generator, b: int, G: int) -> np.ndarray:
    """(b, G) bootstrap weights: row r counts how often each of G units is drawn in G uniform draws with
    replacement (multinomial(G, uniform), as counts of the draws: 5x faster than ``rng.multinomial``).
    The one resampling of groups of documents (mean cosine here, CKA in core.stats.geometry)."""
    draws = rng.integers(0, G, size=(b, G)) + G * np.arange(b)[:, None]
    return np.bincount(draws.ravel(), minlength=b * G).reshape(b, G).astype(np.float64)


def mean_cosine_replicates(
    group_sum_u: np.ndarray,
    group_n: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    group_u_sq: np.ndarray | None = None,
) -> np.ndarray:
    """The bootstrap replicates of ``mean_cosine`` behind :func:`mean_cosine_ci`.

    Empty groups are dropped; each replicate draws the G non-empty groups with replacement
    (multinomial weights ``w``, seeded). Its statistic is the mean cosine over the pairs a corpus
    of new groups would have: pairs across groups with weight ``w_g w_h``, pairs within a group
    with weight ``w_g`` (the copies of one group are not paired with each other: they are not
    different documents, and pairing them would count within-group pairs ``w_g^2`` times)::

        (||sum_g w_g S_g||^2 - sum_g w_g^2 s_g + sum_g w_g (s_g - Q_g))
        / ((sum_g w_g n_g)^2 - sum_g w_g^2 n_g^2 + sum_g w_g (n_g^2 - n_g))

    ``s_g = ||S_g||^2``, ``Q_g = sum_{t in g} ||u_t||^2``. With every ``w_g = 1`` it is exactly
    :func:`mean_cosine`.

    Returns
    -------
    ndarray of shape (n_boot,)
        Empty (shape (0,)) with fewer than two non-empty groups; nan for a replicate without pairs.
    """
    S = _matrix(group_sum_u, "group_sum_u")
    gn = _vector(group_n, "group_n", S.shape[0])
    q = gn if group_u_sq is None else _vector(group_u_sq, "group_u_sq", S.shape[0])
    n_boot = as_count(n_boot, "n_boot")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    keep = gn > 0  # empty groups are not resampling units
    if keep.sum() < 2:
        return np.zeros(0)
    S, gn, q = S[keep], gn[keep], q[keep]
    G = S.shape[0]
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, 4_000_000 // max(G, S.shape[1])))
    stats = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        b = min(start + chunk, n_boot) - start
        W = group_weights(rng, b, G)
        stop = start + b
        stats[start:stop] = _replicate_mean_cosine(W, S, gn, q)
    return stats


def mean_cosine_ci(
    group_sum_u: np.ndarray,
    group_n: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    group_u_sq: np.ndarray | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval for ``mean_cosine``, resampling groups of whole documents.

    Tokens of one document are dependent (its windows too), so the resampling unit is a group of
    documents (the extraction deals every document, with all its windows, into one of G groups).
    Each replicate draws the non-empty groups with replacement (:func:`mean_cosine_replicates`).
    A group drawn twice is two copies of the same documents, not two groups: its copies are not
    paired with each other (a token with its own copy has cosine 1, and the other cross-copy pairs
    are within-group pairs, the most similar ones), so within-group pairs weigh ``w_g`` and pairs
    across groups ``w_g w_h``, as in a corpus of ``sum_g w_g`` distinct groups.
    ``Q_g = sum_{t in g} ||u_t||^2`` (= n_g without zero hidden states). With all ``w_g = 1`` it is
    exactly ``mean_cosine`` (Efron & Tibshirani 1993; Davison & Hinkley 1997 for cluster resampling).

    Parameters
    ----------
    group_sum_u : ndarray of shape (G, d)
        Per-group sums of ``u_t``.
    group_n : ndarray of shape (G,)
        Tokens per group.
    n_boot : int
        Number of bootstrap replicates.
    seed : int
        Seed of the ``numpy.random.Generator``.
    level : float
        Coverage in (0, 1).
    group_u_sq : ndarray of shape (G,), optional
        ``Q_g``; default ``group_n``.

    Returns
    -------
    (low, high) : tuple of float
        (nan, nan) with fewer than two non-empty groups.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    stats = mean_cosine_replicates(group_sum_u, group_n, n_boot, seed, group_u_sq)
    if stats.size == 0 or np.isnan(stats).all():
        return (math.nan, math.nan)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(stats, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def mean_cosine_diff_ci(a_group_sum_u: np.ndarray, a_group_n: np.ndarray, b_group_sum_u: np.ndarray,
                        b_group_n: np.ndarray, n_boot: int = 1000, seed: int = 0,
                        level: float = 0.95, a_group_u_sq: np.ndarray | None = None,
                        b_group_u_sq: np.ndarray | None = None) -> tuple[float, float, float]:
    """Difference of two runs' ``mean_cosine`` (a - b) with a percentile bootstrap interval.

    The runs are resampled independently (two corpora, or two models whose token windows differ),
    each by whole groups with the replicates of :func:`mean_cosine_ci`; the interval is that of the
    differences of the replicates. ``a_group_u_sq``, ``b_group_u_sq``: each run's ``Q_g`` (default
    its ``group_n``; less where hidden states are zero).

    Returns
    -------
    (difference, low, high) : the point estimate from all tokens, and the interval (nan when a run
    has fewer than two groups).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.normal(size=(8, 4)) + 3.0; b = rng.normal(size=(8, 4))
    >>> d, lo, hi = mean_cosine_diff_ci(a, np.full(8, 5.0), b, np.full(8, 5.0), n_boot=200)
    >>> lo <= d <= hi
    True
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    A, B = _matrix(a_group_sum_u, "a_group_sum_u"), _matrix(b_group_sum_u, "b_group_sum_u")
    an, bn = _vector(a_group_n, "a_group_n", A.shape[0]), _vector(b_group_n, "b_group_n", B.shape[0])
    aq = an if a_group_u_sq is None else _vector(a_group_u_sq, "a_group_u_sq", A.shape[0])
    bq = bn if b_group_u_sq is None else _vector(b_group_u_sq, "b_group_u_sq", B.shape[0])
    sa, sb = A.sum(0), B.sum(0)
    d = float(_pair_mean(sa @ sa, an.sum(), aq.sum()) - _pair_mean(sb @ sb, bn.sum(), bq.sum()))
    ra = mean_cosine_replicates(A, an, n_boot, seed, aq)
    rb = mean_cosine_replicates(B, bn, n_boot, seed + 1, bq)
    if ra.size == 0 or rb.size == 0:
        return d, math.nan, math.nan
    diff = ra - rb
    if np.isnan(diff).all():
        return d, math.nan, math.nan
    alpha = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(diff, [alpha, 1.0 - alpha])
    return d, float(lo), float(hi)


def frequency_binned_cosine(bin_sum_u: np.ndarray, bin_n: np.ndarray, bin_u_sq: np.ndarray | None = None) -> np.ndarray:
    """Mean cosine among the tokens of each frequency bin.

    Same formula as :func:`mean_cosine`, row by row; useful to see whether anisotropy is
    driven by frequent tokens (Puccetti et al. 2022; Gao et al. 2019).

    Parameters
    ----------
    bin_sum_u : ndarray of shape (B, d)
    bin_n : ndarray of shape (B,)
    bin_u_sq : ndarray of shape (B,), optional
        ``sum_t ||u_t||^2`` per bin (default ``bin_n``; less where hidden states are zero).

    Returns
    -------
    ndarray of shape (B,)
        nan for bins with fewer than 2 tokens.
    """
    S = _matrix(bin_sum_u, "bin_sum_u")
    n = _vector(bin_n, "bin_n", S.shape[0])
    q = None if bin_u_sq is None else _vector(bin_u_sq, "bin_u_sq", S.shape[0])
    return _pair_mean(np.einsum("bd,bd->b", S, S), n, q)


def pearson_from_sums(
    n: int,
    sum_f: float,
    sum_f2: float,
    sum_a: np.ndarray,
    sum_a2: np.ndarray,
    sum_fa: np.ndarray,
) -> np.ndarray:
    """Pearson r between a per-token scalar ``f`` and each column ``a_d``, from streaming sums.

    Used for the frequency analysis of Puccetti et al. (2022): ``f = log frequency`` of the
    token, ``a_d = |x_{t,d}|``. Computed as
    ``(n Sfa - Sf Sa) / sqrt((n Sff - Sf^2) (n Saa - Sa^2))`` in float64; the variance terms
    are clipped at 0 against cancellation, and ``r`` is clipped to [-1, 1].

    Parameters
    ----------
    n : int
        Number of tokens.
    sum_f, sum_f2 : float
        ``sum f`` and ``sum f^2``.
    sum_a, sum_a2, sum_fa : ndarray of shape (d,)
        ``sum a``, ``sum a^2``, ``sum f a``.

    Returns
    -------
    ndarray of shape (d,)
        nan where either variance is 0 (or n < 2).
    """
    n = as_count(n)
    sa = _vector(sum_a, "sum_a")
    saa = _vector(sum_a2, "sum_a2", sa.shape[0])
    sfa = _vector(sum_fa, "sum_fa", sa.shape[0])
    sf, sff = float(sum_f), float(sum_f2)
    if n < 2:
        return np.full(sa.shape, np.nan)
    var_f = max(n * sff - sf * sf, 0.0)
    var_a = np.maximum(n * saa - sa * sa, 0.0)
    cov = n * sfa - sf * sa
    # relative tolerance: a "variance" at rounding level of its terms is a constant column
    tol_f = 1e-12 * n * sff
    tol_a = 1e-12 * n * saa
    denom = np.sqrt(var_f * var_a)
    ok = (var_f > tol_f) & (var_a > tol_a) & (denom > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(ok, cov / np.where(ok, denom, 1.0), np.nan)
    return np.clip(r, -1.0, 1.0)


# --------------------------------------------------------------------------- sample based


def _cov_eigvals(X: np.ndarray) -> np.ndarray:
    """Eigenvalues (descending, >= 0) of the centred covariance (ddof=1) of X (K, d)."""
    Xc = X - X.mean(axis=0)
    C = (Xc.T @ Xc) / (X.shape[0] - 1)
    lam = np.linalg.eigvalsh(C)[::-1]
    return np.clip(lam, 0.0, None)


def pc1_ratio_of_eigvals(lam: np.ndarray) -> float:
    tr = lam.sum()
    return float(lam[0] / tr) if tr > 0 else math.nan


def effective_rank_of_eigvals(lam: np.ndarray) -> float:
    """Roy & Vetterli on the singular values of the centred sample: sigma_i = sqrt((K - 1) lam_i)
    (the constant cancels in the normalisation). Eigenvalues at rounding level of the largest
    (below d eps lam_max, the usual rank tolerance) are 0: their square roots would not be."""
    if lam.size == 0:
        return math.nan
    sv = np.sqrt(np.where(lam > lam.max() * lam.size * np.finfo(np.float64).eps, lam, 0.0))
    tr = sv.sum()
    if tr <= 0:
        return math.nan
    p = sv / tr
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def isoscore_of_eigvals(lam: np.ndarray) -> float:
    """IsoScore from the variances of the PCA-reoriented points (= covariance eigenvalues)."""
    n = lam.shape[0]
    norm = np.linalg.norm(lam)
    if n < 2 or norm == 0:
        return math.nan
    sigma = lam * math.sqrt(n) / norm  # step 4: ||sigma|| = sqrt(n)
    delta = np.linalg.norm(sigma - 1.0) / math.sqrt(2.0 * (n - math.sqrt(n)))  # step 5
    k = (n - delta**2 * (n - math.sqrt(n))) ** 2 / n**2  # step 6
    return float((n * k - 1.0) / (n - 1.0))  # step 7


def partition_isotropy_unchecked(X: np.ndarray) -> float:
    """min Z / max Z over the eigenvectors c of W^T W, Z(c) = sum_t exp(c . w_t), in log space;
    W = X rescaled to unit mean norm; each eigenvector's sign fixed (largest |entry| positive)."""
    mean_norm = np.linalg.norm(X, axis=1).mean()
    if not mean_norm > 0:
        return math.nan
    W = X / mean_norm
    _, V = np.linalg.eigh(W.T @ W)  # (d, d), columns = eigenvectors
    V = V * np.sign(V[np.abs(V).argmax(axis=0), np.arange(V.shape[1])])  # deterministic sign
    logz = _logsumexp0(W @ V)  # (d,): log Z(c) for every eigenvector
    return float(np.exp(logz.min() - logz.max()))


def _logsumexp0(P: np.ndarray) -> np.ndarray:
    m = P.max(axis=0)
    return m + np.log(np.exp(P - m).sum(axis=0))


def pc1_variance_ratio(X: np.ndarray) -> float:
    """Share of the variance on the first principal component.

    Top eigenvalue over the trace of the centred covariance (cf. Ethayarajh 2019's "variance
    explained by the first principal component").

    Parameters
    ----------
    X : ndarray of shape (K, d)
        Sampled hidden states of one layer.

    Returns
    -------
    float
        In [1/d, 1]; nan when X has no variance.
    """
    return pc1_ratio_of_eigvals(_cov_eigvals(as_sample(X)))


def effective_rank(X: np.ndarray) -> float:
    """Effective rank of the centred sample (Roy & Vetterli 2007, "The effective rank: a measure
    of effective dimensionality").

    ``exp(H(p))``, ``H`` the Shannon entropy (nats) of ``p = sigma / sum(sigma)``, ``sigma`` the
    singular values of the centred sample ``X - mean(X)`` (as the paper defines it; not of the
    covariance eigenvalues, which are the squared singular values and give a smaller number).
    d for isotropic data, 1 when all variance lies on one direction.

    Examples
    --------
    >>> X = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])  # singular values 2 sqrt 2, sqrt 2
    >>> round(effective_rank(X), 4)  # exp(H(2/3, 1/3))
    1.8899

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
        In [1, d]; nan when X has no variance.
    """
    return effective_rank_of_eigvals(_cov_eigvals(as_sample(X)))


def isoscore(X: np.ndarray) -> float:
    """IsoScore (Rudman, Gillman, Rayne & Eickhoff 2022, "IsoScore: Measuring the Uniformity
    of Embedding Space Utilization").

    Algorithm of the paper / reference implementation (bcbi-edu/p_eickhoff_isoscore,
    ``IsoScore.py``): reorient the points on their principal axes, take the variance vector
    ``sigma`` of the new coordinates (the covariance eigenvalues), rescale it so that
    ``||sigma|| = sqrt(n)`` (n = number of dimensions), isotropy defect
    ``delta = ||sigma - 1|| / sqrt(2 (n - sqrt(n)))``, ``k = (n - delta^2 (n - sqrt(n)))^2 / n^2``
    and ``IsoScore = (n k - 1) / (n - 1)``. 1 for isotropic data, 0 when one dimension holds
    all the variance.

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
        In [0, 1]; nan when X has no variance or d < 2.
    """
    return isoscore_of_eigvals(_cov_eigvals(as_sample(X)))


def partition_isotropy(X: np.ndarray) -> float:
    """Partition-function isotropy ``I(W)`` (Mu & Viswanath 2018, "All-but-the-Top").

    ``I(W) = min_c Z(c) / max_c Z(c)`` with ``Z(c) = sum_t exp(c . w_t)``, approximated, as in
    the paper, over the eigenvectors ``c`` of the *uncentred* ``W^T W``, one sign each (the paper's
    Z(c); the sign LAPACK returns is arbitrary, so it is fixed: the largest-magnitude entry of
    each eigenvector is positive). Two choices of ours, both documented in docs/metrics.md:
    ``W`` is ``X`` rescaled to unit mean norm (``w_t = x_t / mean_s ||x_s||``), because for hidden
    states with norms in the hundreds ``exp(c . x)`` makes any anisotropy collapse the value to
    0 (the paper's word vectors have norms near 1); and the sign convention above. Computed in
    log space.

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
        In (0, 1]; close to 1 for isotropic data, toward 0 when there is a dominant common
        direction; nan when every row is zero.
    """
    return partition_isotropy_unchecked(as_sample(X))


def _unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows normalised to unit length; a zero row stays zero (no direction: its cosine with any row
    counts as 0, as in the streaming statistics)."""
    norms = np.linalg.norm(X, axis=1)
    return X / np.where(norms > 0, norms, 1.0)[:, None]


def sample_mean_cosine(X: np.ndarray) -> float:
    """Exact mean cosine over all ordered pairs ``i != j`` of the sample rows.

    Same estimator as :func:`mean_cosine`, applied to the sample (a zero row has cosine 0 with
    every row, as in the streaming statistics).

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
    """
    U = _unit_rows(as_sample(X))
    s = U.sum(axis=0)
    return float(_pair_mean(s @ s, U.shape[0], (U * U).sum()))


def centred_mean_cosine(X: np.ndarray) -> float:
    """Mean cosine over all ordered pairs ``i != j`` of the sample rows after the sample's mean vector
    is subtracted: ``sample_mean_cosine(X - mean(X))``.

    A component shared by every token (a constant vector added to all of them: a token-type
    embedding, a bias, a norm offset) moves the mean, not the spread around it, so it raises the
    mean cosine and leaves this one unchanged. An isotropic cloud plus any shared vector gives about
    ``-1 / (K - 1)`` (the centred rows sum to zero), so near 0. A zero centred row (a token equal to
    the mean) has cosine 0 with every row, as in :func:`sample_mean_cosine`.

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
    """
    Y = as_sample(X)
    return sample_mean_cosine(Y - Y.mean(axis=0))


def pairwise_cosine_histogram(
    X: np.ndarray, bins: int = 100, max_pairs: int | None = None, seed: int = 0
) -> dict:
    """Histogram of cos(x_i, x_j) over all unordered pairs ``i < j`` of the sample.

    Computed blockwise (memory O(block x K)), so K = 5000 (12.5M pairs) is fine. When
    ``max_pairs`` is set and ``K (K - 1) / 2`` exceeds it, a random subset of ``m`` rows is
    kept (the largest m with ``m (m - 1) / 2 <= max_pairs``) and all its pairs counted; the
    pairs are still pairs of distinct random tokens. Zero rows are dropped.

    Parameters
    ----------
    X : ndarray of shape (K, d)
    bins : int
        Number of equal bins on [-1, 1].
    max_pairs : int, optional
    seed : int
        Seed for the row subset (only used with ``max_pairs``).

    Returns
    -------
    dict
        ``edges`` (ndarray (bins + 1,)), ``counts`` (ndarray (bins,) int64), ``n_pairs`` (int).
    """
    if isinstance(bins, bool) or int(bins) != bins or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    bins = int(bins)
    U = _unit_rows(as_sample(X))
    if max_pairs is not None:
        max_pairs = as_count(max_pairs, "max_pairs")
        K = U.shape[0]
        if K * (K - 1) // 2 > max_pairs:
            m = int((1 + math.isqrt(1 + 8 * max_pairs)) // 2)
            while m * (m - 1) // 2 > max_pairs:
                m -= 1
            rows = np.sort(np.random.default_rng(seed).choice(K, size=m, replace=False))
            U = U[rows]
    K = U.shape[0]
    edges = np.linspace(-1.0, 1.0, bins + 1)
    counts = np.zeros(bins, dtype=np.int64)
    block = max(1, 4_000_000 // max(K, 1))
    for s in range(0, K - 1, block):
        e = min(s + block, K - 1)
        G = U[s:e] @ U[s:].T  # (b, K - s); row r is token s + r, column c is token s + c
        vals = G[np.arange(K - s)[None, :] > np.arange(e - s)[:, None]]
        idx = np.floor((vals + 1.0) * (bins / 2.0)).astype(np.int64)
        counts += np.bincount(np.clip(idx, 0, bins - 1), minlength=bins)
    return {"edges": edges, "counts": counts, "n_pairs": int(K * (K - 1) // 2)}


# --------------------------------------------------------------------------- high-norm tokens


HIGH_NORM_SEPARATION = 0.8  # Otsu's effectiveness sigma_B^2 / sigma_T^2 that marks two groups (unimodal: 2/pi)


def _otsu_split(v: np.ndarray) -> tuple[int, float]:
    """Otsu's split of the sorted 1-D `v`: (how many values lie above it, its effectiveness).

    The split between two distinct consecutive values that maximises the between-class variance
    w0 w1 (mu0 - mu1)^2 (the first such split on ties); its effectiveness is that variance over the
    total variance (Otsu 1979: 1 for two point masses, 2/pi for a normal, 3/4 for a uniform).
    (0, 0.0) when all values are equal.
    """
    n = v.shape[0]
    k = np.arange(1, n)  # lower class v[:k], upper class v[k:]
    c = np.cumsum(v)[:-1]
    mu0, mu1 = c / k, (c[-1] + v[-1] - c) / (n - k)
    between = (k / n) * (1 - k / n) * (mu0 - mu1) ** 2
    between[v[1:] <= v[:-1]] = -1.0  # no threshold between equal values
    best = int(np.argmax(between))
    if between[best] < 0:
        return 0, 0.0
    return int(n - k[best]), float(between[best] / v.var())


def high_norm_share(X: np.ndarray) -> float:
    """Share of high-norm tokens: rows above Otsu's threshold on the log-norms, where the log-norms
    form two groups.

    Otsu (1979) on the log of the row norms, without a histogram: of all splits of the sorted
    log-norms between two distinct values, the one that maximises the between-class variance
    ``w0 w1 (mu0 - mu1)^2``. Otsu always splits, and splits a unimodal cloud near its middle, so
    the tokens above the threshold count only when the split separates two groups: its
    effectiveness (between-class over total variance) is at least ``HIGH_NORM_SEPARATION`` = 0.8
    (a normal gives 2/pi = 0.64, a uniform 0.75, two well separated groups close to 1); else the
    share is 0 (Darcet et al. 2024 find such a separate group of tokens, with norms far above the
    rest, in vision Transformers). A zero row has no log-norm and counts as low.

    Examples
    --------
    >>> X = np.ones((10, 2)); X[:2] *= 100.0  # two tokens with 100 times the norm of the others
    >>> high_norm_share(X)
    0.2
    >>> high_norm_share(np.random.default_rng(0).normal(size=(500, 16)))  # one group: none
    0.0

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
        In [0, 1): 0 when fewer than two rows have distinct non-zero norms, or when the log-norms
        form one group.
    """
    X = as_sample(X)
    norms = np.linalg.norm(X, axis=1)
    logn = np.sort(np.log(norms[norms > 0]))
    if logn.shape[0] < 2:
        return 0.0
    above, separation = _otsu_split(logn)
    return above / X.shape[0] if separation >= HIGH_NORM_SEPARATION else 0.0


def high_norm_split(X: np.ndarray) -> dict:
    """Where `high_norm_share` splits: ``threshold`` (the norm at Otsu's split of the log-norms, the
    geometric mean of the two norms around it; None when there is no split), ``separation`` (its
    effectiveness), ``share`` (as `high_norm_share`) and ``mask`` (K,) of the high-norm rows (all False
    when the log-norms form one group).

    >>> X = np.ones((10, 2)); X[:2] *= 100.0
    >>> s = high_norm_split(X); round(s["threshold"], 3), s["share"], s["mask"][:3].tolist()
    (14.142, 0.2, [True, True, False])
    """
    X = as_sample(X)
    norms = np.linalg.norm(X, axis=1)
    pos = norms[norms > 0]
    logn = np.sort(np.log(pos))
    none = {"threshold": None, "separation": 0.0, "share": 0.0, "mask": np.zeros(X.shape[0], dtype=bool)}
    if logn.shape[0] < 2:
        return none
    above, separation = _otsu_split(logn)
    if above == 0:
        return {**none, "separation": separation}
    tau = float(np.exp((logn[-above - 1] + logn[-above]) / 2))
    if separation < HIGH_NORM_SEPARATION:
        return {**none, "threshold": tau, "separation": separation}
    mask = norms > tau
    return {"threshold": tau, "separation": separation, "share": above / X.shape[0], "mask": mask}
