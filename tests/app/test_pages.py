"""Every page with the default selection (MiniLM + Wikipedia) and with two models, via AppTest.

Runs are small (2,000 tokens, sample 500, from the URL) and shared through the app tier's cache: the
first test computes them (pressing Run: the worker runs a synthetic extraction, see synthetic_runs.py),
the others load them from the cache. No model is loaded: what needs one (a local model folder, the
ablation job) is in tests/integration/test_app_models.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from app_helpers import APP, SMALL, TIMEOUT, by_title, figures, no_exception, run_clicked, title

from core.compute.pipeline import analyze, is_cached
from core.studies.selection import Selection, strongest_dims

PAGES = ["pages/layers.py", "pages/outliers.py", "pages/projection.py", "pages/compare.py"]
TWO = ("minilm-l6", "untrained-bert-base")


def _results(model: str) -> dict:
    """The results the app shows (from the disk cache the app filled: never computed here)."""
    spec = Selection(models=(model,), max_tokens=2000, sample=500).spec(model)
    assert is_cached(spec)
    return analyze(spec)


@pytest.fixture(scope="module")
def computed(cache_dir):
    """Press Run once for each selection (progress bars, then the cache is warm for every test)."""
    from streamlit.testing.v1 import AppTest

    for models in (("minilm-l6",), TWO):
        at = AppTest.from_file(APP, default_timeout=TIMEOUT * 3)
        for k, v in SMALL.items():
            at.query_params[k] = v
        at.query_params["models"] = list(models)
        at.run()
        assert any("not computed yet" in c.value for c in at.caption)
        run_clicked(at)
        no_exception(at)
        assert not at.error, [e.value for e in at.error]
        assert sum("computed in" in c.value for c in at.caption) >= 1
    return True


def test_layers_default(app, computed):
    at = app()
    no_exception(at)
    assert any("loaded from cache" in c.value for c in at.caption)  # shown at once, no Run needed
    res = _results("minilm-l6")
    curves = by_title(at, "Mean cosine similarity by layer")
    measured = [t for t in curves["data"] if "all-MiniLM-L6-v2" in t.get("name", "") and t.get("fill") != "toself"]
    assert len(measured) == 1
    np.testing.assert_allclose(measured[0]["y"], [r["mean_cosine"] for r in res["layers"]], rtol=1e-9)
    # Issue 36 item 7: the published overlay is off by default (its 0-0.7 range flattened MiniLM's curve)
    assert not [t for t in curves["data"] if t.get("name", "").startswith("published:")]
    assert at.toggle(key="reference").value is False and at.radio(key="x_axis_layer").value == "layer"
    at.toggle(key="reference").set_value(True).run()  # on: Ethayarajh's BERT curve, by relative depth
    curves = by_title(at, "Mean cosine similarity by layer")
    assert [t for t in curves["data"] if t.get("name", "").startswith("published:")]
    assert at.radio(key="x_axis_depth").value == "depth" and at.query_params["ref"] in ("1", ["1"])
    assert "N = 2,0" in curves["layout"]["title"]["subtitle"]["text"]
    assert not at.dataframe and len(figures(at)) == 1  # the curves: one section at a time
    at.session_state["layers_section"] = "At one layer"
    at.run()
    no_exception(at)
    assert len(figures(at)) == 3  # the histogram, the deciles and the layers' CKA, not the curves
    cka = by_title(at, "Linear CKA between layers")
    np.testing.assert_allclose(np.diag(np.asarray(cka["data"][0]["z"], dtype=float)), 1.0, atol=1e-9)
    np.testing.assert_allclose(cka["data"][0]["z"], res["cka"]["matrix"], rtol=1e-9)
    hist = by_title(at, "Pairwise cosine")
    assert np.nansum(hist["data"][0]["y"]) > 0
    dec = by_title(at, "frequency decile")
    np.testing.assert_allclose(dec["data"][0]["y"], [np.nan if v is None else v
                                                     for v in res["layers"][3]["frequency_binned_cosine"]])
    at.session_state["layers_section"] = "Numbers"
    at.run()
    no_exception(at)
    table = at.dataframe[0].value
    assert len(table) == len(res["layers"]) and "effective_rank" in table.columns
    at.session_state["layers_section"] = "Logit lens"  # MiniLM has no LM head: said, never an empty chart
    at.run()
    no_exception(at)
    assert not figures(at) and any("LM head" in c.value for c in at.caption)


def test_layers_metric_axis_and_reference_go_to_the_url(app, computed):
    at = app(ref="1")
    at.selectbox(key="metric").set_value("effective_rank").run()
    # auto: one model, and no published curve of this metric: the overlay does not move the axis (issue 36 item 7)
    assert at.toggle(key="reference").value is True and at.radio(key="x_axis_layer").value == "layer"
    at.toggle(key="reference").set_value(False).run()
    assert at.radio(key="x_axis_layer").value == "layer"  # auto: one model, no published curves
    at.radio(key="x_axis_layer").set_value("depth").run()  # an explicit choice
    no_exception(at)
    assert at.query_params["x"] in (["depth"], "depth")
    assert at.query_params["metric"] == ["effective_rank"] or at.query_params["metric"] == "effective_rank"
    fig = by_title(at, "Effective rank by layer")
    xs = fig["data"][0]["x"]
    assert xs[0] == 0 and xs[-1] == 1  # relative depth
    assert not [t for t in fig["data"] if t.get("name", "").startswith("published")]
    # Reloading the URL gives the same view.
    again = app(metric="effective_rank", x="depth", ref="0")
    assert title(figures(again)[0]) == title(fig)


def test_layers_post_processing_overlay(app, computed):
    at = app(metric="pc1_variance_ratio", pp_center="1", pp_abtt="2")
    no_exception(at)
    fig = by_title(at, "PC1 variance ratio")
    dashed = [t for t in fig["data"] if t.get("line", {}).get("dash") == "dash"]
    assert len(dashed) == 1 and "ABTT-2" in dashed[0]["name"]
    raw = [t for t in fig["data"] if t.get("line", {}).get("dash") == "solid" and "MiniLM" in t["name"]][0]
    # ABTT removes the top components: the PC1 share drops in most layers (not necessarily in every one:
    # a flat spectrum's third component can hold a larger share of what is left).
    d, r = np.asarray(dashed[0]["y"]), np.asarray(raw["y"])
    assert (d < r).mean() > 0.5 and d.mean() < r.mean()


def test_outliers_default(app, computed):
    at = app(page="pages/outliers.py")
    no_exception(at)
    res = _results("minilm-l6")
    bars = by_title(at, "Mean |x_d| per dimension, layer 3")
    hi = [t for t in bars["data"] if t["name"] == "outlier dimensions"][0]
    assert sorted(np.asarray(hi["x"], dtype=int).tolist()) == res["outliers"]["activation"]["per_layer"][3]
    cc = by_title(at, "Cosine contribution")
    assert len(cc["data"][0]["x"]) == 20
    # One section at a time: the others are neither computed nor sent.
    assert len(figures(at)) == 2 and not [f for f in figures(at) if "signed Pearson r" in title(f)]
    at.session_state["outliers_section"] = "Across layers"
    at.run()
    no_exception(at)
    heat = by_title(at, "across layers")
    assert np.asarray(heat["data"][0]["z"]).shape == (7, 384) and len(figures(at)) == 1
    assert any("this run: activation rule" in str(i) for i in at.table[0].value.index)  # the persistent dims
    at.session_state["outliers_section"] = "Two definitions"
    at.run()
    no_exception(at)
    defs = by_title(at, "activation vs norm-parameter")
    assert len(defs["data"]) == 2  # both definitions drawn
    at.session_state["outliers_section"] = "Frequency"
    at.run()
    freq = by_title(at, "signed Pearson r")
    assert freq["data"][0]["name"].startswith("baseline")  # the random dims' band, first in the legend
    assert any("Outlier set" in c.value and "persistent outlier dims" in c.value for c in at.caption)
    at.radio(key="w_outlier_set").set_value("layer").run()  # this layer's 3-sigma dims instead (in the URL)
    no_exception(at)
    assert at.query_params["oset"] in (["layer"], "layer")
    assert any("over the 3-sigma rule at layer 3" in c.value for c in at.caption)
    at.radio(key="w_outlier_set").set_value("persistent").run()
    at.session_state["outliers_section"] = "Drill into a dimension"
    at.run()
    prof = by_title(at, "with token frequency per layer")  # the drill-down of the strongest outlier dim
    strongest = strongest_dims(res["outliers"])
    if strongest:
        assert f"Dim {strongest[0]}:" in title(prof)
        assert at.number_input(key="dim_any_outliers").value == strongest[0]
    scatter = by_title(at, "vs token frequency, layer 3")
    # each point marked by its position class (MiniLM's position 0 is [CLS], a special token left out by default)
    assert [t["name"].split(" (")[0] for t in scatter["data"]][0] == "later positions"
    assert "given the position class" in scatter["layout"]["title"]["subtitle"]["text"]
    if len(strongest) > 1:  # a dim picked from the list shows in the "or any dim" box too
        at.selectbox(key="dim_pick_outliers").set_value(strongest[1]).run()
        no_exception(at)
        assert by_title(at, f"Dim {strongest[1]}: Pearson r")
        assert at.number_input(key="dim_any_outliers").value == strongest[1]
    at.number_input(key="dim_any_outliers").set_value(7).run()
    no_exception(at)
    assert by_title(at, "Dim 7: Pearson r") and at.query_params["dim"] in (["7"], "7")
    assert at.selectbox(key="dim_pick_outliers").value == 7
    assert at.session_state["outliers_section"] == "Drill into a dimension"  # still there after the rerun
    # The ablation needs an LM head: MiniLM has none, the message says so and the page keeps working.
    at.session_state["outliers_section"] = "Ablation"
    at.run()
    at.button(key="ablate").click().run()
    no_exception(at)
    assert any("LM head" in e.value for e in at.error)


def test_projection_default_and_search(app, computed):
    at = app(page="pages/projection.py")
    no_exception(at)
    fig = figures(at)[0]
    assert len(fig["data"][0]["x"]) == 500 and "K = 500" in fig["layout"]["title"]["subtitle"]["text"]
    assert "[" in fig["data"][0]["text"][0]  # the token in its context
    at.text_input(key="p_search").set_value("the")
    at.button(key="FormSubmitter:projection_form-Project").click().run()
    no_exception(at)
    fig = figures(at)[0]
    matches = [t for t in fig["data"] if t.get("name") == "matches"]
    assert matches and len(matches[0]["x"]) > 0
    assert all("the" in s.lower() for s in matches[0]["text"])


def test_compare_single_model_invites_a_second(app, computed):
    at = app(page="pages/compare.py")
    no_exception(at)
    assert any("second model" in i.value for i in at.info)
    assert figures(at)


def test_compare_with_a_second_model_not_computed_says_it_waits(app, computed):
    at = app(models=("minilm-l6", "untrained-minilm-l6"), page="pages/compare.py")  # only MiniLM is computed
    no_exception(at)
    assert any("as soon as a second selected run is computed" in i.value for i in at.info), \
        [i.value for i in at.info]
    assert not any("Add a second model" in i.value for i in at.info)  # it is selected already


@pytest.mark.parametrize("page", PAGES)
def test_two_models_every_page(app, computed, page):
    at = app(models=TWO, page=page)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    figs = figures(at)
    assert figs and all(f["data"] for f in figs)
    if page.endswith("layers.py"):
        names = [t["name"] for t in figs[0]["data"] if t.get("fill") != "toself"]
        assert any("MiniLM" in n for n in names) and any("untrained BERT" in n for n in names)
        bert = _results("untrained-bert-base")
        tr = [t for t in figs[0]["data"] if "untrained BERT" in t["name"] and t.get("fill") != "toself"][0]
        np.testing.assert_allclose(tr["y"], [r["mean_cosine"] for r in bert["layers"]], rtol=1e-9)
    if page.endswith("compare.py"):
        assert by_title(at, "Mean cosine similarity") and by_title(at, "Difference in mean cosine")  # first section
        # MiniLM and BERT-base read different token windows of one corpus: CKA at the document level, said so
        assert len(figs) == 3 and by_title(at, "Document-level linear CKA")
        at.session_state["compare_section"] = "Outliers and summary"
        at.run()
        no_exception(at)
        counts = by_title(at, "outlier dimensions per layer")
        assert len(counts["data"]) == 2
        bert = _results("untrained-bert-base")
        d = bert["manifest"]["model"]["hidden_size"]
        np.testing.assert_allclose(counts["data"][1]["y"],  # a share of the width d, in percent
                                   [100.0 * len(p) / d for p in bert["outliers"]["activation"]["per_layer"]])
        summary = at.dataframe[0].value
        assert list(summary["layers (L)"]) == [6, 12]
        at.session_state["compare_section"] = "Projections"
        at.run()
        no_exception(at)
        proj = by_title(at, "sampled token representations")
        assert len([t for t in proj["data"] if len(t.get("x", [])) == 500]) == 2  # one panel per model


def test_an_unknown_model_is_an_error_and_the_rest_stays(app, computed):
    at = app(models=("minilm-l6", "no-such-model"))
    no_exception(at)
    assert any("no-such-model" in e.value for e in at.error)
    assert by_title(at, "Mean cosine similarity by layer")  # MiniLM still shown


def test_a_bad_url_value_is_reported(app, computed):
    at = app(metric="nope")
    no_exception(at)
    assert any("metric" in w.value for w in at.warning)
    assert by_title(at, "Mean cosine similarity by layer")


def test_a_table_corpus_from_the_url(app, cache_dir, tmp_path):
    """An upload is named in the URL by its id (no server path), and everywhere by its own name."""
    import pandas as pd

    from core.inputs.uploads import save_upload, upload_id

    df = pd.DataFrame({"id": range(40), "text": [f"Document {i} talks about rivers, mountains and the sea. " * 3
                                                 for i in range(40)]})
    path = save_upload(df.to_csv(index=False).encode(), "my-corpus.csv", cache_dir)
    assert path.parent == cache_dir / "uploads" and path.suffix == ".csv"
    uid = upload_id(path)
    at = app(corpus=uid, col="text", tokens="800", sample="200")
    no_exception(at)
    assert at.sidebar.selectbox(key="w_text_col").value == "text"
    assert any("my-corpus.csv" in c.value and "40 rows" in c.value and "(detected)" in c.value
               for c in at.sidebar.caption)  # the preview before Run
    assert str(cache_dir) not in str(dict(at.query_params))
    run_clicked(at)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    fig = by_title(at, "Mean cosine similarity by layer")
    name = [t["name"] for t in fig["data"] if "MiniLM" in t["name"] and t.get("fill") != "toself"][0]
    assert "my-corpus.csv [text]" in name
    assert "my-corpus.csv [text]" in fig["layout"]["title"]["subtitle"]["text"]
    assert any("computed in" in c.value and "my-corpus.csv" in c.value for c in at.caption)
    at.sidebar.text_input(key=f"w_name_{uid}_text").set_value("rivers").run()
    no_exception(at)
    fig = by_title(at, "Mean cosine similarity by layer")
    assert any("rivers" in t["name"] for t in fig["data"])


def test_a_failed_upload_says_what_is_shown(app, computed):
    at = app(corpus="upload:" + "0" * 64 + ".csv")
    no_exception(at)
    assert any("corpus" in w.value for w in at.warning)  # the URL's unknown upload is reported


def test_post_processing_form_applies_on_submit(app, computed):
    at = app(metric="isoscore")
    assert "pp_center_layers" not in [c.key for c in at.checkbox]  # closed: its form is not made
    at.session_state["post_open_layers"] = True  # the expander's body is made only when it is open
    at.run()
    at.checkbox(key="pp_center_layers").check()
    at.number_input(key="pp_abtt_layers").set_value(3)
    # Nothing changes before the form is submitted (a heavy view never runs on a widget tick).
    assert not [t for t in by_title(at, "IsoScore")["data"] if t.get("line", {}).get("dash") == "dash"]
    at.button(key="FormSubmitter:post_layers-Apply post-processing").click().run()
    no_exception(at)
    qp = {k: (v if isinstance(v, str) else v[-1]) for k, v in at.query_params.items()}
    assert qp["pp_center"] == "1" and qp["pp_abtt"] == "3"
    dashed = [t for t in by_title(at, "IsoScore")["data"] if t.get("line", {}).get("dash") == "dash"]
    assert len(dashed) == 1 and "center + ABTT-3" in dashed[0]["name"]
    assert np.all(np.isfinite(dashed[0]["y"]))


@pytest.mark.slow
def test_umap_projection_with_post_processing_side_by_side(app, computed):
    at = app(page="pages/projection.py", proj="umap", nn="10", pp_center="1")
    no_exception(at)
    fig = figures(at)[0]
    assert "UMAP" in title(fig) and "n_neighbors=10" in title(fig)
    panels = [t for t in fig["data"] if len(t.get("x", [])) == 500]
    assert len(panels) == 2  # raw | centered
    assert all(np.isfinite(np.asarray(p["x"], dtype=float)).all() for p in panels)
    assert fig["layout"]["xaxis"]["title"]["text"].startswith("UMAP 1")


def test_post_processing_reset(app, computed):
    at = app(metric="isoscore", pp_center="1")
    assert at.checkbox(key="pp_center_layers").value is True
    at.button(key="FormSubmitter:post_layers-Reset to raw").click().run()
    no_exception(at)
    assert "pp_center" not in at.query_params
    assert at.checkbox(key="pp_center_layers").value is False
    assert not [t for t in by_title(at, "IsoScore")["data"] if t.get("line", {}).get("dash") == "dash"]


@pytest.mark.slow
def test_report_zip_of_the_selection(computed):
    """The sidebar's report: every view of the cached runs (images, CSV, JSON), report.html, results."""
    import io
    import zipfile

    from core.views.report import build_report

    sel = Selection(models=TWO, max_tokens=2000, sample=500)
    z = zipfile.ZipFile(io.BytesIO(build_report(sel, image_formats=("png",))))
    names = set(z.namelist())
    for stem in ("layers_mean_cosine", "pairwise_cosine_histogram", "outlier_counts",
                 "minilm-l6_outlier_bars_layer3", "untrained-bert-base_outlier_heatmap",
                 "untrained-bert-base_projection_pca_layer6"):
        stem += "__wiki-en"  # the corpus is part of every file name
        assert f"figures/{stem}.png" in names and f"data/{stem}.csv" in names, stem
        assert f"data/{stem}.csv.manifest.json" in names, stem  # the plain CSV's sidecar
    assert {"report.html", "manifest.json", "results/minilm-l6__wiki-en.results.json",
            "results/untrained-bert-base__wiki-en.results.json"} <= names
    man = json.loads(z.read("manifest.json"))
    assert man["selection"]["models"] == list(TWO) and len(man["runs"]) == 2
    assert json.loads(z.read("results/minilm-l6__wiki-en.results.json"))["layers"] == _results("minilm-l6")["layers"]
    html = z.read("report.html").decode()
    assert html.count("Plotly.newPlot") >= 20


