"""Token windows: one document per sequence, split into windows, seeded whole-document budget,
padding-aware batching that does not change the numbers."""

import numpy as np
import pytest
from foundation_helpers import make_documents
from transformers import AutoTokenizer

from core.compute.extract import SUM_KEYS, extract_stats, padding_fraction, plan_batches
from core.inputs.corpora import special_affixes, tokenize_budget
from core.inputs.models import load_model


@pytest.fixture(scope="module")
def bert_tok(tiny_bert_dir):
    return AutoTokenizer.from_pretrained(str(tiny_bert_dir))


@pytest.fixture(scope="module")
def gpt2_tok(tiny_gpt2_dir):
    return AutoTokenizer.from_pretrained(str(tiny_gpt2_dir))


def _check_windows(windows, docs, tok, max_seq_len):
    prefix, suffix = special_affixes(tok)
    used = list(dict.fromkeys(windows.doc.tolist()))  # documents in the order they were taken
    assert windows.n_documents == len(used)
    # the windows of one document are contiguous
    runs = [d for i, d in enumerate(windows.doc.tolist()) if i == 0 or windows.doc[i - 1] != d]
    assert runs == used
    content_total = 0
    for d in used:
        idx = np.flatnonzero(windows.doc == d)
        want = tok(docs[d], add_special_tokens=False)["input_ids"]
        got = []
        for j, i in enumerate(idx):
            ids, sp = windows.ids[i], windows.special[i]
            assert len(ids) <= max_seq_len
            assert ids[:len(prefix)].tolist() == prefix and ids[len(ids) - len(suffix):].tolist() == suffix
            assert sp.tolist() == [True] * len(prefix) + [False] * (len(ids) - len(prefix) - len(suffix)) \
                + [True] * len(suffix)
            if j < len(idx) - 1:
                assert len(ids) == max_seq_len, "only a document's last window may be short"
            got += ids[~sp].tolist()
        if d == used[-1] and len(got) < len(want):
            # the document that meets the budget ends with the window in which the budget is met
            room = max_seq_len - len(prefix) - len(suffix)
            assert got == want[:len(got)] and len(got) % room == 0 and windows.n_content_tokens >= 1
        else:
            assert got == want, f"windows of document {d} are not exactly its tokens"  # nothing from another doc
        content_total += len(got)
    assert windows.n_content_tokens == content_total
    assert windows.n_tokens_total == sum(len(w) for w in windows.ids)
    return used


@pytest.mark.parametrize("max_seq_len", [8, 16, 40])
def test_windows_never_cross_documents_bert(bert_tok, max_seq_len):
    docs = make_documents([5, 30, 1, 64, 14, 2, 47], seed=2)
    w = tokenize_budget(docs, bert_tok, 10_000, max_seq_len, seed=0)
    used = _check_windows(w, docs, bert_tok, max_seq_len)
    assert sorted(used) == list(range(len(docs)))  # a large budget takes every document
    assert len(w.ids) > len(docs)  # and long ones were split


def test_windows_never_cross_documents_gpt2(gpt2_tok):
    docs = make_documents([5, 30, 1, 64, 14], seed=3)
    w = tokenize_budget(docs, gpt2_tok, 10_000, 12, seed=0)
    assert special_affixes(gpt2_tok) == ([], [])
    _check_windows(w, docs, gpt2_tok, 12)
    assert not any(s.any() for s in w.special)


