"""Views and figures on synthetic runs built by the real results builder (numpy only)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from core import views
from core.compute.projection import pca_2d, sample_table
from core.stats.postprocess import PostProcess
from core.stats.reference import reference_curves
from core.views import figures as F
from core.views.common import as_results
from tests.synthetic import synthetic_run


@pytest.fixture(scope="module")
def run_a():
    return synthetic_run()


@pytest.fixture(scope="module")
def run_b():
    return synthetic_run(n_layers=9, d=32, label="deep-net", seed=1, with_norms=False)


def _y(trace):
    return np.asarray(trace.y, dtype=float)


def _measured(fig):
    return [t for t in fig.data if not t.name.startswith("published") and t.fill != "toself"
            and "isotropic Gaussian" not in t.name]


def test_sample_metrics_show_their_isotropic_baseline_as_a_dotted_line(run_a, run_b):
    (_, a), (_, b) = run_a, run_b
    v = views.layer_curves([a, b], "isoscore", "layer", reference=False)
    iso = [t for t in v.figure.data if "isotropic Gaussian" in t.name]
    assert len(iso) == 2 and all(t.line.dash == "dot" for t in iso)
    for t, res in zip(iso, (a, b)):
        assert list(t.y) == pytest.approx([r["isoscore_isotropic"] for r in res["layers"]])
        assert 0.5 < t.y[0] <= 1.0
    assert "isoscore_isotropic" in views.metric_table([a]).data.columns
    # streaming metrics have no such baseline
    assert not [t for t in views.layer_curves([a], "mean_cosine").figure.data if "isotropic" in t.name]


def test_layer_curves_plot_the_results(run_a, run_b):
    import copy

    (_, a), (_, b) = copy.deepcopy(run_a), copy.deepcopy(run_b)
    for r, cls in ((a, "BertModel"), (b, "GPT2Model")):  # English text read by the published models' families
        r["manifest"]["model"]["model_class"], r["manifest"]["corpus"]["id"] = cls, "wiki-en"
    v = views.layer_curves([a, b], "mean_cosine", "layer", reference=True)
    measured = _measured(v.figure)
    assert len(measured) == 2
    np.testing.assert_allclose(_y(measured[0]), [r["mean_cosine"] for r in a["layers"]])
    np.testing.assert_allclose(_y(measured[1]), [r["mean_cosine"] for r in b["layers"]])
    assert list(measured[1].x) == list(range(9))
    # The CI band: a closed polygon through the upper then the lower bounds.
    band = [t for t in v.figure.data if t.fill == "toself"]
    assert len(band) == 2
    np.testing.assert_allclose(_y(band[0])[:5], [r["mean_cosine_ci"][1] for r in a["layers"]])
    # Published curves: labelled as such, their estimator in the hover, never a measured colour.
    refs = [t for t in v.figure.data if t.name.startswith("published")]
    assert len(refs) == len(reference_curves("mean_cosine")) >= 1
    assert all("Ethayarajh" in t.name and "random" in t.hovertemplate for t in refs)
    assert all(t.line.color == F.REFERENCE for t in refs)
    assert set(v.data["series"]) >= {"measured"} and v.data["corpus"].eq("published").any()
    assert "N = 600 tokens" in v.figure.layout.title.subtitle.text


def test_relative_depth_aligns_models_of_different_depth(run_a, run_b):
    (_, a), (_, b) = run_a, run_b
    v = views.layer_curves([a, b], "isoscore", "depth", reference=False)
    xs = [np.asarray(t.x, dtype=float) for t in _measured(v.figure)]
    assert xs[0][0] == 0 and xs[0][-1] == 1 and xs[1][-1] == 1 and len(xs[1]) == 9
    assert not [t for t in v.figure.data if t.name.startswith("published")]
    assert "sample" in v.figure.layout.title.subtitle.text  # isoscore is a sample metric: K is stated


def test_post_processing_overlay_is_dashed_and_only_for_sample_metrics(run_a):
    _, a = run_a
    rows = [{"layer": l, "post": "center", "pc1_variance_ratio": 0.5 + 0.01 * l} for l in range(5)]
    v = views.layer_curves([a], "pc1_variance_ratio", post_rows=[rows], post_labels=["center"])
    dashed = [t for t in v.figure.data if t.line.dash == "dash"]
    assert len(dashed) == 1 and "after center" in dashed[0].name
    np.testing.assert_allclose(_y(dashed[0]), [0.5 + 0.01 * l for l in range(5)])
    v2 = views.layer_curves([a], "mean_norm", post_rows=[rows], post_labels=["center"])
    assert not [t for t in v2.figure.data if t.line.dash == "dash"]
    assert any("corpus-level" in n for n in v2.notes)


def test_post_for_restricts_dims_and_adds_the_models_outliers(run_a):
    _, a = run_a
    p = views.post_for(a, PostProcess(center=True, remove=(1, 500)), drop_outliers=True)
    assert p.center and p.remove == tuple(sorted({1, *a["outliers"]["activation"]["persistent"]}))


def test_histogram_is_a_density_with_its_pair_count(run_a):
    st, a = run_a
    v = views.pairwise_histogram([st], [a], [2])
    d = v.data
    assert math.isclose(float((d["density"] * (d["bin_high"] - d["bin_low"])).sum()), 1.0, rel_tol=1e-9)
    assert d["count"].sum() == d["n_pairs"].iloc[0] == 300 * 299 // 2
    assert "44,850 pairs of 300 tokens" in v.figure.layout.title.subtitle.text
    small = views.pairwise_histogram([st], [a], [2], max_pairs=1000)
    assert small.data["count"].sum() <= 1000 and "random subset" in small.caption


def test_frequency_deciles_plot_the_binned_cosines(run_a):
    _, a = run_a
    v = views.frequency_deciles([a], [3])
    want = [np.nan if x is None else x for x in a["layers"][3]["frequency_binned_cosine"]]
    np.testing.assert_allclose(_y(v.figure.data[0]), want)
    assert list(v.figure.data[0].x) == list(range(1, 11))


def test_outlier_bars_highlight_the_planted_dimension(run_a):
    st, a = run_a
    v = views.outlier_bars(st, a, 2)
    other, hi = v.figure.data[0], v.figure.data[1]
    assert 5 in list(hi.x) and 5 not in list(other.x)
    assert list(hi.x) == a["outliers"]["activation"]["per_layer"][2]
    assert len(hi.x) + len(other.x) == 24 and hi.width == 1.0
    m = v.data.set_index("dim")["mean_abs"]
    assert m[5] > v.data["threshold"].iloc[0] > m.drop(5).max()


def test_cosine_contributions_add_up_to_the_mean_cosine(run_a):
    st, a = run_a
    v = views.cosine_contribution_bars(st, a, 3, top=5)
    assert math.isclose(v.data["cc"].sum(), a["layers"][3]["mean_cosine"], rel_tol=1e-9, abs_tol=1e-12)
    bars = v.figure.data[0]
    assert len(bars.x) == 5 and list(bars.x)[0] == "5"  # the planted dim dominates
    assert bars.marker.color[0] == F.HIGHLIGHT


def test_heatmap_and_definitions(run_a, run_b):
    st, a = run_a
    hm = views.outlier_heatmap(st, a)
    z = np.asarray(hm.figure.data[0].z, dtype=float)
    assert z.shape == (5, 24) and (z[:, 5] > 3).all()
    d = views.outlier_definitions(a)
    act, norm = d.figure.data[0], d.figure.data[1]
    assert len(act.x) == sum(len(x) for x in a["outliers"]["activation"]["per_layer"])
    assert set(zip(norm.x, norm.y)) >= {(5, l) for l in range(1, 5)}  # norm block b drawn at layer b + 1
    assert d.data["jaccard"].notna().any()
    _, b = run_b
    db = views.outlier_definitions(b)  # a model without norm modules: only the activation rule, a note
    assert len(db.figure.data) == 1 and db.notes


def test_summary_tables_and_compare(run_a, run_b):
    (_, a), (_, b) = run_a, run_b
    s = views.outlier_summary(a)
    assert s.data["source"].str.startswith("published").sum() >= 1
    cs = views.compare_summary([a, b])
    assert list(cs.data["layers (L)"]) == [4, 8] and list(cs.data["d"]) == [24, 32]
    oc = views.outlier_counts([a, b])
    # as a share of the width (d = 32 here), the count kept in the data (issue 28 item 5)
    assert list(oc.figure.data[1].y) == pytest.approx([100 * len(x) / 32 for x in b["outliers"]["activation"]["per_layer"]])
    assert list(oc.data[oc.data["d"] == 32]["n_outlier_dims"]) == [len(x) for x in b["outliers"]["activation"]["per_layer"]]
    assert "% of d" in oc.figure.layout.yaxis.title.text
    text = views.comparison_sentence([a, b], "mean_cosine")
    ya, yb = (np.asarray([r["mean_cosine"] for r in x["layers"]]) for x in (a, b))
    assert f"to {ya[-1]:.3g} at the last layer" in text and f"to {yb[-1]:.3g} at the last layer" in text
    hi = "deep-net" if yb[-1] > ya[-1] else "synthetic-net"
    assert f"At the last layer {hi}" in text
    # the shapes-not-values caveat names what differs, and is left out for runs on one corpus (issue 28 item 5)
    assert ("differ in corpus" in text) == (as_results(a).corpus_label != as_results(b).corpus_label)
    same = views.comparison_sentence([a, a], "mean_cosine")
    assert "differ" not in same and same.endswith(")."), same
    fr = views.frequency_correlation(a)
    assert fr.figure.data[1].name == "dim 5" and max(_y(fr.figure.data[1])) > 0.5  # signed r, positive here
    assert "random" in fr.figure.data[0].name and fr.figure.data[0].fill == "toself"  # the baseline band first


def test_projection_hover_colours_and_search(run_a):
    st, a = run_a
    xy, ev = pca_2d(st.sample(2).astype(float))
    proj = {"xy": xy, "method": "pca", "params": {}, "layer": 2, "post": "raw", "n_points": len(xy),
            "explained_variance": ev}
    table = sample_table(st)
    v = views.projection([(a, proj, table)], "log_frequency")
    tr = v.figure.data[0]
    assert len(tr.x) == 300 and table["token"][0] in tr.text[0] and table["context"][0] in tr.text[0]
    np.testing.assert_allclose(np.asarray(tr.marker.color, dtype=float), table["log_frequency"])
    assert "K = 300 of N = 600" in v.figure.layout.title.subtitle.text
    assert v.figure.layout.xaxis.title.text.startswith("PC1 (")
    tok = table["token"][0]
    s = views.projection([(a, proj, table), (a, proj, table)], "search", search=tok)
    n_match = int((table["token"] == tok).sum())
    matches = [t for t in s.figure.data if t.name == "matches"]
    assert len(matches) == 2 and len(matches[0].x) == n_match
    assert int(s.data["match"].sum()) == 2 * n_match
    doc = views.projection([(a, proj, table)], "document")
    assert len(set(doc.figure.data[0].marker.color)) > 1


def test_ablation_view(run_a):
    _, a = run_a
    ab = {"baseline_loss": 3.0, "ablated_loss": 3.6, "delta": 0.6, "random_losses": [3.01, 3.03],
          "random_deltas": [0.01, 0.03], "random_delta_mean": 0.02, "random_delta_std": 0.014, "dims": [5],
          "random_dims": [[1], [2]], "modules": [], "n_tokens": 100, "held_out_tokens": 100,
          "held_out_documents": 3}
    v = views.ablation_view(ab, a)
    bars = [t for t in v.figure.data if t.type == "bar"]
    assert [float(b.y[0]) for b in bars] == [0.6, 0.02]
    assert list(v.data["ablation"]) == ["outlier dims", "random dims", "random dims"]
    assert [b.text[0] for b in bars] == ["+0.6", "+0.02 ± 0.014"]  # each bar's value written on it
    assert v.notes == ["Zeroing the 1 outlier dims (5) raises the loss by 0.6 nats/token (3 → 3.6); zeroing 1 random "
                       "dims raises it by 0.02 ± 0.014 (mean ± std of 2 draws). The chosen dims' change is 30 times "
                       "the random dims' mean."]
    typed = views.ablation_view(ab, a, "typed dim")  # the set's own name (issue 28 item 4)
    assert typed.notes[0].startswith("Zeroing the 1 typed dim (5) raises the loss by 0.6")
    assert [b.name for b in typed.figure.data if b.type == "bar"][0] == "typed dim zeroed (1)"


def test_every_figure_uses_the_template_and_states_its_sample_size(run_a, run_b):
    (sa, a), (_, b) = run_a, run_b
    figs = [views.layer_curves([a, b], m) for m in ("mean_cosine", "effective_rank", "mean_norm")]
    figs += [views.pairwise_histogram([sa], [a], [1]), views.frequency_deciles([a], [1]),
             views.outlier_bars(sa, a, 1), views.outlier_heatmap(sa, a), views.cosine_contribution_bars(sa, a, 1),
             views.outlier_definitions(a), views.frequency_correlation(a), views.outlier_counts([a, b])]
    for v in figs:
        lay = v.figure.layout
        assert lay.template.layout.paper_bgcolor == "white" and lay.template.layout.plot_bgcolor == "white"
        assert list(lay.template.layout.colorway) == F.OKABE_ITO
        assert lay.title.text and ("N = " in lay.title.subtitle.text or "pairs of" in lay.title.subtitle.text), v.name
        assert lay.xaxis.title.text and lay.yaxis.title.text, v.name
        json.loads(v.figure.to_json())  # serialisable for the browser and the exports
        assert v.manifest["runs"][0]["model"]["label"] == "synthetic-net"


def test_subtitles_wrap_at_separators():
    s = F.wrap_segments(" · ".join(["x" * 40] * 4), width=90)
    assert s.count("<br>") == 1 and s.replace("<br>", " · ") == " · ".join(["x" * 40] * 4)


def test_side_by_side_panel_titles_wrap():
    """Compare's Godey preset: eight panels two by two; a long title ran into its neighbour's."""
    long = "untrained Whisper tiny encoder · speech-human, layer 2/4, raw"
    panels = [{"title": t, "x": [0.0, 1.0], "y": [0.0, 1.0], "hover": ["a", "b"], "color": [0.0, 1.0]}
              for t in ("Whisper tiny.en encoder · speech-human, layer 2/4, raw", long, "a <b> · c", "short")]
    fig = F.scatter_panels(panels, title="t", subtitle="s", color_mode="continuous")
    got = [a.text for a in fig.layout.annotations][:4]
    assert all(len(line) <= F.PANEL_TITLE_CHARS for t in got for line in t.split("<br>")), got
    assert got[1].replace("<br>", " ") == long and got[2] == "a &lt;b&gt; · c" and got[3] == "short"
    one = F.scatter_panels(panels[1:2], title="t", subtitle="s", color_mode="continuous")
    assert one.layout.annotations[0].text == long  # a panel alone keeps its title on one line


def test_long_subtitle_segments_break_at_spaces():
    seg = "word " * 40
    s = F.wrap_segments(f"a · {seg.strip()}", width=50)
    assert all(len(line) <= 50 for line in s.split("<br>"))
    assert s.replace("<br>", " ").replace(" · ", " ") == f"a {seg.strip()}"


def _lightness(colorscale) -> np.ndarray:
    """CIE L* of 201 evenly spaced points of a Plotly colour scale (sRGB, D65)."""
    from plotly.colors import get_colorscale, sample_colorscale, unlabel_rgb

    scale = get_colorscale(colorscale) if isinstance(colorscale, str) else colorscale
    rgb = np.array([unlabel_rgb(c) for c in sample_colorscale(scale, list(np.linspace(0, 1, 201)))]) / 255.0
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    y = lin @ np.array([0.2126, 0.7152, 0.0722])
    return np.where(y > 216 / 24389, 116 * np.cbrt(y) - 16, y * 24389 / 27)


def _kink(lightness: np.ndarray) -> float:
    """Largest distance of L* from a straight line between the ends and the middle, over both halves."""
    m = len(lightness) // 2
    out = 0.0
    for half in (lightness[:m + 1], lightness[m:]):
        line = np.linspace(half[0], half[-1], len(half))
        out = max(out, float(np.abs(half - line).max()))
    return out


def test_diverging_scale_changes_lightness_evenly():
    """The signed heatmaps' scale: L* dark at both ends, lightest at 0, and linear in each half (no
    band like ColorBrewer's RdBu near +-0.45 on a -1..1 range, which this measure tells apart)."""
    lum = _lightness(F.DIVERGING)
    assert lum[0] < 25 and lum[-1] < 25 and lum[100] > 85 and lum.argmax() in range(95, 106)
    assert _kink(lum) < 4
    assert _kink(_lightness("RdBu_r")) > 8  # the scale used before
    fig = F.heat_panels([{"z": [[-1, 0.5], [0, 1]], "title": "t"}], title="x", subtitle="s", colorbar_title="r",
                        zmin=-1, zmax=1, diverging=True)
    assert fig.layout.coloraxis.colorscale[0][1] == F.DIVERGING[0][1]


