"""Geometry beyond the cosine (issue 25): intrinsic dimension, matrix entropy, linear CKA.

Kernels of the per-layer statistics registered in core/stats/registry.py, on a layer's token sample
X (K, d). Numpy only.

- Intrinsic dimension: TwoNN (Facco et al. 2017) and GRIDE (Denti et al. 2022), on the sample's
  distinct vectors (duplicates give zero distances, which break the neighbour ratios: they are
  dropped and counted, `unique_rows`).
- Matrix entropy (Skean et al. 2025, alpha = 1): Shannon entropy of the eigenvalues of the
  trace-normalised Gram matrix X X^T / tr(X X^T) of the (uncentred) sample.
- Linear CKA (Kornblith et al. 2019) with the unbiased HSIC estimator of Song et al. 2012
  (as in Nguyen et al. 2021), computed from Gram matrices in row blocks; its bootstrap interval
  over groups of documents from the group-level sums of the same Gram matrices (`cka_interval`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..base.config import CONFIG
from .batching import document_groups
from .kernels import group_weights

__all__ = ["unique_rows", "neighbour_distances", "twonn", "gride", "gride_scales", "GRIDE_SCALES", "GRIDE_N1",
           "ID_POSITIONS", "CKA_POSITIONS", "CKA_HOVER", "cka_positions", "cka_section", "matrix_entropy",
           "entropy_of_gram", "hsic_unbiased", "linear_cka", "cka_matrix", "cka_cross", "same_tokens",
           "CKA_BOOT", "CKA_LEVEL", "CKA_INTERVAL", "cka_replicates", "cka_interval",
           "sample_groups", "CKA_SPREAD_MIN", "CKA_TIE", "cka_alignment"]

ID_POSITIONS = 1024  # the intrinsic dimension reads at most this many distinct vectors (a seeded subset): cost O(n^2 d)
GRIDE_N1 = 8  # the registered GRIDE scale: ratio of the 16th to the 8th neighbour distance
GRIDE_SCALES = (1, 2, 4, 8, 16, 32)  # n1 of the GRIDE profile (n2 = 2 n1): the 2nd/1st ... 64th/32nd neighbours
TWONN_DISCARD = 0.1  # Facco et al. 2017: the 10% largest ratios are left out of the fit


def unique_rows(X: np.ndarray) -> tuple[np.ndarray, int]:
    """(the distinct rows of X in their first-seen order, the number of rows dropped as duplicates).

    Rows are compared by their float64 bytes (-0.0 counted as 0.0) through a dict: O(K d), where
    sorting the rows (np.unique(axis=0)) cost 5x more at K = 5,000."""
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64)) + 0.0  # + 0.0: -0.0 -> 0.0, equal values, equal bytes
    if len(X) == 0:
        return X, 0
    first: dict[bytes, int] = {}
    for i, row in enumerate(X):
        first.setdefault(row.tobytes(), i)
    idx = np.fromiter(first.values(), dtype=np.int64, count=len(first))  # first-seen order: ascending
    return X[idx], int(len(X) - len(idx))


def neighbour_distances(X: np.ndarray, k: int, block: int = 1024) -> np.ndarray:
    """(K, k) Euclidean distances of each row of X to its k nearest other rows, ascending.

    The Gram matrix X X^T is made once (a symmetric product: half the work of a general one); the
    squared distances of a block of rows to all rows are ||x||^2 + ||y||^2 - 2 x.y (float64), the k
    smallest chosen by partition, then sorted. Memory O(K^2) for the Gram (K <= ID_POSITIONS)."""
    X = np.asarray(X, dtype=np.float64)
    K = len(X)
    k = min(int(k), K - 1)
    if k < 1:
        return np.zeros((K, 0))
    gram = X @ X.T  # numpy calls the symmetric rank-k update (syrk) for X @ X.T
    sq = np.diagonal(gram).copy()
    out = np.empty((K, k))
    for a in range(0, K, block):
        b = min(K, a + block)
        D = sq[a:b, None] + sq[None, :] - 2.0 * gram[a:b]
        D[np.arange(b - a), np.arange(a, b)] = np.inf  # not its own neighbour
        D = np.partition(D, k - 1, axis=1)[:, :k]
        out[a:b] = np.sqrt(np.clip(np.sort(D, axis=1), 0.0, None))
    return out


def twonn(r: np.ndarray, discard: float = TWONN_DISCARD) -> float:
    """TwoNN (Facco et al. 2017) from neighbour distances r (K, >= 2) of distinct points.

    mu_i = r_2 / r_1; with F the empirical CDF of mu, -log(1 - F(mu)) = d log(mu): d is the slope of
    the line through the origin fitted to the (log mu, -log(1 - F)) points, leaving out the
    `discard` share of largest mu (the paper's estimator)."""
    r = np.asarray(r, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < 2 or len(r) < 3:
        return math.nan
    ok = r[:, 0] > 0
    mu = np.sort(r[ok, 1] / r[ok, 0])
    n = len(mu)
    if n < 3:
        return math.nan
    F = np.arange(n) / n  # F(mu_(i)) = i / N, i = 0..N-1 (the largest would give log 0)
    keep = int(math.floor(n * (1.0 - discard)))
    x, y = np.log(mu[:keep]), -np.log(1.0 - F[:keep])
    den = float(x @ x)
    return float(x @ y / den) if den > 0 else math.nan


def gride(r: np.ndarray, n1: int = GRIDE_N1, n2: int | None = None) -> float:
    """GRIDE (Denti et al. 2022): the maximum-likelihood dimension from mu_i = r_{n2}(i) / r_{n1}(i).

    With n2 = 2 n1 by default. mu follows f(mu) = d (mu^d - 1)^(n2-n1-1) / (B(n2-n1, n1) mu^((n2-1) d + 1));
    the score N/d + (n2-n1-1) sum log(mu)/(1 - mu^-d) - (n2-1) sum log(mu) decreases in d, so its
    root is found by bisection (on log d). n1 = 1, n2 = 2 is the TwoNN maximum-likelihood estimate."""
    n2 = 2 * n1 if n2 is None else n2
    r = np.asarray(r, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < n2 or len(r) < 3:
        return math.nan
    a, b = r[:, n1 - 1], r[:, n2 - 1]
    ok = a > 0
    lm = np.log(b[ok] / a[ok])
    lm = lm[lm > 0]  # mu = 1 (equal distances) carries no scale information
    N = len(lm)
    if N < 3:
        return math.nan
    S = float(lm.sum())
    m = n2 - n1 - 1

    def score(logd: float) -> float:
        d = math.exp(logd)
        extra = 0.0 if m == 0 else m * float((lm / -np.expm1(-d * lm)).sum())
        return N / d + extra - (n2 - 1) * S

    lo, hi = math.log(1e-3), math.log(1e5)
    if score(hi) > 0:
        return math.inf
    if score(lo) < 0:
        return 0.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if score(mid) > 0 else (lo, mid)
    return float(math.exp(0.5 * (lo + hi)))


def gride_scales(r: np.ndarray, scales: tuple[int, ...] = GRIDE_SCALES) -> list:
    """GRIDE at each n1 of `scales` (n2 = 2 n1); NaN where the sample has too few neighbours."""
    return [gride(r, n1) if r.shape[1] >= 2 * n1 else math.nan for n1 in scales]


def matrix_entropy(X: np.ndarray) -> float:
    """Matrix-based (von Neumann / Renyi alpha = 1) entropy of the trace-normalised Gram matrix of X (nats).

    G = X X^T / tr(X X^T); S = -sum_i lambda_i log lambda_i over its eigenvalues (Skean et al. 2025).
    The nonzero eigenvalues of X X^T are those of X^T X (the squared singular values of X), so the
    smaller of the two is decomposed. 0 for a rank-1 sample; log(min(K, d)) at most."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.size == 0:
        return math.nan
    C = X.T @ X if X.shape[1] <= X.shape[0] else X @ X.T
    return entropy_of_gram(C)


def entropy_of_gram(C: np.ndarray) -> float:
    """The alpha = 1 matrix entropy from a (symmetric, PSD) Gram matrix X^T X or X X^T of the sample."""
    lam = np.clip(np.linalg.eigvalsh(C), 0.0, None)
    tr = lam.sum()
    if tr <= 0:
        return math.nan
    p = lam / tr
    p = p[p > lam.size * np.finfo(np.float64).eps]
    return float(-(p * np.log(p)).sum())


# ----------------------------------------------------------------------------- linear CKA
def _gram_terms(G: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(G with a zero diagonal, its row sums, its total) for the unbiased HSIC."""
    G = np.array(G, dtype=np.float64)
    np.fill_diagonal(G, 0.0)
    r = G.sum(1)
    return G, r, float(r.sum())


def hsic_unbiased(K: np.ndarray, L: np.ndarray) -> float:
    """The unbiased HSIC estimator of Song et al. 2012 for two n x n kernel matrices (n >= 4).

    (1 / (n (n - 3))) [tr(K~ L~) + 1'K~1 1'L~1 / ((n - 1)(n - 2)) - 2/(n - 2) 1'K~L~1], K~ = K with a zero diagonal."""
    n = len(K)
    if n < 4:
        return math.nan
    Kt, rk, sk = _gram_terms(K)
    Lt, rl, sl = _gram_terms(L)
    return float(((Kt * Lt).sum() + sk * sl / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * (rk @ rl)) / (n * (n - 3)))


def linear_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """Linear CKA of two samples of the same n positions: HSIC_u(XX', YY') / sqrt(HSIC_u(XX', XX') HSIC_u(YY', YY'))."""
    return float(cka_cross([X], [Y])[0, 0])


FULL_GRAMS_BYTES = 2**27  # cka_cross holds every Gram matrix whole up to this size (128 MiB), else a block of rows


def cka_cross(Xs: list[np.ndarray], Ys: list[np.ndarray] | None = None, block: int = 256) -> np.ndarray:
    """(len(Xs), len(Ys)) linear CKA with the unbiased HSIC between every X of Xs and Y of Ys (all of n rows,
    the same positions). Gram matrices are made whole when all m of them fit in FULL_GRAMS_BYTES, else a block
    of rows at a time (memory O(m block n)).
    Ys = None: Xs against themselves (a symmetric matrix, ones on the diagonal)."""
    same = Ys is None
    Xs = [np.asarray(X, dtype=np.float64) for X in Xs]
    Ys = Xs if same else [np.asarray(Y, dtype=np.float64) for Y in Ys]
    n = len(Xs[0])
    if n < 4 or any(len(Z) != n for Z in Xs + Ys):
        return np.full((len(Xs), len(Ys)), math.nan)
    allz = Xs if same else Xs + Ys
    m = len(allz)
    tr, R = np.zeros((m, m)), np.zeros((m, n))
    whole = m * n * n * 8 <= FULL_GRAMS_BYTES
    if whole:  # every Gram whole: one symmetric product each (half the work of blocks)
        F = np.empty((m, n * n))
        for i, Z in enumerate(allz):
            G = Z @ Z.T  # numpy calls syrk for Z @ Z.T
            np.fill_diagonal(G, 0.0)
            R[i] = G.sum(1)
            F[i] = G.ravel()
        tr = F @ F.T
    for a in range(0, 0 if whole else n, block):
        b = min(n, a + block)
        F = np.empty((m, (b - a) * n))
        for i, Z in enumerate(allz):
            G = Z[a:b] @ Z.T
            G[np.arange(b - a), np.arange(a, b)] = 0.0
            R[i, a:b] = G.sum(1)
            F[i] = G.ravel()
        tr += F @ F.T
    T = R.sum(1)
    H = (tr + np.outer(T, T) / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * (R @ R.T)) / (n * (n - 3))
    dg = np.sqrt(np.clip(np.diag(H), 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        C = H / np.outer(dg, dg)
    if same:
        return C
    return C[:len(Xs), len(Xs):]


def cka_matrix(Xs: list[np.ndarray], block: int = 256) -> np.ndarray:
    """The layers x layers linear CKA (unbiased HSIC) of one run's samples."""
    return cka_cross(Xs, None, block)


# ----------------------------------------------------------------------------- the depth alignment
CKA_SPREAD_MIN = 0.02  # a row of CKA spreading less than this over the other run's layers (or than its best cell's
# interval half-width, where wider): those layers are indistinguishable from that layer
CKA_TIE = 0.01  # a layer of B within this (or within the best cell's interval half-width) of the best CKA ties with it


def cka_alignment(C: np.ndarray, low: np.ndarray | None = None, high: np.ndarray | None = None,
                  spread_min: float = CKA_SPREAD_MIN, tie: float = CKA_TIE) -> dict:
    """The depth alignment of a (layers of A, layers of B) CKA matrix, with its degenerate cases said.

    For each layer i of A (row), j its column of highest CKA and w its interval's half-width (0 without
    `low`/`high`): ``spread`` = max - min of the row over B's layers; the row is *flat* when spread <
    max(`spread_min`, w): B's layers are indistinguishable from layer i, and an argmax there picks a tie.
    ``best`` = j, or None for a flat row or one without finite values; ``ties`` = the columns within
    max(`tie`, w) of the best (the best included; more than one: a near-tie, the match is that set).
    ``degenerate``: "B" when every defined row is flat (the layers of B are indistinguishable: no alignment
    line), else "A" when every column is flat over A's layers (each layer of A looks alike, so every row's
    best is the same and says nothing about depth), else None; ``why`` says it with the numbers.

    >>> a = cka_alignment(np.array([[0.9, 0.5], [0.4, 0.8]]))
    >>> a["best"], a["degenerate"]
    ([0, 1], None)
    >>> cka_alignment(np.array([[0.37, 0.36], [0.08, 0.07]]))["degenerate"]
    'B'
    """
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2:
        raise ValueError(f"C must be a (layers of A, layers of B) matrix, got shape {C.shape}")
    half = np.zeros_like(C)
    if low is not None and high is not None:
        h = (np.asarray(high, dtype=np.float64) - np.asarray(low, dtype=np.float64)) / 2
        half = np.where(np.isfinite(h), h, 0.0)
    fin = np.isfinite(C)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows and columns stay NaN
        row_spread = np.nanmax(C, 1) - np.nanmin(C, 1)
        col_spread = np.nanmax(C, 0) - np.nanmin(C, 0)
    defined = fin.sum(1) >= 2
    best, ties, flat_rows, cut = [], [], [], []
    for i in range(C.shape[0]):
        if not defined[i]:
            only = np.flatnonzero(fin[i])
            best.append(int(only[0]) if only.size else None)
            ties.append([best[-1]] if best[-1] is not None else [])
            continue
        j = int(np.nanargmax(C[i]))
        t = max(spread_min, float(half[i, j]))
        cut.append(t)
        if row_spread[i] < t:
            flat_rows.append(i)
            best.append(None)
            ties.append([])
            continue
        best.append(j)
        ties.append([int(k) for k in np.flatnonzero(fin[i] & (C[i] >= C[i, j] - max(tie, float(half[i, j]))))])
    degenerate, why = None, ""
    cols = fin.sum(0) >= 2
    if defined.any() and len(flat_rows) == int(defined.sum()):
        degenerate = "B"
        why = (f"the layers of B are indistinguishable: for every layer of A, CKA varies by at most "
               f"{float(row_spread[defined].max()):.3f} over B's layers (each row under the larger of {spread_min:g} "
               f"and its best cell's interval half-width, up to {max(cut):.3f}), so a best match would be a tie "
               "broken by position")
    elif cols.any() and C.shape[0] >= 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ci = np.nanargmax(np.where(fin, C, -np.inf), 0)
        tc = np.maximum(spread_min, half[ci, np.arange(C.shape[1])])
        if (col_spread[cols] < tc[cols]).all():
            degenerate = "A"
            why = (f"the layers of A are indistinguishable: for every layer of B, CKA varies by at most "
                   f"{float(col_spread[cols].max()):.3f} over A's layers (each under the larger of {spread_min:g} and "
                   f"its best cell's interval half-width, up to {float(tc[cols].max()):.3f}), so "
                   "every layer of A has the same best match and the alignment says nothing about depth")
    return {"best": best, "ties": ties, "spread": [float(x) for x in row_spread], "degenerate": degenerate,
            "why": why, "spread_min": spread_min, "tie": tie}


# ----------------------------------------------------------------------------- CKA's bootstrap interval
CKA_BOOT = 200  # replicates of CKA's interval: few, since every replicate reweights each layer pair's G x G sums
CKA_LEVEL = 0.95
CKA_INTERVAL = (f"{CKA_LEVEL:.0%} percentile bootstrap interval over the run's groups of documents ({CKA_BOOT} "
                "replicates; a group drawn twice is two copies of the same documents: no kernel value between "
                "copies enters a replicate)")


def _pair_index(m: int, ma: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) pairs of matrices whose HSIC is needed: all a <= b (one run: ma None), or A x B then every
    (c, c) (two runs: the first ma matrices are A's)."""
    if ma is None:
        return np.triu_indices(m)
    a, b = np.meshgrid(np.arange(ma), np.arange(ma, m), indexing="ij")
    return np.r_[a.ravel(), np.arange(m)], np.r_[b.ravel(), np.arange(m)]


SMALL_PAIRS = 8  # _group_sums makes whole Grams and block sums without a loop over blocks up to this many pairs


def _group_sums(allz: list[np.ndarray], gi: np.ndarray, G: int, ma: int | None) -> dict:
    """The group-level sums of every Gram matrix K_a = Z_a Z_a' (zero diagonal) behind the weighted HSIC.

    Rows sorted by group (`gi`: each row's group 0..G-1, sorted). R[a, i, h] = sum_{j in h, j != i} K_a[i, j];
    S[a, g, h] = sum_{i in g} R[a, i, h]; P[p, g, h] = sum_{i in g, j in h, i != j} K_a[i, j] K_b[i, j] and
    D[p, g, h] = sum_{i in g} R[a, i, h] R[b, i, h] for each needed pair p = (a, b). Gram rows are made one
    group at a time against the groups from it on (K is symmetric: half the products); memory O(m n_g n)."""
    m, n = len(allz), len(gi)
    pa, pb = _pair_index(m, ma)
    starts = np.searchsorted(gi, np.arange(G))
    ends = np.searchsorted(gi, np.arange(G), side="right")
    R, P = np.zeros((m, n, G)), np.zeros((len(pa), G, G))
    if len(pa) <= SMALL_PAIRS and n:  # few pairs (two layers): whole Grams, block sums by reduceat, no loop over blocks
        K = np.stack([Z @ Z.T for Z in allz])
        K[:, np.arange(n), np.arange(n)] = 0.0
        R = np.add.reduceat(K, starts, axis=2)
        for p, (a, b) in enumerate(zip(pa, pb)):
            P[p] = np.add.reduceat(np.add.reduceat(K[a] * K[b], starts, axis=0), starts, axis=1)
    for g in range(0 if len(pa) <= SMALL_PAIRS else G):
        a0, a1 = starts[g], ends[g]
        Mg = np.stack([Z[a0:a1] @ Z[a0:].T for Z in allz])  # (m, n_g, n - a0)
        Mg[:, np.arange(a1 - a0), np.arange(a1 - a0)] = 0.0
        for h in range(g, G):
            B = Mg[:, :, starts[h] - a0:ends[h] - a0]
            R[:, a0:a1, h] = B.sum(2)
            if h != g:
                R[:, starts[h]:ends[h], g] = B.sum(1)
            F = B.reshape(m, -1)
            if ma is None:
                pr = (F @ F.T)[pa, pb]
            else:
                pr = np.r_[(F[:ma] @ F[ma:].T).ravel(), np.einsum("ak,ak->a", F, F)]
            P[:, g, h] = P[:, h, g] = pr
    S = np.add.reduceat(R, starts, axis=1) if n else np.zeros((m, G, G))
    D = np.zeros_like(P)
    for g in range(G):
        Rg = R[:, starts[g]:ends[g], :]
        D[:, g, :] = np.einsum("pih,pih->ph", Rg[pa], Rg[pb])
    return {"R": R, "S": S, "P": P, "D": D, "pa": pa, "pb": pb, "n_g": (ends - starts).astype(np.float64), "gi": gi}


def _wsum(M: np.ndarray, W: np.ndarray, V: np.ndarray | None = None) -> np.ndarray:
    """(b, p): sum_{g != h} w_g v_h M[p, g, h] + sum_g w_g M[p, g, g] for each row w of W (v = w by default):
    with V = W the weighted sum over the pairs of a resampled corpus (across groups w_g w_h, within one w_g)."""
    p, G, _ = M.shape
    V = W if V is None else V
    t = (M.reshape(p * G, G) @ V.T).reshape(p, G, -1)  # (p, G, b): sum_h M[p, g, h] v_h
    out = np.einsum("pgb,bg->bp", t, W)
    dg = np.diagonal(M, axis1=1, axis2=2)  # (p, G)
    return out + W @ dg.T - (W * V) @ dg.T


def _weighted_hsic(parts: dict, W: np.ndarray) -> np.ndarray:
    """(b, p) the unbiased HSIC of every needed pair in each replicate of group weights W (b, G).

    The estimator is HSIC_u = (n-1)/(n-3) [a (n-4)/(n-2) + n/(n-2) s_K s_L - 2 c], with a the mean of
    k_ij l_ij over the pairs i != j, s_K and s_L the means of k_ij and l_ij over the same pairs, c the mean of
    k_ij l_iq over the triples of distinct i, j, q (it is Song et al.'s formula regrouped). A replicate holds
    w_g copies of group g, n* = sum_g w_g n_g positions, and takes each mean over the pairs and triples of a
    corpus of sum_g w_g distinct groups in which two positions of one group are only ever together within one
    copy: a pair or triple weighs the product of w_f over the distinct groups f it touches (across groups
    w_g w_h, within a group w_g). So no kernel value between two copies (of one position, or of two positions
    of one group) enters a replicate. With every w_g = 1 it is the estimator itself."""
    R, S, P, D, pa, pb, ng, gi = (parts[k] for k in ("R", "S", "P", "D", "pa", "pb", "n_g", "gi"))
    m, n, G = R.shape
    b = len(W)
    W2 = W - W * W
    ns = W @ ng  # n*
    Nmat = np.outer(ng, ng) - np.diag(ng)  # pairs of positions (i != j) between groups g and h
    N2 = _wsum(Nmat[None], W)[:, 0]
    A = _wsum(P, W)
    SK = _wsum(S, W)  # (b, m)
    # triples, centre i in g: w_g [r*_i^a r*_i^b + sum_{h != g} (w_h - w_h^2) R_ih^a R_ih^b - sum_h w^_h e_ih],
    # r*_i = sum_h w^_h R_ih with w^_h = w_h (h != g), 1 (h = g); e_ih = sum_{j in h} k_ij l_ij: the last sum is A
    RW = (R.reshape(m * n, G) @ W.T).reshape(m, n, b)
    own = R[:, np.arange(n), gi]  # (m, n) R_i,g(i)
    wi = W[:, gi]  # (b, n)
    rs = RW.transpose(2, 0, 1) + own[None] * (1.0 - wi)[:, None, :]  # (b, m, n)
    TT = np.matmul(rs * wi[:, None, :], rs.transpose(0, 2, 1))[:, pa, pb]  # (b, m, m) -> the needed pairs
    Doff = D.copy()
    Doff[:, np.arange(G), np.arange(G)] = 0.0
    T = TT + _wsum(Doff, W, W2) - A
    # the same count of triples (k = l = 1): R_ih = n_h - [h = g]
    r1 = ns[:, None] - W * ng + (ng - 1.0)  # (b, G) r*_i for i in g
    N3 = (W * ng * r1 * r1).sum(1) + _wsum((np.outer(ng, ng * ng) * (1.0 - np.eye(G)))[None], W, W2)[:, 0] - N2
    with np.errstate(invalid="ignore", divide="ignore"):
        a, c = A / N2[:, None], T / N3[:, None]
        s = SK / N2[:, None]
        nn = ns[:, None]
        H = (nn - 1) / (nn - 3) * (a * (nn - 4) / (nn - 2) + nn / (nn - 2) * s[:, pa] * s[:, pb] - 2.0 * c)
    return np.where(nn > 3, H, np.nan)


def _cka_of_hsic(H: np.ndarray, pa: np.ndarray, pb: np.ndarray, m: int, ma: int | None) -> np.ndarray:
    """(b, rows, cols) CKA from the (b, p) HSIC of the needed pairs: the (ma, m - ma) A x B block, or m x m."""
    b = len(H)
    diag = np.full((b, m), np.nan)
    dmask = pa == pb
    diag[:, pa[dmask]] = H[:, dmask]
    dg = np.sqrt(np.clip(diag, 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        if ma is None:
            C = np.full((b, m, m), np.nan)
            C[:, pa, pb] = C[:, pb, pa] = H / (dg[:, pa] * dg[:, pb])
            return C
        k = ma * (m - ma)
        return (H[:, :k] / (dg[:, pa[:k]] * dg[:, pb[:k]])).reshape(b, ma, m - ma)


def _prepare(Xs, groups, Ys):
    """(parts, m, ma, G, shape) for cka_interval / cka_replicates, or None when CKA is undefined (n < 4, rows
    or groups of different lengths)."""
    same = Ys is None
    allz = [np.asarray(Z, dtype=np.float64) for Z in (Xs if same else list(Xs) + list(Ys))]
    n = len(allz[0])
    groups = np.asarray(groups)
    if n < 4 or any(len(Z) != n for Z in allz) or groups.shape != (n,):
        return None
    labels, gi = np.unique(groups, return_inverse=True)
    order = np.argsort(gi, kind="stable")
    ma = None if same else len(Xs)
    return _group_sums([Z[order] for Z in allz], gi[order], len(labels), ma), len(allz), ma, len(labels)


def cka_replicates(Xs: list[np.ndarray], groups: np.ndarray, W: np.ndarray, Ys: list[np.ndarray] | None = None,
                   _prep=None) -> np.ndarray:
    """(b, len(Xs), len(Ys or Xs)) the CKA of each replicate of group weights W (b, G): column g of W weighs
    the g-th of the sorted distinct labels of `groups` (see `_weighted_hsic`). W = 1 gives the estimate."""
    prep = _prep or _prepare(Xs, groups, Ys)
    parts, m, ma, _ = prep
    W = np.asarray(W, dtype=np.float64)
    return np.concatenate([_cka_of_hsic(_weighted_hsic(parts, W[s:s + 32]), parts["pa"], parts["pb"], m, ma)
                           for s in range(0, len(W), 32)])


def cka_interval(Xs: list[np.ndarray], groups: np.ndarray, Ys: list[np.ndarray] | None = None,
                 n_boot: int = CKA_BOOT, seed: int = 0, level: float = CKA_LEVEL) -> dict:
    """Linear CKA (unbiased HSIC) of every X of Xs with every Y of Ys (or Xs with themselves), with a
    percentile bootstrap interval over groups of documents.

    `groups`: the group of documents of each of the n rows (the same rows in every matrix). Each replicate
    draws the G groups present with replacement (multinomial weights, core.stats.kernels.group_weights, seeded) and
    computes every HSIC from the group-level sums of the sample's own Gram matrices (`_weighted_hsic`), not
    from duplicated rows: a row and its copy have kernel value |x|^2 (the diagonal that the unbiased
    estimator leaves out) and two rows of one group are more alike than two documents, so pairing copies
    would pull every replicate towards 1. Returns {"matrix", "low", "high"} ((len(Xs), len(Ys)) arrays; the
    intervals NaN with fewer than two groups), "n_groups" and "n_boot"."""
    same = Ys is None
    shape = (len(Xs), len(Xs) if same else len(Ys))
    prep = _prepare(Xs, groups, Ys)
    if prep is None:
        nan = np.full(shape, math.nan)
        return {"matrix": nan, "low": nan.copy(), "high": nan.copy(), "n_groups": 0, "n_boot": 0}
    G = prep[3]
    C = cka_replicates(Xs, groups, np.ones((1, G)), Ys, _prep=prep)[0]
    lo, hi = np.full(shape, math.nan), np.full(shape, math.nan)
    if G >= 2 and n_boot >= 1:
        reps = cka_replicates(Xs, groups, group_weights(np.random.default_rng(seed), int(n_boot), G), Ys, _prep=prep)
        alpha = (1.0 - level) / 2.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN cell (a constant layer) stays NaN
            lo, hi = np.nanquantile(reps, [alpha, 1.0 - alpha], axis=0)
    if same:
        for M in (C, lo, hi):
            np.fill_diagonal(M, 1.0)
    return {"matrix": C, "low": lo, "high": hi, "n_groups": int(G), "n_boot": int(n_boot) if G >= 2 else 0}


CKA_POSITIONS = 1024  # CKA uses at most this many of the sample's positions (a seeded subset, the same in every layer)
CKA_HOVER = ("linear CKA = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) on centred features, unbiased HSIC "
             "(Kornblith et al. 2019; Song et al. 2012)")
CKA_ESTIMATOR = "linear CKA with the unbiased HSIC estimator (Song et al. 2012; Nguyen et al. 2021)"


def cka_positions(K: int, n_max: int = CKA_POSITIONS, seed: int = 0) -> np.ndarray:
    """The sample rows CKA reads: all K, or a seeded subset of n_max (sorted), the same in every layer."""
    if K <= n_max:
        return np.arange(K)
    return np.sort(np.random.default_rng(seed).choice(K, n_max, replace=False))


def cka_section(stats) -> dict | None:
    """results.json's `cka`: the layers x layers linear CKA of the run's token sample (the same
    positions in every layer), with its bootstrap interval over the run's groups of documents (`low`,
    `high`; see `cka_interval`), or None with fewer than 4 sampled tokens."""
    K = int(stats.arrays["sample"].shape[1])
    if K < 4:
        return None
    idx = cka_positions(K)
    Xs = [np.asarray(stats.sample(l), dtype=np.float64)[idx] for l in range(stats.n_layers)]
    groups, why = sample_groups(stats, idx)
    out = cka_interval(Xs, groups if groups is not None else np.zeros(len(idx), dtype=np.int64),
                       n_boot=CKA_BOOT if groups is not None else 0)
    interval = {"method": CKA_INTERVAL, "level": CKA_LEVEL, "n_boot": out["n_boot"], "n_groups": out["n_groups"]}
    if groups is None or out["n_groups"] < 2:
        interval["not_applicable"] = why or "the sampled positions fall in fewer than two groups of documents"
    return {"estimator": CKA_ESTIMATOR, "n_positions": int(len(idx)), "sample_size": K,
            "positions": f"a seeded subset of {len(idx)} of the {K} sampled positions" if len(idx) < K
            else f"all {K} sampled positions",
            "layers": [int(x) for x in stats.layer_ids], "matrix": out["matrix"].tolist(),
            "low": out["low"].tolist(), "high": out["high"].tolist(), "interval": interval}


def sample_groups(stats, rows: np.ndarray) -> tuple[np.ndarray | None, str]:
    """(the group of documents of each of these sample rows, as the extraction dealt the run's documents; or
    None) and why not (a sample of an earlier version without document ids)."""
    doc = stats.arrays.get("sample_doc")
    if doc is None:
        return None, "this run's sample has no document ids (an earlier version)"
    return document_groups(np.asarray(doc)[rows], int(stats.manifest.get("seed", 0)), CONFIG.bootstrap_groups), ""


def same_tokens(stats_a, stats_b) -> tuple[bool, str]:
    """Whether two runs' samples are the same tokens at the same positions (so that CKA may pair them):
    the same corpus file, and the same token id, window and position at every sampled row."""
    ma, mb = stats_a.manifest, stats_b.manifest
    if (ma.get("corpus") or {}).get("sha256") != (mb.get("corpus") or {}).get("sha256"):
        return False, "the two runs read different corpora"
    a, b = stats_a.arrays, stats_b.arrays
    for k in ("sample_token_id", "sample_window", "sample_position"):
        if k not in a or k not in b or np.shape(a[k]) != np.shape(b[k]) or not np.array_equal(a[k], b[k]):
            return False, ("their token samples differ (another tokenizer, token budget, window length or seed): "
                           "tokens of the two runs cannot be paired")
    return True, "the same tokens at the same positions (same corpus, tokenizer, budget and sample)"
