"""core.stats.kernels against naive O(N^2) references and synthetic geometries (numpy only)."""

import math

import numpy as np
import pytest

from core.stats import kernels as m
from core.stats.registry import baseline_keys, isotropic_baseline, sample_values

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


def svd_effective_rank(X):
    """Roy & Vetterli 2007 from numpy's SVD of the centred sample: exp of the entropy of sigma / sum(sigma)."""
    sv = np.linalg.svd(X - X.mean(0), compute_uv=False)
    p = sv / sv.sum()
    p = p[p > 1e-15]
    return math.exp(-(p * np.log(p)).sum())


def published_isoscore(X):
    """IsoScore as Rudman et al. 2022 (Algorithm 1) write it, step by step."""
    Xc = X - X.mean(0)  # step 1: centre (the PCA of step 2 is on the centred points)
    _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
    P = Xc @ Vt.T  # step 2: reorient the points on their principal components
    var = np.diag(np.cov(P.T))  # step 3: the variance vector of the reoriented points
    n = len(var)
    sig = var * np.sqrt(n) / np.linalg.norm(var)  # step 4: normalise, ||sigma|| = sqrt(n)
    delta = np.linalg.norm(sig - 1) / np.sqrt(2 * (n - np.sqrt(n)))  # step 5: isotropy defect
    k = (n - delta**2 * (n - np.sqrt(n))) ** 2 / n**2  # step 6: share of dimensions used
    return (n * k - 1) / (n - 1)  # step 7: IsoScore


def eig_partition_isotropy(X):
    """Mu & Viswanath's I(W) on W = X / mean norm, Z(c) over the eigenvectors of W^T W, each signed with
    its largest-magnitude entry positive (the documented convention)."""
    W = X / np.linalg.norm(X, axis=1).mean()
    _, V = np.linalg.eigh(W.T @ W)
    for j in range(V.shape[1]):
        V[:, j] *= np.sign(V[np.abs(V[:, j]).argmax(), j])
    Z = np.exp(W @ V).sum(0)
    return Z.min() / Z.max()


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


