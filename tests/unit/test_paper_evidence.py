"""core.studies.papers.evidence: the level's bootstrap interval and the precision an interval justifies (numpy only)."""

import numpy as np
import pytest

from core.stats import kernels as M
from core.studies.papers import evidence as E


def _run(rng, L=3, G=20, n=15, d=8, mu=0.6):
    """Per-layer per-group sums of unit vectors of a cloud with a shared direction (its level ~ mu^2-ish)."""
    S, gn, q = np.zeros((L + 1, G, d)), np.full(G, float(n)), np.zeros((L + 1, G))
    for layer in range(L + 1):
        for g in range(G):
            X = rng.standard_normal((n, d)) + mu * (1 + layer) * np.ones(d) / np.sqrt(d) * 2
            U = X / np.linalg.norm(X, axis=1, keepdims=True)
            S[layer, g], q[layer, g] = U.sum(0), (U * U).sum()
    return S, gn, q


def test_level_interval_is_the_quantile_of_the_layers_mean_under_shared_weights():
    S, gn, q = _run(np.random.default_rng(0))
    lo, hi = E.level_interval(S, gn, q, n_boot=400)
    reps = np.mean([M.mean_cosine_replicates(S[layer], gn, 400, E.BOOT_SEED, q[layer]) for layer in (1, 2, 3)], axis=0)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])))
    level = np.mean([M.mean_cosine(S[layer].sum(0), int(gn.sum()), q[layer].sum()) for layer in (1, 2, 3)])
    assert lo < level < hi
    # the interval of the mean is narrower than the mean of the layers' own bounds would suggest, never wider
    own = [M.mean_cosine_ci(S[layer], gn, 400, E.BOOT_SEED, group_u_sq=q[layer]) for layer in (1, 2, 3)]
    assert hi - lo <= np.mean([b - a for a, b in own]) + 1e-12
    assert E.level_interval(S[:, :1], gn[:1], q[:, :1]) is None  # one group: no interval


def test_centred_level_interval_brackets_the_centred_level():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(40), 10)
    samples = [rng.standard_normal((400, 6)) + 5.0 for _ in range(3)]
    lo, hi = E.centred_level_interval(samples, groups, n_boot=300)
    level = np.mean([M.centred_mean_cosine(X) for X in samples[1:]])
    assert lo <= level <= hi and hi - lo < 0.05 and abs(level) < 0.01


def test_values_are_printed_at_the_precision_of_their_interval():
    assert E.decimals(0.10, 0.18) == 2 and E.decimals(0.150, 0.158) == 3 and E.decimals(0.1, 0.9) == 1
    assert E.fmt(0.15234, (0.1480, 0.1561)) == "0.152 [0.148, 0.156]"
    assert E.fmt(0.15234, None) == "0.15" and E.fmt(float("nan")) == "n/a"
    assert E.disjoint((0.1, 0.2), (0.3, 0.4)) and not E.disjoint((0.1, 0.35), (0.3, 0.4))
    assert E.beyond((0.12, 0.2), 0.1) and not E.beyond((0.05, 0.2), 0.1) and E.beyond(None, 0.1) is None


def test_curve_replicates_share_one_set_of_weights_across_layers():
    S, gn, q = _run(np.random.default_rng(2))
    reps = E.curve_replicates(S, gn, q, n_boot=300)
    assert reps.shape == (300, 4)
    for layer in range(4):  # each column is that layer's replicates under the shared seed
        np.testing.assert_allclose(reps[:, layer], M.mean_cosine_replicates(S[layer], gn, 300, E.BOOT_SEED, q[layer]))
    # the level interval is the interval of the rows' mean over layers 1..L
    assert E.replicate_interval(reps, lambda r: r[1:].mean()) == pytest.approx(E.level_interval(S, gn, q, n_boot=300))
    lo, hi = E.replicate_interval(reps, lambda r: r[3] - r[1])
    assert lo > 0  # the planted rise with depth is resolved
    assert E.curve_replicates(S[:, :1], gn[:1], q[:, :1]) is None and E.replicate_interval(None, np.min) is None


def test_frequency_replicates_against_a_naive_weighted_pearson():
    rng = np.random.default_rng(3)
    K, d = 300, 6
    groups = np.repeat(np.arange(30), 10)
    f = rng.uniform(1, 4, size=K)  # log frequencies: positive, so |x_0| = |3f + noise| follows f
    X = rng.normal(size=(2, K, d))
    X[:, :, 0] += 3 * f  # dim 0 tracks frequency in both layers; the others do not
    reps = E.frequency_above_replicates(X, f, groups, [0], [1, 2, 3], n_boot=50)
    assert reps.shape == (50, 2) and (reps > 0.5).all()
    # replicate 0 by hand: its documents' multinomial copies, then weighted Pearson r of |x_d| with f
    w = np.random.default_rng(E.BOOT_SEED).multinomial(30, np.full(30, 1 / 30), size=50)[0][groups].astype(float)

    def r(a, b):
        ma, mb = np.average(a, weights=w), np.average(b, weights=w)
        return np.average((a - ma) * (b - mb), weights=w) / np.sqrt(
            np.average((a - ma) ** 2, weights=w) * np.average((b - mb) ** 2, weights=w))

    want = abs(r(np.abs(X[1][:, 0]), f)) - np.mean([abs(r(np.abs(X[1][:, k]), f)) for k in (1, 2, 3)])
    assert reps[0, 1] == pytest.approx(want)
    assert E.frequency_above_replicates(X, f, np.zeros(K), [0], [1]) is None  # one document: no interval
