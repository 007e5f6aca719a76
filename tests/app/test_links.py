"""Every page's link restores its view (issue 36 item 5): on each page a non-default state is set through the page's
own widgets, the URL the page then shows is opened in a fresh AppTest (a new browser session: nothing of the
first one), and what is drawn is compared: every figure's title and data, every table, and the forms' values.
No model is loaded: the runs, the reproduction record and the training series are synthetic, planted under their
real keys (synthetic_runs.py, tests/synthetic.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from app_helpers import figures, no_exception
from synthetic import synthetic_run, synthetic_stats

from core.base.cache import get_store
from core.compute.pipeline import resolve
from core.studies.papers import run as R
from core.studies.selection import Selection

TOKENS = "2330"  # this module's own budget: other app tests expect a cold cache for theirs
TWO = ("minilm-l6", "untrained-minilm-l6")


@pytest.fixture(scope="module")
def planted(cache_dir):
    """MiniLM and its untrained control 'computed' (synthetic statistics of their shapes), and a reproduction record
    of Ethayarajh 2019 on MiniLM alone at the quick-look budget."""
    sel = Selection(models=TWO, max_tokens=int(TOKENS), sample=500, control_seeds=1)
    for i, spec in enumerate(sel.specs()):
        s = synthetic_stats(n_layers=7, d=384, seed=10 + i, label=spec.model)
        get_store().put(resolve(spec).key, {"manifest": s.manifest, "meta": s.meta}, s.arrays)
    from test_papers_page import _run

    s = R.Settings(max_tokens=1000, sample=500, models=("minilm-l6",))
    info = R.PAPERS["ethayarajh"]
    rec = {"paper": "ethayarajh", "title": info.title, "citation": info.citation, "what": info.what,
           "settings": s.to_dict(), "runs": [_run("minilm-l6", "wiki-en", "trained", "minilm", "text",
                                                  (0.1, 0.2, 0.3, 0.25, 0.2))],
           "published": [], "key": R.record_key("ethayarajh", s), "timing": {"wall_s": 1.0, "runs": []}}
    rec["claims"] = R.claims_of(rec)
    get_store().put(rec["key"], rec)
    yield sel
    get_store().delete(rec["key"])


def _query(at) -> dict:
    return {k: at.query_params[k] for k in at.query_params}


FORM_WIDGETS = ("selectbox", "number_input", "text_input", "radio", "multiselect", "slider", "toggle", "checkbox",
                "segmented_control")


def _canon(obj):
    """A figure's JSON in one spelling: arrays as lists, keys sorted (two builds of one figure may order keys apart)."""
    if isinstance(obj, np.ndarray):
        return _canon(obj.tolist())
    if isinstance(obj, dict):
        return {k: _canon(obj[k]) for k in sorted(obj)}
    if isinstance(obj, (list, tuple)):
        return [_canon(v) for v in obj]
    return obj


def _drawn(at) -> list:
    """What the page draws: every figure's title and data, every table, and every widget's value (keyed)."""
    out = [json.dumps(_canon([f.get("layout", {}).get("title"), f["data"]]), default=str) for f in figures(at)]
    out += [d.value.to_json() for d in list(at.dataframe) + list(at.table)]
    out += sorted(f"{w.key}={w.value!r}" for kind in FORM_WIDGETS for w in getattr(at.main, kind) if w.key)
    return out


def _reopened(app, at, page: str):
    """The link the page shows, opened in a fresh session (AppTest), on that page."""
    fresh = app(page=page, **_query(at))
    no_exception(fresh)
    return fresh


def _layers(at):
    at.session_state["layers_section"] = "At one layer"
    at.run()
    at.radio(key="layer_by_layers").set_value("index").run()  # keeps the layer on show: the middle one, by index
    return {"ltab": "layer", "layer_by": "index", "layer": "3"}


def _outliers(at):
    at.session_state["outliers_section"] = "Across layers"
    at.run()
    return {"otab": "across"}


def _projection(at):
    at.selectbox(key="focus_projection").set_value(1)
    at.slider(key="p_layer").set_value(5)
    at.button(key="FormSubmitter:projection_form-Project").click().run()
    return {"focus": "untrained-minilm-l6", "layer": "5"}


def _chain(at):
    at.selectbox(key="focus_chain").set_value(1).run()
    return {"focus": "untrained-minilm-l6"}


def _compare(at):
    # B minus A of the default: a link without A and B drew the difference with its sign flipped
    at.selectbox(key="c_run_a").set_value(1)
    at.selectbox(key="c_run_b").set_value(0)
    at.run()
    diff = next(f for f in figures(at) if "(A - B)" in str(f["layout"]["title"]))
    assert "A: untrained" in str(diff["layout"]["title"]), diff["layout"]["title"]
    return {"ca": "untrained-minilm-l6", "cb": "minilm-l6"}


def _attention(at):
    at.number_input(key="dr_d").set_value(32)
    at.text_input(key="dr_alphas").set_value("0, 2")
    at.text_input(key="dr_taus").set_value("1")
    at.button(key="FormSubmitter:drift-Run experiment").click().run()
    return {"drift": "1", "dr_d": "32", "dr_alphas": "0,2", "dr_taus": "1"}


def _papers(at):
    at.segmented_control(key="paper_pick").set_value("ethayarajh").run()
    at.radio(key="paper_tokens").set_value(1000)
    at.multiselect(key="paper_models_ethayarajh").set_value(["minilm-l6"])
    at.run()
    assert any("Self-similarity" in str(f["layout"]["title"]) for f in figures(at))  # the planted record is drawn
    return {"paper": "ethayarajh", "pbudget": "1000", "pruns": "minilm-l6"}


