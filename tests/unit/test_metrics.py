"""core.metrics against naive O(N^2) references and synthetic geometries (numpy only)."""

import math

import numpy as np
import pytest

from core import metrics as m

# ------------------------------------------------------------------ naive references


def _cos_matrix(X):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    return U @ U.T


def naive_mean_cosine(X):
    C = _cos_matrix(X)
    n = len(X)
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                total += C[i, j]
    return total / (n * (n - 1))


def naive_cross_sequence(X, seq):
    C = _cos_matrix(X)
    mask = seq[:, None] != seq[None, :]
    return C[mask].mean()


def naive_cc(X):
    """Per-dim contribution: mean over ordered pairs i != j of u_i,d * u_j,d."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    n, d = U.shape
    out = np.zeros(d)
    for i in range(n):
        for j in range(n):
            if i != j:
                out += U[i] * U[j]
    return out / (n * (n - 1))


def naive_intra(X, seq):
    vals = []
    for s in np.unique(seq):
        Xs = X[seq == s]
        mu = Xs.mean(0)
        vals.append(np.mean([x @ mu / (np.linalg.norm(x) * np.linalg.norm(mu)) for x in Xs]))
    return float(np.mean(vals))


def sums(X, seq=None):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    out = {"U": U, "sum_u": U.sum(0), "sum_u_sq": (U * U).sum(0), "n": len(X)}
    if seq is not None:
        ids = np.unique(seq)
        S = np.stack([U[seq == s].sum(0) for s in ids])
        ns = np.array([(seq == s).sum() for s in ids], dtype=float)
        out.update(S=S, ns=ns, Sx=np.stack([X[seq == s].sum(0) for s in ids]))
    return out


@pytest.fixture
def data():
    rng = np.random.default_rng(1)
    n, d = 120, 16
    X = rng.standard_normal((n, d)) + 0.7 * rng.standard_normal(d)  # some anisotropy
    seq = np.repeat(np.arange(6), 20)
    rng.shuffle(seq)
    return X, seq


# ------------------------------------------------------------------ streaming vs naive


def test_mean_cosine_matches_naive(data):
    X, _ = data
    s = sums(X)
    assert m.mean_cosine(s["sum_u"], s["n"]) == pytest.approx(naive_mean_cosine(X), abs=1e-9)


def test_mean_cosine_nan_below_two_tokens():
    assert math.isnan(m.mean_cosine(np.ones(3) / math.sqrt(3), 1))


def test_cross_sequence_matches_naive(data):
    X, seq = data
    s = sums(X, seq)
    got = m.cross_sequence_cosine(s["sum_u"], s["n"], float((s["S"] ** 2).sum()), float((s["ns"] ** 2).sum()))
    assert got == pytest.approx(naive_cross_sequence(X, seq), abs=1e-9)


def test_cross_sequence_single_sequence_is_nan(data):
    X, _ = data
    s = sums(X)
    n = s["n"]
    assert math.isnan(m.cross_sequence_cosine(s["sum_u"], n, float(s["sum_u"] @ s["sum_u"]), n * n))


def test_cosine_contribution_matches_naive_and_sums_to_mean(data):
    X, _ = data
    s = sums(X)
    cc = m.cosine_contribution(s["sum_u"], s["sum_u_sq"], s["n"])
    np.testing.assert_allclose(cc, naive_cc(X), atol=1e-9)
    assert cc.sum() == pytest.approx(m.mean_cosine(s["sum_u"], s["n"]), abs=1e-12)


def test_self_similarity_matches_naive(data):
    X, seq = data  # use the sequence label as a stand-in "token id"
    ids = seq.copy()
    ids[:3] = 99  # an id with 3 occurrences: under min_count=5
    s = sums(X, ids)
    per = m.self_similarity_per_id(s["S"], s["ns"], min_count=5)
    uniq = np.unique(ids)
    for r, t in enumerate(uniq):
        if (ids == t).sum() < 5:
            assert math.isnan(per[r])
        else:
            assert per[r] == pytest.approx(naive_mean_cosine(X[ids == t]), abs=1e-9)
    assert m.self_similarity(s["S"], s["ns"]) == pytest.approx(np.nanmean(per), abs=1e-12)
    top = np.argmax(s["ns"])
    assert m.self_similarity(s["S"], s["ns"], max_ids=1) == pytest.approx(per[top], abs=1e-12)


def test_self_similarity_nan_when_no_id_qualifies():
    assert math.isnan(m.self_similarity(np.ones((2, 3)), np.array([1, 4]), min_count=5))


def test_intra_sentence_matches_naive(data):
    X, seq = data
    s = sums(X, seq)
    got = m.intra_sentence_similarity(s["S"], s["Sx"], s["ns"])
    assert got == pytest.approx(naive_intra(X, seq), abs=1e-9)


def test_frequency_binned_matches_naive(data):
    X, seq = data
    s = sums(X, seq)
    got = m.frequency_binned_cosine(s["S"], s["ns"])
    want = [naive_mean_cosine(X[seq == b]) for b in np.unique(seq)]
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert math.isnan(m.frequency_binned_cosine(np.ones((1, 4)), np.array([1]))[0])


def test_pearson_from_sums_matches_corrcoef():
    rng = np.random.default_rng(2)
    n, d = 200, 8
    f = np.log(rng.integers(1, 10_000, n).astype(float))
    A = np.abs(rng.standard_normal((n, d)) + 0.3 * f[:, None] * np.arange(d) / d)
    A[:, 3] = 2.5  # constant column -> nan
    r = m.pearson_from_sums(n, f.sum(), (f * f).sum(), A.sum(0), (A * A).sum(0), (f[:, None] * A).sum(0))
    for j in range(d):
        if j == 3:
            assert math.isnan(r[j])
        else:
            assert r[j] == pytest.approx(np.corrcoef(f, A[:, j])[0, 1], abs=1e-9)


def test_pearson_large_offset_is_stable():
    rng = np.random.default_rng(3)
    f = rng.standard_normal(500)
    a = 1e4 + f + 0.5 * rng.standard_normal(500)
    r = m.pearson_from_sums(500, f.sum(), (f * f).sum(), np.array([a.sum()]), np.array([(a * a).sum()]),
                            np.array([(f * a).sum()]))
    assert r[0] == pytest.approx(np.corrcoef(f, a)[0, 1], abs=1e-6)


# ------------------------------------------------------------------ top contributions


def test_huge_constant_dimension_dominates_cc():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, 32))
    X[:, 7] += 50.0  # a rogue dimension: large constant value
    s = sums(X)
    top = m.top_contributions(m.cosine_contribution(s["sum_u"], s["sum_u_sq"], s["n"]), k=5)
    assert top["dims"][0] == 7
    assert top["top1_share"] > 0.9
    assert len(top["dims"]) == len(top["share"]) == 5
    assert top["top3_share"] >= top["top1_share"]


def test_top_contributions_order_and_shares():
    cc = np.array([0.1, -0.05, 0.3, 0.15])
    top = m.top_contributions(cc, k=10)
    assert top["dims"] == [2, 3, 0, 1]
    np.testing.assert_allclose(top["share"], cc[[2, 3, 0, 1]] / cc.sum())
    assert top["top1_share"] == pytest.approx(0.3 / 0.5)
    assert top["top3_share"] == pytest.approx(0.55 / 0.5)
    zero = m.top_contributions(np.array([0.1, -0.1]), k=1)
    assert math.isnan(zero["top1_share"]) and math.isnan(zero["share"][0])


# ------------------------------------------------------------------ bootstrap


def _groups(n_groups, rng, per=30, d=16, offset=0.5):
    mu = offset * rng.standard_normal(d)
    S, N = [], []
    for _ in range(n_groups):
        X = rng.standard_normal((per, d)) + mu
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        S.append(U.sum(0))
        N.append(per)
    return np.array(S), np.array(N, dtype=float)


def test_bootstrap_ci_contains_estimate_and_narrows():
    rng = np.random.default_rng(5)
    S, N = _groups(400, rng)
    point = m.mean_cosine(S.sum(0), int(N.sum()))
    lo_s, hi_s = m.mean_cosine_ci(S[:20], N[:20], n_boot=500)
    lo, hi = m.mean_cosine_ci(S, N, n_boot=500)
    assert lo <= point <= hi
    assert lo_s < hi_s and lo < hi
    assert (hi - lo) < 0.6 * (hi_s - lo_s)
    assert m.mean_cosine_ci(S, N, n_boot=500, seed=0) == (lo, hi)  # reproducible


def test_bootstrap_single_group_is_nan():
    lo, hi = m.mean_cosine_ci(np.ones((1, 3)), np.array([5.0]))
    assert math.isnan(lo) and math.isnan(hi)


# ------------------------------------------------------------------ synthetic geometries


def test_isotropic_gaussian_is_isotropic():
    # d/K = 32/5000: sampling noise spreads the covariance eigenvalues only by ~ +-16%
    # (Marchenko-Pastur, (1 +- sqrt(d/K))^2), so IsoScore stays near 1. For I(W) the extreme
    # eigen-directions give Z ~ K exp(lambda/2) with lambda in ~[0.85, 1.17], so min/max ~ 0.85,
    # less sampling noise of the exponential sums: > 0.6 leaves a wide margin.
    X = np.random.default_rng(6).standard_normal((5000, 32))
    r = m.spectral_metrics(X)
    assert abs(r["mean_cosine"]) < 0.02
    assert r["isoscore"] > 0.9
    assert r["partition_isotropy"] > 0.6
    assert r["effective_rank"] == pytest.approx(32, rel=0.02)
    assert r["pc1_variance_ratio"] < 2.0 / 32
    assert r["n_sample"] == 5000


def test_shared_offset_gives_high_cosine_and_low_partition_isotropy():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((1000, 32)) + 10.0 * np.ones(32) / np.sqrt(32) * 3
    assert m.sample_mean_cosine(X) > 0.9
    assert m.partition_isotropy(X) < 0.01


def test_dimension_with_huge_variance_drives_pc1():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((2000, 32))
    X[:, 3] *= 100.0
    assert m.pc1_variance_ratio(X) > 0.95
    assert m.isoscore(X) < 0.05
    assert m.effective_rank(X) < 1.5


def test_effective_rank_of_rank_one_data():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((500, 1)) @ rng.standard_normal((1, 24))
    assert m.effective_rank(X) == pytest.approx(1.0, abs=1e-6)
    assert m.pc1_variance_ratio(X) == pytest.approx(1.0, abs=1e-9)
    assert m.isoscore(X) == pytest.approx(0.0, abs=1e-6)


def test_isoscore_matches_published_algorithm_stepwise():
    # PCA via SVD of the centred data, np.cov of the reoriented points, Steps 4-7 of the paper.
    rng = np.random.default_rng(10)
    X = rng.standard_normal((300, 10)) @ rng.standard_normal((10, 10))
    Xc = X - X.mean(0)
    _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
    P = Xc @ Vt.T
    var = np.diag(np.cov(P.T))
    n = len(var)
    sig = var * np.sqrt(n) / np.linalg.norm(var)
    delta = np.linalg.norm(sig - 1) / np.sqrt(2 * (n - np.sqrt(n)))
    ref = ((n - delta**2 * (n - np.sqrt(n))) ** 2 - n) / (n * (n - 1))
    assert m.isoscore(X) == pytest.approx(ref, abs=1e-10)


def test_isoscore_of_k_dims_equal_variance():
    # closed form of Rudman et al.: k dims with equal variance -> IsoScore = (k - 1) / (n - 1)
    rng = np.random.default_rng(11)
    n, k = 20, 5
    X = np.zeros((4000, n))
    X[:, :k] = rng.standard_normal((4000, k))
    X[:, :k] = (X[:, :k] - X[:, :k].mean(0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(X[:, :k].T))).T
    assert m.isoscore(X) == pytest.approx((k - 1) / (n - 1), abs=1e-8)


def test_whitened_correlated_gaussian_is_isotropic():
    from core.postprocess import whiten

    rng = np.random.default_rng(12)
    A = rng.standard_normal((32, 32))
    X = rng.standard_normal((5000, 32)) @ A + 3.0
    assert m.isoscore(X) < 0.6
    assert m.isoscore(whiten(X)) > 0.95


def test_partition_isotropy_no_overflow_for_large_norms():
    X = np.random.default_rng(13).standard_normal((200, 8)) * 1e3
    v = m.partition_isotropy(X)
    assert np.isfinite(v) and 0.0 <= v <= 1.0


def test_partition_isotropy_matches_direct_formula_small_scale():
    rng = np.random.default_rng(14)
    X = 0.3 * rng.standard_normal((100, 6))
    _, V = np.linalg.eigh(X.T @ X)
    Z = np.concatenate([np.exp(X @ V).sum(0), np.exp(-X @ V).sum(0)])
    assert m.partition_isotropy(X) == pytest.approx(Z.min() / Z.max(), rel=1e-10)


# ------------------------------------------------------------------ sample mean cosine, histogram


def test_sample_mean_cosine_matches_naive(data):
    X, _ = data
    assert m.sample_mean_cosine(X) == pytest.approx(naive_mean_cosine(X), abs=1e-9)


def test_spectral_metrics_agree_with_single_functions(data):
    X, _ = data
    r = m.spectral_metrics(X)
    assert r["pc1_variance_ratio"] == pytest.approx(m.pc1_variance_ratio(X), abs=1e-12)
    assert r["effective_rank"] == pytest.approx(m.effective_rank(X), abs=1e-9)
    assert r["isoscore"] == pytest.approx(m.isoscore(X), abs=1e-12)
    assert r["partition_isotropy"] == pytest.approx(m.partition_isotropy(X), rel=1e-9)
    assert r["mean_cosine"] == pytest.approx(m.sample_mean_cosine(X), abs=1e-12)
    lam = np.linalg.eigvalsh(np.cov(X.T))
    assert r["pc1_variance_ratio"] == pytest.approx(lam.max() / lam.sum(), abs=1e-10)


def test_histogram_counts_all_pairs_and_matches_numpy():
    rng = np.random.default_rng(15)
    X = rng.standard_normal((300, 12)) + 0.5
    h = m.pairwise_cosine_histogram(X, bins=40)
    K = len(X)
    assert h["n_pairs"] == K * (K - 1) // 2 == h["counts"].sum()
    C = _cos_matrix(X)[np.triu_indices(K, 1)]
    want, edges = np.histogram(C, bins=40, range=(-1, 1))
    np.testing.assert_array_equal(h["counts"], want)
    np.testing.assert_allclose(h["edges"], edges)


def test_histogram_blocks_and_max_pairs():
    X = np.random.default_rng(16).standard_normal((2100, 4))  # > one block (4e6 // 2100 rows)
    h = m.pairwise_cosine_histogram(X, bins=10)
    assert h["counts"].sum() == 2100 * 2099 // 2
    h2 = m.pairwise_cosine_histogram(X, bins=10, max_pairs=1000)
    assert h2["n_pairs"] == h2["counts"].sum() <= 1000
    assert h2["n_pairs"] > 900


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "call",
    [
        lambda: m.mean_cosine(np.ones((2, 3)), 4),
        lambda: m.mean_cosine(np.ones(3), -1),
        lambda: m.cosine_contribution(np.ones(3), np.ones(4), 5),
        lambda: m.self_similarity_per_id(np.ones((3, 2)), np.ones(4)),
        lambda: m.mean_cosine_ci(np.ones((3, 2)), np.ones(3), level=1.5),
        lambda: m.pc1_variance_ratio(np.ones(5)),
        lambda: m.isoscore(np.ones((1, 5))),
        lambda: m.spectral_metrics(np.full((4, 3), np.nan)),
        lambda: m.top_contributions(np.ones(3), k=0),
        lambda: m.pairwise_cosine_histogram(np.ones((4, 3)), bins=0),
    ],
)
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_error_message_carries_shape():
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        m.mean_cosine(np.ones((2, 3)), 4)
