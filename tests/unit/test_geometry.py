"""Geometry beyond the cosine (core/stats/geometry.py, issue 25): intrinsic dimension, matrix entropy, linear CKA.

Each kernel against data of known structure and an independent computation. Numpy only, seconds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.stats import geometry as G
from core.stats import kernels
from core.stats import registry as S
from core.stats.batching import document_groups


def _linear(rng, K=2000, k=5, D=384):
    """K points of a k-dim Gaussian in a random k-dim subspace of R^D."""
    Q = np.linalg.qr(rng.standard_normal((D, k)))[0]
    return rng.standard_normal((K, k)) @ Q.T


def _swiss_roll(rng, K=2000):
    t = 1.5 * np.pi * (1 + 2 * rng.random(K))
    return np.c_[t * np.cos(t), 21 * rng.random(K), t * np.sin(t)]


def _gauss10(rng, K=2000, D=100, noise=0.01):
    """A 10-dim standard Gaussian in R^100 plus isotropic noise of std 0.01."""
    Z = np.zeros((K, D))
    Z[:, :10] = rng.standard_normal((K, 10))
    return Z + noise * rng.standard_normal((K, D))


# Tolerances: TwoNN and GRIDE (n1 = 8) within 10% of the true dimension on 2,000 points.
@pytest.mark.parametrize("make, dim", [(_linear, 5), (_swiss_roll, 2), (_gauss10, 10)], ids=["linear5", "swissroll", "gauss10"])
def test_intrinsic_dimension_recovers_known_manifolds(make, dim):
    X = make(np.random.default_rng(0))
    r = G.neighbour_distances(X, 2 * max(G.GRIDE_SCALES))
    assert G.twonn(r) == pytest.approx(dim, rel=0.10)
    assert G.gride(r, G.GRIDE_N1) == pytest.approx(dim, rel=0.10)
    assert G.gride(r, 1) == pytest.approx(dim, rel=0.10)  # the TwoNN maximum-likelihood estimate


def test_gride_n1_1_is_the_twonn_maximum_likelihood_estimate():
    r = G.neighbour_distances(_swiss_roll(np.random.default_rng(1), 500), 2)
    mu = r[:, 1] / r[:, 0]
    assert G.gride(r, 1) == pytest.approx(len(mu) / np.log(mu).sum(), rel=1e-9)


def test_neighbour_distances_match_brute_force():
    X = np.random.default_rng(2).standard_normal((300, 7))
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    np.fill_diagonal(D, np.inf)
    np.testing.assert_allclose(G.neighbour_distances(X, 5, block=64), np.sort(D, 1)[:, :5], rtol=1e-9)


def test_duplicates_are_dropped_and_counted():
    X = _swiss_roll(np.random.default_rng(3), 1000)
    Xd = np.vstack([X, X[:37], X[:5]])
    smp = S.Sample(Xd)
    r, dropped = smp.neighbours
    assert dropped == 42 and len(r) == 1000 and (r[:, 0] > 0).all()
    assert G.twonn(r) == pytest.approx(G.twonn(G.neighbour_distances(X, r.shape[1])), rel=1e-12)


def test_matrix_entropy_known_cases_and_an_independent_computation():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 40)) @ rng.standard_normal((40, 40))
    # independent: eigenvalues of the K x K Gram matrix vs singular values of the sample
    lam = np.clip(np.linalg.eigvalsh(X @ X.T), 0, None)
    p = lam / lam.sum()
    p = p[p > 1e-15]
    sv = np.linalg.svd(X, compute_uv=False) ** 2
    q = sv / sv.sum()
    assert G.matrix_entropy(X) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-9)
    assert G.matrix_entropy(X) == pytest.approx(-(q * np.log(q)).sum(), rel=1e-9)
    assert G.matrix_entropy(X.T) == pytest.approx(G.matrix_entropy(X), rel=1e-9)  # K < d takes the other Gram
    assert abs(G.matrix_entropy(np.outer(rng.standard_normal(200), rng.standard_normal(30)))) < 1e-9  # rank 1 -> 0
    iso = G.matrix_entropy(rng.standard_normal((5000, 64)))  # K >> d: near log d
    assert math.log(64) - 0.02 < iso <= math.log(64)
    iso = G.matrix_entropy(rng.standard_normal((64, 5000)))  # d >> K: near log K
    assert math.log(64) - 0.02 < iso <= math.log(64)


def test_shared_decompositions_give_the_standalone_values():
    """Sample reuses one scatter matrix for the covariance spectrum and the matrix entropy, and finds
    duplicates by their bytes: the same numbers as the standalone kernels and np.unique."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((400, 30)) * 3 + 5
    smp = S.Sample(X)
    assert smp.matrix_entropy == pytest.approx(G.matrix_entropy(X), rel=1e-12)
    assert S.Sample(X.T).matrix_entropy == pytest.approx(G.matrix_entropy(X.T), rel=1e-12)  # K < d
    Xd = np.vstack([X, X[[3, 3, 9]]])
    U, dropped = G.unique_rows(Xd)
    _, first = np.unique(Xd, axis=0, return_index=True)
    assert dropped == len(Xd) - len(first) == 3 and np.array_equal(U, Xd[np.sort(first)])


