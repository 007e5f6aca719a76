"""The controlled drift experiment (core/studies/drift.py): the isolated query/key drift against a naive computation
(numpy loops over sequences, heads, queries and keys), the key-only and query-only identities, the input-drift
baseline's property (its output mean cosine grows with the drift norm at every temperature), seeding, caching
and input validation."""

import math

import numpy as np
import pytest

from core.base.errors import InputError
from core.studies.drift import ISOLATED, TARGETS, DriftSpec, _block, _inputs, drift_experiment, grid, run_drift


def _np(t):
    return t.detach().numpy().astype(np.float64)


def _layer_norm(x, w, b, eps=1e-5):
    mu = sum(x) / len(x)
    var = sum((v - mu) ** 2 for v in x) / len(x)
    return np.array([(v - mu) / math.sqrt(var + eps) * w[i] + b[i] for i, v in enumerate(x)])


def _gelu(x):
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])


def _cos(a, b):
    return float(np.dot(a, b) / math.sqrt(np.dot(a, a) * np.dot(b, b)))


def _naive(spec: DriftSpec, target: str, alpha: float, tau: float):
    """(output mean cosine, within-sequence mean cosine, attention entropy / log T) by loops, from the block's
    weights and the seeded inputs; the drift as the module docstring states it."""
    m = _block(spec.d, spec.heads, spec.seed, spec.biases)
    u, g, uq, uk = (_np(t) for t in _inputs(spec))
    W = {k: (_np(v.weight), _np(v.bias)) for k, v in m.items()}
    d, H, T, S = spec.d, spec.heads, spec.seq_len, spec.n_seq
    dh = d // H

    def qkv(x):
        z = W["qkv"][0] @ _layer_norm(x, *W["ln1"]) + W["qkv"][1]
        return [z[:d][h * dh:(h + 1) * dh] for h in range(H)], [z[d:2 * d][h * dh:(h + 1) * dh] for h in range(H)], \
            [z[2 * d:][h * dh:(h + 1) * dh] for h in range(H)]

    xs = [[g[s, t] + (alpha * u if target == "input" else 0) for t in range(T)] for s in range(S)]
    Q, K, V = {}, {}, {}
    for s in range(S):
        for t in range(T):
            Q[s, t], K[s, t], V[s, t] = qkv(xs[s][t])
    if target != "input":  # RMS norms of the undrifted queries and keys, over tokens and heads
        rq = math.sqrt(sum(np.dot(q, q) for v in Q.values() for q in v) / (S * T * H))
        rk = math.sqrt(sum(np.dot(k, k) for v in K.values() for k in v) / (S * T * H))
        for key in Q:
            for h in range(H):
                if target in ("query", "query_key"):
                    Q[key][h] = Q[key][h] + alpha * rq * uq[h]
                if target in ("key", "query_key"):
                    K[key][h] = K[key][h] + alpha * rk * (uq[h] if target == "query_key" else uk[h])
    ys, ent = [], 0.0
    for s in range(S):
        row = []
        for i in range(T):
            heads = []
            for h in range(H):
                logits = [float(np.dot(Q[s, i][h], K[s, j][h])) / (tau * math.sqrt(dh)) for j in range(T)]
                top = max(logits)
                e = [math.exp(v - top) for v in logits]
                p = [v / sum(e) for v in e]
                ent += -sum(v * math.log(v) for v in p if v > 0)
                heads.append(sum(p[j] * V[s, j][h] for j in range(T)))
            hid = xs[s][i] + W["out"][0] @ np.concatenate(heads) + W["out"][1]
            mlp = W["fc2"][0] @ _gelu(W["fc1"][0] @ _layer_norm(hid, *W["ln2"]) + W["fc1"][1]) + W["fc2"][1]
            row.append(hid + mlp)
        ys.append(row)
    flat = [y for row in ys for y in row]
    n = len(flat)
    all_pairs = sum(_cos(flat[a], flat[b]) for a in range(n) for b in range(n) if a != b) / (n * (n - 1))
    within = sum(_cos(row[a], row[b]) for row in ys for a in range(T) for b in range(T) if a != b) / (S * T * (T - 1))
    return all_pairs, within, ent / (S * T * H) / math.log(T)


@pytest.mark.parametrize("biases", [False, True])
def test_every_target_agrees_with_a_naive_computation(biases):
    spec = DriftSpec(d=8, heads=2, seq_len=4, n_seq=3, alphas=(0.0, 1.5), taus=(0.5, 2.0), seed=5, biases=biases)
    res = run_drift(spec)
    for target in TARGETS:
        for i, alpha in enumerate(spec.alphas):
            for j, tau in enumerate(spec.taus):
                want = _naive(spec, target, alpha, tau)
                got = [grid(res, k, target)[i, j] for k in ("output_mean_cosine", "output_within_sequence_cosine",
                                                            "attention_entropy")]
                np.testing.assert_allclose(got, want, atol=1e-10, err_msg=f"{target} alpha={alpha} tau={tau}")


