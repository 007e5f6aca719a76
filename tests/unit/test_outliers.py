"""Unit tests for core.stats.outliers on synthetic arrays (numpy only)."""

import math
import subprocess
import sys

import numpy as np
import pytest

from core.stats.outliers import (
    activation_outliers,
    agreement,
    frequency_correlation,
    massive_activations,
    norm_param_outliers,
    persistent_activation_outliers,
    persistent_dims,
)


def _mean_abs(rng, n_layers=6, n_tokens=2000, d=64):
    """m_{l,d} = mean_t |x_{t,d}| of iid Gaussian hidden states: every dim on the same scale."""
    return np.stack([np.abs(rng.standard_normal((n_tokens, d))).mean(0) for _ in range(n_layers)])


def _naive_flags(row, sigma=3.0):
    mu = sum(row) / len(row)
    sd = math.sqrt(sum((v - mu) ** 2 for v in row) / len(row))
    return [i for i, v in enumerate(row) if v > mu + sigma * sd]


def test_planted_activation_outlier_is_found():
    rng = np.random.default_rng(0)
    m = _mean_abs(rng)
    m[2:, 7] *= 6.0  # a dim that becomes an outlier from layer 2 on
    flags = activation_outliers(m)
    assert flags[:2] == [[], []]
    assert all(f == [7] for f in flags[2:])
    assert persistent_activation_outliers(flags) == [7]


def test_iid_activations_have_no_persistent_outlier():
    # The 3-sigma rule has a false-positive rate of ~0.13% per dim (6 x 64 dims: ~0.5 expected
    # flags in all), so a stray single-layer flag is allowed; persistence removes it.
    for seed in range(5):
        flags = activation_outliers(_mean_abs(np.random.default_rng(seed)))
        assert sum(map(len, flags)) <= 1
        assert persistent_activation_outliers(flags) == []


def test_activation_rule_matches_naive_implementation():
    rng = np.random.default_rng(2)
    m = np.abs(rng.standard_t(2, size=(5, 50)))  # heavy tails: some flags
    assert activation_outliers(m) == [_naive_flags(list(r)) for r in m]
    assert any(activation_outliers(m))


def test_constant_layer_has_no_outlier():
    assert activation_outliers(np.ones((3, 10))) == [[], [], []]


def test_activation_outliers_rejects_1d():
    with pytest.raises(ValueError, match="2-D"):
        activation_outliers(np.ones(10))


def test_persistence_threshold():
    flags = [[1, 2], [1], [1, 3], [3], [], [], [], []]  # L = 8 -> ceil(0.25 * 8) = 2
    assert persistent_dims(flags, 1) == [1, 2, 3]
    assert persistent_dims(flags, 2) == [1, 3]
    assert persistent_dims(flags, 3) == [1]
    assert persistent_activation_outliers(flags) == [1, 3]
    assert persistent_activation_outliers(flags[:7]) == [1, 3]  # ceil(1.75) = 2
    assert persistent_activation_outliers(flags + [[]]) == [1]  # ceil(2.25) = 3
    assert persistent_dims([[4, 4]], 2) == []  # a dim counts once per layer


def test_massive_activations():
    mx = np.ones((2, 6))
    mx[1, 4], mx[1, 2] = 100.0, 50.0
    out = massive_activations(mx, median_abs=np.array([0.5, 2.0]), top=2)
    assert out[1]["dims"] == [4, 2] and out[1]["values"] == [100.0, 50.0]
    assert out[1]["ratio"] == pytest.approx(50.0)
    assert out[0]["ratio"] == pytest.approx(2.0)
    # without a median, the median of the max_abs row stands in
    assert massive_activations(mx, top=1)[1]["ratio"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="median_abs"):
        massive_activations(mx, median_abs=np.ones(3))


