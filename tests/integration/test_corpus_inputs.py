"""Corpus files as people have them: encodings, table quirks, huge documents (core/inputs/corpora.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute.pipeline import analyze
from core.inputs.corpora import load_documents, table_columns, tokenize_budget


@pytest.fixture(scope="module")
def tok(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_bert_dir))


def test_utf16_with_a_bom_is_decoded(tmp_path):
    for enc in ("utf-16", "utf-16-be", "utf-32"):
        p = tmp_path / f"{enc}.txt"
        bom = {"utf-16-be": b"\xfe\xff"}.get(enc, b"")
        p.write_bytes(bom + "Grüße aus Köln.\n\nZweites Dokument.".encode(enc))
        assert load_documents(str(p)) == ["Grüße aus Köln.", "Zweites Dokument."], enc
    p = tmp_path / "bom8.csv"
    p.write_bytes("\ufefftext,n\nhello,1\n".encode("utf-8"))
    assert table_columns(str(p)) == ["text", "n"]  # no "\ufefftext" column


def test_utf16_and_utf32_without_a_bom_are_recognised_binary_is_not(tmp_path):
    text = "Grüße aus Köln, am Rhein.\n\nZweites Dokument: 3 Zeilen, ein Ende."
    for enc in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"):
        p = tmp_path / f"{enc}.txt"
        p.write_bytes(text.encode(enc))
        assert load_documents(str(p)) == ["Grüße aus Köln, am Rhein.", "Zweites Dokument: 3 Zeilen, ein Ende."], enc
    greek = tmp_path / "greek.txt"  # no NUL lane at all: the sniffing needs none, an explicit encoding decides
    greek.write_bytes("Καλημέρα κόσμε".encode("utf-16-le"))
    assert load_documents(str(greek), encoding="utf-16-le") == ["Καλημέρα κόσμε"]
    import numpy as np

    blob = tmp_path / "model.txt"  # binary with NULs: refused, naming the way out for real UTF-16 text
    blob.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes() + b"\x00" * 64)
    with pytest.raises(InputError, match="binary data.*--encoding utf-16-le"):
        load_documents(str(blob))
    halves = tmp_path / "ints.txt"  # little-endian int16 data: a NUL lane like UTF-16, but not printable text
    halves.write_bytes(np.tile(np.arange(256, dtype="<i2"), 8).tobytes())
    with pytest.raises(InputError, match="binary data"):
        load_documents(str(halves))


def test_latin1_needs_its_encoding_named(tmp_path):
    p = tmp_path / "latin1.txt"
    p.write_bytes("café crème\n\nbrûlée".encode("latin-1"))
    with pytest.raises(InputError, match="--encoding latin-1"):
        load_documents(str(p))
    assert load_documents(str(p), encoding="latin-1") == ["café crème", "brûlée"]
    c = tmp_path / "latin1.csv"
    c.write_bytes("text\ncafé\n".encode("latin-1"))
    assert load_documents(str(c), "text", encoding="latin-1") == ["café"]


@pytest.mark.parametrize("encoding", ["rot13", "hex", "base64", "zlib_codec", "bz2", "uu", "quopri"])
def test_codecs_that_are_not_text_encodings_are_refused(tmp_path, encoding):
    """Issue 27 item 10: --encoding rot13/hex ended in a traceback (a LookupError from bytes.decode)."""
    t = tmp_path / "a.txt"
    t.write_bytes(b"6162630a")
    c = tmp_path / "a.csv"
    c.write_bytes(b"text\nabc\n")
    for path, col in ((t, None), (c, "text")):
        with pytest.raises(InputError, match="not a text encoding"):
            load_documents(str(path), col, encoding=encoding)
    with pytest.raises(InputError, match="Unknown encoding"):
        load_documents(str(t), encoding="no-such-codec")


def test_csv_quoted_newlines_and_empty_cells(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text('id,text\n1,"first line\nsecond line"\n2,\n3,"  "\n4,"a, b and ""c"""\n')
    assert load_documents(str(p), "text") == ["first line second line", 'a, b and "c"']


def test_jsonl_bad_lines_are_named_by_line_number(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "a"}\n\n[1, 2]\n{"text": "b"}\n{oops\n')
    with pytest.raises(InputError, match=r"line 3 .*2 bad lines in all: 3, 5"):
        load_documents(str(p), "text")


def test_a_table_without_text(tmp_path):
    p = tmp_path / "n.parquet"
    pd.DataFrame({"a": [1, 2], "b": [0.1, 0.2]}).to_parquet(p)
    with pytest.raises(InputError, match="no column of this table holds text"):
        load_documents(str(p), "a")


def test_numbers_only_column_is_analysed_with_a_warning(tmp_path, tiny_bert_dir, cache_dir):
    p = tmp_path / "nums.csv"
    pd.DataFrame({"text": [str(1000 + i) for i in range(30)]}).to_csv(p, index=False)
    assert load_documents(str(p), "text")[0] == "1000"  # read as text, not as numbers
    res = analyze(RunSpec(model=str(tiny_bert_dir), corpus=str(p), text_column="text", max_tokens=100,
                          sample=50), cache_dir=cache_dir)
    assert any("numbers only" in w for w in res["manifest"]["warnings"])


def test_the_budget_stops_inside_a_huge_document(tok):
    """One 8 MB paragraph with a budget of 2,000 tokens: tokenization stops at the window that
    reaches the budget instead of producing millions of tokens."""
    words = ("river mountain valley ocean forest desert island " * 160_000)[:8_000_000]
    calls = []

    class Counting:  # the tokenizer, counting the characters it is given
        def __call__(self, text, *a, **k):
            calls.append(sum(map(len, text)) if isinstance(text, list) else len(text))
            return tok(text, *a, **k)

        def __getattr__(self, name):
            return getattr(tok, name)

    w = tokenize_budget([words], Counting(), 2000, 128, seed=0)
    assert 2000 <= w.n_content_tokens < 2000 + 128
    assert 0 < sum(calls) < 200_000  # characters tokenized: a few pieces, not 8 MB


def test_windows_of_a_long_document_are_the_whole_text_tokens(tok):
    """Piecewise tokenization gives the tokens of the whole text (cut before whitespace)."""
    text = " ".join(f"word{i} and more text, with punctuation." for i in range(6000))  # > 20k chars
    w = tokenize_budget([text], tok, 10**9, 64, seed=0)
    whole = tok(text, add_special_tokens=False)["input_ids"]
    got = [int(t) for ids, sp in zip(w.ids, w.special) for t in ids[~sp]]
    assert got == whole


def test_one_document_longer_than_any_window(tok):
    w = tokenize_budget(["lorem ipsum dolor " * 400], tok, 10**6, 32, seed=0)
    assert len(w.ids) > 10 and all(len(a) <= 32 for a in w.ids) and set(w.doc.tolist()) == {0}


def test_uniform_random_is_capped():
    with pytest.raises(InputError, match="at most"):
        RunSpec(corpus="uniform-random", max_tokens=10**12)