def _naive_cka(X, Y):
    """Linear CKA with the unbiased HSIC from the n x n Gram matrices, term by term (Song et al. 2012, eq. 5)."""
    def hsic(K, L):
        n = len(K)
        K, L = K.copy(), L.copy()
        np.fill_diagonal(K, 0)
        np.fill_diagonal(L, 0)
        one = np.ones(n)
        return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
                - 2 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3))
    K, L = X @ X.T, Y @ Y.T
    return hsic(K, L) / math.sqrt(hsic(K, K) * hsic(L, L))


def test_linear_cka_invariances_and_a_naive_implementation():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((200, 30)) @ rng.standard_normal((30, 30))
    Q = np.linalg.qr(rng.standard_normal((30, 30)))[0]
    assert G.linear_cka(X, X @ Q) == pytest.approx(1.0, abs=1e-10)
    assert G.linear_cka(X, 3.5 * X + rng.standard_normal(30)) == pytest.approx(1.0, abs=1e-10)
    Y = np.tanh(X[:, :10]) + 0.5 * rng.standard_normal((200, 10))
    assert G.linear_cka(X, Y) == pytest.approx(_naive_cka(X, Y), abs=1e-8)
    assert G.hsic_unbiased(X @ X.T, Y @ Y.T) == pytest.approx(
        _naive_cka(X, Y) * math.sqrt(G.hsic_unbiased(X @ X.T, X @ X.T) * G.hsic_unbiased(Y @ Y.T, Y @ Y.T)), rel=1e-9)


def test_linear_cka_of_independent_gaussians_is_near_zero():
    rng = np.random.default_rng(6)
    vals = [G.linear_cka(rng.standard_normal((500, 50)), rng.standard_normal((500, 50))) for _ in range(5)]
    assert abs(np.mean(vals)) < 0.01 and max(abs(v) for v in vals) < 0.03


def test_cka_matrix_is_symmetric_with_a_unit_diagonal_and_blocks_do_not_matter(monkeypatch):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((150, 12))
    Xs = [X, X @ rng.standard_normal((12, 8)), np.tanh(X), rng.standard_normal((150, 5))]
    C = G.cka_matrix(Xs)  # whole Gram matrices
    np.testing.assert_allclose(C, C.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(C), 1.0, atol=1e-12)
    monkeypatch.setattr(G, "FULL_GRAMS_BYTES", 0)  # too large to hold whole: blocks of rows
    np.testing.assert_allclose(C, G.cka_matrix(Xs, block=32), atol=1e-12)
    np.testing.assert_allclose(C, G.cka_matrix(Xs, block=1000), atol=1e-12)
    for i in range(4):
        for j in range(4):
            assert C[i, j] == pytest.approx(_naive_cka(Xs[i], Xs[j]), abs=1e-8)
    np.testing.assert_allclose(G.cka_cross(Xs[:2], Xs[2:]), C[:2, 2:], atol=1e-12)


