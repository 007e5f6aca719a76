"""core.stats.postprocess: properties of each what-if transform and of PostProcess (numpy only)."""

import numpy as np
import pytest

from core.stats import postprocess as pp
from core.stats.postprocess import PostProcess


@pytest.fixture
def X():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((12, 12))
    X = rng.standard_normal((800, 12)) @ A + 5.0
    X[:, 4] *= 30.0  # an outlier-scale dimension
    return X


def test_center_zero_mean(X):
    out = pp.center(X)
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-9)
    np.testing.assert_allclose(out - X, -X.mean(0) * np.ones_like(X), atol=1e-9)


def test_zscore_unit_std_and_constant_dims_zero(X):
    X = X.copy()
    X[:, 2] = 7.0
    out = pp.zscore(X)
    std = out.std(0)
    np.testing.assert_allclose(np.delete(std, 2), 1.0, atol=1e-9)
    np.testing.assert_array_equal(out[:, 2], 0.0)
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-9)


def test_abtt_removes_top_variance(X):
    D = 2
    lam = np.sort(np.linalg.eigvalsh(np.cov(X.T)))[::-1]
    out = pp.all_but_the_top(X, D)
    lam_out = np.sort(np.linalg.eigvalsh(np.cov(out.T)))[::-1]
    # the top D directions are gone (D zero eigenvalues), the rest are kept as they were
    np.testing.assert_allclose(lam_out[: len(lam) - D], lam[D:], rtol=1e-8)
    np.testing.assert_allclose(lam_out[len(lam) - D:], 0.0, atol=1e-8 * lam[0])
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-8)
    np.testing.assert_allclose(pp.all_but_the_top(X, 0), pp.center(X), atol=1e-12)


def test_whiten_identity_covariance(X):
    out = pp.whiten(X)
    assert out.shape == X.shape
    # eps=1e-8 is added to eigenvalues as small as ~1e-3 here: deviation ~1e-5
    np.testing.assert_allclose(np.cov(out.T), np.eye(12), atol=1e-4)
    np.testing.assert_allclose(np.cov(pp.whiten(X, eps=0.0).T), np.eye(12), atol=1e-9)
    low = pp.whiten(X, k=3)
    assert low.shape == (800, 3)
    np.testing.assert_allclose(np.cov(low.T), np.eye(3), atol=1e-6)


def test_remove_dims_drops_columns(X):
    out = pp.remove_dims(X, [4, 0])
    assert out.shape == (800, 10)
    np.testing.assert_array_equal(out, np.delete(X, [0, 4], axis=1))


@pytest.mark.parametrize(
    "call",
    [
        lambda X: pp.all_but_the_top(X, 12),
        lambda X: pp.all_but_the_top(X, -1),
        lambda X: pp.whiten(X, k=0),
        lambda X: pp.whiten(X, k=13),
        lambda X: pp.remove_dims(X, [12]),
        lambda X: pp.remove_dims(X, [1, 1]),
        lambda X: pp.remove_dims(X, range(12)),
        lambda X: pp.center(np.ones(3)),
    ],
)
def test_transforms_validate(X, call):
    with pytest.raises(ValueError):
        call(X)


def test_transforms_do_not_mutate_input(X):
    before = X.copy()
    PostProcess(center=True, zscore=True, abtt=1, whiten=True, remove=(3,)).apply(X)
    np.testing.assert_array_equal(X, before)


def test_identity_and_labels():
    ident = PostProcess()
    assert ident.is_identity and ident.label() == "raw"
    p = PostProcess(center=True, abtt=2, remove=(381, 308))
    assert not p.is_identity
    assert p.remove == (308, 381)
    assert p.label() == "drop dims 308,381 + center + ABTT-2"
    assert PostProcess(whiten=True, whiten_k=64).label() == "whiten-64"


def test_apply_identity_returns_same_values(X):
    np.testing.assert_array_equal(PostProcess().apply(X), X)


def test_apply_order_remove_then_transforms(X):
    p = PostProcess(center=True, zscore=True, abtt=1, whiten=True, whiten_k=5, remove=(4,))
    want = pp.whiten(pp.all_but_the_top(pp.zscore(pp.center(pp.remove_dims(X, [4]))), 1), 5)
    np.testing.assert_allclose(p.apply(X), want, atol=1e-10)
    # remove indices refer to the raw dimensions even when other steps are on
    q = PostProcess(zscore=True, remove=(4,))
    np.testing.assert_allclose(q.apply(X), pp.zscore(np.delete(X, 4, axis=1)), atol=1e-12)


def test_apply_validates_against_data(X):
    with pytest.raises(ValueError, match="abtt"):
        PostProcess(abtt=11, remove=(0,)).apply(X)
    with pytest.raises(ValueError, match="whiten_k"):
        PostProcess(whiten=True, whiten_k=12, remove=(0,)).apply(X)


@pytest.mark.parametrize(
    "kwargs",
    [dict(abtt=-1), dict(whiten_k=4), dict(whiten=True, whiten_k=0), dict(remove=(-1,)),
     dict(remove=(2, 2)), dict(center="yes")],
)
def test_postprocess_validates(kwargs):
    with pytest.raises(ValueError):
        PostProcess(**kwargs)


def test_dict_round_trip_and_hashable():
    p = PostProcess(center=True, whiten=True, whiten_k=8, remove=(5, 1))
    d = p.to_dict()
    assert d["remove"] == [1, 5]
    assert PostProcess.from_dict(d) == p
    assert hash(PostProcess.from_dict(d)) == hash(p)
    assert PostProcess.from_dict({}) == PostProcess()
    with pytest.raises(ValueError, match="unknown"):
        PostProcess.from_dict({"centre": True})
