"""The Papers page via AppTest on synthetic reproduction records (no model): the figure, the published values
and the claims table come from the stored record; without one, the page offers its Reproduce button."""

from __future__ import annotations

import pytest
from app_helpers import by_title, no_exception

from core.papers import run as R
from core.pipeline import get_store

PAGE = "pages/papers.py"


def _run(model, corpus, role, group, modality, mc):
    facts = R.FACTS[model]
    return {"model": model, "corpus": corpus, "label": model, "modality": modality, "role": role, "group": group,
            "family": facts["family"], "tokenization": facts.get("tokenization"), "note": facts.get("note"),
            "analogue": facts.get("analogue"), "n_tokens": 1000, "d": 8, "layer_ids": list(range(len(mc))),
            "manifest": {"model": {"label": model, "fingerprint": "f"}, "corpus": {"id": corpus, "sha256": "s"},
                         "tokens": {"analysed": 1000}, "seed": 0},
            "curves": {c: list(mc) for c in R.CURVES}}


def godey_record(trained_minilm=(0.06, 0.13, 0.16, 0.25, 0.03)) -> dict:
    runs = [_run("minilm-l6", "wiki-en", "trained", "minilm", "text", trained_minilm),
            _run("untrained-minilm-l6", "wiki-en", "control", "minilm", "text", (0.36, 0.38, 0.39, 0.39, 0.40)),
            _run("dinov2-vits14", "images-crops", "trained", "vit", "image", (0.46, 0.36, 0.2, 0.27, 0.49)),
            _run("untrained-vit-s14", "images-crops", "control", "vit", "image", (0.01, 0.05, 0.07, 0.09, 0.11))]
    drift = {"spec": {"d": 64, "heads": 4, "seq_len": 32, "n_seq": 32, "seed": 0, "alphas": [0.0, 4.0],
                      "taus": [0.25, 1.0]},
             "alphas": [0.0, 4.0], "taus": [0.25, 1.0], "output_mean_cosine": [[0.3, 0.3], [0.95, 0.95]],
             "input_mean_cosine": [[0.0, 0.0], [0.9, 0.9]], "attention_entropy": [[0.8, 0.9], [0.98, 0.99]],
             "n_tokens": 1024, "block": "pre-norm block"}
    rec = {"paper": "godey", "title": R.PAPERS["godey"].title, "citation": R.PAPERS["godey"].citation,
           "what": R.PAPERS["godey"].what, "settings": R.Settings().to_dict(), "runs": runs, "drift": drift,
           "published": [], "key": R.record_key("godey", R.Settings()), "timing": {"wall_s": 12.0, "runs": []}}
    rec["claims"] = R.claims_of(rec)
    return rec


@pytest.fixture
def stored(cache_dir):
    store = get_store(cache_dir)
    key = R.record_key("godey", R.Settings())

    def put(rec):
        store.put(key, rec)
    yield put
    store.delete(key)


def _claims(at):
    tables = [d.value for d in list(at.table) + list(at.dataframe) if "verdict" in d.value.columns]
    assert tables, "no claims table"
    t = tables[0]
    return t if "claim" in t.columns else t.reset_index().rename(columns={"index": "claim"})


def test_godey_figure_and_claims_from_the_record(app, stored):
    stored(godey_record())
    at = app(page=PAGE)
    no_exception(at)
    fig = by_title(at, "Mean cosine by layer: Text")
    names = [t["name"] for t in fig["data"]]
    assert any("untrained-minilm-l6 (random init)" in n for n in names)
    by_title(at, "Controlled experiment: output mean cosine")
    claims = _claims(at)
    row = claims[claims["claim"].str.startswith("Training makes minilm-l6")].iloc[0]
    assert row["verdict"].endswith("does not agree") and "contrastive" in row["reason"]
    assert claims[claims["claim"].str.startswith("Training makes dinov2")].iloc[0]["verdict"].endswith("agrees")
    # the numbers flip, the verdict flips (the table is computed, not typed)
    stored(godey_record(trained_minilm=(0.5, 0.6, 0.6, 0.7, 0.8)))
    at = app(page=PAGE)
    claims = _claims(at)
    row = claims[claims["claim"].str.startswith("Training makes minilm-l6")].iloc[0]
    assert row["verdict"] == "agrees" and row["reason"] == ""


def test_without_a_record_the_page_offers_to_reproduce(app, cache_dir):
    get_store(cache_dir).delete(R.record_key("godey", R.Settings()))
    at = app(page=PAGE)
    no_exception(at)
    assert "Reproduce Godey" in next(b.label for b in at.button if b.key == "paper_run")
    assert not [d for d in list(at.table) + list(at.dataframe) if "verdict" in d.value.columns]
