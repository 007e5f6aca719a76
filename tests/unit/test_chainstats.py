"""The outlier chain's rules (core/stats/chain_rules.py, issue 24) against naive computations on synthetic
arrays, and the massive / high-norm sections of a synthetic run. Numpy only."""

import itertools

import numpy as np
import pytest

from core.stats import chain_rules as C
from core.stats.chain_summary import high_norm_section, massive_section
from core.stats.kernels import high_norm_share, high_norm_split
from tests.synthetic import synthetic_run


def test_position_classes():
    assert C.position_class(0, "<s>", special=True) == "first position"  # position 0 wins
    assert C.position_class(4, "[SEP]", special=True) == "BOS/special"
    for tok in ("Ġ.", ",", "Ċ", "ĊĊ", "▁;", "Ġ—", "\n"):
        assert C.position_class(7, tok) == "delimiter/punctuation", tok
    for tok in ("Ġthe", "##ing", "▁cat", "7", None):
        assert C.position_class(7, tok) == "other", tok


def test_massive_layer_counts_against_a_loop():
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(200, 16)))
    X[0, 3], X[5, 9], X[7, 3] = 5000.0, 300.0, 150.0  # a planted massive dim 3 at token 0
    med = float(np.median(X))
    got = C.massive_layer(X.max(0), med, X)
    assert (got["dim"], got["top"]) == (3, 5000.0)
    assert got["ratio"] == pytest.approx(5000.0 / med)
    assert got["values_above_100x"] == sum(1 for v in X.ravel() if v > 100 * med) == 3
    assert got["values_above_1000x"] == sum(1 for v in X.ravel() if v > 1000 * med) == 1
    assert got["dims_above_100x"] == sum(1 for v in X.max(0) if v > 100 * med) == 2


def _naive_candidates(mi, mo, factor):
    tops_in, tops_out = [max(r) for r in mi], [max(r) for r in mo]
    med_in, med_out = sorted(tops_in)[len(tops_in) // 2], sorted(tops_out)[len(tops_out) // 2]  # odd count
    return [(b, list(mo[b]).index(tops_out[b]), list(mi[b]).index(tops_in[b])) for b in range(len(mi))
            if tops_in[b] > factor * med_in and tops_out[b] > factor * med_out]


def test_super_weight_candidates_against_a_loop():
    rng = np.random.default_rng(1)
    mi, mo = np.abs(rng.normal(size=(7, 40))), np.abs(rng.normal(size=(7, 12)))
    mi[2, 17], mo[2, 5] = 90.0, 400.0  # block 2: both spike -> a candidate at W[5, 17]
    mi[4, 3] = 80.0  # block 4: the input alone spikes -> no candidate
    got = C.super_weight_candidates(mi, mo)
    assert [(c["block"], c["row"], c["col"]) for c in got] == _naive_candidates(mi, mo, C.SPIKE_FACTOR) == [(2, 5, 17)]
    assert got[0]["max_in"] == 90.0 and got[0]["max_out"] == 400.0


def test_weight_magnitude_against_a_loop():
    rng = np.random.default_rng(2)
    W = rng.normal(size=(6, 9))
    W[4, 1] = 25.0
    got = C.weight_magnitude(W, 4, 1)
    others = [abs(W[i, j]) for i in range(6) for j in range(9) if (i, j) != (4, 1)]
    assert got["ratio_to_max_other"] == pytest.approx(25.0 / max(others))
    assert got["ratio_to_median"] == pytest.approx(25.0 / np.median(np.abs(W)))
    assert got["rank"] == 1 and C.weight_magnitude(W, 0, 0)["rank"] == 1 + sum(v > abs(W[0, 0]) for v in others + [25])


def test_int8_rule_against_a_loop():
    rng = np.random.default_rng(3)
    L, d, n = 12, 10, 200
    counts = rng.integers(0, 30, size=(L, d)).astype(float)
    got = C.int8_outliers(counts, np.full(L, n))
    naive = [k for k in range(d) if sum(counts[l, k] / n >= 0.06 for l in range(L)) >= 3]  # 25% of 12 layers
    assert got["dims"] == naive
    assert got["per_layer"][0] == [k for k in range(d) if counts[0, k] / n >= 0.06]


def test_sink_rate_against_a_loop():
    rng = np.random.default_rng(4)
    A = rng.random((3, 2, 5, 5))
    A /= A.sum(-1, keepdims=True)
    n_real = np.array([5, 3, 4])
    alpha = C.alpha_first(A, n_real)
    for b, h in itertools.product(range(3), range(2)):
        assert alpha[b, h] == pytest.approx(np.mean([A[b, h, i, 0] for i in range(n_real[b])]))
    al = np.array([[0.9, 0.31, 0.3], [0.05, 0.6, 0.1]])
    got = C.sink_rate(al)
    assert got["rate"] == pytest.approx(3 / 6) and got["per_layer"] == pytest.approx([2 / 3, 1 / 3])


def test_set_overlap():
    got = C.set_overlap({"int8": [1, 5, 7], "activation": [5, 7, 9], "norm": [7]})
    assert got["all"] == [7]
    pair = {(p["a"], p["b"]): p for p in got["pairs"]}
    assert pair[("int8", "activation")]["intersection"] == [5, 7]
    assert pair[("int8", "activation")]["jaccard"] == pytest.approx(2 / 4)
    assert C.set_overlap({"a": [], "b": []})["pairs"][0]["jaccard"] is None


def test_high_norm_split_agrees_with_the_share():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(500, 8))
    X[:20] *= 60.0
    sp = high_norm_split(X)
    assert sp["share"] == high_norm_share(X) == pytest.approx(0.04)
    assert sp["mask"][:20].all() and not sp["mask"][20:].any()
    norms = np.linalg.norm(X, axis=1)
    assert norms[19::-1].min() > sp["threshold"] > norms[20:].max()
    assert not high_norm_split(rng.normal(size=(300, 8)))["mask"].any()