def _dynamics(at):
    at.multiselect(key="dyn_pick").set_value(["run-a", "run-b"])
    at.number_input(key="dyn_tokens").set_value(5000)
    at.selectbox(key="dyn_metric").set_value("isoscore")
    at.run()
    assert any("IsoScore" in str(f["layout"]["title"]) for f in figures(at))  # the series of 5,000 tokens is drawn
    return {"druns": "run-a,run-b", "dtokens": "5000", "metric": "isoscore"}


def _train(at):
    at.selectbox(key="t_arch").set_value("llama")
    at.selectbox(key="t_corpus").set_value("wiki-fr")
    at.number_input(key="t_layers").set_value(3)
    at.number_input(key="t_steps").set_value(50)
    at.number_input(key="t_lr").set_value(3e-4)
    at.selectbox(key="t_preset").set_value("natural-vs-uniform")
    at.button(key="FormSubmitter:train_form-Train").click().run(timeout=60)
    return {"tarch": "llama", "tcorpus": "wiki-fr", "tlayers": "3", "tsteps": "50", "tlr": "0.0003",
            "tpreset": "natural-vs-uniform"}


def _lab(at):
    at.selectbox(key="lab_pick").set_value("lab-old").run()
    at.segmented_control(key="lab_stat").set_value("max_massive_ratio").run()
    assert any("top-1/median" in str(f["layout"]["title"]) for f in figures(at))  # the older lab's effects are drawn
    return {"lab": "lab-old", "lstat": "max_massive_ratio"}


PAGES = {"layers": _layers, "outliers": _outliers, "projection": _projection, "chain": _chain, "compare": _compare,
         "attention": _attention, "papers": _papers, "dynamics": _dynamics, "train": _train, "lab": _lab}


@pytest.fixture(scope="module")
def series():
    """Two trained runs' series (synthetic checkpoints), analysed at 5,000 tokens per checkpoint only."""
    res = [synthetic_run(seed=i)[1] for i in range(3)]
    record = {"spec": {"arch": "gpt2", "n_layers": 4, "d_model": 24, "n_heads": 4, "tokenizer": "bpe"}, "checkpoints": []}
    return {run: {"run": run, "steps": [0, 2, 8], "results": res[k:] + res[:k], "attention": None, "record": record,
                  "attention_note": None, "duplicates": [], "cka_to_final": None}
            for k, run in enumerate(("run-a", "run-b"))}


@pytest.fixture
def page_env(monkeypatch, tmp_path, series):
    """Dynamics reads the planted series; Train queues into a cache of its own with no worker (nothing trains)."""
    from ui import training

    monkeypatch.setattr(training, "series_on_disk", lambda: list(series))
    monkeypatch.setattr(training, "cached_series", lambda run, **kw: series[run] if kw == {"max_tokens": 5000} else None)

    def train_cache():
        monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
        monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    return train_cache


@pytest.fixture
def lab_env(cache_dir):
    """The Lab page's stored labs: a finished one-seed lab and a newer running one (tests/synthetic_lab.py)."""
    import shutil
    import time

    from synthetic_lab import synthetic_lab, write_lab

    def plant():
        write_lab(cache_dir, "lab-old", synthetic_lab(seeds=(0,), pending=None, status="done"), mtime=time.time() - 60)
        write_lab(cache_dir, "lab-new", synthetic_lab())
    yield plant
    shutil.rmtree(cache_dir / "labs", ignore_errors=True)


@pytest.mark.parametrize("page", list(PAGES))
def test_a_link_restores_the_view(app, planted, page_env, lab_env, page):
    if page == "train":
        page_env()
    if page == "lab":
        lab_env()
    # Layers is the home page ("/"): its link opens there (the harness opens every session on it first)
    path = None if page == "layers" else f"pages/{page}.py"
    at = app(models=TWO, page=path, tokens=TOKENS)
    no_exception(at)
    want = PAGES[page](at)
    no_exception(at)
    assert not at.error and not at.warning, [e.value for e in list(at.error) + list(at.warning)]
    query = _query(at)
    got = {k: (v[-1] if isinstance(v, list) else v) for k, v in query.items()}
    assert want.items() <= got.items(), got  # the page's state is in its URL
    fresh = _reopened(app, at, path)
    assert not fresh.warning, [w.value for w in fresh.warning]
    assert _drawn(fresh) == _drawn(at)
    assert figures(at) or at.dataframe or page == "train"  # Train draws a form
    assert _query(fresh) == query  # and the fresh session's link is the same link


def test_an_export_is_named_after_its_page(app, planted, monkeypatch):
    """Issue 36 item 7: the curves exported from Compare were named layers_... (the view's name, as on Layers)."""
    import streamlit as st

    names = []
    real = st.download_button

    def recorded(*a, **kw):
        names.append(kw["file_name"])
        return real(*a, **kw)

    monkeypatch.setattr(st, "download_button", recorded)
    at = app(models=TWO, page="pages/compare.py", tokens=TOKENS)
    at.session_state["dlpop_c_curves"] = True  # open the curves' Download popover
    at.run()
    no_exception(at)
    curves = [n for n in names if "mean_cosine" in n]
    assert {n.rsplit(".", 1)[1] for n in curves} == {"png", "svg", "pdf", "html", "csv", "json"}
    assert all(n.startswith("compare_layers_mean_cosine__") for n in curves), curves