def test_one_model_on_several_corpora(app, computed):
    """The selection is a set of (model, corpus) runs: MiniLM on wiki-en and on the uniform-random control."""
    at = app(vs=["uniform-random"], ref="0")
    no_exception(at)
    assert any("uniform-random" in c.value and "not computed yet" in c.value for c in at.caption)
    run_clicked(at)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    names = [t["name"] for t in by_title(at, "Mean cosine similarity by layer")["data"] if t.get("fill") != "toself"]
    assert any("wiki-en" in n for n in names) and any("uniform-random" in n for n in names), names
    at.switch_page("pages/compare.py").run()
    no_exception(at)
    names = [t["name"] for t in by_title(at, "Mean cosine similarity by layer")["data"] if t.get("fill") != "toself"]
    assert sum("MiniLM" in n for n in names) == 2 and any("uniform-random" in n for n in names), names
    assert by_title(at, "Difference in mean cosine")  # the bootstrap interval of the difference
    at.switch_page("pages/outliers.py").run()
    no_exception(at)
    assert at.selectbox(key="focus_outliers").value is not None  # a run picker: model · corpus


def _active_jobs():
    from core.entry import jobs

    return [j for j in jobs.list_jobs() if j.active]


def test_run_is_a_job_that_navigation_and_widgets_do_not_cancel(app, computed):
    """Run queues a job; switching pages and moving widgets while it runs leaves it running; once it
    ends, the page shows the figures without pressing Run again."""
    import time

    from core.entry import jobs

    at = app(tokens="2600")
    at.sidebar.button(key="run").click().run()
    no_exception(at)
    [job] = _active_jobs()
    assert job.kind == "analyze" and "MiniLM" in job.label
    assert at.button(key=f"cancel_{job.id}")  # its progress panel, with Cancel
    assert any("Computing" in i.value for i in at.info)  # not "Nothing to show yet ... press Run"
    at.switch_page("pages/outliers.py").run()
    at.switch_page("pages/compare.py").run()
    at.switch_page("pages/layers.py").run()
    no_exception(at)
    assert jobs.status(job.id).status in (jobs.QUEUED, jobs.RUNNING, jobs.DONE)
    t0 = time.monotonic()
    while jobs.status(job.id).active:
        assert time.monotonic() - t0 < 900
        time.sleep(0.5)
    assert jobs.status(job.id).status == jobs.DONE
    at.run()
    no_exception(at)
    assert by_title(at, "Mean cosine similarity by layer")
    assert any("computed in" in c.value for c in at.caption)


def test_cancel_button_stops_the_job_and_stores_nothing(app, computed):
    import time

    from core.entry import jobs

    at = app(tokens="150000")
    spec = Selection(max_tokens=150000, sample=500).spec("minilm-l6")
    at.sidebar.button(key="run").click().run()
    [job] = _active_jobs()
    t0 = time.monotonic()
    while jobs.status(job.id).status == jobs.QUEUED:  # the worker may still be busy with another job
        assert time.monotonic() - t0 < 600
        time.sleep(0.3)
    at.run()
    at.button(key=f"cancel_{job.id}").click().run()
    no_exception(at)
    end = jobs.wait(job.id, timeout=600)
    assert end.status == jobs.CANCELLED
    assert not is_cached(spec)
    at.run()
    assert any("cancelled" in c.value and "nothing partial" in c.value for c in at.caption)