def _self_sim_sums(X, ids, seq):
    """Per id: sum of u, occurrences, sum over sequences of ||S_seq||^2 and of c_seq^2."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    uniq = np.unique(ids)
    S = np.stack([U[ids == t].sum(0) for t in uniq])
    c = np.array([(ids == t).sum() for t in uniq], dtype=float)
    q = np.array([sum(float(np.sum(U[(ids == t) & (seq == s)].sum(0) ** 2)) for s in np.unique(seq)) for t in uniq])
    c2 = np.array([sum(float(((ids == t) & (seq == s)).sum()) ** 2 for s in np.unique(seq)) for t in uniq])
    return uniq, S, c, q, c2


def naive_self_similarity(X, seq):
    """Mean cosine over pairs of occurrences that lie in different sequences (Ethayarajh 2019)."""
    C = _cos_matrix(X)
    return C[seq[:, None] != seq[None, :]].mean() if len(np.unique(seq)) > 1 else math.nan


def test_self_similarity_counts_only_pairs_from_different_sequences(data):
    X, seq = data
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 5, size=len(X))  # 5 token ids spread over the 6 sequences
    ids[seq == 0] = 7  # an id seen in ONE sequence only: no pair from different contexts
    X[seq == 0] += 3.0 * rng.standard_normal(X.shape[1])  # ... and very similar to itself there
    uniq, S, c, q, c2 = _self_sim_sums(X, ids, seq)
    per = m.self_similarity_per_id(S, c, q, c2)
    for r, t in enumerate(uniq):
        ref = naive_self_similarity(X[ids == t], seq[ids == t])
        if math.isnan(ref):
            assert math.isnan(per[r]) and t == 7
        else:
            assert per[r] == pytest.approx(ref, abs=1e-12)
    assert m.self_similarity(S, c, q, c2) == pytest.approx(np.nanmean(per), abs=1e-12)
    # Counting the pairs inside one sequence too (the old estimator) gives another, higher number.
    within = np.array([naive_mean_cosine(X[ids == t]) for t in uniq if t != 7])
    assert np.mean(within) != pytest.approx(np.nanmean(per), abs=1e-6)


def test_self_similarity_nan_when_no_id_has_pairs_in_two_sequences():
    assert math.isnan(m.self_similarity(np.ones((2, 3)), np.array([1, 4]), np.array([1.0, 16.0]),
                                        np.array([1.0, 16.0])))


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
    cc = np.array([0.1, -0.2, 0.3, 0.15])  # ranked by |CC_d|, as in the figure: 2, 1, 3, 0
    top = m.top_contributions(cc, k=10)
    assert top["dims"] == [2, 1, 3, 0]
    np.testing.assert_allclose(top["share"], cc[[2, 1, 3, 0]] / cc.sum())
    assert top["top1_share"] == pytest.approx(0.3 / 0.35)
    assert top["top3_share"] == pytest.approx((0.3 - 0.2 + 0.15) / 0.35)
    assert m.top_contributions(cc, k=2)["dims"] == [2, 1]
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
    # 64 groups of which only one holds tokens (a corpus of one document): no interval either
    S, N = np.zeros((64, 3)), np.zeros(64)
    S[7], N[7] = [3.0, 1.0, 0.0], 5.0
    assert all(math.isnan(v) for v in m.mean_cosine_ci(S, N))


def _literal_replicate(U, group, W):
    """The mean cosine of a replicate corpus built literally: group g copied W[g] times; a pair of
    positions counts when they are different tokens of one copy, or tokens of different groups."""
    rows, grp, copy, origin = [], [], [], []
    for g, w in enumerate(W):
        idx = np.flatnonzero(group == g)
        for c in range(int(w)):
            rows.append(U[idx])
            grp += [g] * len(idx)
            copy += [c] * len(idx)
            origin += list(idx)
    V, grp, copy, origin = np.concatenate(rows), np.array(grp), np.array(copy), np.array(origin)
    pair = (grp[:, None] != grp[None, :]) | ((copy[:, None] == copy[None, :]) & (origin[:, None] != origin[None, :]))
    return (V @ V.T)[pair].mean()


def test_bootstrap_replicate_weighs_within_group_pairs_once_per_copy():
    """The replicate statistic against the resampled corpus built literally (copies of one group are
    not paired with each other), with a zero hidden state in one group; all weights 1 = mean_cosine."""
    rng = np.random.default_rng(21)
    sizes = (3, 5, 2, 4, 6)
    group = np.repeat(np.arange(len(sizes)), sizes)
    X = rng.standard_normal((len(group), 5)) + 0.4 + 2.0 * rng.standard_normal((len(sizes), 5))[group]
    X[4] = 0.0  # a zero hidden state (group 1): u = 0
    U = X / np.where(np.linalg.norm(X, axis=1) > 0, np.linalg.norm(X, axis=1), 1.0)[:, None]
    S = np.stack([U[group == g].sum(0) for g in range(len(sizes))])
    N = np.array(sizes, dtype=float)
    Q = np.array([(U[group == g] ** 2).sum() for g in range(len(sizes))])
    W = np.array([[2.0, 0.0, 1.0, 1.0, 1.0], [0.0, 3.0, 0.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0],
                  [0.0, 0.0, 5.0, 0.0, 0.0]])
    ours = m._replicate_mean_cosine(W, S, N, Q)
    for w, got in zip(W, ours):
        assert got == pytest.approx(_literal_replicate(U, group, w), abs=1e-12)
    assert ours[2] == pytest.approx(naive_mean_cosine_with_zeros(X), abs=1e-12)
    reps = m.mean_cosine_replicates(S, N, 200, seed=3, group_u_sq=Q)
    assert reps.shape == (200,) and np.isfinite(reps).all()


def naive_mean_cosine_with_zeros(X):
    norms = np.linalg.norm(X, axis=1)
    U = X / np.where(norms > 0, norms, 1.0)[:, None]
    C = U @ U.T
    return C[~np.eye(len(X), dtype=bool)].mean()


def _coverage(rng, reps, n_docs, n_groups, doc_sd, win_sd, mu0=1.0, d=6, len_range=(4, 80), win_len=16, n_boot=1000,
              n_truth=400):
    """Coverage of the 95% interval over `reps` corpora drawn from a known process, and the share of
    intervals that contain their own estimate. A corpus: `n_docs` documents of random unequal length,
    each cut in windows of `win_len` tokens; token = mu + document offset (sd `doc_sd`) + window
    offset (sd `win_sd`) + N(0, I). Documents, with all their windows, are dealt at random into
    `n_groups` groups, as the extraction deals them (core.stats.batching.document_groups). The truth is
    the expected value of the statistic under this process, from `n_truth` corpora not used below."""
    mu = np.zeros(d, dtype=np.float32)
    mu[0] = mu0

    def corpus():
        lens = rng.integers(*len_range, size=n_docs)
        starts = np.cumsum(lens) - lens
        doc = np.repeat(np.arange(n_docs), lens)
        n_win = -(-lens // win_len)  # windows never cross documents
        win = np.repeat(np.cumsum(n_win) - n_win, lens) + (np.arange(doc.size) - starts[doc]) // win_len
        X = rng.standard_normal((doc.size, d), dtype=np.float32)
        X += mu + doc_sd * rng.standard_normal((n_docs, d), dtype=np.float32)[doc]
        X += win_sd * rng.standard_normal((int(n_win.sum()), d), dtype=np.float32)[win]
        U = X.astype(np.float64)
        U /= np.sqrt(np.einsum("td,td->t", U, U))[:, None]
        return np.add.reduceat(U, starts), lens.astype(float)  # (n_docs, d) sums of u, tokens per document

    def estimate(S_doc, n_doc):
        s, N = S_doc.sum(0), n_doc.sum()
        return (s @ s - N) / (N * (N - 1))

    truth = np.mean([estimate(*corpus()) for _ in range(n_truth)])
    hits, own = 0, 0
    for r in range(reps):
        S_doc, n_doc = corpus()
        grp = rng.integers(0, n_groups, size=n_docs)  # every document, with all its windows, in one group
        S = np.zeros((n_groups, d))
        np.add.at(S, grp, S_doc)
        N = np.bincount(grp, weights=n_doc, minlength=n_groups)
        lo, hi = m.mean_cosine_ci(S, N, n_boot=n_boot, seed=r)
        own += lo <= m.mean_cosine(S.sum(0), int(N.sum())) <= hi
        hits += lo <= truth <= hi
    return hits / reps, own / reps


def test_bootstrap_replicates_centre_on_the_estimate_with_a_strong_group_effect():
    """Issue 23's synthetic corpus: 40 groups of unequal size, each with a strong direction of its own.
    Replicates that paired the copies of a group lay 2.1 SD above the estimate and their 95% interval
    excluded it; with within-group pairs weighted w_g they lie within a few tenths of an SD."""
    rng = np.random.default_rng(0)
    G, d = 40, 64
    mu = np.zeros(d)
    mu[0] = 0.5
    S, N = np.zeros((G, d)), rng.integers(50, 400, size=G).astype(float)
    for g in range(G):
        X = mu + rng.standard_normal(d) + rng.standard_normal((int(N[g]), d))
        S[g] = (X / np.linalg.norm(X, axis=1, keepdims=True)).sum(0)
    est = m.mean_cosine(S.sum(0), int(N.sum()))
    reps = m.mean_cosine_replicates(S, N, 2000, seed=1)
    assert abs(reps.mean() - est) < 0.3 * reps.std()
    lo, hi = m.mean_cosine_ci(S, N, n_boot=2000, seed=1)
    assert lo < est < hi


@pytest.mark.slow  # 300 corpora (~3 s): a property of the interval, not a kernel; the full suite runs it
def test_bootstrap_coverage_with_document_effects():
    """Strong document effects, documents of unequal length in several windows, 64 groups (the
    extraction's): over 300 corpora the 95% interval covers the truth 90-99% of the time and always
    contains its own estimate (docs/metrics.md gives the measured coverage)."""
    cover, own = _coverage(np.random.default_rng(0), 300, n_docs=160, n_groups=64, doc_sd=1.0, win_sd=0.3, d=32,
                           len_range=(4, 40))
    assert own == 1.0
    assert 0.90 <= cover <= 0.99, cover


@pytest.mark.slow  # 300 corpora (~3 s): a property of the interval, not a kernel; the full suite runs it
def test_bootstrap_coverage_weak_document_effect_many_groups():
    cover, own = _coverage(np.random.default_rng(1), 300, n_docs=400, n_groups=200, doc_sd=0.15, win_sd=0.05,
                           len_range=(4, 40))
    assert own == 1.0
    assert 0.90 <= cover <= 0.99, cover


# ------------------------------------------------------------------ synthetic geometries


def test_isotropic_gaussian_is_isotropic():
    # d/K = 32/5000: sampling noise spreads the covariance eigenvalues only by ~ +-16%
    # (Marchenko-Pastur, (1 +- sqrt(d/K))^2), so IsoScore stays near 1. For I(W) the extreme
    # eigen-directions give Z ~ K exp(lambda/2) with lambda in ~[0.85, 1.17], so min/max ~ 0.85,
    # less sampling noise of the exponential sums: > 0.6 leaves a wide margin.
    X = np.random.default_rng(6).standard_normal((5000, 32))
    r = sample_values(X)
    assert abs(r["sample_mean_cosine"]) < 0.02
    assert r["isoscore"] > 0.9
    assert r["partition_isotropy"] > 0.6
    assert r["effective_rank"] == pytest.approx(32, rel=0.02)
    assert r["pc1_variance_ratio"] < 2.0 / 32
    assert r["n_sample"] == 5000


def test_shared_offset_gives_high_cosine_and_low_partition_isotropy():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((1000, 32)) + 10.0 * np.ones(32) / np.sqrt(32) * 3
    assert m.sample_mean_cosine(X) > 0.9
    # On unit-mean-norm vectors a common direction c gives Z(c) ~ K e while the others stay ~ K:
    # I(W) ~ 1/e, far below an isotropic sample of the same shape (~1).
    iso = m.partition_isotropy(rng.standard_normal((1000, 32)))
    assert m.partition_isotropy(X) < 0.45 < 0.9 < iso


def test_dimension_with_huge_variance_drives_pc1():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((2000, 32))
    X[:, 3] *= 100.0
    assert m.pc1_variance_ratio(X) > 0.95
    assert m.isoscore(X) < 0.05
    assert m.effective_rank(X) < 5  # singular values 100 vs 31 x 1: exp(H) ~ 3.9, far below 32


def test_effective_rank_is_roy_vetterli_on_singular_values():
    rng = np.random.default_rng(10)
    X = rng.standard_normal((300, 6)) * np.array([5.0, 3.0, 1.0, 1.0, 0.5, 0.1]) + 2.0
    sv = np.linalg.svd(X - X.mean(0), compute_uv=False)
    assert m.effective_rank(X) == pytest.approx(svd_effective_rank(X), rel=1e-9)
    lam = sv ** 2 / sv.sum() ** 2  # the variant on eigenvalues (squared singular values) is smaller
    q = lam / lam.sum()
    assert math.exp(-(q * np.log(q)).sum()) < m.effective_rank(X)


def test_effective_rank_of_rank_one_data():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((500, 1)) @ rng.standard_normal((1, 24))
    assert m.effective_rank(X) == pytest.approx(1.0, abs=1e-6)
    assert m.pc1_variance_ratio(X) == pytest.approx(1.0, abs=1e-9)
    assert m.isoscore(X) == pytest.approx(0.0, abs=1e-6)


def test_isoscore_matches_published_algorithm_stepwise():
    rng = np.random.default_rng(10)
    for X in (rng.standard_normal((300, 10)) @ rng.standard_normal((10, 10)),
              rng.standard_normal((200, 24)) * np.geomspace(10.0, 0.1, 24) + 5.0):
        assert m.isoscore(X) == pytest.approx(published_isoscore(X), abs=1e-10)


def test_isoscore_of_k_dims_equal_variance():
    # closed form of Rudman et al.: k dims with equal variance -> IsoScore = (k - 1) / (n - 1)
    rng = np.random.default_rng(11)
    n, k = 20, 5
    X = np.zeros((4000, n))
    X[:, :k] = rng.standard_normal((4000, k))
    X[:, :k] = (X[:, :k] - X[:, :k].mean(0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(X[:, :k].T))).T
    assert m.isoscore(X) == pytest.approx((k - 1) / (n - 1), abs=1e-8)


def test_whitened_correlated_gaussian_is_isotropic():
    from core.stats.postprocess import whiten

    rng = np.random.default_rng(12)
    A = rng.standard_normal((32, 32))
    X = rng.standard_normal((5000, 32)) @ A + 3.0
    assert m.isoscore(X) < 0.6
    assert m.isoscore(whiten(X)) > 0.95


def test_partition_isotropy_no_overflow_for_large_norms():
    X = np.random.default_rng(13).standard_normal((200, 8)) * 1e3
    v = m.partition_isotropy(X)
    assert np.isfinite(v) and 0.0 <= v <= 1.0


def test_partition_isotropy_matches_mu_viswanath_on_unit_mean_norm():
    rng = np.random.default_rng(14)
    X = 40.0 * (rng.standard_normal((100, 6)) + 0.2)  # hidden-state-like norms
    assert m.partition_isotropy(X) == pytest.approx(eig_partition_isotropy(X), rel=1e-10)
    assert m.partition_isotropy(X) == pytest.approx(m.partition_isotropy(X / 40.0), rel=1e-10)  # scale-free
    assert m.partition_isotropy(X) > 0.05  # no collapse to 0 at large norms


def test_isotropic_baseline_is_seeded_and_biased_below_one():
    a, b = isotropic_baseline(500, 64, seed=3), isotropic_baseline(500, 64, seed=3)
    assert a == b and set(a) == set(baseline_keys())
    assert 0.5 < a["isoscore"] < 0.99  # a finite isotropic sample is not perfectly isotropic
    assert a["effective_rank"] < 64 and a["pc1_variance_ratio"] > 1 / 64


def test_a_zero_hidden_state_has_cosine_zero_in_streaming_and_sample_metrics():
    rng = np.random.default_rng(15)
    X = rng.standard_normal((30, 4)) + 1.0
    X[[3, 17]] = 0.0
    U = X / np.where(np.linalg.norm(X, axis=1) > 0, np.linalg.norm(X, axis=1), 1.0)[:, None]
    C = U @ U.T  # cos(0, x) = 0
    naive = C[~np.eye(30, dtype=bool)].mean()
    assert m.sample_mean_cosine(X) == pytest.approx(naive, abs=1e-12)
    assert m.mean_cosine(U.sum(0), 30, (U * U).sum()) == pytest.approx(naive, abs=1e-12)
    assert m.cosine_contribution(U.sum(0), (U * U).sum(0), 30).sum() == pytest.approx(naive, abs=1e-12)


# ------------------------------------------------------------------ sample mean cosine, histogram


def test_sample_mean_cosine_matches_naive(data):
    X, _ = data
    assert m.sample_mean_cosine(X) == pytest.approx(naive_mean_cosine(X), abs=1e-9)


def test_sample_statistics_match_independent_computations(data):
    """The registry's sample statistics (core.stats.registry.sample_values: shared decompositions) against
    computations that share nothing with core.stats.kernels:
    numpy's SVD of the centred sample, the published IsoScore steps, eigh of the covariance, the naive
    pair loop."""
    X, _ = data
    rng = np.random.default_rng(3)
    for Y in (X, rng.standard_normal((400, 12)) * np.geomspace(8.0, 0.05, 12) + 3.0):
        r = sample_values(Y)
        lam = np.linalg.eigvalsh(np.cov(Y.T))
        assert r["pc1_variance_ratio"] == pytest.approx(lam.max() / lam.sum(), abs=1e-10)
        assert r["effective_rank"] == pytest.approx(svd_effective_rank(Y), rel=1e-9)
        assert r["isoscore"] == pytest.approx(published_isoscore(Y), abs=1e-10)
        assert r["partition_isotropy"] == pytest.approx(eig_partition_isotropy(Y), rel=1e-9)
        assert r["sample_mean_cosine"] == pytest.approx(naive_mean_cosine(Y), abs=1e-12)
        assert r["n_sample"] == len(Y)
        # the single functions are the same numbers (the API's two entry points agree)
        assert (m.effective_rank(Y), m.isoscore(Y)) == pytest.approx((r["effective_rank"], r["isoscore"]), rel=1e-12)


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
        lambda: m.self_similarity_per_id(np.ones((3, 2)), np.ones(4), np.ones(3), np.ones(3)),
        lambda: m.mean_cosine_ci(np.ones((3, 2)), np.ones(3), level=1.5),
        lambda: m.pc1_variance_ratio(np.ones(5)),
        lambda: m.isoscore(np.ones((1, 5))),
        lambda: sample_values(np.full((4, 3), np.nan)),
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


# ------------------------------------------------------------------ centred mean cosine


def naive_centred_mean_cosine(X):
    """The pair loop on the rows minus their mean (shares nothing with core.stats.kernels)."""
    Y = np.asarray(X, dtype=float)
    Y = Y - Y.mean(axis=0)
    n = len(Y)
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                ni, nj = np.linalg.norm(Y[i]), np.linalg.norm(Y[j])
                total += 0.0 if ni == 0 or nj == 0 else float(Y[i] @ Y[j]) / (ni * nj)
    return total / (n * (n - 1))


def test_centred_mean_cosine_matches_the_naive_pair_loop(data):
    X, _ = data
    rng = np.random.default_rng(21)
    for Y in (X, rng.standard_normal((60, 7)) * np.geomspace(4.0, 0.2, 7) + 2.5):
        assert m.centred_mean_cosine(Y) == pytest.approx(naive_centred_mean_cosine(Y), abs=1e-12)
        assert sample_values(Y)["centred_mean_cosine"] == pytest.approx(naive_centred_mean_cosine(Y), abs=1e-12)


def test_a_shared_vector_raises_the_raw_mean_cosine_and_leaves_the_centred_one_near_zero():
    """An isotropic cloud plus one vector added to every token (the issue's planted shared input): the raw
    mean cosine is the shared share |v|^2 / (|v|^2 + E|g|^2), the centred one stays at about -1/(K-1)."""
    rng = np.random.default_rng(22)
    K, d = 2000, 64
    G = rng.standard_normal((K, d))  # E|g|^2 = d
    v = rng.standard_normal(d)
    v *= np.sqrt(d / 2.0) / np.linalg.norm(v)  # |v|^2 = d / 2: expected raw cosine 1/3 (BERT's type embedding)
    iso_raw, iso_centred = m.sample_mean_cosine(G), m.centred_mean_cosine(G)
    raw, centred = m.sample_mean_cosine(G + v), m.centred_mean_cosine(G + v)
    assert abs(iso_raw) < 0.01 and abs(iso_centred) < 0.01
    assert raw == pytest.approx(1 / 3, abs=0.02)
    assert abs(centred) < 0.005 and centred == pytest.approx(iso_centred, abs=1e-3)
    # what is not a shared vector survives the centring: a skewed direction (most tokens a little below the
    # mean along dim 0, a few far above it) keeps a centred mean cosine well above 0
    S = rng.standard_normal((K, d))
    S[:, 0] = rng.exponential(30.0, K)
    assert m.centred_mean_cosine(S) > 0.03
