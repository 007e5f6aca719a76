"""Anisotropy metrics: pure numpy kernels behind a small validated API.

Two families:

* **Streaming** metrics take float64 sums accumulated over the whole corpus for ONE layer
  (``u_t = x_t / ||x_t||``; ``sum_u`` is the sum of ``u_t`` over the analysed tokens). They are
  exact: ``mean_cosine`` is the mean cosine over all ordered pairs ``i != j``, obtained from
  ``||sum u||^2 = sum_{i,j} u_i . u_j`` in O(N d).
* **Sample** metrics take ``X`` of shape ``(K, d)``: K sampled token positions of one layer
  (layer 0 = embeddings). ``spectral_metrics`` computes them all with shared decompositions.

Public functions validate their inputs (plain ``ValueError`` with the shapes); the ``_kernels``
trust theirs. Nothing here imports torch or streamlit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
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
    "sample_mean_cosine",
    "spectral_metrics",
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


def _count(n: Any, name: str = "n") -> int:
    if isinstance(n, (bool, np.bool_)) or not float(n).is_integer() or n < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {n!r}")
    return int(n)


def _sample(X: Any, min_rows: int = 2) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] < 1:
        raise ValueError(f"X must be a 2-D (n_tokens, d_model) array, got shape {X.shape}")
    if X.shape[0] < min_rows:
        raise ValueError(f"X needs at least {min_rows} rows (tokens), got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError(f"X of shape {X.shape} contains NaN or inf")
    return X


# --------------------------------------------------------------------------- streaming


def _pair_mean(sq_norm: np.ndarray | float, n: np.ndarray | float) -> np.ndarray:
    """(||S||^2 - n) / (n (n - 1)) elementwise; nan where n < 2."""
    sq_norm = np.asarray(sq_norm, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    denom = n * (n - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (sq_norm - n) / denom
    return np.where(n >= 2, out, np.nan)


def mean_cosine(sum_u: np.ndarray, n: int) -> float:
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
    return float(_pair_mean(s @ s, _count(n)))


def cross_sequence_cosine(sum_u: np.ndarray, n: int, sum_seq_sq: float, sum_n_sq: float) -> float:
    """Mean cosine over pairs of tokens from *different* sequences.

    Removes the within-sequence (context) similarity from ``mean_cosine``:
    ``(||S||^2 - sum_s ||S_s||^2) / (n^2 - sum_s n_s^2)``, ``S_s`` the sum of ``u`` over
    sequence ``s`` (cf. Ethayarajh 2019's random-word baseline).

    Parameters
    ----------
    sum_u : ndarray of shape (d,)
        Sum of ``u_t`` over all tokens.
    n : int
        Number of tokens.
    sum_seq_sq : float
        ``sum_s ||S_s||^2``.
    sum_n_sq : float
        ``sum_s n_s^2``.

    Returns
    -------
    float
        nan when there are no cross-sequence pairs (single sequence or ``n == 0``).
    """
    s = _vector(sum_u, "sum_u")
    n = _count(n)
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
    n = _count(n)
    if n < 2:
        return np.full(s.shape, np.nan)
    return (s * s - q) / (n * (n - 1.0))


def top_contributions(cc: np.ndarray, k: int = 10) -> dict:
    """The ``k`` dimensions with the largest cosine contribution and their shares.

    Dimensions are ordered by ``cc`` descending (signed: a dimension that *lowers* the mean
    cosine is not "top"). ``share_d = cc_d / sum(cc)``. When the mean cosine is close to 0
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
    order = np.argsort(-cc, kind="stable")[:k] if finite else np.arange(k)
    denom = total if (finite and total != 0) else math.nan
    top = cc[order]
    ranked = np.sort(cc)[::-1]  # top1/top3 shares do not depend on k
    return {
        "dims": [int(i) for i in order],
        "cc": [float(v) for v in top],
        "share": [float(v / denom) for v in top],
        "top1_share": float(ranked[:1].sum() / denom),
        "top3_share": float(ranked[:3].sum() / denom),
        "total": total,
    }


def self_similarity_per_id(
    id_sum_u: np.ndarray, id_counts: np.ndarray, min_count: int = 5
) -> np.ndarray:
    """Self-similarity of each token id (Ethayarajh 2019).

    For a token id with ``n`` occurrences whose unit vectors sum to ``S``, the mean pairwise
    cosine among its occurrences is ``(||S||^2 - n) / (n (n - 1))``.

    Parameters
    ----------
    id_sum_u : ndarray of shape (M, d)
        Per-id sums of ``u_t``.
    id_counts : ndarray of shape (M,)
        Occurrences of each id.
    min_count : int
        Ids seen fewer times get nan (Ethayarajh uses 5).

    Returns
    -------
    ndarray of shape (M,)
    """
    S = _matrix(id_sum_u, "id_sum_u")
    c = _vector(id_counts, "id_counts", S.shape[0])
    min_count = max(_count(min_count, "min_count"), 2)
    out = _pair_mean(np.einsum("md,md->m", S, S), c)
    return np.where(c >= min_count, out, np.nan)


def self_similarity(
    id_sum_u: np.ndarray,
    id_counts: np.ndarray,
    min_count: int = 5,
    max_ids: int | None = None,
) -> float:
    """Mean self-similarity over token ids seen at least ``min_count`` times (Ethayarajh 2019).

    Parameters
    ----------
    id_sum_u : ndarray of shape (M, d)
    id_counts : ndarray of shape (M,)
    min_count : int
    max_ids : int, optional
        Average over only the ``max_ids`` most frequent qualifying ids (ties broken by row
        order). None = all qualifying ids.

    Returns
    -------
    float
        nan when no id qualifies.
    """
    per_id = self_similarity_per_id(id_sum_u, id_counts, min_count)
    c = np.asarray(id_counts, dtype=np.float64)
    keep = np.flatnonzero(np.isfinite(per_id))
    if keep.size == 0:
        return math.nan
    if max_ids is not None:
        if _count(max_ids, "max_ids") < 1:
            raise ValueError(f"max_ids must be >= 1, got {max_ids!r}")
        keep = keep[np.argsort(-c[keep], kind="stable")[: int(max_ids)]]
    return float(per_id[keep].mean())


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


def mean_cosine_ci(
    group_sum_u: np.ndarray,
    group_n: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval for ``mean_cosine``, resampling groups of sequences.

    Tokens within a sequence are dependent, so the resampling unit is a group of whole
    sequences. Each replicate draws G groups with replacement (multinomial weights ``w``),
    ``S = w @ group_sum_u``, ``N = w @ group_n`` and evaluates ``(||S||^2 - N) / (N (N - 1))``
    (Efron & Tibshirani 1993). Vectorised over replicates, in bounded-memory chunks.

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

    Returns
    -------
    (low, high) : tuple of float
        (nan, nan) when G < 2.
    """
    S = _matrix(group_sum_u, "group_sum_u")
    gn = _vector(group_n, "group_n", S.shape[0])
    n_boot = _count(n_boot, "n_boot")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    G = S.shape[0]
    if G < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, 4_000_000 // max(G, S.shape[1])))
    stats = np.empty(n_boot)
    p = np.full(G, 1.0 / G)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        W = rng.multinomial(G, p, size=stop - start).astype(np.float64)  # (b, G)
        Sb = W @ S  # (b, d)
        stats[start:stop] = _pair_mean(np.einsum("bd,bd->b", Sb, Sb), W @ gn)
    alpha = (1.0 - level) / 2.0
    if np.isnan(stats).all():
        return (math.nan, math.nan)
    lo, hi = np.nanquantile(stats, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def mean_cosine_replicates(group_sum_u: np.ndarray, group_n: np.ndarray, n_boot: int = 1000,
                           seed: int = 0) -> np.ndarray:
    """The bootstrap replicates of ``mean_cosine`` behind :func:`mean_cosine_ci` (same resampling of
    whole groups, same seed gives the same draws); an empty array when G < 2.

    Parameters
    ----------
    group_sum_u : ndarray of shape (G, d)
    group_n : ndarray of shape (G,)

    Returns
    -------
    ndarray of shape (n_boot,)
    """
    S = _matrix(group_sum_u, "group_sum_u")
    gn = _vector(group_n, "group_n", S.shape[0])
    n_boot = _count(n_boot, "n_boot")
    G = S.shape[0]
    if G < 2 or n_boot < 1:
        return np.empty(0)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, 4_000_000 // max(G, S.shape[1])))
    out = np.empty(n_boot)
    p = np.full(G, 1.0 / G)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        W = rng.multinomial(G, p, size=stop - start).astype(np.float64)  # (b, G)
        Sb = W @ S  # (b, d)
        out[start:stop] = _pair_mean(np.einsum("bd,bd->b", Sb, Sb), W @ gn)
    return out


def mean_cosine_diff_ci(a_group_sum_u: np.ndarray, a_group_n: np.ndarray, b_group_sum_u: np.ndarray,
                        b_group_n: np.ndarray, n_boot: int = 1000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float, float]:
    """Difference of two runs' ``mean_cosine`` (a - b) with a percentile bootstrap interval.

    The runs are resampled independently (two corpora, or two models whose token windows differ),
    each by whole groups as in :func:`mean_cosine_ci`; the interval is that of the differences of
    the replicates.

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
    sa, sb = A.sum(0), B.sum(0)
    d = float(_pair_mean(np.array([sa @ sa]), np.array([an.sum()]))[0]
              - _pair_mean(np.array([sb @ sb]), np.array([bn.sum()]))[0])
    ra = mean_cosine_replicates(A, an, n_boot, seed)
    rb = mean_cosine_replicates(B, bn, n_boot, seed + 1)
    if ra.size == 0 or rb.size == 0:
        return d, math.nan, math.nan
    diff = ra - rb
    if np.isnan(diff).all():
        return d, math.nan, math.nan
    alpha = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(diff, [alpha, 1.0 - alpha])
    return d, float(lo), float(hi)


def frequency_binned_cosine(bin_sum_u: np.ndarray, bin_n: np.ndarray) -> np.ndarray:
    """Mean cosine among the tokens of each frequency bin.

    Same formula as :func:`mean_cosine`, row by row; useful to see whether anisotropy is
    driven by frequent tokens (Puccetti et al. 2022; Gao et al. 2019).

    Parameters
    ----------
    bin_sum_u : ndarray of shape (B, d)
    bin_n : ndarray of shape (B,)

    Returns
    -------
    ndarray of shape (B,)
        nan for bins with fewer than 2 tokens.
    """
    S = _matrix(bin_sum_u, "bin_sum_u")
    n = _vector(bin_n, "bin_n", S.shape[0])
    return _pair_mean(np.einsum("bd,bd->b", S, S), n)


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
    n = _count(n)
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


def _pc1_ratio(lam: np.ndarray) -> float:
    tr = lam.sum()
    return float(lam[0] / tr) if tr > 0 else math.nan


def _effective_rank(lam: np.ndarray) -> float:
    tr = lam.sum()
    if tr <= 0:
        return math.nan
    p = lam / tr
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def _isoscore(lam: np.ndarray) -> float:
    """IsoScore from the variances of the PCA-reoriented points (= covariance eigenvalues)."""
    n = lam.shape[0]
    norm = np.linalg.norm(lam)
    if n < 2 or norm == 0:
        return math.nan
    sigma = lam * math.sqrt(n) / norm  # step 4: ||sigma|| = sqrt(n)
    delta = np.linalg.norm(sigma - 1.0) / math.sqrt(2.0 * (n - math.sqrt(n)))  # step 5
    k = (n - delta**2 * (n - math.sqrt(n))) ** 2 / n**2  # step 6
    return float((n * k - 1.0) / (n - 1.0))  # step 7


def _partition_isotropy(X: np.ndarray) -> float:
    """min Z / max Z over +-eigenvectors c of X^T X, Z(c) = sum_t exp(c . x_t), in log space."""
    _, V = np.linalg.eigh(X.T @ X)  # (d, d), columns = eigenvectors
    P = X @ V  # (K, d): c . x_t for every eigenvector
    logz = np.concatenate([_logsumexp0(P), _logsumexp0(-P)])
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
    return _pc1_ratio(_cov_eigvals(_sample(X)))


def effective_rank(X: np.ndarray) -> float:
    """Effective rank of the covariance (Roy & Vetterli 2007).

    ``exp(H(p))`` with ``p = lambda / sum(lambda)`` the normalised covariance eigenvalues:
    d for isotropic data, 1 when all variance lies on one direction.

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
        In [1, d]; nan when X has no variance.
    """
    return _effective_rank(_cov_eigvals(_sample(X)))


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
    return _isoscore(_cov_eigvals(_sample(X)))


def partition_isotropy(X: np.ndarray) -> float:
    """Partition-function isotropy ``I(W)`` (Mu & Viswanath 2018, "All-but-the-Top").

    ``I(W) = min_c Z(c) / max_c Z(c)`` with ``Z(c) = sum_t exp(c . x_t)``, approximated, as in
    the paper, over the eigenvectors of the *uncentred* ``X^T X``. Eigenvector signs are
    arbitrary (LAPACK-dependent), so both ``c`` and ``-c`` are used, which makes the value
    reproducible; it can only be lower than a single-sign variant. Computed in log space.

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
        In (0, 1]; close to 1 for isotropic data, 0 when there is a dominant common direction
        (values underflow to 0.0 for large norms — that is the correct limit).
    """
    return _partition_isotropy(_sample(X))


def _unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows normalised to unit length; zero rows (no direction) are dropped."""
    norms = np.linalg.norm(X, axis=1)
    keep = norms > 0
    return X[keep] / norms[keep, None]


def sample_mean_cosine(X: np.ndarray) -> float:
    """Exact mean cosine over all ordered pairs ``i != j`` of the sample rows.

    Same estimator as :func:`mean_cosine`, applied to the sample (zero rows are dropped).

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    float
    """
    U = _unit_rows(_sample(X))
    s = U.sum(axis=0)
    return float(_pair_mean(s @ s, U.shape[0]))


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
    U = _unit_rows(_sample(X))
    if max_pairs is not None:
        max_pairs = _count(max_pairs, "max_pairs")
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


def spectral_metrics(X: np.ndarray) -> dict:
    """All sample-based metrics of one layer, sharing the decompositions.

    One eigendecomposition of the centred covariance serves ``pc1_variance_ratio``,
    ``effective_rank`` and ``isoscore``; one of the uncentred ``X^T X`` serves
    ``partition_isotropy``.

    Parameters
    ----------
    X : ndarray of shape (K, d)

    Returns
    -------
    dict
        ``pc1_variance_ratio``, ``effective_rank``, ``isoscore``, ``partition_isotropy``,
        ``mean_cosine`` (exact on the sample), ``n_sample`` (K).
    """
    X = _sample(X)
    lam = _cov_eigvals(X)
    U = _unit_rows(X)
    s = U.sum(axis=0)
    return {
        "pc1_variance_ratio": _pc1_ratio(lam),
        "effective_rank": _effective_rank(lam),
        "isoscore": _isoscore(lam),
        "partition_isotropy": _partition_isotropy(X),
        "mean_cosine": float(_pair_mean(s @ s, U.shape[0])),
        "n_sample": int(X.shape[0]),
    }