# ----------------------------------------------------------------------------- CKA's bootstrap interval
def _naive_replicate_hsic(K, L, groups, w):
    """The unbiased HSIC of a resampled corpus, written out: w[g] copies of group g (the g-th sorted label) as
    explicit rows, then the estimator's three means over the pairs and triples of distinct rows in which two
    rows of one group are only ever together within one copy (the copies are the same documents, not other
    ones), in HSIC_u = (n-1)/(n-3) [a (n-4)/(n-2) + n/(n-2) s_K s_L - 2 c]."""
    idx, gv, cv = [], [], []
    for gl, wg in zip(np.unique(groups), w):
        rows = np.flatnonzero(groups == gl)
        for c in range(int(wg)):
            idx += list(rows)
            gv += [gl] * len(rows)
            cv += [c] * len(rows)
    idx, gv, cv = map(np.asarray, (idx, gv, cv))
    n = len(idx)
    Kv, Lv = K[np.ix_(idx, idx)], L[np.ix_(idx, idx)]
    ok = ~np.eye(n, dtype=bool) & ((gv[:, None] != gv[None]) | (cv[:, None] == cv[None]))
    a, sK, sL = (Kv * Lv)[ok].mean(), Kv[ok].mean(), Lv[ok].mean()
    ok3 = ok[:, :, None] & ok[:, None, :] & ok[None, :, :]
    c = (ok3 * Kv[:, :, None] * Lv[:, None, :]).sum() / ok3.sum()
    return (n - 1) / (n - 3) * (a * (n - 4) / (n - 2) + n / (n - 2) * sK * sL - 2 * c)


def _grouped(rng, n=22, G_=6, d=4):
    groups = np.arange(n) % G_
    rng.shuffle(groups)
    X = rng.standard_normal((n, d)) + 2.0 * rng.standard_normal((G_, d))[groups]  # strong group effects
    Y = np.tanh(X @ rng.standard_normal((d, 3))) + 0.5 * rng.standard_normal((n, 3))
    return X, Y, groups


def test_cka_replicates_equal_a_naive_resample_whose_copies_are_not_paired():
    rng = np.random.default_rng(11)
    X, Y, groups = _grouped(rng)
    K, L = X @ X.T, Y @ Y.T
    ones = np.ones(6)
    assert _naive_replicate_hsic(K, L, groups, ones) == pytest.approx(G.hsic_unbiased(K, L), rel=1e-10)
    for w in (ones, np.array([2, 0, 1, 2, 0, 1.0]), np.array([0, 3, 0, 0, 2, 1.0]), rng.multinomial(6, ones / 6)):
        naive = _naive_replicate_hsic(K, L, groups, w) / math.sqrt(
            _naive_replicate_hsic(K, K, groups, w) * _naive_replicate_hsic(L, L, groups, w))
        assert G.cka_replicates([X], groups, w[None], [Y])[0, 0, 0] == pytest.approx(naive, rel=1e-9)
        # one run's matrix (X, Y, tanh X) gives the same cell
        assert G.cka_replicates([X, Y, np.tanh(X)], groups, w[None])[0, 0, 1] == pytest.approx(naive, rel=1e-9)
    # literal duplication (a group drawn twice as its rows twice, copies paired like other documents) is another
    # statistic: it pairs each row with its copy and the two copies of a group with each other
    w = np.array([2, 0, 1, 2, 0, 1.0])
    dup = np.concatenate([np.flatnonzero(groups == g) for g, k in enumerate(w) for _ in range(int(k))])
    literal = G.linear_cka(X[dup], Y[dup])
    assert abs(literal - G.cka_replicates([X], groups, w[None], [Y])[0, 0, 0]) > 1e-3


