"""Selection, presets, URL and sidebar across pages (issue 28 items 1, 2, 10, 11): no model is run; the runs
a page shows are synthetic statistics planted in the test cache under the selection's run keys."""

from __future__ import annotations

import re

import pytest
from app_helpers import figures, no_exception
from synthetic import synthetic_stats

from core.base.cache import get_store
from core.compute.pipeline import resolve
from core.studies.selection import GODEY_CONTROLS, GODEY_MODELS, GODEY_PRESET, Selection

TOKENS = "2300"  # not the other app tests' budget: their first test expects a cold cache
TWO = ("minilm-l6", "untrained-minilm-l6")


@pytest.fixture(scope="module")
def planted(cache_dir):
    """MiniLM and its untrained control 'computed' (synthetic statistics of their shapes, never a model)."""
    sel = Selection(models=TWO, max_tokens=int(TOKENS), sample=500, control_seeds=1)
    for i, spec in enumerate(sel.specs()):
        s = synthetic_stats(n_layers=7, d=384, seed=i, label=spec.model)
        get_store().put(resolve(spec).key, {"manifest": s.manifest, "meta": s.meta}, s.arrays)
    return sel


def _sidebar_captions(at) -> str:
    return " ".join(c.value for c in at.sidebar.caption)


def _query(at) -> dict:
    return {k: at.query_params[k] for k in at.query_params}


def _drawn(at) -> list:
    """What the page draws: every figure's title and data (as JSON text), and the tables."""
    return [str(f.get("layout", {}).get("title")) + str(f["data"]) for f in figures(at)] + \
        [d.value.to_json() for d in at.dataframe]


def test_godey_preset_sets_the_sidebar_the_url_and_what_run_runs(app):
    at = app(models=("smollm2-135m",), page="pages/outliers.py", dim="308", ablate="1")
    assert at.query_params["dim"] in ("308", ["308"])
    at.switch_page("pages/compare.py").run()
    assert "dim" not in at.query_params and "ablate" not in at.query_params  # Outliers' choices stay there
    at.button(key="c_godey").click().run()
    no_exception(at)
    want = [m for p in GODEY_MODELS for m in (p, GODEY_CONTROLS[p])]  # each model with its untrained control
    assert want == list(GODEY_PRESET)
    assert at.sidebar.multiselect(key="w_models").value == want  # the sidebar shows the preset
    assert list(at.query_params["models"]) == want  # so does the URL
    assert at.session_state["w_models"] == want  # the widget's own state (what the browser sends back)
    assert "dim" not in at.query_params and "ablate" not in at.query_params
    assert not at.warning, [w.value for w in at.warning]
    # Run computes the preset, not "everything is already computed" (another app test may have stored
    # one of its runs in the tier's shared cache, so the count is not always 0)
    done = re.search(r"(\d+) of (\d+) selected runs? already computed", _sidebar_captions(at))
    assert done and int(done.group(2)) == len(want) and int(done.group(1)) < len(want), _sidebar_captions(at)
    at.run()  # a later rerun (e.g. Run's click) keeps it
    assert at.sidebar.multiselect(key="w_models").value == want
    at.switch_page("pages/outliers.py").run()
    assert "dim" not in at.query_params  # the preset dropped the dim chosen for another model


def test_compare_section_is_in_the_link(app, planted):
    at = app(models=TWO, page="pages/compare.py", tokens=TOKENS)
    no_exception(at)
    at.session_state["compare_section"] = "Outliers and summary"
    at.run()
    assert at.query_params["ctab"] in ("outliers", ["outliers"])
    fresh = app(models=TWO, page="pages/compare.py", **{k: v for k, v in _query(at).items() if k != "models"})
    no_exception(fresh)
    assert fresh.session_state["compare_section"] == "Outliers and summary"
    assert _drawn(fresh) == _drawn(at) and _drawn(at)
    fresh.switch_page("pages/layers.py").run()
    assert "ctab" not in fresh.query_params  # Compare's tab stays on Compare
    fresh.switch_page("pages/compare.py").run()
    assert fresh.query_params["ctab"] in ("outliers", ["outliers"])  # and comes back with it


