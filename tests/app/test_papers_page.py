"""The Papers page via AppTest on synthetic reproduction records (no model): the figure, the published values
and the claims table come from the stored record; without one, the page offers its Reproduce button."""

from __future__ import annotations

import pytest
from app_helpers import by_title, no_exception

from core.base.cache import get_store
from core.studies.papers import run as R

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
             "alphas": [0.0, 4.0], "taus": [0.25, 1.0], "n_tokens": 1024, "block": "pre-norm block",
             "experiments": {t: {"output_mean_cosine": c, "output_within_sequence_cosine": c, "attention_entropy": e,
                                 "input_mean_cosine": i, "q_drift": [0.0, 0.9], "k_drift": [0.0, 0.9]}
                             for t, c, e, i in (("query_key", [[0.07, 0.07], [0.12, 0.1]], [[0.8, 0.9], [0.2, 0.7]],
                                                 [0.0, 0.0]),
                                                ("key", [[0.07, 0.07], [0.07, 0.07]], [[0.8, 0.9], [0.8, 0.9]],
                                                 [0.0, 0.0]),
                                                ("input", [[0.07, 0.07], [0.95, 0.95]], [[0.8, 0.9], [0.98, 0.99]],
                                                 [0.0, 0.94]))}}
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
    # the reason is measured (here: nothing on the page explains it), the model's recorded fact is context only
    assert row["verdict"].endswith("does not agree") and "contrastive" not in row["reason"]
    assert "contrastive" in row["context"] and row["context"].startswith("context")
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
    # no Godey claims table (the lab's claims block, beside it, stands on its own: tests/app/test_lab_page.py)
    assert not [d for d in list(at.table) + list(at.dataframe) if "verdict" in d.value.columns
                and "lab" not in d.value.columns]


def test_any_statistic_of_the_registry_is_drawn_for_the_runs(app, stored):
    """The record keeps every per-layer statistic of the registry (R.CURVES is its picker); the page offers each
    one the runs carry and draws the chosen one for every run."""
    from core.stats import registry as S

    assert R.CURVES == tuple(S.picker())
    rec = godey_record()
    rec["runs"][0]["curves"]["token_kurtosis"] = [3.0, 5.0, 40.0, 60.0, 8.0]  # one run's values of one statistic
    for r in rec["runs"][1:]:
        r["curves"]["token_kurtosis"] = [None] * 5
    for r in rec["runs"]:
        r["curves"]["massive_ratio"] = [None] * 5  # no run measured it: not offered
    stored(rec)
    at = app(page=PAGE)
    no_exception(at)
    box = next(s for s in at.selectbox if s.key == "paper_godey_stat")
    assert S.picker()["token_kurtosis"][0] in box.options and S.picker()["mean_cosine"][0] in box.options
    assert S.picker()["massive_ratio"][0] not in box.options
    box.set_value("token_kurtosis").run()
    no_exception(at)
    fig = by_title(at, f"{S.picker()['token_kurtosis'][0]} by layer: every run")
    drawn = {t["name"]: list(t["y"]) for t in fig["data"]}
    assert drawn["minilm-l6"] == [3.0, 5.0, 40.0, 60.0, 8.0]
