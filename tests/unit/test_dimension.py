"""One dimension drilled into (core/stats/single_dim.py) and the frequency views (core/views_dimension.py)."""

import math

import numpy as np
import pandas as pd
import pytest

from core.compute.projection import sample_table
from core.stats import single_dim as D
from core.stats.assemble import frequency_r
from core.views import single_dim as VD
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
    # 14 dims (issue 28 item 8): the 6 strongest in distinct colours (no yellow), the rest grey; a legible band
    dims = list(range(14))
    many = VD.frequency_correlation(res, R, dims, "14 dims")
    band, lines = many.figure.data[0], [t for t in many.figure.data if t.fill != "toself"]
    assert float(band.fillcolor.rsplit(",", 1)[1].rstrip(")")) >= 0.3 and band.line.width > 0
    coloured = [t for t in lines if t.line.color != VD.OTHERS]
    assert len(coloured) == VD.HIGHLIGHT_K and len({t.line.color for t in coloured}) == VD.HIGHLIGHT_K
    assert "#F0E442" not in {t.line.color for t in lines}
    peak = {d: np.nanmax(np.abs(R[:, d])) for d in dims}
    strongest = sorted(dims, key=lambda d: -peak[d])[:VD.HIGHLIGHT_K]
    assert [t.name for t in coloured] == [f"dim {d}" for d in strongest]  # strongest first in the legend
    assert many.notes[0] == "Outlier set: 14 dims."
    tab = VD.frequency_r_table(res, R)
    assert tab.figure is None and set(tab.data["dim"]) == set(res["frequency"]["outlier_dims"])


def test_difference_of_mean_cosine_has_a_bootstrap_interval():
    from core.stats import kernels as M
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
    assert list(v.figure.data[-1].x) == list(range(len(res1["layers"])))  # same depth: by layer, unless asked
    dv = VDF.mean_cosine_difference(st1, res1, st2, res2, n_boot=100, x_axis="depth")  # Compare: as its curves
    L = len(res1["layers"]) - 1
    assert list(dv.figure.data[-1].x) == pytest.approx([l / L for l in range(L + 1)])
    assert "relative depth" in dv.figure.layout.xaxis.title.text


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
    rows = banded.data[banded.data["series"].str.startswith("seed band")]  # the CSV: min/max columns per layer
    assert len(rows) == n and rows["n_seeds"].eq(3).all()
    np.testing.assert_allclose(rows["mean_cosine_seed_min"], ys.min(0))
    np.testing.assert_allclose(rows["mean_cosine_seed_max"], ys.max(0))


def _lstsq_partial(f, x, groups):
    """Independent partial r: residualise both on group dummies by least squares, then Pearson."""
    Z = (groups[:, None] == np.unique(groups)[None, :]).astype(float)  # dummies span the intercept
    rf = f - Z @ np.linalg.lstsq(Z, f, rcond=None)[0]
    rx = x - Z @ np.linalg.lstsq(Z, x, rcond=None)[0]
    return np.corrcoef(rf, rx)[0, 1]


def test_partial_r_given_position_class_matches_a_least_squares_residualisation():
    rng = np.random.default_rng(3)
    g = rng.integers(0, 3, size=400)
    f = rng.normal(size=400) + 2.0 * g
    x = 0.3 * f + rng.normal(size=400) + 5.0 * (g == 0)
    assert D.partial_r(f, x, g) == pytest.approx(_lstsq_partial(f, x, g), abs=1e-12)


def test_a_first_position_effect_shows_in_the_plain_r_and_vanishes_given_the_position():
    # |x_d| is large only at position 0, whose tokens are rare: a strong plain r, none within classes.
    rng = np.random.default_rng(0)
    K = 600
    pos = np.tile(np.arange(20), K // 20)
    logf = rng.normal(5, 1, size=K) - 3.0 * (pos == 0)
    x = rng.normal(size=K) * 0.1 + 40.0 * (pos == 0)
    cls = D.position_classes(pos)
    link = D.position_link(x, logf, cls)
    assert link["r"] < -0.4
    assert abs(link["r_later"]) < 0.15 and abs(link["partial_r"]) < 0.15
    assert link["partial_r"] == pytest.approx(_lstsq_partial(logf, np.abs(x), cls), abs=1e-12)
    assert D.top_position_share(x, pos) == (0, 1.0)
    special = np.zeros(K, dtype=bool)
    special[[1, 2, 20]] = True
    c = D.position_classes(pos, special)  # position 0 wins over special; later special tokens are their own class
    assert c[0] == D.FIRST and c[1] == D.SPECIAL and c[20] == D.FIRST and c[3] == D.LATER


def test_results_frequency_carries_the_position_adjusted_link_and_the_views_warn():
    stats, res = synthetic_run()
    pos = res["frequency"]["position"]
    dims = res["frequency"]["outlier_dims"]
    assert pos["outlier_dims"] == dims and len(pos["layers"]) == stats.n_layers
    a = stats.arrays
    logf = np.log(np.maximum(a["sample_freq"], 1))
    cls = D.position_classes(a["sample_position"])
    for j, d in enumerate(dims):
        x = np.abs(a["sample"][2, :, d].astype(float))
        assert pos["layers"][2]["r_sample"][j] == pytest.approx(np.corrcoef(logf, x)[0, 1])
        assert pos["layers"][2]["partial_r"][j] == pytest.approx(_lstsq_partial(logf, x, cls), abs=1e-9)
    assert pos["n_position0"] == int((a["sample_position"] == 0).sum())
    table = VD.frequency_r_table(res, frequency_r(stats)).data
    assert {"r_sample", "r_later", "partial_r"} <= set(table.columns)
    # a dim whose top tokens all sit at position 0 is named in the warning
    rep = {"outlier_dims": [7, 9], "layers": [{"top_position": [0, 3], "top_position_share": [0.9, 0.2]}] * 4}
    assert D.position_dominated(rep) == {7: 0}


def test_the_drill_down_opens_on_the_strongest_outlier_dim_not_the_lowest_index():
    from core.studies.selection import Selection, strongest_dims

    outliers = {"activation": {"persistent": [8, 308, 100], "per_layer": [[308], [308, 8], [100, 308]]},
                "norm_parameters": {"persistent": [14]},
                "massive_activations": [{"layer": 1, "dims": [308, 8], "values": [900.0, 40.0]},
                                        {"layer": 2, "dims": [100], "values": [60.0]}]}
    assert strongest_dims(outliers) == [308, 100, 8, 14]
    res = {"manifest": {"model": {"hidden_size": 576}}, "outliers": outliers}
    assert Selection().dim_for(res) == 308
    assert Selection().replace(dim=14).dim_for(res) == 14