def test_cleared_models_show_no_run(app, planted):
    at = app(models=TWO, page="pages/layers.py", tokens=TOKENS)
    assert figures(at)
    at.sidebar.multiselect(key="w_models").set_value([]).run()
    no_exception(at)
    assert any("Select at least one model." in e.value for e in at.sidebar.error)
    assert "already computed" not in _sidebar_captions(at)
    assert not [b for b in at.sidebar.button if b.key == "run"]
    assert not figures(at) and any("No model is selected" in i.value for i in at.info)
    assert "models" not in at.query_params  # a link of this view does not reopen the models cleared
    at.sidebar.multiselect(key="w_models").set_value(["minilm-l6"]).run()
    assert figures(at) and "1 of 1" in _sidebar_captions(at)
    at.sidebar.multiselect(key="w_models").set_value(list(TWO)).run()
    assert list(at.query_params["models"]) == list(TWO)  # and a choice writes them again


@pytest.mark.parametrize("page,corpus", [("pages/train.py", True), ("pages/dynamics.py", False)])
def test_train_and_dynamics_sidebar_shows_what_applies(app, page, corpus):
    at = app(page=page)
    no_exception(at)
    keys = {w.key for kind in ("multiselect", "number_input", "button", "radio") for w in getattr(at.sidebar, kind)}
    assert not keys & {"w_models", "w_tokens", "run"}
    assert ("w_corpus_src" in keys) == corpus  # Train lists the sidebar's own corpora: upload them here


def test_the_default_budget_is_a_first_look_with_a_way_to_more(app):
    from core.studies.selection import DEFAULT, FULL_LOOK_TOKENS, UI_MAX_TOKENS

    assert DEFAULT.max_tokens == UI_MAX_TOKENS == 8_000
    at = app(tokens=str(UI_MAX_TOKENS))
    assert "a first look" in _sidebar_captions(at)
    at.sidebar.button(key="w_more_tokens").click().run()
    no_exception(at)
    assert at.sidebar.number_input(key="w_tokens").value == FULL_LOOK_TOKENS
    assert at.query_params["tokens"] in (str(FULL_LOOK_TOKENS), [str(FULL_LOOK_TOKENS)])
    assert "a first look" not in _sidebar_captions(at)
    assert not at.warning, [w.value for w in at.warning]  # no "default value and Session State" warning
    at.run()
    assert at.sidebar.number_input(key="w_tokens").value == FULL_LOOK_TOKENS  # the next rerun keeps it


def test_dynamics_opens_on_every_run_of_the_preset_by_its_names(app, monkeypatch):
    """Issue 28 item 12: both runs of a training preset, named as the preset named them (not by hash names),
    also when the second reaches the disk after Dynamics was first opened."""
    from ui import training
    from ui.state import LOG_KEY

    on_disk = ["gpt2-bpe-1a2b3c", "other-run-9f9f9f"]
    monkeypatch.setattr(training, "series_on_disk", lambda: list(on_disk))
    monkeypatch.setattr(training, "cached_series", lambda run, **kw: None)  # not analysed yet: a line each
    at = app(page="pages/dynamics.py")
    log = at.session_state[LOG_KEY]
    log.dynamics_runs = ["gpt2-bpe-1a2b3c", "gpt2-bytes-4d5e6f"]  # what Train's preset button queued
    log.dynamics_labels.update({"gpt2-bpe-1a2b3c": "BPE", "gpt2-bytes-4d5e6f": "bytes"})
    at.session_state[LOG_KEY] = log
    at.run()
    def runs(v):  # AppTest gives the widget's values as shown or as they are: the run names
        return [x.split(" · ")[-1] for x in v]

    assert runs(at.multiselect(key="dyn_pick").value) == ["gpt2-bpe-1a2b3c"]  # the only one trained so far
    on_disk.insert(1, "gpt2-bytes-4d5e6f")  # the second training ends
    at.run()
    no_exception(at)
    pick = at.multiselect(key="dyn_pick")
    assert runs(pick.value) == ["gpt2-bpe-1a2b3c", "gpt2-bytes-4d5e6f"]  # both runs of the preset
    assert "BPE · gpt2-bpe-1a2b3c" in pick.options and "bytes · gpt2-bytes-4d5e6f" in pick.options


def test_compare_projection_panels_name_their_corpus(app, planted):
    at = app(models=TWO, page="pages/compare.py", tokens=TOKENS, ctab="projections")
    no_exception(at)
    proj = next(f for f in figures(at) if "sampled token" in str(f["layout"].get("title")))
    titles = [a["text"] for a in proj["layout"].get("annotations", []) if "layer" in a.get("text", "")]
    assert len(titles) == 2 and all(" · synthetic, layer" in t for t in titles), titles  # the planted runs' corpus
