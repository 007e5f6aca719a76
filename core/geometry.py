"""Geometry beyond the cosine (issue 25): intrinsic dimension, matrix entropy, linear CKA.

Kernels of the per-layer statistics registered in core/statistics.py, on a layer's token sample
X (K, d). Numpy only.

- Intrinsic dimension: TwoNN (Facco et al. 2017) and GRIDE (Denti et al. 2022), on the sample's
  distinct vectors (duplicates give zero distances, which break the neighbour ratios: they are
  dropped and counted, `unique_rows`).
- Matrix entropy (Skean et al. 2025, alpha = 1): Shannon entropy of the eigenvalues of the
  trace-normalised Gram matrix X X^T / tr(X X^T) of the (uncentred) sample.
- Linear CKA (Kornblith et al. 2019) with the unbiased HSIC estimator of Song et al. 2012
  (as in Nguyen et al. 2021), computed from Gram matrices in row blocks.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["unique_rows", "neighbour_distances", "twonn", "gride", "gride_scales", "GRIDE_SCALES", "GRIDE_N1",
           "ID_POSITIONS", "CKA_POSITIONS", "CKA_HOVER", "cka_positions", "cka_section", "matrix_entropy",
           "entropy_of_gram", "hsic_unbiased", "linear_cka", "cka_matrix", "cka_cross", "same_tokens"]

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
    positions in every layer), or None with fewer than 4 sampled tokens."""
    K = int(stats.arrays["sample"].shape[1])
    if K < 4:
        return None
    idx = cka_positions(K)
    C = cka_matrix([np.asarray(stats.sample(l), dtype=np.float64)[idx] for l in range(stats.n_layers)])
    return {"estimator": CKA_ESTIMATOR, "n_positions": int(len(idx)), "sample_size": K,
            "positions": f"a seeded subset of {len(idx)} of the {K} sampled positions" if len(idx) < K
            else f"all {K} sampled positions",
            "layers": [int(x) for x in stats.layer_ids], "matrix": C.tolist()}


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
