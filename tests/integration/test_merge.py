"""Accumulators are plain sums: two shards of one corpus merge into exactly the whole's statistics."""

import numpy as np
import pytest
from foundation_helpers import make_documents

from core.compute.extract import MAX_KEYS, SUM_KEYS, extract_stats, merge_stats, stats_layout
from core.inputs.corpora import TokenWindows, tokenize_budget
from core.inputs.models import load_model
from core.stats import kernels as M

# Keys that do not depend on corpus-wide frequencies or on the window -> group assignment
LAYOUT_FREE = ("n", "n_seq", "sum_doc_n_sq", "sum_u_sq", "sum_doc_sq", "sum_norm", "sum_x", "sum_abs", "sum_abs2",
               "intra_sum", "intra_n")


def _subset(w: TokenWindows, idx) -> TokenWindows:
    ids = [w.ids[i] for i in idx]
    special = [w.special[i] for i in idx]
    return TokenWindows(ids, special, w.doc[idx], len(set(w.doc[idx].tolist())), sum(len(a) for a in ids),
                        sum(int((~s).sum()) for s in special))


@pytest.fixture(scope="module")
def shards(tiny_bert_dir):
    lm = load_model(str(tiny_bert_dir))
    docs = make_documents([int(n) for n in np.random.default_rng(11).integers(2, 70, size=30)], seed=11)
    w = tokenize_budget(docs, lm.tokenizer, 100_000, 24, seed=0)
    # shards split at a document boundary (a document's windows are summed together, then squared)
    h = next(i for i in range(len(w.ids) // 2, len(w.ids)) if w.doc[i] != w.doc[i - 1])
    kw = dict(batch_size=1, sample_size=50, seed=0)  # batch 1: each window's hidden states are bitwise the same
    whole, _ = extract_stats(lm.base, w, **kw)
    layout = stats_layout(w, "exclude", seed=0)
    parts = [extract_stats(lm.base, _subset(w, np.arange(lo, hi)), **kw,
                           layout={**layout, "group_of": layout["group_of"][lo:hi]})[0]
             for lo, hi in ((0, h), (h, len(w.ids)))]
    plain = [extract_stats(lm.base, _subset(w, np.arange(lo, hi)), **kw)[0] for lo, hi in ((0, h), (h, len(w.ids)))]
    return lm, w, whole, layout, parts, plain


def test_layout_reproduces_the_default(shards):
    lm, w, whole, layout, _, _ = shards
    again, _ = extract_stats(lm.base, w, batch_size=1, sample_size=50, seed=0, layout=layout)
    for k in whole:
        np.testing.assert_array_equal(again[k], whole[k], err_msg=k)


def test_two_halves_merge_into_the_whole(shards):
    _, _, whole, _, parts, _ = shards
    merged = merge_stats(*parts)
    for k in SUM_KEYS:
        np.testing.assert_allclose(merged[k], whole[k], rtol=1e-9, atol=1e-9, err_msg=k)
    for k in MAX_KEYS:
        np.testing.assert_array_equal(merged[k], whole[k], err_msg=k)
    # and the metrics computed from the merged sums are the whole's
    for l in range(whole["sum_abs"].shape[0]):
        S_m, S_w = merged["group_sum_u"][l].sum(0), whole["group_sum_u"][l].sum(0)
        n = int(whole["n"])
        assert M.mean_cosine(S_m, n) == pytest.approx(M.mean_cosine(S_w, n), abs=1e-12)
        assert M.self_similarity(merged["id_sum_u"][l], merged["id_counts"], merged["id_seq_sq"][l],
                                 merged["id_seq_n_sq"]) == pytest.approx(
            M.self_similarity(whole["id_sum_u"][l], whole["id_counts"], whole["id_seq_sq"][l], whole["id_seq_n_sq"]),
            abs=1e-12)


def test_layout_free_sums_merge_even_without_a_shared_layout(shards):
    _, _, whole, _, _, plain = shards
    merged = merge_stats(*plain)
    for k in LAYOUT_FREE:
        np.testing.assert_allclose(merged[k], whole[k], rtol=1e-9, atol=1e-9, err_msg=k)
    np.testing.assert_allclose(merged["group_sum_u"].sum(1), whole["group_sum_u"].sum(1), rtol=1e-9, atol=1e-9)
    # ...but frequency-dependent sums do not: that is what the shared layout is for
    assert not np.allclose(merged["sum_f"], whole["sum_f"])