def test_isolated_drift_leaves_inputs_isotropic_and_reaches_only_the_queries():
    spec = DriftSpec(d=32, heads=2, seq_len=16, n_seq=8, alphas=(0.0, 1.0, 4.0), taus=(0.25, 1.0), seed=2)
    res = run_drift(spec)
    for target in ISOLATED:  # the inputs are the same isotropic tokens at every alpha
        inp = grid(res, "input_mean_cosine", target)[:, 0]
        assert np.ptp(inp) == 0 and abs(inp[0]) < 0.05
    # the measured drift ratio ||mu|| / E||.|| grows with alpha where the drift is added, not elsewhere
    assert (np.diff(grid(res, "q_drift", "query")[:, 0]) > 0).all()
    assert np.ptp(grid(res, "k_drift", "query")) == 0 and np.ptp(grid(res, "q_drift", "key")) == 0
    for key in ("output_mean_cosine", "output_within_sequence_cosine", "attention_entropy"):
        k_only = grid(res, key, "key")  # a shared key vector adds a constant to each query's logits
        assert np.abs(k_only - k_only[0]).max() < 1e-12, key
        np.testing.assert_allclose(grid(res, key, "query"), grid(res, key, "query_key"), atol=1e-12)
    ent = grid(res, "attention_entropy", "query_key")
    assert (ent[-1] < ent[0]).all()  # the query drift sharpens attention at every temperature


@pytest.mark.parametrize("seed,d,heads", [(0, 64, 4), (1, 32, 2), (7, 48, 3)])
def test_input_drift_baseline_output_mean_cosine_grows_with_alpha_at_fixed_tau(seed, d, heads):
    spec = DriftSpec(d=d, heads=heads, seq_len=16, n_seq=8, alphas=(0.0, 0.5, 1.0, 2.0, 4.0),
                     taus=(0.25, 1.0, 4.0), seed=seed, biases=True)
    res = run_drift(spec)
    cos = grid(res, "output_mean_cosine", "input")
    assert cos.shape == (5, 3)
    assert (np.diff(cos, axis=0) > 0).all(), cos
    ent = grid(res, "attention_entropy", "input")
    assert ((ent > 0) & (ent <= 1 + 1e-12)).all()
    # the input's own mean cosine: ~0 without drift, then about alpha^2 / (1 + alpha^2): anisotropy in, out
    inp = grid(res, "input_mean_cosine", "input")[:, 0]
    assert abs(inp[0]) < 0.05 and (np.diff(inp) > 0).all()
    assert inp[-1] == pytest.approx(16 / 17, abs=0.05)


def test_biases_are_a_shared_vector():
    kw = dict(d=32, heads=2, seq_len=8, n_seq=8, alphas=(0.0,), taus=(1.0,), seed=1)
    free, biased = run_drift(DriftSpec(**kw)), run_drift(DriftSpec(**kw, biases=True))
    assert grid(biased, "output_mean_cosine", "input")[0, 0] > grid(free, "output_mean_cosine", "input")[0, 0] + 0.05
    assert "biases zeroed" in free["block"] and "with its biases" in biased["block"]


def test_seeded_and_cached(tmp_path):
    spec = DriftSpec(d=32, heads=2, seq_len=8, n_seq=4, alphas=(0.0, 1.0), taus=(1.0,), seed=3)
    a = drift_experiment(spec, tmp_path)
    b = drift_experiment(spec, tmp_path)
    assert not a["cache_hit"] and b["cache_hit"]
    assert a["experiments"] == b["experiments"] == run_drift(spec)["experiments"]
    other = run_drift(DriftSpec(d=32, heads=2, seq_len=8, n_seq=4, alphas=(0.0, 1.0), taus=(1.0,), seed=4))
    assert other["experiments"]["query_key"]["output_mean_cosine"] != a["experiments"]["query_key"]["output_mean_cosine"]


@pytest.mark.parametrize("kw,msg", [({"d": 30, "heads": 4}, "divisible"), ({"taus": (0.0,)}, "taus"),
                                    ({"alphas": (-1.0,)}, "alphas"), ({"seq_len": 1}, "seq_len"),
                                    ({"alphas": ()}, "at least one"), ({"d": 4096}, "small"),
                                    ({"biases": "yes"}, "biases")])
def test_bad_specs_are_refused(kw, msg):
    with pytest.raises(InputError, match=msg):
        DriftSpec(**kw)


def test_the_rise_has_a_paired_interval_over_the_sequences():
    """The claims' drift rows carry a 95% interval of the rise (alpha min -> max), resampling sequences with one
    set of weights for both alphas: it brackets the measured rise, and with every sequence alike it is a point."""
    spec = DriftSpec(d=16, heads=2, seq_len=8, n_seq=12, alphas=(0.0, 4.0), taus=(0.5, 2.0), seed=1)
    res = run_drift(spec)
    for target in TARGETS:
        cos = grid(res, "output_mean_cosine", target)
        cis = res["experiments"][target]["output_mean_cosine_rise_ci"]
        for t, (lo, hi) in enumerate(cis):
            assert lo - 1e-12 <= cos[1, t] - cos[0, t] <= hi + 1e-12, (target, t, lo, hi)
        lo, hi = res["experiments"][target]["output_mean_cosine_rise_mean_ci"]
        assert lo - 1e-12 <= float(np.mean(cos[1] - cos[0])) <= hi + 1e-12
    assert res["experiments"]["input"]["output_mean_cosine_rise_mean_ci"][0] > 0.5  # input drift: resolved
