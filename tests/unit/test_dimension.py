"""One dimension drilled into (core/dimension.py) and the frequency views (core/views_dimension.py)."""

import math

import numpy as np
import pandas as pd
import pytest

from core import dimension as D
from core.analysis import frequency_r
from core.projection import sample_table
from core.views import dimension as VD
from tests.synthetic import synthetic_run


def test_fisher_interval_against_the_formula_and_its_edges():
    lo, hi = D.fisher_ci(0.3, 1003)
    se = 1 / math.sqrt(1000)
    assert lo == pytest.approx(math.tanh(math.atanh(0.3) - D.Z95 * se))
    assert hi == pytest.approx(math.tanh(math.atanh(0.3) + D.Z95 * se))
    assert lo < 0.3 < hi
    assert all(math.isnan(v) for v in D.fisher_ci(float("nan"), 100) + D.fisher_ci(0.5, 3))


def test_r_profile_p_value_is_the_share_of_baseline_dims_at_least_as_strong():
    R = np.array([[0.9, 0.1, -0.2, 0.95, 0.5], [-0.8, 0.1, 0.85, 0.0, np.nan]])
    df = D.r_profile(R, dim=0, outlier_dims=[3], n_tokens=500)
    # layer 0: baseline dims 1, 2, 4 (3 is an outlier, 0 itself) -> none reaches 0.9: p = 1/4
    assert df.loc[0, "n_baseline"] == 3 and df.loc[0, "p_baseline"] == pytest.approx(0.25)
    # layer 1: dims 1, 2 finite, |0.85| >= |-0.8| -> p = 2/3; the sign of r is kept
    assert df.loc[1, "n_baseline"] == 2 and df.loc[1, "p_baseline"] == pytest.approx(2 / 3)
    assert df.loc[1, "r"] == -0.8 and df.loc[1, "ci_high"] < 0
    with pytest.raises(ValueError, match="dim"):
        D.r_profile(R, 9, [], 10)


def test_top_tokens_are_ranked_by_absolute_value():
    table = pd.DataFrame({"token": list("abcde"), "context": list("ABCDE"), "document": range(5),
                          "position": range(5), "frequency": [1, 2, 3, 4, 5]})
    out = D.top_tokens(np.array([0.1, -5.0, 2.0, 0.0, 3.0]), table, top=3)
    assert out["token"].tolist() == ["b", "e", "c"] and out["x_d"].tolist() == [-5.0, 3.0, 2.0]


def test_planted_frequency_dim_is_found_with_its_sign():
    st, res = synthetic_run()
    R = frequency_r(st)
    out = res["outliers"]["activation"]["persistent"]
    assert out, "the synthetic run plants an outlier dim"
    dim = out[0]
    prof = D.r_profile(R, dim, out, int(st.n_tokens))
    assert (prof["r"] > 0.5).all() and (prof["p_baseline"] < 0.1).all()  # |x_d| grows with log frequency
    table = sample_table(st)
    f, a, r = D.frequency_scatter(st.sample(2)[:, dim], table)
    assert r > 0.5 and len(f) == len(a) == len(table)
    v = VD.dimension_r(res, R, dim, out)
    assert v.figure is not None and "p_baseline" in v.data
    assert VD.dimension_scatter(res, st.sample(2)[:, dim], table, dim, 2).data["abs_x_d"].min() >= 0
    assert len(VD.dimension_tokens(res, st.sample(2)[:, dim], table, dim, 2).data) == D.TOP_TOKENS


def test_frequency_figure_is_signed_with_distinct_lines_and_a_baseline_first():
    st, res = synthetic_run()
    R = frequency_r(st)
    v = VD.frequency_correlation(res, R)
    traces = v.figure.data
    assert traces[0].fill == "toself" and "baseline" in traces[0].name  # the band, first in the legend
    lines = [t for t in traces if t.fill != "toself"]
    assert len({(t.line.color, t.marker.symbol, t.line.dash) for t in lines}) == len(lines)
    assert v.figure.layout.legend.orientation == "h"  # under the plot: it never hides the baseline
    styles = {tuple(VD._style(j).values()) for j in range(40)}
    assert len(styles) == 40
    tab = VD.frequency_r_table(res, R)
    assert tab.figure is None and set(tab.data["dim"]) == set(res["frequency"]["outlier_dims"])


def test_difference_of_mean_cosine_has_a_bootstrap_interval():
    from core import metrics as M
    from core.views import difference as VDF

    rng = np.random.default_rng(1)
    a = rng.normal(size=(16, 6)) + 2.0  # aligned groups: high mean cosine
    b = rng.normal(size=(16, 6))
    n = np.full(16, 10.0)
    d, lo, hi = M.mean_cosine_diff_ci(a, n, b, n, n_boot=300)
    exact = M.mean_cosine(a.sum(0), int(n.sum())) - M.mean_cosine(b.sum(0), int(n.sum()))
    assert d == pytest.approx(exact) and lo < d < hi and lo > 0
    # the difference of two runs' replicates centres on the difference of the estimates (each run's do)
    ra, rb = M.mean_cosine_replicates(a, n, 300, seed=0), M.mean_cosine_replicates(b, n, 300, seed=1)
    assert abs((ra - rb).mean() - d) < 0.3 * (ra - rb).std()
    assert all(np.isnan(v) for v in M.mean_cosine_diff_ci(a[:1], n[:1], b, n)[1:])
    st1, res1 = synthetic_run(seed=0)
    st2, res2 = synthetic_run(seed=1)
    v = VDF.mean_cosine_difference(st1, res1, st2, res2, n_boot=100)
    assert len(v.data) == len(res1["layers"]) and {"difference", "ci_low", "ci_high"} <= set(v.data.columns)
    assert (v.data["ci_low"] <= v.data["difference"]).all() and (v.data["difference"] <= v.data["ci_high"]).all()


def test_seed_band_spans_the_seeds():
    from core import views

    _, a = synthetic_run(seed=0)
    _, b = synthetic_run(seed=1)
    _, c = synthetic_run(seed=2)
    v = views.layer_curves([a], "mean_cosine", "layer", reference=False)
    banded = views.add_seed_bands(v, [a], [[b, c]], "mean_cosine", "layer")
    band = [t for t in banded.figure.data if "3 seeds" in (t.name or "")]
    assert len(band) == 1 and band[0].fill == "toself"
    ys = np.array([[r["mean_cosine"] for r in x["layers"]] for x in (a, b, c)])
    n = ys.shape[1]
    np.testing.assert_allclose(band[0].y[:n], ys.max(0))
    np.testing.assert_allclose(band[0].y[n:], ys.min(0)[::-1])
    assert len(banded.manifest["runs"]) == 3 and views.add_seed_bands(v, [a], [[]], "mean_cosine", "layer") is v