def test_cka_interval_point_is_the_estimate_and_literal_copies_would_bias_it():
    """The interval's estimate is cka_cross's; with strong group effects the replicates centre on it, while
    replicates that duplicate rows (copies paired) lie above it (pairs of copies are the most alike)."""
    rng = np.random.default_rng(12)
    G_, n = 30, 240
    groups = rng.integers(0, G_, size=n)
    X = rng.standard_normal((n, 8)) + 1.5 * rng.standard_normal((G_, 8))[groups]
    Y = np.tanh(X @ rng.standard_normal((8, 6))) + rng.standard_normal((n, 6)) + rng.standard_normal((G_, 6))[groups]
    out = G.cka_interval([X, Y], groups, n_boot=100, seed=3)
    np.testing.assert_allclose(out["matrix"], G.cka_matrix([X, Y]), atol=1e-12)
    est = out["matrix"][0, 1]
    assert out["low"][0, 1] <= est <= out["high"][0, 1] and out["n_groups"] == len(np.unique(groups))
    W = kernels.group_weights(np.random.default_rng(3), 100, out["n_groups"])
    ours = G.cka_replicates([X], groups, W, [Y])[:, 0, 0]
    labels = np.unique(groups)
    literal = [G.linear_cka(X[d], Y[d]) for d in
               (np.concatenate([np.flatnonzero(groups == labels[g]) for g in np.repeat(np.arange(len(w)), w.astype(int))])
                for w in W)]
    assert abs(np.mean(ours) - est) < 0.5 * np.std(ours)
    assert np.mean(literal) - est > 1.0 * np.std(ours)