def test_budget_takes_whole_documents_in_a_seeded_order(bert_tok):
    docs = make_documents([int(n) for n in np.random.default_rng(5).integers(5, 40, size=60)], seed=4)
    lens = {i: len(bert_tok(d, add_special_tokens=False)["input_ids"]) for i, d in enumerate(docs)}
    a = tokenize_budget(docs, bert_tok, 200, 32, seed=7)
    b = tokenize_budget(docs, bert_tok, 200, 32, seed=7)
    c = tokenize_budget(docs, bert_tok, 200, 32, seed=8)
    used = _check_windows(a, docs, bert_tok, 32)
    # the budget is met by documents (the last one cut after the window that meets it)
    assert a.n_content_tokens >= 200
    assert a.n_content_tokens - lens[used[-1]] < 200
    # same seed: the same tokens; another seed: other documents (in another order)
    assert len(a.ids) == len(b.ids) and all(np.array_equal(x, y) for x, y in zip(a.ids, b.ids))
    assert np.array_equal(a.doc, b.doc)
    used_c = _check_windows(c, docs, bert_tok, 32)
    assert set(used) != set(used_c)
    # the order is the seeded permutation of the documents, independent of max_tokens
    longer = tokenize_budget(docs, bert_tok, 600, 32, seed=7)
    assert list(dict.fromkeys(longer.doc.tolist()))[:len(used)] == used
    assert a.next_position == len(used)
    # a held-out slice starts where the analysed one ended: no document in common
    held = tokenize_budget(docs, bert_tok, 200, 32, seed=7, start=a.next_position)
    assert not set(held.doc.tolist()) & set(used)


def test_batches_waste_little_padding(bert_tok):
    docs = make_documents([int(n) for n in np.random.default_rng(6).integers(1, 60, size=40)], seed=6)
    w = tokenize_budget(docs, bert_tok, 10_000, 32, seed=0)
    batches = plan_batches(w, 8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(w.ids)))  # every window exactly once
    assert all(len(b) <= 8 for b in batches)
    naive = [np.arange(i, min(i + 8, len(w.ids))) for i in range(0, len(w.ids), 8)]
    assert padding_fraction(w, batches) <= padding_fraction(w, naive)
    assert padding_fraction(w, batches) < 0.2


@pytest.mark.parametrize("kind", ["bert", "gpt2", "llama"])
def test_batch_size_does_not_change_the_numbers(request, kind):
    lm = load_model(str(request.getfixturevalue(f"tiny_{kind}_dir")))
    docs = make_documents([3, 50, 12, 7, 33, 1, 21, 9, 44, 16, 5], seed=9)
    w = tokenize_budget(docs, lm.tokenizer, 10_000, 20, seed=0)
    pad = int(lm.tokenizer.pad_token_id)
    one, t1 = extract_stats(lm.base, w, batch_size=1, sample_size=10_000, pad_id=pad)
    eight, t8 = extract_stats(lm.base, w, batch_size=8, sample_size=10_000, pad_id=pad)
    assert t1["padding_fraction"] == 0 and t8["padding_fraction"] > 0  # padding really happened
    assert one.keys() == eight.keys()
    for k in one:
        if k in SUM_KEYS or k in ("max_abs", "sample"):
            np.testing.assert_allclose(eight[k], one[k], atol=1e-6, rtol=1e-6, err_msg=k)
        else:
            np.testing.assert_array_equal(eight[k], one[k], err_msg=k)


def test_row_chunks_of_the_statistics_do_not_change_the_numbers(tiny_bert_dir, monkeypatch):
    """The float64 statistics run in chunks of rows (bounded memory); any chunking gives the same sums."""
    import core.compute.extract as E

    lm = load_model(str(tiny_bert_dir))
    docs = make_documents([3, 50, 12, 7, 33, 1, 21, 9, 44, 16, 5], seed=9)
    w = tokenize_budget(docs, lm.tokenizer, 10_000, 20, seed=0)
    pad = int(lm.tokenizer.pad_token_id)
    whole, _ = extract_stats(lm.base, w, batch_size=8, sample_size=10_000, pad_id=pad)
    monkeypatch.setattr(E, "STATS_CHUNK_TOKENS", 1)  # one row per chunk
    rows, _ = extract_stats(lm.base, w, batch_size=8, sample_size=10_000, pad_id=pad)
    for k in SUM_KEYS + ("max_abs", "sample"):
        np.testing.assert_allclose(rows[k], whole[k], atol=1e-9, rtol=1e-9, err_msg=k)
