"""The Python API's boundary (core/entry/api.py, imported as aniso), numpy and pandas only: corpora given as Python
objects are saved as the dashboard's uploads (the same key as the upload in the dashboard), every bad argument is
one InputError with the CLI's message, and the JSON Schema of results.json describes what it must.
No model runs here: runs are tests/integration/test_api.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from core.base.errors import InputError
from core.base.settings import use_cache_dir
from core.entry import api
from core.entry.cli import main as cli_main
from core.inputs import uploads
from core.inputs.corpora import document_metadata, load_documents
from core.studies.selection import Selection

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "results.schema.json"
DOCS = ["The cat sat on the mat.", "Dogs  bark at\nnight.", "A third document, about atoms."]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_list_of_strings_is_an_upload_read_as_the_dashboard_reads_it(cache):
    spec = api.run_spec("minilm-l6", DOCS)
    saved = Path(spec.corpus)
    assert saved.parent == cache / "uploads" and saved.suffix == ".jsonl" and spec.text_column == "text"
    # one document per item, whitespace normalised as for any file
    assert load_documents(spec.corpus, "text") == [" ".join(d.split()) for d in DOCS]
    # the dashboard names the upload by its id; its spec for the same choices is this one
    sel = Selection(models=("minilm-l6",), corpus=uploads.upload_id(saved), text_column="text",
                    max_tokens=spec.max_tokens, sample=spec.sample)
    assert sel.spec("minilm-l6") == spec
    # content-addressed: the same documents, the same file; one changed word, another
    assert api.run_spec("minilm-l6", list(DOCS)).corpus == spec.corpus
    assert api.run_spec("minilm-l6", DOCS[:2] + ["A third document, about atom."]).corpus != spec.corpus


def test_series_dataframe_and_list_give_the_same_documents(cache):
    as_list = api.run_spec("minilm-l6", DOCS)
    as_series = api.run_spec("minilm-l6", pd.Series(DOCS, name="text"))
    assert as_series == as_list  # the same bytes: the same run
    frame = pd.DataFrame({"topic": ["pets", "pets", "physics"], "content": DOCS, "year": [2001, None, 2003]})
    spec = api.run_spec("minilm-l6", frame)  # "content" is found as the text column
    assert spec.text_column == "content"
    assert load_documents(spec.corpus, "content") == load_documents(as_list.corpus, "text")
    meta = document_metadata(spec.corpus, "content")  # the other columns colour the projection, as an upload's
    assert meta["topic"].tolist() == ["pets", "pets", "physics"]
    assert meta["year"].tolist()[1] is None or pd.isna(meta["year"].tolist()[1])


def test_a_file_is_keyed_by_its_absolute_path_as_in_the_dashboard(cache, tmp_path, monkeypatch):
    f = tmp_path / "docs.txt"
    f.write_text("one document here\n\nand a second one\n")
    monkeypatch.chdir(tmp_path)
    assert api.run_spec("minilm-l6", "docs.txt").corpus == str(f.resolve())
    assert api.run_spec("minilm-l6", "wiki-en").corpus == "wiki-en"


@pytest.mark.parametrize("corpus, text_column, message", [
    ([], None, "The corpus list is empty"),
    (["fine", 3], None, r"corpus\[1\] is a int, not a string"),
    (["fine"], "body", "text_column='body' is for tables"),
    (pd.DataFrame({"a": ["x"], "b": ["y"]}), None, r"choose its text column \(text_column=...\). Columns: \['a', 'b'\]"),
    (pd.DataFrame({"text": ["x"]}), "body", "has no column 'body'"),
    (pd.DataFrame({"text": [1.0, 2.0]}), None, "Column 'text' of the DataFrame holds no text"),
    ({"text": "a dict"}, None, "corpus must be a built-in corpus id, a file path, a list of strings"),
])
def test_bad_corpora_are_one_input_error(cache, corpus, text_column, message):
    with pytest.raises(InputError, match=message):
        api.run_spec("minilm-l6", corpus, text_column=text_column)


@pytest.mark.parametrize("options, message", [
    ({"max_tokens": "40k"}, "max_tokens must be a whole number, got '40k'"),
    ({"max_tokens": 4e4}, "max_tokens must be a whole number, got 40000.0"),
    ({"sample": True}, "sample must be a whole number, got True"),
    ({"logit_lens": "yes"}, "logit_lens must be True or False"),
    ({"layers": "0,6"}, "layers must be layer indices"),
    ({"model": 42}, "model must be a model id"),
    ({"tokenizer": object()}, "tokenizer= goes with a loaded model"),
])
def test_bad_python_arguments_are_one_input_error(cache, options, message):
    model = options.pop("model", "minilm-l6")
    with pytest.raises(InputError, match=message):
        api.run_spec(model, "wiki-en", **options)


# The CLI's options that reach the same checks: the API raises the message the CLI prints after "error: ".
CLI_CASES = [
    (["--max-tokens", "0"], {"max_tokens": 0}),
    (["--sample", "0"], {"sample": 0}),
    (["--max-seq-len", "4"], {"max_seq_len": 4}),
    (["--batch-size", "-3"], {"batch_size": -3}),
    (["--seed", "-1"], {"seed": -1}),
    (["--corpus", "uniform-random", "--max-tokens", "20000000"], {"corpus": "uniform-random", "max_tokens": 20_000_000}),
    (["--layers=-1,2"], {"layers": (-1, 2)}),
    (["--model", "no-such-model"], {"model": "no-such-model"}),
    (["--corpus", "/no/such/corpus.txt"], {"corpus": "/no/such/corpus.txt"}),
]  # (a table without --text-column or an unknown encoding are refused when the documents are read:
#    tests/integration/test_api.py)


@pytest.mark.parametrize("argv, options", CLI_CASES)
def test_the_api_raises_the_message_the_cli_prints(cache, tmp_path, capsys, argv, options):
    code = cli_main(["analyze", *argv, "--out", str(tmp_path / "r.json"), "--quiet", "--cache-dir", str(cache)])
    printed = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and printed.startswith("error: ")
    kw = {"model": "minilm-l6", "corpus": "wiki-en", **options}
    with pytest.raises(InputError) as e:
        with use_cache_dir(cache):
            api.resolve(api.run_spec(kw.pop("model"), kw.pop("corpus"), **kw), cache)
    assert printed == "error: " + " ".join(str(e.value).split())


def test_compare_and_load_say_what_is_wrong(tmp_path):
    with pytest.raises(InputError, match="compare takes a list of runs"):
        api.compare("run")
    with pytest.raises(InputError, match="item 0 is a dict"):
        api.compare([{}, {}])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="is not JSON"):
        api.load(bad)
    bad.write_text(json.dumps({"layers": []}))
    with pytest.raises(InputError, match="is not a results.json"):
        api.load(bad)
    with pytest.raises(InputError, match="Cannot read"):
        api.load(tmp_path / "missing.json")


# ----------------------------------------------------------------------------- the JSON Schema of results.json
# DESIGN.md's headless interface: the per-layer keys that are never renamed
STABLE_KEYS = {"layer", "n_tokens", "mean_cosine", "mean_cosine_ci", "cross_sequence_cosine", "intra_sentence_similarity",
               "self_similarity", "mean_norm", "pc1_variance_ratio", "effective_rank", "isoscore", "partition_isotropy",
               "outlier_dims", "cosine_contribution"}


def _validator():
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schema_requires_the_stable_keys():
    schema = json.loads(SCHEMA.read_text())
    assert set(schema["$defs"]["layer"]["required"]) == STABLE_KEYS
    assert {"spec", "model", "corpus", "tokens", "cache_key"} <= set(schema["$defs"]["manifest"]["required"])


def test_a_synthetic_runs_layers_validate_and_broken_ones_do_not():
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from synthetic import synthetic_run

    v = _validator()
    check = v.evolve(schema={"$schema": v.schema["$schema"], "$defs": v.schema["$defs"], "$ref": "#/$defs/layer"})
    _, res = synthetic_run()
    for row in res["layers"]:
        assert not list(check.iter_errors(row)), [e.message for e in check.iter_errors(row)]
    row = dict(res["layers"][1])
    broken = [{**row, "mean_cosine": "0.3"}, {k: v for k, v in row.items() if k != "outlier_dims"},
              {**row, "outlier_dims": [-1]}, {**row, "mean_cosine_ci": [0.1]}, {**row, "layer": 1.5}]
    for b in broken:
        assert list(check.iter_errors(b)), b
