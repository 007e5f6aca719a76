"""The bootstrap interval of mean_cosine on a real model: it contains its own estimate at every layer.

Issue 23: on minilm-l6, wiki-en, 8,000 tokens, layer 6 had mean_cosine 0.02575 and an interval
[0.02614, 0.03563] wholly above it (within-group pairs weighed w_g^2 in a replicate).
"""

import numpy as np
import pytest

from core.base.config import CONFIG
from core.base.spec import RunSpec
from core.compute.pipeline import analyze, get_stats
from core.stats import kernels as M


@pytest.mark.slow
def test_minilm_interval_contains_the_estimate_at_every_layer(cache_dir):
    spec = RunSpec(model="minilm-l6", corpus="wiki-en", max_tokens=8000, device="cpu")
    res = analyze(spec, cache_dir)
    a = get_stats(spec, cache_dir).arrays
    assert len(res["layers"]) == 7
    for l, row in enumerate(res["layers"]):
        lo, hi = row["mean_cosine_ci"]
        assert lo < row["mean_cosine"] < hi, (row["layer"], row["mean_cosine"], lo, hi)
        # the replicates centre on the estimate (the old ones lay +1.8 SD above it at layer 6)
        reps = M.mean_cosine_replicates(a["group_sum_u"][l], a["group_n"], CONFIG.bootstrap_draws, seed=row["layer"],
                                        group_u_sq=a["group_u_sq"][l])
        assert abs(np.nanmean(reps) - row["mean_cosine"]) < 0.3 * np.nanstd(reps), row["layer"]