def test_document_groups_of_sampled_tokens_are_those_of_the_whole_corpus():
    """The extraction deals the corpus's windows into groups with document_groups; the CKA interval calls it again
    on the sampled tokens' documents: a subset, whose largest document index may be smaller."""
    from core.base.config import CONFIG

    doc = np.repeat(np.arange(50), np.random.default_rng(0).integers(1, 4, size=50))  # each document's windows
    for seed in (0, 7):
        want = document_groups(doc, seed, CONFIG.bootstrap_groups)
        assert all(len(np.unique(want[doc == k])) == 1 for k in range(50))  # a document's windows: one group
        for rows in (np.arange(0, len(doc), 3), np.arange(len(doc) // 2)):
            np.testing.assert_array_equal(document_groups(doc[rows], seed, CONFIG.bootstrap_groups), want[rows])


@pytest.mark.slow
def test_cka_interval_coverage_with_document_effects():
    """Documents of 2-8 tokens with shared offsets in both layers (the second a noisy nonlinear map of the
    first), dealt into 64 groups as the extraction deals them: over 150 corpora the 95% interval covers the
    truth (the estimator's mean over 300 other corpora) 88-99% of the time and always contains its estimate.
    Measured: 0.95 over 200 corpora (seed 0; 0.30 the truth)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 5))

    def corpus(n_docs=60):
        doc = np.repeat(np.arange(n_docs), rng.integers(2, 9, size=n_docs))
        X = rng.standard_normal((doc.size, 6)) + rng.standard_normal((n_docs, 6))[doc]
        Y = np.tanh(X @ A) + 0.7 * rng.standard_normal((doc.size, 5)) + 0.7 * rng.standard_normal((n_docs, 5))[doc]
        return X, Y, doc

    truth = np.mean([G.linear_cka(X, Y) for X, Y, _ in (corpus() for _ in range(300))])
    hits = own = 0
    reps = 150
    for r in range(reps):
        X, Y, doc = corpus()
        out = G.cka_interval([X], rng.integers(0, 64, size=60)[doc], [Y], n_boot=200, seed=r)
        lo, hi = out["low"][0, 0], out["high"][0, 0]
        hits += lo <= truth <= hi
        own += lo <= out["matrix"][0, 0] <= hi
    assert own == reps
    assert 0.88 <= hits / reps <= 0.99, hits / reps


def test_results_json_has_the_run_cka_matrix_and_the_layers_page_draws_it():
    import json

    from core import views
    from core.views import export
    from tests.synthetic import synthetic_run

    st, res = synthetic_run(n_layers=4, seed=0, label="net-a")
    sec = res["cka"]
    assert sec["estimator"].startswith("linear CKA with the unbiased HSIC")
    idx = G.cka_positions(int(st.arrays["sample"].shape[1]))
    want = G.cka_matrix([st.sample(l)[idx] for l in range(st.n_layers)])
    np.testing.assert_allclose(np.asarray(sec["matrix"], dtype=float), want, atol=1e-12)
    assert sec["layers"] == [int(x) for x in st.layer_ids] and sec["n_positions"] == len(idx)
    lo, hi = np.asarray(sec["low"], dtype=float), np.asarray(sec["high"], dtype=float)
    assert sec["interval"]["n_boot"] == G.CKA_BOOT and sec["interval"]["n_groups"] >= 2
    assert (lo <= want + 1e-12).all() and (want <= hi + 1e-12).all() and (lo < hi)[~np.eye(len(want), dtype=bool)].all()
    other = synthetic_run(n_layers=3, d=16, seed=1, label="net-b")[1]
    v = views.cka_heatmap([res, other])
    assert len(v.figure.data) == 2 and len(v.data) == len(res["layers"]) ** 2 + len(other["layers"]) ** 2
    assert {"layer_a", "layer_b", "cka", "cka_low", "cka_high"} <= set(json.loads(export.data_bytes(v, "json"))["data"][0])
    assert "cka_low" in export.data_bytes(v, "csv").decode().splitlines()[0]
    assert "95% interval [" in v.figure.data[0].customdata[0][1]  # the hover of a cell off the diagonal
    old = {k: v for k, v in res.items() if k != "cka"}  # results of an earlier version: said, not an empty chart
    assert views.cka_heatmap([old]).figure is None


def test_compare_cka_pairs_runs_of_the_same_tokens_only():
    from core import views
    from tests.synthetic import synthetic_run

    st_a, res_a = synthetic_run(n_layers=4, seed=0, label="net-a")
    # run B: the same token sample (ids, windows, positions), other vectors: e.g. a checkpoint of the same training
    st_b = type(st_a)(key=st_a.key + "-b", manifest=st_a.manifest, meta=st_a.meta,
                      arrays={**st_a.arrays, "sample": np.tanh(st_a.arrays["sample"][::-1].copy())})
    assert views.same_tokens(st_a, st_b)[0]
    v = views.cka_across(st_a, res_a, st_b, res_a)
    idx = G.cka_positions(int(st_a.arrays["sample"].shape[1]))
    want = G.cka_cross([st_a.sample(l)[idx] for l in range(st_a.n_layers)], [st_b.sample(l)[idx] for l in range(st_b.n_layers)])
    got = v.data.pivot(index="layer_a", columns="layer_b", values="cka").to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-12)
    best = v.data.groupby("layer_a")["best_layer_b_for_a"].first().to_numpy()
    low = v.data.pivot(index="layer_a", columns="layer_b", values="cka_low").to_numpy()
    high = v.data.pivot(index="layer_a", columns="layer_b", values="cka_high").to_numpy()
    al = G.cka_alignment(want, low, high)  # a best match only where B's layers differ for that layer of A: the argmax
    expect = [int(st_b.layer_ids[j]) if k is not None else None for j, k in zip(np.argmax(want, axis=1), al["best"])]
    assert [None if b is None or b != b else int(b) for b in best] == expect and any(e is not None for e in expect)
    same = views.cka_across(st_a, res_a, st_a, res_a).data  # a run against itself aligns each layer with itself
    assert (same.groupby("layer_a")["best_layer_b_for_a"].first().to_numpy() == np.asarray(st_a.layer_ids)).all()
    st_c, res_c = synthetic_run(n_layers=3, d=16, seed=1, label="net-b")  # other tokens: said, not drawn
    st_c = type(st_c)(key=st_c.key, manifest=st_c.manifest, meta=st_c.meta,
                      arrays={**st_c.arrays, "sample_position": st_c.arrays["sample_position"] + 1})
    v = views.cka_across(st_a, res_a, st_c, res_c)  # same corpus, other tokens: documents' mean vectors
    assert "document-level" in v.figure.layout.title.text.lower() and (v.data["level"] == "document").all()
    docs = sorted(set(st_a.arrays["sample_doc"].tolist()) & set(st_c.arrays["sample_doc"].tolist()))

    def means(st, l):  # naive: each shared document's sampled vectors averaged, one by one
        X, doc = st.sample(l).astype(np.float64), st.arrays["sample_doc"]
        return np.stack([X[doc == d].mean(0) for d in docs])
    want = np.array([[_naive_cka(means(st_a, i), means(st_c, j)) for j in range(st_c.n_layers)]
                     for i in range(st_a.n_layers)])
    got = v.data.pivot(index="layer_a", columns="layer_b", values="cka").to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-8)
    st_d = type(st_c)(key=st_c.key + "-d", manifest={**st_c.manifest, "corpus": {"sha256": "1" * 64}}, meta=st_c.meta,
                      arrays=st_c.arrays)  # another corpus: said, not drawn
    v = views.cka_across(st_a, res_a, st_d, res_c)
    assert v.figure is None and "not comparable at the token level" in v.caption.lower() and "corpora" in v.caption


def test_cka_alignment_of_synthetic_matrices():
    # distinct layers: each row's best is its argmax, one layer each
    C = np.array([[0.9, 0.5, 0.2], [0.4, 0.8, 0.6], [0.1, 0.3, 0.7]])
    a = G.cka_alignment(C)
    assert a["best"] == [0, 1, 2] and a["ties"] == [[0], [1], [2]] and a["degenerate"] is None and a["why"] == ""
    # a near-tie: B's layers 1 and 2 within CKA_TIE of each other for A's layer 1: the match is the set
    C[1] = [0.2, 0.8, 0.8 - G.CKA_TIE / 2]
    a = G.cka_alignment(C)
    assert a["best"][1] == 1 and a["ties"][1] == [1, 2] and a["degenerate"] is None
    # B's layers indistinguishable (an untrained control as B: every column alike): no best anywhere, said with numbers
    D = np.array([[0.37, 0.365, 0.36, 0.355], [0.29, 0.285, 0.28, 0.28], [0.08, 0.075, 0.07, 0.07]])
    a = G.cka_alignment(D)
    assert a["degenerate"] == "B" and a["best"] == [None, None, None] and "0.015" in a["why"] and "0.02" in a["why"]
    # MiniLM against its control (docs/metrics.md): rows spread by 0.03, more than 0.02 but less than the
    # intervals' half-width (0.04 here): indistinguishable too, said with the interval's numbers
    M = np.array([[0.37, 0.36, 0.35, 0.34], [0.29, 0.28, 0.27, 0.26]])
    assert G.cka_alignment(M)["degenerate"] is None  # without intervals, 0.03 is a distinction
    a = G.cka_alignment(M, M - 0.04, M + 0.04)
    assert a["degenerate"] == "B" and "0.04" in a["why"]
    # the same matrix the other way round: A's layers indistinguishable, every row would point at one layer
    a = G.cka_alignment(D.T)
    assert a["degenerate"] == "A" and "layers of A are indistinguishable" in a["why"]
    assert a["best"] == [0, 0, 0, 0]  # defined, but the line is not drawn
    # one row flat among distinct ones: that row has no best, the alignment stands
    E = np.array([[0.9, 0.1], [0.5, 0.51], [0.1, 0.9]])
    a = G.cka_alignment(E)
    assert a["best"] == [0, None, 1] and a["degenerate"] is None
    assert G.cka_alignment(np.full((2, 3), np.nan))["best"] == [None, None]
    with pytest.raises(ValueError, match="matrix"):
        G.cka_alignment(np.zeros(3))


def test_compare_cka_draws_no_alignment_line_against_indistinguishable_layers():
    from core import views
    from tests.synthetic import synthetic_run

    st_a, res_a = synthetic_run(n_layers=4, seed=0, label="net-a")
    sample = st_a.arrays["sample"]
    flat = np.repeat(sample[-1:], sample.shape[0], axis=0)  # B: every layer the same vectors (a degenerate control)
    st_b = type(st_a)(key=st_a.key + "-flat", manifest=st_a.manifest, meta=st_a.meta, arrays={**st_a.arrays, "sample": flat})
    v = views.cka_across(st_a, res_a, st_b, res_a)
    names = [t.name for t in v.figure.data]
    assert "best layer of B" not in names  # no dots, no line
    said = " ".join(a.text for a in v.figure.layout.annotations)
    assert "No alignment line" in said and "layers of B are indistinguishable" in said
    assert "no alignment line" in v.figure.layout.title.subtitle.text.replace("<br>", " ").lower()  # the subtitle too
    assert v.data["best_layer_b_for_a"].isna().all() and v.manifest["params"]["alignment_degenerate"] == "B"
    assert "No depth alignment" in v.caption and v.notes
    # against a run with distinct layers (itself), the line is drawn
    same = views.cka_across(st_a, res_a, st_a, res_a)
    assert "best layer of B" in [t.name for t in same.figure.data]


def test_cka_to_final_over_checkpoints(monkeypatch):
    """core.studies.series.cka_to_final: each checkpoint's layer l against the final checkpoint's layer l on the same
    positions (the final one is 1 everywhere); the Dynamics heatmap shows that matrix."""
    from core.studies import series as SER
    from core.views import dynamics as D
    from tests.synthetic import synthetic_run

    st0, res0 = synthetic_run(n_layers=4, seed=0, label="net")
    steps = [type(st0)(key=f"{st0.key}-{k}", manifest=st0.manifest, meta=st0.meta,
                       arrays={**st0.arrays, "sample": (st0.arrays["sample"] * (1 + k) + k * np.sin(st0.arrays["sample"]))})
             for k in range(3)]
    monkeypatch.setattr(SER.pipeline, "get_stats", lambda spec, cache_dir=None: steps[int(spec)])
    got = SER.cka_to_final([0, 1, 2])
    idx = G.cka_positions(int(st0.arrays["sample"].shape[1]))
    want = [[_naive_cka(st.sample(l)[idx].astype(float), steps[-1].sample(l)[idx].astype(float)) for l in range(4)]
            for st in steps]
    np.testing.assert_allclose(got["matrix"], want, atol=1e-8)
    np.testing.assert_allclose(got["matrix"][-1], 1.0, atol=1e-12)
    ser = {"run": "net", "steps": [0, 1, 2], "results": [res0] * 3, "cka_to_final": got,
           "record": {"spec": {"arch": "gpt2", "n_layers": 3, "d_model": 24, "tokenizer": "bpe"}}}
    v = D.cka_to_final(ser)
    np.testing.assert_allclose(np.asarray(v.figure.data[0].z, dtype=float), np.asarray(want).T, atol=1e-8)
    assert "Kornblith" in v.figure.data[0].customdata[0][0]
    assert D.cka_to_final({**ser, "cka_to_final": None}).figure is None  # an older series: said, not drawn
