"""Every built-in model and corpus loads offline; file corpora of every supported type."""

import hashlib
import json
import math

import numpy as np
import pandas as pd
import pytest
from transformers import AutoTokenizer

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute.pipeline import analyze
from core.inputs.corpora import (
    BUILTIN_CORPORA,
    UNIFORM_DOC_LEN,
    corpus_fingerprint,
    load_documents,
    table_columns,
    tokenize_budget,
)
from core.inputs.models import BUILTIN_MODELS, gpt2_tokenizer, minilm_folder

DESIGN_KEYS = ("layer", "n_tokens", "mean_cosine", "mean_cosine_ci", "cross_sequence_cosine",
               "intra_sentence_similarity", "self_similarity", "mean_norm", "pc1_variance_ratio", "effective_rank",
               "isoscore", "partition_isotropy", "outlier_dims", "cosine_contribution")
EXPECTED_LAYERS = {"minilm-l6": 7, "smollm2-135m": 31, "untrained-bert-base": 13, "untrained-gpt2": 13, "untrained-rwkv": 13,
                   "untrained-smollm2": 31, "untrained-byt5-small": 13, "untrained-minilm-l6": 7,
                   "untrained-canine-s": 17, "dinov2-vits14": 13, "whisper-tiny-en": 5,
                   "whisper-base": 7, "mobilenet-v2": 19, "untrained-vit-s14": 13, "untrained-whisper-tiny": 5,
                   "untrained-mobilenet-v2": 19, "untrained-resnet50": 5, "untrained-llama-1b": 17,
                   "untrained-llama-8b": 33}
# a control without its shared input (ModelEntry.shared_of) has the layers of the control it is drawn as
EXPECTED_LAYERS.update({m: EXPECTED_LAYERS[e.shared_of] for m, e in BUILTIN_MODELS.items() if e.shared_of})
# the first load dequantizes SmolLM2's GGUF (~15 s) or converts ONNX / CTranslate2 weights; big random models
SLOW_MODELS = {"untrained-bert-base-noshared", "untrained-rwkv",
               "smollm2-135m", "untrained-smollm2", "untrained-byt5-small", "untrained-canine-s", "dinov2-vits14",
               "whisper-tiny-en",               "whisper-base", "mobilenet-v2", "untrained-vit-s14", "untrained-whisper-tiny",
               "untrained-mobilenet-v2", "untrained-resnet50"}
CORPUS_OF = {"text": "wiki-en", "image": "images-natural", "audio": "speech-human"}