def test_sections_of_a_synthetic_run():
    st, res = synthetic_run()
    mas = massive_section(st)
    hn = high_norm_section(st)
    assert len(mas) == len(hn) == st.n_layers
    for l, (m, h) in enumerate(zip(mas, hn)):
        X = np.abs(st.sample(l).astype(np.float64))
        assert m["median"] == pytest.approx(np.median(X))
        assert m["top"] == pytest.approx(st.arrays["max_abs"][l].max())
        assert m["ratio"] == pytest.approx(res["layers"][l]["massive_ratio"])
        assert res["layers"][l]["massive_count_100x"] == m["values_above_100x"]
        assert h["share"] == pytest.approx(res["layers"][l]["high_norm_share"])
        assert sum(h["where"]["position_classes"].values()) == h["n"]


@pytest.mark.parametrize("shape,kind", [((5000, 96), "normal"), ((4097, 3), "normal"), ((3000, 7), "ties"),
                                        ((2049, 4), "heavy"), ((100, 5), "normal"), ((4096, 2), "zeros")])
def test_abs_median_and_counts_equal_numpy(shape, kind):
    """The radix-select median of |x| (float32 samples) and the 100x / 1000x counts equal np.median and a
    count over float64 |x|, for odd and even sizes, many ties, heavy tails (massive values) and zeros."""
    rng = np.random.default_rng(sum(shape))
    X = rng.normal(size=shape)
    if kind == "ties":
        X = np.round(X * 4) / 4
    elif kind == "heavy":
        X = X * rng.lognormal(0, 3, size=shape)
        X[0, 0] = 5e4
    elif kind == "zeros":
        X[: shape[0] // 2 + 3] = 0.0
    X32 = X.astype(np.float32)
    ref = np.abs(X32.astype(np.float64))
    med, above = C.abs_summary(X32)
    assert med == float(np.median(ref))
    assert C.abs_median(C.abs_values(X32.astype(np.float64))) == med  # float64 holding float32 values: the same
    for f, n in above.items():
        assert n == int((ref > f * med).sum()) if med > 0 else n == 0


def test_abs_median_of_values_float32_cannot_hold_is_numpy_s():
    X = np.random.default_rng(1).normal(size=(5000, 3))  # float64 values: no float32 shortcut
    assert C.abs_values(X).dtype == np.float64
    assert C.abs_median(C.abs_values(X)) == float(np.median(np.abs(X)))
