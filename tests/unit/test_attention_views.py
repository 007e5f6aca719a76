"""Attention views on a synthetic section: shapes, values, escaping of token labels, exports."""

import json

import numpy as np
import pytest

from core.studies.attention import finish, layer_means, pick_dims
from core.studies.attention.summary import _closed_form_cosine, _pearson
from core.views import attention as AV
from core.views import export
from core.views import figures as F
from tests.synthetic import synthetic_run

L, H, HKV, DH = 3, 4, 2, 5


def _sums(rng):
    """Sums of a fake accumulator (finish() only divides and combines them)."""
    D = 3
    acc = {"n_q": np.full(L, 50.0), "sum_entropy": rng.uniform(10, 40, (L, H)), "n_entropy": np.full(L, 45.0),
           "sum_first": rng.uniform(0, 50, (L, H)), "sum_special": rng.uniform(0, 50, (L, H)),
           "sum_special_nf": rng.uniform(0, 10, (L, H)), "sum_alpha_first": rng.uniform(0, 4, (L, H)),
           "n_windows": np.full(L, 5.0),
           "qk_n": np.full(L, 50.0), "sum_q": rng.normal(size=(L, H, DH)) * 50, "sum_qnorm": np.full((L, H), 200.0),
           "sum_qu": rng.normal(size=(L, H, DH)), "sum_k": rng.normal(size=(L, HKV, DH)) * 50,
           "sum_knorm": np.full((L, HKV), 200.0), "sum_ku": rng.normal(size=(L, HKV, DH)),
           "pairs": np.full(L, 700.0), "pair_q": rng.normal(size=(L, H, DH)) * 700,
           "pair_k": rng.normal(size=(L, HKV, DH)) * 700, "pair_qk": rng.normal(size=(L, H)) * 700}
    x = rng.normal(size=(L, 2, 60, D))
    s = rng.normal(size=(L, 2, H, 60))
    acc.update(link_n=np.full((L, 2), 60.0), link_a=x.sum(2), link_a2=(x * x).sum(2), link_s=s.sum(3),
               link_s2=(s * s).sum(3), link_as=np.einsum("lsht,lstd->lshd", s, x))
    return acc, x, s


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    acc, x, s = _sums(rng)
    sec = finish(acc, {"n_blocks": L, "n_heads": H, "n_kv_heads": HKV, "head_dim": DH, "causal": True,
                       "special_tokens": "exclude", "run_key": "k"}, [1], [2, 3])
    _, res = synthetic_run()
    return res, sec, x, s