def _finite_numbers(obj):
    """Every number inside obj (dicts and lists walked), for finiteness checks."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _finite_numbers(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _finite_numbers(v)
    else:
        yield obj


def assert_layer_rows_complete(layers, not_applicable=(), n_documents: int = 2):
    """Every DESIGN key is a finite number (or null where not applicable); the bootstrap CI
    and the cross-document cosine are null exactly when fewer than two documents were analysed."""
    if n_documents < 2:
        assert all(row["mean_cosine_ci"] is None or row["mean_cosine_ci"] == [None, None] for row in layers)
        assert all(row["cross_sequence_cosine"] is None for row in layers)
        not_applicable = (*not_applicable, "mean_cosine_ci", "cross_sequence_cosine")
    for row in layers:
        for key in DESIGN_KEYS:
            if key == "mean_cosine_ci" and key in not_applicable:
                continue
            if key in not_applicable:
                assert row[key] is None, key  # stated as not applicable, never a number
                continue
            assert key in row, key
            vals = list(_finite_numbers(row[key]))
            assert all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                       for v in vals), (row["layer"], key, row[key])
        if "mean_cosine_ci" not in not_applicable:
            assert len(row["mean_cosine_ci"]) == 2 and row["mean_cosine_ci"][0] <= row["mean_cosine_ci"][1]
            lo, hi = row["mean_cosine_ci"]
            assert lo - 1e-12 <= row["mean_cosine"] <= hi + 1e-12  # the point estimate inside (to rounding)
        assert all(isinstance(d, int) for d in row["outlier_dims"])
        cc = row["cosine_contribution"]
        assert len(cc["dims"]) == len(cc["share"]) > 0 and cc["total"] == pytest.approx(row["mean_cosine"], abs=1e-9)
        assert -1 <= row["mean_cosine"] <= 1 and row["mean_norm"] > 0


def test_every_registry_model_is_covered():
    assert set(EXPECTED_LAYERS) == set(BUILTIN_MODELS)


@pytest.mark.parametrize("model", [pytest.param(m, marks=[pytest.mark.slow] if {m, e.shared_of} & SLOW_MODELS else [])
                                   for m, e in BUILTIN_MODELS.items() if not e.large])  # large: test_large_models.py
def test_builtin_model_runs_offline(model, cache_dir):
    modality = BUILTIN_MODELS[model].modality
    res = analyze(RunSpec(model=model, corpus=CORPUS_OF[modality], max_tokens=300, max_seq_len=64, sample=200,
                          device="cpu"), cache_dir)
    json.dumps(res, allow_nan=False)  # strict JSON
    m = res["manifest"]
    assert m["device"] == "cpu" and m["dtype"] == "float32"  # auto dtype on CPU
    assert m["model"]["id"] == model and m["model"]["trained"] == BUILTIN_MODELS[model].trained
    assert 300 <= m["tokens"]["analysed"] and m["tokens"]["sample"] == 200
    assert len(res["layers"]) == EXPECTED_LAYERS[model] == m["layers"]["n"]
    assert [r["layer"] for r in res["layers"]] == list(range(EXPECTED_LAYERS[model]))
    na = res["not_applicable"]
    assert (na == []) if modality == "text" else ("self_similarity" in na and "not_applicable" in res["frequency"])
    # 300 bytes of a byte-level model fit in one Wikipedia article: no bootstrap CI from one document
    assert_layer_rows_complete(res["layers"], not_applicable=na, n_documents=m["corpus"]["n_documents"])
    assert res["layers"][0]["n_sequences"] >= 2


# ----------------------------------------------------------------------------- built-in corpora
@pytest.mark.parametrize("corpus", ["wiki-en", "wiki-fr", "wiki-es", "python-docs"])
def test_builtin_text_corpus_loads_deterministically(corpus):
    docs = load_documents(corpus)
    assert len(docs) > 1000
    assert all(isinstance(d, str) and d.strip() for d in docs)
    assert load_documents(corpus) == docs
    # the fingerprint is of these documents (computed here, not read from its per-process cache)
    h = hashlib.sha256()
    for d in docs:
        h.update(d.encode() + b"\x1e")
    assert corpus_fingerprint(corpus) == h.hexdigest()
    assert len(set(docs)) > 0.95 * len(docs)


def test_wiki_languages_differ():
    en, fr, es = (load_documents(c) for c in ("wiki-en", "wiki-fr", "wiki-es"))
    assert len({corpus_fingerprint(c) for c in ("wiki-en", "wiki-fr", "wiki-es")}) == 3
    text = {k: " ".join(v[:300]).lower() for k, v in (("en", en), ("fr", fr), ("es", es))}
    assert text["en"].count(" the ") > text["fr"].count(" the ") * 5
    assert text["fr"].count(" les ") > text["en"].count(" les ") * 5
    assert text["es"].count(" los ") > text["fr"].count(" los ") * 5


def test_every_registry_corpus_is_covered():
    assert set(BUILTIN_CORPORA) == {"wiki-en", "wiki-fr", "wiki-es", "python-docs", "uniform-random"}


@pytest.mark.parametrize("tokenizer", ["bert", "gpt2"])
def test_uniform_random_corpus(tokenizer):
    tok = AutoTokenizer.from_pretrained(str(minilm_folder())) if tokenizer == "bert" else gpt2_tokenizer()
    w = tokenize_budget([], tok, 1000, 512, seed=0, corpus_id="uniform-random")
    content = np.concatenate([i[~s] for i, s in zip(w.ids, w.special)])
    assert len(content) == w.n_content_tokens == 1000
    assert content.min() >= 0 and content.max() < len(tok)
    assert not set(content.tolist()) & set(tok.all_special_ids)
    assert len(w.ids) == w.n_documents == -(-1000 // UNIFORM_DOC_LEN)
    assert len(np.unique(content)) > 900  # uniform over a 30k-50k vocabulary: few repeats
    same = tokenize_budget([], tok, 1000, 512, seed=0, corpus_id="uniform-random")
    other = tokenize_budget([], tok, 1000, 512, seed=1, corpus_id="uniform-random")
    assert all(np.array_equal(a, b) for a, b in zip(w.ids, same.ids))
    assert not np.array_equal(w.ids[0], other.ids[0])
    assert load_documents("uniform-random") == []  # generated from the tokenizer, not read


def test_uniform_random_documents_split_into_windows():
    """max_seq_len below the 128-token document length: documents split, the budget still holds."""
    tok = AutoTokenizer.from_pretrained(str(minilm_folder()))
    w = tokenize_budget([], tok, 300, 50, seed=0, corpus_id="uniform-random")
    assert max(len(i) for i in w.ids) <= 50
    content = sum(int((~s).sum()) for s in w.special)
    assert content == w.n_content_tokens == 300
    assert w.n_documents == 3 and sorted(set(w.doc.tolist())) == [0, 1, 2]
    assert [int((~s).sum()) for s, d in zip(w.special, w.doc) if d == 0] == [48, 48, 32]


# ----------------------------------------------------------------------------- file corpora
DOCS = ["First document, about cats.", "Second document: dogs and more dogs.", "Third one, Über café ñ."]


def _write_table(path, suffix, docs):
    df = pd.DataFrame({"id": range(len(docs)), "body": docs})
    if suffix == ".csv":
        df.to_csv(path, index=False)
    elif suffix == ".tsv":
        df.to_csv(path, sep="\t", index=False)
    elif suffix == ".jsonl":
        df.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        df.to_parquet(path)


@pytest.mark.parametrize("suffix", [".txt", ".md"])
def test_text_file_corpus(tmp_path, suffix):
    p = tmp_path / f"c{suffix}"
    p.write_text("\n\n".join(d.replace(", ", ",\n") for d in DOCS) + "\n\n\n", encoding="utf-8")
    assert load_documents(str(p)) == DOCS  # blank lines separate documents; line breaks inside are spaces
    fp = corpus_fingerprint(str(p))
    p.write_text("\n\n".join(DOCS[:2]), encoding="utf-8")
    assert corpus_fingerprint(str(p)) != fp


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_table_file_corpus(tmp_path, suffix):
    p = tmp_path / f"c{suffix}"
    _write_table(p, suffix, DOCS)
    assert table_columns(str(p)) == ["id", "body"]
    assert load_documents(str(p), "body") == DOCS
    with pytest.raises(InputError, match="text column"):
        load_documents(str(p))
    with pytest.raises(InputError, match="no column 'text'"):
        load_documents(str(p), "text")
    assert corpus_fingerprint(str(p), "body") != corpus_fingerprint(str(p), "id")


def test_table_corpus_through_the_pipeline(tmp_path, cache_dir, tiny_bert_dir):
    p = tmp_path / "c.parquet"
    _write_table(p, ".parquet", DOCS * 3)
    res = analyze(RunSpec(model=str(tiny_bert_dir), corpus=str(p), text_column="body", max_tokens=1000,
                          sample=50, device="cpu"), cache_dir)
    assert res["manifest"]["corpus"]["text_column"] == "body"
    assert res["manifest"]["corpus"]["n_documents"] == 9
    assert res["manifest"]["corpus"]["id"] == "c.parquet"
    assert_layer_rows_complete(res["layers"])
