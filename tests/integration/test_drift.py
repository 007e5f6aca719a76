"""The controlled drift experiment: a property test (output mean cosine grows with the drift norm
at every temperature), seeding, caching and input validation."""

import numpy as np
import pytest

from core.drift import DriftSpec, drift_experiment, grid, run_drift
from core.errors import InputError


@pytest.mark.parametrize("seed,d,heads", [(0, 64, 4), (1, 32, 2), (7, 48, 3)])
def test_output_mean_cosine_grows_with_alpha_at_fixed_tau(seed, d, heads):
    spec = DriftSpec(d=d, heads=heads, seq_len=16, n_seq=8, alphas=(0.0, 0.5, 1.0, 2.0, 4.0),
                     taus=(0.25, 1.0, 4.0), seed=seed)
    res = run_drift(spec)
    cos = grid(res, "output_mean_cosine")
    assert cos.shape == (5, 3)
    assert (np.diff(cos, axis=0) > 0).all(), cos
    ent = grid(res, "attention_entropy")
    assert ((ent > 0) & (ent <= 1 + 1e-12)).all()
    # the input's own mean cosine: ~0 without drift, growing with alpha
    inp = grid(res, "input_mean_cosine")[:, 0]
    assert abs(inp[0]) < 0.05 and (np.diff(inp) > 0).all()


def test_seeded_and_cached(tmp_path):
    spec = DriftSpec(d=32, heads=2, seq_len=8, n_seq=4, alphas=(0.0, 1.0), taus=(1.0,), seed=3)
    a = drift_experiment(spec, tmp_path)
    b = drift_experiment(spec, tmp_path)
    assert not a["cache_hit"] and b["cache_hit"]
    assert a["output_mean_cosine"] == b["output_mean_cosine"] == run_drift(spec)["output_mean_cosine"]
    other = run_drift(DriftSpec(d=32, heads=2, seq_len=8, n_seq=4, alphas=(0.0, 1.0), taus=(1.0,), seed=4))
    assert other["output_mean_cosine"] != a["output_mean_cosine"]


@pytest.mark.parametrize("kw,msg", [({"d": 30, "heads": 4}, "divisible"), ({"taus": (0.0,)}, "taus"),
                                    ({"alphas": (-1.0,)}, "alphas"), ({"seq_len": 1}, "seq_len"),
                                    ({"alphas": ()}, "at least one"), ({"d": 4096}, "small")])
def test_bad_specs_are_refused(kw, msg):
    with pytest.raises(InputError, match=msg):
        DriftSpec(**kw)