def test_norm_param_outliers_planted_and_persistence():
    rng = np.random.default_rng(3)
    w = 1.0 + 0.01 * rng.standard_normal((6, 64))
    b = 0.01 * rng.standard_normal((6, 64))
    w[:, 5] = 20.0  # in all 6 blocks: persistent
    w[:3, 17] = -20.0  # in 3 blocks: not persistent (needs MORE than 3)
    b[:4, 30] = 1.0  # bias outlier in 4 blocks: persistent through the union
    out = norm_param_outliers(w, b)
    assert out["weight"][0] == [5, 17] and out["weight"][5] == [5]
    assert out["bias"][0] == [30] and out["bias"][5] == []
    assert out["union"][0] == [5, 17, 30]
    assert out["persistent"] == [5, 30]
    assert norm_param_outliers(w, None)["bias"] is None
    assert norm_param_outliers(w, None)["persistent"] == [5]


def test_fresh_norm_parameters_have_no_outlier():
    out = norm_param_outliers(np.ones((4, 32)), np.zeros((4, 32)))
    assert out["union"] == [[]] * 4 and out["persistent"] == []


def test_agreement_math():
    act = [[0], [1, 2], [2, 3], [], [9]]  # hidden layers 0..4
    norm = [[1, 2], [2, 4], [], [5]]  # blocks 0..3
    out = agreement(act, norm)
    assert [r["layer"] for r in out] == [1, 2, 3, 4]
    assert out[0]["intersection"] == [1, 2] and out[0]["jaccard"] == 1.0
    assert out[1]["intersection"] == [2] and out[1]["jaccard"] == pytest.approx(1 / 3)
    assert out[2]["jaccard"] is None  # both empty
    assert out[3]["jaccard"] == 0.0
    pre = agreement(act, norm, layer_offset=0)
    assert [r["layer"] for r in pre] == [0, 1, 2, 3]
    assert pre[1]["jaccard"] == pytest.approx(1 / 3)
    assert len(agreement(act[:3], norm)) == 2  # blocks without a matching layer are dropped


def test_frequency_correlation():
    rng = np.random.default_rng(4)
    r = rng.uniform(-0.1, 0.1, size=(3, 40))
    r[:, 3], r[:, 11] = 0.8, -0.6
    out = frequency_correlation(r, [11, 3], n_random=8, seed=0)
    assert out["outlier_dims"] == [3, 11]
    assert len(out["random_dims"]) == 8 and not {3, 11} & set(out["random_dims"])
    for lay in out["layers"]:
        assert lay["outlier_r"] == [0.8, -0.6]
        assert lay["baseline"] == pytest.approx(np.abs(r[lay["layer"], out["random_dims"]]).mean())
        assert lay["baseline"] < 0.1
    again = frequency_correlation(r, [3, 11], n_random=8, seed=0)
    assert again["random_dims"] == out["random_dims"]
    assert frequency_correlation(r, [3, 11], n_random=8, seed=1)["random_dims"] != out["random_dims"]
    # fewer candidates than asked: all of them
    assert len(frequency_correlation(r[:, :5], [3], n_random=10)["random_dims"]) == 4
    with pytest.raises(ValueError, match="out of range"):
        frequency_correlation(r, [40])


def test_frequency_correlation_ignores_nan_in_baseline():
    r = np.full((1, 6), np.nan)
    r[0, 1] = 0.5
    out = frequency_correlation(r, [0], n_random=5)
    assert out["layers"][0]["baseline"] == pytest.approx(0.5)


def test_import_does_not_import_torch():
    code = "import sys, core.stats.outliers; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_numpy_rules_never_touch_torch():
    """The split: core/stats/outliers.py (rules) and core/studies/attention/summary.py are numpy only; what runs a
    model lives in core/compute/ablation.py and core/studies/attention/{arch,stats}.py."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "core"
    for f in (root / "stats" / "outliers.py", root / "studies" / "attention" / "summary.py"):
        assert "torch" not in f.read_text(), f
