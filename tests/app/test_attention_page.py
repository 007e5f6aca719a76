"""The Attention page via AppTest: compute behind the button, heatmaps equal the section, the outlier
link, the single-window viewer beside its ablated twin, the controlled experiment and its errors."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import by_title, figures, no_exception, title, wait_for_jobs

from core import jobs
from core.attention import attention_maps, head_matrix, run_attention
from core.attention import is_cached as attention_cached
from core.pipeline import analyze
from core.selection import Selection
from core.views import attention as AV
from ui.state import LOG_KEY

PAGE = "pages/attention.py"
TOKENS = 1500  # not the other app tests' selection: their first test expects a cold cache
SEQ = 128  # windows of 128 tokens: long documents have several, picked by document in the viewer


@pytest.fixture(scope="module")
def spec(cache_dir):
    s = Selection(models=("minilm-l6",), max_tokens=TOKENS, sample=500, max_seq_len=SEQ).spec("minilm-l6")
    analyze(s)  # the run itself is cached (as after pressing Run); its attention is not
    return s


@pytest.mark.slow
def test_attention_page_end_to_end(app, spec):
    at = app(page=PAGE, tokens=str(TOKENS), seqlen=str(SEQ))
    no_exception(at)
    assert not attention_cached(spec)
    assert any("not computed yet" in i.value for i in at.info)
    at.button(key="attn_compute").click().run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    queued = jobs.list_jobs(kinds=("attention",))
    assert queued, "the button queues a job of the queue (a click elsewhere no longer stops it)"
    at.run()  # while the job is queued or running: no second Compute button, a line saying it is computing
    no_exception(at)
    assert not [b for b in at.button if b.key == "attn_compute"] or jobs.status(queued[0].id).status == jobs.FAILED
    assert attention_cached(spec) or any("Computing the attention statistics" in i.value for i in at.info), \
        [i.value for i in at.info]
    wait_for_jobs(900)
    assert jobs.status(queued[0].id).status == jobs.DONE, jobs.status(queued[0].id).error
    at.run()
    no_exception(at)
    assert attention_cached(spec)
    sec = run_attention(spec)
    heat = by_title(at, "Attention entropy per block and head")
    np.testing.assert_allclose(heat["data"][0]["z"], head_matrix(sec, "entropy"), rtol=1e-9)
    assert heat["data"][0]["z"].shape == (6, 12)
    curve = by_title(at, "Attention entropy by block")
    np.testing.assert_allclose(curve["data"][0]["y"], np.nanmean(head_matrix(sec, "entropy"), axis=1), rtol=1e-9)
    link = by_title(at, "Outlier link")
    assert len(link["data"]) == 2  # outlier dims beside random dims
    assert "special tokens excluded" in link["layout"]["title"]["subtitle"]["text"]

    at.selectbox(key="attn_stat").set_value("cos_mu_qk").run()
    heat = by_title(at, "cos(mean query, mean key) per block and head")
    np.testing.assert_allclose(heat["data"][0]["z"], head_matrix(sec, "cos_mu_qk"), rtol=1e-9)
    at.radio(key="attn_keys").set_value("included").run()
    link = by_title(at, "Outlier link")
    assert "special tokens included" in link["layout"]["title"]["subtitle"]["text"]
    assert "mean |r|" in link["layout"]["title"]["subtitle"]["text"]  # the default summary over the dims
    at.radio(key="attn_link_summary").set_value("strongest").run()
    assert "r of the strongest dim" in by_title(at, "Outlier link")["layout"]["title"]["subtitle"]["text"]

    # The viewer picks a window by document: the second window of a document that has several,
    # block 2, head 3: the map and its twin with the outlier dims zeroed.
    docs = AV.window_documents(sec, sec["n_windows"])
    assert len(docs) < sec["n_windows"] and sorted(w for e in docs for w in e["windows"]) == list(range(sec["n_windows"]))
    di = next(i for i, e in enumerate(docs) if len(e["windows"]) >= 2)
    entry = docs[di]
    at.selectbox(key="attn_doc").set_value(di).run()
    assert at.selectbox(key=f"attn_doc_win_{di}").options == [AV.window_label(entry, k)
                                                               for k in range(len(entry["windows"]))]
    at.selectbox(key=f"attn_doc_win_{di}").set_value(1)
    at.slider(key="attn_block").set_value(2)
    at.slider(key="attn_head").set_value(4)  # heads numbered from 1 (as blocks): column 3 of the arrays
    at.button(key="attn_show").click().run()
    no_exception(at)
    window = entry["windows"][1]
    maps = attention_maps(spec, window)
    amap = by_title(at, "Attention map of one window")
    sub = amap["layout"]["title"]["subtitle"]["text"].replace("<br>", " ")
    assert f"document {entry['doc']} “" in sub and "block 2, head 4" in sub
    assert f"window 2 of {len(entry['windows'])} (run window {window})" in sub
    z = amap["data"][0]["z"]
    np.testing.assert_allclose(z, maps["maps"][1, 3], rtol=1e-6)
    if "first" not in sub:  # the whole window: rows are distributions
        np.testing.assert_allclose(z.sum(1), 1.0, atol=1e-5)
    from core.figures import esc

    want = [esc(AV.readable_token(t)) for t in maps["tokens"]]
    assert list(amap["layout"]["yaxis"]["ticktext"]) == want  # every query's token, as text (not ĠPolish)
    if sec["outlier_dims"]:
        assert len(amap["data"]) == 2 and not np.allclose(amap["data"][0]["z"], amap["data"][1]["z"])
        change = by_title(at, "Change in attention when the outlier dims are zeroed")  # on the diverging scale
        np.testing.assert_allclose(change["data"][0]["z"], maps["zeroed"][1, 3] - maps["maps"][1, 3], atol=1e-6)
        assert change["layout"]["coloraxis"]["cmin"] == -change["layout"]["coloraxis"]["cmax"] < 0
    # block and head switch between that window's maps (no button); choosing another document
    # does not change the map until Show
    at.slider(key="attn_head").set_value(1).run()
    at.selectbox(key="attn_doc").set_value((di + 1) % len(docs)).run()
    no_exception(at)
    amap = by_title(at, "Attention map of one window")
    sub = amap["layout"]["title"]["subtitle"]["text"].replace("<br>", " ")
    assert f"(run window {window})" in sub and "block 2, head 1" in sub
    np.testing.assert_allclose(amap["data"][0]["z"], maps["maps"][1, 0], rtol=1e-6)
    # a window number in the session that this run does not have (stale or forged): nothing is run
    log = at.session_state[LOG_KEY]
    [rid] = log.attention_maps
    log.attention_maps[rid] = (10**9, 1, 0)
    at.session_state[LOG_KEY] = log
    at.run()
    no_exception(at)
    assert not at.error and not [f for f in figures(at) if "Attention map" in title(f)]

    # Compare shows the per-block means by relative depth once attention is computed.
    at.switch_page("pages/compare.py").run()  # the selection (tokens) stays in the session
    no_exception(at)
    at.session_state["compare_section"] = "Attention"
    at.run()
    no_exception(at)
    cmp_ = by_title(at, "Attention entropy by relative depth")
    np.testing.assert_allclose(cmp_["data"][0]["x"][-1], 1.0)
    np.testing.assert_allclose(cmp_["data"][0]["y"], np.nanmean(head_matrix(sec, "entropy"), axis=1), rtol=1e-9)


def test_controlled_experiment_from_the_page(app, spec):
    at = app(page=PAGE, tokens=str(TOKENS), seqlen=str(SEQ))
    at.text_input(key="dr_alphas").set_value("0, 1, 3")
    at.text_input(key="dr_taus").set_value("0.5, 2")
    at.number_input(key="dr_d").set_value(32)
    at.button(key="FormSubmitter:drift-Run experiment").click().run()
    no_exception(at)
    cos = by_title(at, "Controlled experiment: output mean cosine")
    z = cos["data"][0]["z"]
    assert z.shape == (3, 2)
    assert (np.diff(z, axis=0) > 0).all()  # grows with alpha at each tau
    assert by_title(at, "Controlled experiment: attention entropy")["data"][0]["z"].shape == (3, 2)
    at.text_input(key="dr_taus").set_value("0, 1")
    at.button(key="FormSubmitter:drift-Run experiment").click().run()
    no_exception(at)
    assert any("taus" in e.value for e in at.error)
    at.text_input(key="dr_taus").set_value("one")
    at.button(key="FormSubmitter:drift-Run experiment").click().run()
    assert at.error and not at.exception