def test_published_curves_only_where_they_apply():
    """Ethayarajh's curves (English text, BERT and GPT-2) are drawn for an English run of that family,
    hidden with the reason otherwise (issue 28 item 5); an English upload is not called 'maybe not English'."""
    import copy

    from core.views.layers import published_for
    from tests.synthetic import synthetic_run

    _, base = synthetic_run()

    def run(cls, corpus, share=None, modality="text"):
        r = copy.deepcopy(base)
        r["manifest"]["model"]["model_class"] = cls
        r["manifest"]["modality"] = modality
        r["manifest"]["corpus"].update(id=corpus, english_share=share)
        return r

    def names(runs):
        shown, notes = published_for([views.as_results(r) for r in runs], "mean_cosine")
        return [c["model"] for c in shown], notes

    assert names([run("BertModel", "wiki-en")])[0] == ["bert-base-cased"]
    assert names([run("GPT2LMHeadModel", "upload:abc.csv", share=0.41)])[0] == ["gpt2"]  # an English CSV
    shown, notes = names([run("LlamaForCausalLM", "wiki-en")])
    assert shown == [] and any("is not a BERT model" in n for n in notes) and not any("English)" in n for n in notes)
    shown, notes = names([run("BertModel", "wiki-fr", share=0.03)])
    assert shown == [] and "wiki-fr" in notes[0] and "is not English (3%" in notes[0]
    shown, notes = names([run("Dinov2Model", "images", modality="image")])
    assert shown == [] and "reads image inputs" in notes[0]
    v = views.layer_curves([run("LlamaForCausalLM", "wiki-en")], "mean_cosine")
    assert not [t for t in v.figure.data if t.name.startswith("published")] and any("hidden" in n for n in v.notes)


