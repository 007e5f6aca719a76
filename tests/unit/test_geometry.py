"""Geometry beyond the cosine (core/geometry.py, issue 25): intrinsic dimension, matrix entropy, linear CKA.

Each kernel against data of known structure and an independent computation. Numpy only, seconds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from core import geometry as G
from core import statistics as S


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


def test_results_json_has_the_run_cka_matrix_and_the_layers_page_draws_it():
    import json

    from core import export, views
    from tests.synthetic import synthetic_run

    st, res = synthetic_run(n_layers=4, seed=0, label="net-a")
    sec = res["cka"]
    assert sec["estimator"].startswith("linear CKA with the unbiased HSIC")
    idx = G.cka_positions(int(st.arrays["sample"].shape[1]))
    want = G.cka_matrix([st.sample(l)[idx] for l in range(st.n_layers)])
    np.testing.assert_allclose(np.asarray(sec["matrix"], dtype=float), want, atol=1e-12)
    assert sec["layers"] == [int(x) for x in st.layer_ids] and sec["n_positions"] == len(idx)
    other = synthetic_run(n_layers=3, d=16, seed=1, label="net-b")[1]
    v = views.cka_heatmap([res, other])
    assert len(v.figure.data) == 2 and len(v.data) == len(res["layers"]) ** 2 + len(other["layers"]) ** 2
    assert {"layer_a", "layer_b", "cka"} <= set(json.loads(export.data_bytes(v, "json"))["data"][0])
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
    np.testing.assert_array_equal(best, np.asarray(st_b.layer_ids)[np.argmax(want, axis=1)])
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


def test_cka_to_final_over_checkpoints(monkeypatch):
    """core.series.cka_to_final: each checkpoint's layer l against the final checkpoint's layer l on the same
    positions (the final one is 1 everywhere); the Dynamics heatmap shows that matrix."""
    from core import series as SER
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
