"""The Chain page on a synthetic run (no model): the chain on one depth axis with a sentence per link,
the ablations' button, then (a chain ablation planted in the cache under the run's key) their
before/after curves, restored from the link (cabl=1); a hostile cabl value is refused with a message."""

from __future__ import annotations

import pytest
from app_helpers import figures, no_exception
from synthetic import synthetic_stats

from core.base.cache import get_store
from core.base.config import CONFIG
from core.compute.pipeline import analyze, resolve
from core.studies.chain import ablate_links as CA
from core.studies.selection import Selection

TOKENS = "2310"  # this module's own budget: other app tests expect a cold cache for theirs
MODEL = "minilm-l6"


@pytest.fixture(scope="module")
def planted(cache_dir):
    sel = Selection(models=(MODEL,), max_tokens=int(TOKENS), sample=500)
    spec = sel.specs()[0]
    s = synthetic_stats(n_layers=7, d=384, seed=3, label=spec.model)
    get_store().put(resolve(spec).key, {"manifest": s.manifest, "meta": s.meta}, s.arrays)
    return spec


def _fake_ablations(res: dict) -> dict:
    L = len(res["layers"])
    curve = {"loss": None, "loss_kind": None, "loss_tokens": 0, "mean_cosine": [0.5] * L, "outlier_count": [1] * L,
             "top1_median": [10.0] * L, "sink_share": [0.2] * (L - 1), "n_positions": 100}
    after = {**curve, "mean_cosine": [0.1] * L, "top1_median": [2.0] * L}
    ab = {k: {"what": CA.ABLATIONS[k][0], "control_of": CA.ABLATIONS[k][1], "targets": {"dims": [5]},
              **CA.summary(curve, after if k == "outlier_dims" else curve)}
          for k in ("outlier_dims", "outlier_random")}
    return {"baseline": curve, "ablations": ab, "targets": CA.default_targets(res), "loss": "not applicable",
            "modality": "text", "model": MODEL}


def test_chain_page_then_its_ablations_from_the_link(app, planted):
    at = app(models=(MODEL,), page="pages/chain.py", tokens=TOKENS)
    no_exception(at)
    figs = figures(at)
    chain = next(f for f in figs if "outlier chain" in str(f["layout"]["title"]))
    names = [tr.get("name") for tr in chain["data"]]
    assert "top-1 / median |x|" in names and "mean cosine" in names and "top-1 dim" in names
    assert chain["layout"]["yaxis"]["type"] == "log"
    text = " ".join(m.value for m in at.caption).replace("\\", "")  # the notes under each figure (escaped)
    assert "Super weights: not scanned" in text and "Mean cosine:" in text and "sink share: not measured" in text
    assert [b for b in at.button if b.key == "chain_ablate"]  # no ablation stored yet: the button
    assert [b for b in at.button if b.key == "chain_stats"]  # no chain section yet: its button
    # the ablations computed (planted under the run's key): their curves, and the link restores them
    run = resolve(planted)
    res = analyze(run)
    key = CA._key(run.key, CA.default_targets(res), CONFIG.ablation_held_out_tokens, planted.seed)
    get_store().put(key, _fake_ablations(res))
    at.run()
    no_exception(at)
    curves = [f for f in figures(at) if "link by link" in str(f["layout"]["title"])]
    assert curves and any(tr.get("name") == "as is" for tr in curves[0]["data"])
    assert at.query_params["cabl"] in ("1", ["1"])
    text = " ".join(m.value for m in at.caption).replace("\\", "")  # the notes under each figure (escaped)
    assert "Outlier dims zeroed in every norm: loss not applicable" in text


def test_a_hostile_cabl_value_is_refused(app, planted):
    at = app(models=(MODEL,), page="pages/chain.py", tokens=TOKENS, cabl="<script>alert(1)</script>")
    no_exception(at)
    assert "cabl" not in at.query_params or at.query_params["cabl"] in ("1", ["1"])
    assert figures(at)


def test_the_last_panel_shows_any_statistic_of_the_registry(app, planted):
    from core.stats import registry as S

    at = app(models=(MODEL,), page="pages/chain.py", tokens=TOKENS)
    no_exception(at)
    box = next(s for s in at.selectbox if s.key == "chain_stat")
    res = analyze(resolve(planted))
    offered = [k for k in S.picker() if any(row.get(k) is not None for row in res["layers"])]
    assert box.value == "mean_cosine" and len(box.options) == len(offered) > 10  # every statistic the run has
    assert S.picker()["token_kurtosis"][0] in box.options
    box.set_value("token_kurtosis").run()
    no_exception(at)
    chain = next(f for f in figures(at) if "outlier chain" in str(f["layout"]["title"]))
    label = S.picker()["token_kurtosis"][0]
    trace = next(tr for tr in chain["data"] if tr.get("name") == label)
    assert list(trace["y"]) == pytest.approx([row["token_kurtosis"] for row in res["layers"]])
    assert chain["layout"]["yaxis4"]["type"] == "log"  # the registry's figure default for it
