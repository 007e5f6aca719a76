"""The share of high-norm tokens (core.stats.kernels.high_norm_share, issue 24 item 3) against a naive
Otsu split on synthetic arrays, and its place in results.json. Numpy only."""

import numpy as np
import pytest

from core.stats.kernels import high_norm_share
from tests.synthetic import synthetic_run


def _naive_share(X: np.ndarray) -> float:
    """Otsu by brute force: every threshold between two distinct log-norms, classes by masking."""
    norms = np.sqrt((X * X).sum(axis=1))
    logn = np.log(norms[norms > 0])
    values = np.unique(logn)
    best, best_t = -1.0, None
    for t in (values[:-1] + values[1:]) / 2:
        lo, hi = logn[logn <= t], logn[logn > t]
        w0, w1 = len(lo) / len(logn), len(hi) / len(logn)
        between = w0 * w1 * (lo.mean() - hi.mean()) ** 2
        if between > best:
            best, best_t = between, t
    if best_t is None:
        return 0.0
    # Otsu's effectiveness: between-class over total variance, written out
    hi, lo = logn[logn > best_t], logn[logn <= best_t]
    within = (((lo - lo.mean()) ** 2).sum() + ((hi - hi.mean()) ** 2).sum()) / len(logn)
    total = ((logn - logn.mean()) ** 2).sum() / len(logn)
    if (total - within) / total < 0.8:
        return 0.0
    return float((logn > best_t).sum()) / X.shape[0]


def _cases():
    rng = np.random.default_rng(7)
    bimodal = rng.normal(size=(400, 16))
    bimodal[rng.choice(400, 12, replace=False)] *= 40.0
    with_zeros = rng.normal(size=(200, 8)) * rng.lognormal(0, 1, size=(200, 1))
    with_zeros[:5] = 0.0
    ties = np.repeat(rng.normal(size=(20, 4)), 5, axis=0)
    return {"bimodal": bimodal, "unimodal": rng.normal(size=(300, 24)), "heavy-tailed": with_zeros, "ties": ties,
            "two rows": np.array([[1.0, 0.0], [0.0, 3.0]])}


@pytest.mark.parametrize("name", list(_cases()))
def test_high_norm_share_is_the_naive_otsu_split(name):
    X = _cases()[name]
    assert high_norm_share(X) == pytest.approx(_naive_share(X), abs=1e-12)


def test_planted_high_norm_tokens_are_found_exactly():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1000, 32))
    X[:30] *= 50.0  # 3% of the tokens with 50 times the norm
    assert high_norm_share(X) == pytest.approx(0.03, abs=1e-12)
    assert high_norm_share(np.ones((6, 3))) == 0.0  # equal norms: no split


@pytest.mark.parametrize("d", [4, 24, 384])
def test_one_group_of_norms_has_no_high_norm_tokens(d):
    """Otsu splits any cloud; a unimodal one (Gaussian rows, or log-norms uniform over a range) must
    give 0, not the half above its middle."""
    rng = np.random.default_rng(d)
    assert high_norm_share(rng.normal(size=(2000, d))) == 0.0
    spread = rng.normal(size=(2000, d)) * np.exp(rng.uniform(0, 3, size=(2000, 1)))
    assert high_norm_share(spread) == 0.0


def test_results_report_it_per_layer_from_the_sample():
    st, res = synthetic_run()
    for l, row in enumerate(res["layers"]):
        assert row["high_norm_share"] == pytest.approx(_naive_share(st.sample(l).astype(np.float64)), abs=1e-12)
