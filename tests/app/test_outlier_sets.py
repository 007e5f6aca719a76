"""Issue 28 item 4: the outlier set of the Frequency, Drill and Ablation tabs is the user's choice (persistent,
this layer's 3-sigma dims, or typed dims), said on each tab and kept in the URL; the ablation runs on the
chosen set as a job, its stored result is shown and reported with the set's own numbers.

A synthetic run of a causal LM (untrained GPT-2's shape, d = 768) on a small CSV, stored directly; the
ablation's result is stored under its real key (the job itself, with a model, is in tests/integration).
"""

from __future__ import annotations

import pytest
import synthetic_runs
from app_helpers import by_title, no_exception

from core.base.cache import get_store
from core.studies.selection import from_query_params

MODEL = "untrained-gpt2"


@pytest.fixture(scope="module")
def query(cache_dir):
    import pandas as pd

    from core.inputs.uploads import save_upload, upload_id

    docs = [{"text": " ".join(f"w{(i * 11 + j) % 97}" for j in range(40))} for i in range(30)]
    uid = upload_id(save_upload(pd.DataFrame(docs).to_csv(index=False).encode(), "sets.csv", cache_dir))
    q = {"models": MODEL, "corpus": uid, "col": "text", "tokens": "1200", "sample": "300", "seeds": "1",
         "oset": "typed", "odims": "8, 308"}
    sel, problems = from_query_params({k: [v] for k, v in q.items()})
    assert not problems and sel.typed_dims == (8, 308)
    synthetic_runs.seed(sel.spec(MODEL))
    return q


def _ablation_tab(app, query, **kw):
    from app_helpers import APP
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in {**query, **kw}.items():
        at.query_params[k] = v
    at.session_state["outliers_section"] = "Ablation"
    at.run()
    at.switch_page("pages/outliers.py").run()
    no_exception(at)
    return at


def _store_ablation(spec, dims):
    from core.base.config import CONFIG
    from core.compute import pipeline

    res = pipeline.analyze(spec)
    _, key = pipeline._ablation_request(res, dims, CONFIG.ablation_random_draws, CONFIG.ablation_held_out_tokens)
    ab = {"baseline_loss": 6.0, "ablated_loss": 9.5, "delta": 3.5, "random_losses": [6.1, 6.2],
          "random_deltas": [0.1, 0.2], "random_delta_mean": 0.15, "random_delta_std": 0.07, "dims": sorted(dims),
          "random_dims": [[1, 2], [3, 4]], "modules": [], "n_tokens": 500, "held_out_tokens": 500,
          "held_out_documents": 4}
    get_store().put(key, ab)


def test_the_ablation_tab_uses_the_typed_set_and_queues_it(app, query, monkeypatch):
    from core.entry import jobs

    monkeypatch.setattr("ui.run.start_worker", lambda: None)  # the job is checked, not run (no model here)
    at = _ablation_tab(app, query)
    assert at.radio(key="w_outlier_set").value == "typed"
    assert at.text_input(key="w_typed_dims").value == "8, 308"
    assert any("This tab uses the 2 typed dims (8, 308)" in c.value for c in at.caption)
    at.button(key="ablate").click().run()
    no_exception(at)
    [job] = [j for j in jobs.list_jobs(kinds=("ablation",)) if j.active]
    try:
        assert job.params["dims"] == [8, 308]
        assert any("ablation job is running" in c.value for c in at.caption)
    finally:
        jobs.cancel(job.id)


def test_typed_dims_are_checked_against_the_model(app, query):
    at = _ablation_tab(app, query)
    at.text_input(key="w_typed_dims").set_value("8, 5000").run()
    no_exception(at)
    assert any("768 dims" in e.value and "5000" in e.value and "out of range" in e.value for e in at.error)
    assert any("persistent outlier dims" in c.value for c in at.caption)  # what the tab uses meanwhile
    at.text_input(key="w_typed_dims").set_value("8; x").run()
    assert any("'x' is not a dimension number" in e.value for e in at.error)
    at.text_input(key="w_typed_dims").set_value("12,  3").run()
    no_exception(at)
    assert not at.error
    assert at.query_params["odims"] in ("3,12", ["3,12"])  # the link carries the set


def test_the_stored_ablation_of_the_chosen_set_is_shown_and_reported(app, query):
    from core import views
    from core.compute.pipeline import analyze
    from core.views import report

    sel = from_query_params({k: [v] for k, v in query.items()})[0]
    spec = sel.spec(MODEL)
    _store_ablation(spec, [8, 308])
    at = _ablation_tab(app, query)
    fig = by_title(at, "zeroed in every norm")
    assert [t["name"] for t in fig["data"] if t["type"] == "bar"][0] == "typed dims zeroed (2)"
    assert not [b for b in at.button if b.key == "ablate"]  # computed: no second Run ablation
    said = " ".join(c.value for c in at.caption).replace("\\", "")  # markdown escapes
    assert "Zeroing the 2 typed dims (8, 308) raises the loss by 3.5 nats/token" in said
    ab = report._chosen_ablation(sel, spec, analyze(spec))
    assert ab["dims"] == [8, 308] and ab["set"] == "typed dims"
    persistent = sel.replace(outlier_set="persistent")
    assert views.outlier_set(analyze(spec))[0] != [8, 308]
    assert report._chosen_ablation(persistent, spec, analyze(spec)) is None  # that set was not ablated


def test_a_note_of_both_frequency_views_is_shown_once(app, query, monkeypatch):
    """The position warning belongs to the Frequency figure and to its table (each exports it): the tab wrote it
    twice, one under the other. Any note the figure already shows is not repeated under the table."""
    from core.base.escape import markdown_text
    from core.views import single_dim

    note = "The top-20 tokens of dims 8 (position 0) sit mostly at one position (planted)."
    monkeypatch.setattr(single_dim, "position_notes", lambda *a, **k: [note])
    q = {**query, "tokens": "1210", "oset": "persistent"}  # a budget of its own: no view memoised without the patch
    synthetic_runs.seed(from_query_params({k: [v] for k, v in q.items()})[0].spec(MODEL))
    at = _ablation_tab(app, q)
    at.session_state["outliers_section"] = "Frequency"
    at.run()
    no_exception(at)
    assert [c.value for c in at.caption].count(f":material/info: {markdown_text(note)}") == 1