def test_finish_pearson_and_closed_form(case):
    res, sec, x, s = case
    for l in range(L):
        for h in range(H):
            want = np.corrcoef(x[l, 0, :, 0], s[l, 0, h])[0, 1]
            assert sec["layers"][l]["link"]["included"]["outlier_r"][h][0] == pytest.approx(want, abs=1e-9)
    u = np.random.default_rng(1).normal(size=(7, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    C = u @ u.T
    assert _closed_form_cosine(u.sum(0), 7) == pytest.approx(C[~np.eye(7, dtype=bool)].mean())
    assert np.isnan(_pearson(np.float64(3), 3.0, 3.0, 1.0, 1.0, 1.0))  # constant: undefined, not an error
    assert len(layer_means(sec, "entropy")) == L
    acc, _, _ = _sums(np.random.default_rng(0))  # alpha_1: the windows' sum over the windows
    np.testing.assert_allclose([r["alpha_first"] for r in sec["layers"]], acc["sum_alpha_first"] / 5.0)


def test_pick_dims_excludes_outliers_and_is_seeded():
    o, r = pick_dims([5, 2, 99], 20, 10, seed=0)
    assert o == [2, 5] and len(r) == 10 and not set(r) & {2, 5}
    assert pick_dims([5, 2], 20, 10, seed=0)[1] == r != pick_dims([5, 2], 20, 10, seed=1)[1]


@pytest.mark.parametrize("key", AV.HEATMAP_STATS)
def test_head_heatmaps(case, key):
    res, sec, _, _ = case
    v = AV.head_heatmap(res, sec, key)
    z = np.asarray(v.figure.data[0].z, dtype=float)
    assert z.shape == (L, H)
    np.testing.assert_allclose(z, [[np.nan if x is None else x for x in row[key]] for row in sec["layers"]])
    assert len(v.data) == L * H and v.manifest["attention"][0]["n_kv_heads"] == HKV
    json.loads(export.data_bytes(v, "json"))


def test_link_grid_and_curves(case):
    res, sec, _, _ = case
    v = AV.link_grid(res, sec, "included", "mean")
    assert len(v.figure.data) == 2 and v.figure.layout.coloraxis.cmin == -1
    assert set(v.data["kind"]) == {"outlier dims", "random non-outlier dims"}
    r = AV.link_matrix(sec, "included", "outlier_r")
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(v.figure.data[0].z, np.nanmean(r, axis=2))
        a = AV.link_grid(res, sec, "included")  # default: mean |r| on a 0-1 scale (signs cannot cancel)
        np.testing.assert_allclose(a.figure.data[0].z, np.nanmean(np.abs(r), axis=2))
    assert a.figure.layout.coloraxis.cmin == 0 and "mean |r|" in a.figure.layout.annotations[0].text
    s = AV.link_grid(res, sec, "included", "strongest")  # the signed r of the dim with the largest |r|
    z = np.asarray(s.figure.data[0].z, dtype=float)
    ok = np.isfinite(z)
    np.testing.assert_allclose(np.abs(z[ok]), np.nanmax(np.abs(r), axis=2)[ok])
    with pytest.raises(ValueError):
        AV.link_grid(res, sec, "included", "median")
    c = AV.attention_curves([(res, sec), (res, sec)], "sink_first", "depth")
    assert len(c.figure.data) == 2 and c.figure.data[0].x[-1] == 1.0
    assert "by relative depth" in c.figure.layout.title.text
    assert AV.link_table(res, sec).figure is None


def test_attention_map_escapes_tokens(case):
    res, _, _, _ = case
    toks = ["<s>", "<script>alert(1)</script>", "a&b", "<s>"]
    rng = np.random.default_rng(2)
    m = rng.random((2, 2, 4, 4))
    maps = {"tokens": toks, "maps": m / m.sum(-1, keepdims=True), "zeroed": m / m.sum(-1, keepdims=True),
            "dims": [3], "window": 0, "n_positions": 9, "document": 0}
    v = AV.attention_map_pair(res, maps, 2, 1)
    ticks = list(v.figure.layout.xaxis.ticktext)
    assert ticks[0] == "&lt;s&gt;" and ticks[3] == "&lt;s&gt;" and "<script>" not in "".join(ticks)
    assert list(v.figure.layout.xaxis.tickvals) == [0, 1, 2, 3]  # repeated tokens stay apart
    assert "<script>" not in "".join(str(h) for h in np.ravel(v.figure.data[0].customdata))
    assert "first 4 of 9 positions" in v.figure.layout.title.subtitle.text
    top = max(maps["maps"][1, 1].max(), maps["zeroed"][1, 1].max())  # one scale for both maps, 0 to their maximum
    assert v.figure.layout.coloraxis.cmin == 0 and v.figure.layout.coloraxis.cmax == pytest.approx(top)
    html = export.figure_bytes(v, "html").decode()
    assert "<script>alert(1)" not in html
    assert list(v.data["key_token"][:4]) == toks  # the data keep the raw tokens


def test_attention_map_labels_show_decoded_text_and_a_short_zeroed_title(case):
    res, _, _, _ = case
    toks = ["ĠPolish", "Ċ", "Ã©t", "▁the", "##ing", "<|endoftext|>"]
    m = np.random.default_rng(4).random((1, 1, 6, 6))
    maps = {"tokens": toks, "maps": m / m.sum(-1, keepdims=True), "zeroed": m / m.sum(-1, keepdims=True),
            "dims": list(range(14)), "window": 0, "n_positions": 6, "document": 0}
    v = AV.attention_map_pair(res, maps, 1, 0)
    assert list(v.figure.layout.yaxis.ticktext) == [" Polish", "↵", "ét", " the", "##ing", "&lt;|endoftext|&gt;"]
    titles = [a.text for a in v.figure.layout.annotations][:2]
    assert titles == ["as computed", "14 outlier dims zeroed"]  # short: no overlap with the left panel's title
    assert "dims 0, 1, 2" in v.figure.layout.title.subtitle.text
    assert list(v.data["key_text"][:6]) == [" Polish", "↵", "ét", " the", "##ing", "<|endoftext|>"]


def test_windows_grouped_by_document_for_the_viewer():
    from core.inputs.corpora import TokenWindows
    from core.studies.attention import doc_start, document_index

    docs = ["zero", "one\u202e  two\n\nthree " + "x" * 100, "two words"]
    ids = [np.arange(3)] * 5
    w = TokenWindows(ids, [np.zeros(3, bool)] * 5, np.asarray([2, 1, 1, 2, 1]), 2, 15, 15)
    sec = document_index(w, docs)
    assert sec["window_docs"] == [2, 1, 1, 2, 1]
    assert [(e["doc"], e["n_windows"]) for e in sec["documents"]] == [(1, 3), (2, 2)]
    assert sec["documents"][1]["start"] == "two words"
    start = sec["documents"][0]["start"]
    assert start == doc_start(docs[1]) and start.startswith("one\u202e two three") and start.endswith("…")
    assert len(start) == 60
    got = AV.window_documents(sec, 5)
    assert [(e["doc"], e["windows"]) for e in got] == [(1, [1, 2, 4]), (2, [0, 3])]
    label = AV.document_label(got[0])
    assert label.startswith("document 1 · 3 windows · “one<U+202E> two three") and "\u202e" not in label
    assert AV.document_label(got[1]) == "document 2 · 2 windows · “two words”"
    assert [AV.window_label(got[0], k) for k in range(3)] == [
        "window 1 of 3 (run window 1)", "window 2 of 3 (run window 2)", "window 3 of 3 (run window 4)"]
    # a section without the index, or one of another run: one entry per window, by number
    for bad in ({}, {"window_docs": [0, 1]}, {"window_docs": "x"}):
        old = AV.window_documents(bad, 3)
        assert [e["windows"] for e in old] == [[0], [1], [2]] and AV.document_label(old[2]) == "window 2"


def _maps(n, dims, rng, **meta):
    m = rng.random((2, 2, n, n))
    m /= m.sum(-1, keepdims=True)
    return {"tokens": [f"t{i}" for i in range(n)], "maps": m, "zeroed": m[::-1].copy(), "dims": dims, "window": 5,
            "n_positions": n, "document": 7, **meta}


def test_attention_map_names_the_document_and_labels_every_token(case):
    res, _, _, _ = case
    rng = np.random.default_rng(3)
    where = {"doc_window": 1, "doc_windows": 3, "doc_start": "The cat [x](http://e.vil) <b>sat</b>"}
    v = AV.attention_map_pair(res, _maps(64, [3], rng, **where), 1, 0)
    sub = v.figure.layout.title.subtitle.text.replace("<br>", " ")  # wrapped in lines
    assert "document 7 “The cat [x](http://e.vil) &lt;b&gt;sat&lt;/b&gt;”, window 2 of 3 (run window 5)" in sub
    lay = v.figure.layout
    assert list(lay.yaxis.ticktext) == [f"t{i}" for i in range(64)]  # every query's token
    assert lay.yaxis2.showticklabels is False  # the twin's rows are the same tokens
    assert list(lay.xaxis.tickvals) == list(range(0, 64, 2)) and "key labels: every 2nd" in sub
    assert lay.height >= 64 * 11  # rows of >= 11 px for the 9 px labels
    assert "query 3 t3<br>key 60 t60" in v.figure.data[0].customdata[3][60]  # every cell names its tokens
    one = AV.attention_map_pair(res, _maps(64, [], rng), 1, 0)  # no twin: the map spans the page
    assert list(one.figure.layout.xaxis.tickvals) == list(range(64))
    assert "key labels" not in one.figure.layout.title.subtitle.text
    # maps without the place of the window in its document (cached before) name the window and document
    assert "window 5 (document 7)" in one.figure.layout.title.subtitle.text.replace("<br>", " ")
    small = AV.attention_map_pair(res, _maps(20, [3], rng, **where), 1, 0)
    assert list(small.figure.layout.xaxis.tickvals) == list(range(20))
    assert small.figure.layout.xaxis.tickfont.size == 11


def test_attention_change_map_is_the_ablations_difference(case):
    res, _, _, _ = case
    rng = np.random.default_rng(4)
    maps = _maps(12, [3], rng, doc_window=0, doc_windows=1, doc_start="<b>x</b>")
    maps["tokens"][5] = "<script>"
    v = AV.attention_map_change(res, maps, 2, 1)
    d = maps["zeroed"][1, 1] - maps["maps"][1, 1]
    z = np.asarray(v.figure.data[0].z, dtype=float)
    np.testing.assert_allclose(z, d)
    np.testing.assert_allclose(z.sum(1), 0, atol=1e-12)  # both maps are distributions over the window's keys
    lay = v.figure.layout
    top = np.abs(d).max()
    assert lay.coloraxis.cmin == pytest.approx(-top) and lay.coloraxis.cmax == pytest.approx(top)
    assert lay.coloraxis.colorscale[0][1] == F.DIVERGING[0][1]  # the shared diverging scale
    assert list(lay.xaxis.tickvals) == list(range(12)) and list(lay.yaxis.ticktext)[5] == "&lt;script&gt;"
    i, j = np.unravel_index(np.abs(d).argmax(), d.shape)
    name = {k: "&lt;script&gt;" if k == 5 else f"t{k}" for k in (i, j)}
    assert f"largest: query {i} {name[i]} → key {j} {name[j]}" in lay.title.subtitle.text.replace("<br>", " ")
    assert "<script>" not in "".join(str(h) for h in np.ravel(v.figure.data[0].customdata))
    assert list(v.data["change"]) == pytest.approx(d.ravel().tolist())
    json.loads(export.data_bytes(v, "json"))
    none = AV.attention_map_change(res, _maps(4, [], rng), 1, 0)
    assert np.isnan(np.asarray(none.figure.data[0].z, dtype=float)).all() and none.notes