def test_projection_panels_of_measures_in_different_units_each_use_their_own_range(run_a):
    """Compare's cross-modal projections: log frequency (text) beside patch position (image) on one colour bar
    drew the text panel dark (a log frequency of 10 as dark as patch 10 of 256); each measure now spans 0-1."""
    import copy

    st, a = run_a
    xy, ev = pca_2d(st.sample(2).astype(float))
    proj = {"xy": xy, "method": "pca", "params": {}, "layer": 2, "post": "raw", "n_points": len(xy),
            "explained_variance": ev}
    text = sample_table(st)
    image = text.copy()
    image["item"] = "crop.png"
    image["position"] = np.arange(len(image)) % 256
    img = copy.deepcopy(a)
    img["manifest"]["modality"] = "image"
    v = views.projection([(a, proj, text), (img, proj, image)], "log_frequency")
    t, i = (np.asarray(tr.marker.color, dtype=float) for tr in v.figure.data[:2])
    lf = text["log_frequency"].to_numpy(dtype=float)
    np.testing.assert_allclose(t, (lf - lf.min()) / (lf.max() - lf.min()))
    np.testing.assert_allclose(i, image["position"].to_numpy() / 255)
    assert t.min() == 0 and t.max() == 1 and i.max() == 1
    assert "low → high" in v.figure.layout.coloraxis.colorbar.title.text
    assert any(n.startswith("Colour: each panel's measure on its own range") and "patch position 0 to 255" in n
               for n in v.notes)
    assert v.data["position"].max() == 255 and v.data["frequency"].equals(  # the export keeps the raw values
        pd.concat([text["frequency"], image["frequency"]], ignore_index=True))
    one = views.projection([(a, proj, text), (a, proj, text)], "log_frequency")  # one measure: its raw values
    np.testing.assert_allclose(np.asarray(one.figure.data[1].marker.color, dtype=float), lf)


def test_the_compared_peak_layer_is_a_tie_when_layers_are_within_the_tolerance():
    from core.views.compare import peak_layers

    assert peak_layers([0.1, 0.4, 0.3]) == "1" and peak_layers([0.1, 0.4, 0.398, 0.2]) == "tie: 1, 2"
    assert peak_layers([float("nan")] * 3) == ""

    def run(mc):
        return {"manifest": {"model": {"label": "m"}, "corpus": {"id": "wiki-en"}, "spec": {"model": "m"},
                             "tokens": {"analysed": 10}},
                "layers": [{"layer": i, "mean_cosine": v} for i, v in enumerate(mc)]}

    text = views.comparison_sentence([run([0.1, 0.4, 0.3, 0.2, 0.1])], "mean_cosine")
    assert "(peak 0.4 at depth 0.25)" in text
    text = views.comparison_sentence([run([0.1, 0.4, 0.1, 0.3997, 0.1])], "mean_cosine")
    assert "peak a tie within 0.004 of 0.4, layers 1, 3 (depths 0.25, 0.75)" in text and "at depth 0.25)" not in text
