"""The Python API (`import aniso`) on real models at a small budget: one cache entry with the CLI and with the
dashboard (its worker's job, an AppTest of the Layers page), the per-layer table and the token sample read back
against results.json and the stored statistics, a loaded model fingerprinted from its weights, exports with the
manifest, results.json against its JSON Schema, the other analyses stored where the pages read them, and
docs/notebook.ipynb executed (at this file's budget, so that its runs are this file's cache hits) and not stale.
The runs are shared by the tests through module fixtures and the session's cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import aniso
from core.compute.analysis_jobs import job_analyze
from core.compute.pipeline import analyze_params, cached_ablation, get_stats, resolve
from core.entry import jobs
from core.entry.cli import main as cli_main
from core.stats import registry as S
from core.studies import attention as A
from core.studies.chain.job import cached_chain_section
from core.studies.selection import Selection, from_query_params

ROOT = Path(__file__).resolve().parents[2]
TOKENS, K = 400, 200
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli_run(cache_dir, tmp_path_factory):
    """minilm-l6 on wiki-en computed by `python -m core analyze` (in this process): (results, its file)."""
    out = tmp_path_factory.mktemp("api") / "results.json"
    code = cli_main(["analyze", "--model", "minilm-l6", "--corpus", "wiki-en", "--max-tokens", str(TOKENS),
                     "--sample", str(K), "--out", str(out), "--quiet", "--cache-dir", str(cache_dir)])
    assert code == 0
    return json.loads(out.read_text()), out


@pytest.fixture(scope="module")
def run(cli_run, cache_dir):
    return aniso.analyze("minilm-l6", "wiki-en", max_tokens=TOKENS, sample=K, cache_dir=cache_dir, progress=False)


@pytest.fixture(scope="module")
def control_spec(cache_dir):
    """untrained-minilm-l6 computed as the dashboard computes it: its Selection's spec, by the worker's job function."""
    spec = Selection(models=("untrained-minilm-l6",), max_tokens=TOKENS, sample=K).spec("untrained-minilm-l6")
    job_analyze(analyze_params(spec), progress=lambda *a, **k: None, cancel=lambda: False)
    return spec


@pytest.fixture(scope="module")
def planted_lm(tmp_path_factory) -> Path:
    """A tiny random GPT-2 (4 blocks, d=32) whose dimension 5 is an outlier: its LayerNorm weights are 25 in every
    norm (the activation rule flags it in every layer). GPT-2's BPE tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from core.inputs.models import gpt2_tokenizer

    d = tmp_path_factory.mktemp("planted-gpt2")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=4, n_head=2, n_positions=128))
    with torch.no_grad():
        for ln in [b.ln_1 for b in model.transformer.h] + [b.ln_2 for b in model.transformer.h] + [model.transformer.ln_f]:
            ln.weight[5] = 25.0
    model.save_pretrained(d)
    gpt2_tokenizer().save_pretrained(d)
    return d


LM_TOKENS, HELD_OUT, N_RANDOM = 300, 128, 1


@pytest.fixture(scope="module")
def lm_ablation(planted_lm, cache_dir):
    lm = aniso.analyze(planted_lm, "wiki-en", max_tokens=LM_TOKENS, sample=100, cache_dir=cache_dir, progress=False)
    return lm, lm.ablation(lm.outliers().persistent, n_random=N_RANDOM, held_out_tokens=HELD_OUT, progress=False)


def test_a_cli_run_is_a_cache_hit_of_the_api_with_the_same_results(cli_run, run):
    res, _ = cli_run
    assert run.cache_hit and run.key == res["manifest"]["cache_key"]
    assert run.results["layers"] == res["layers"] and run.results["outliers"] == res["outliers"]


def test_the_layers_table_holds_the_registry_columns_and_the_results_numbers(cli_run, run):
    res, _ = cli_run
    expected = ["model", "corpus", "layer", "depth"]
    for c in S.table_columns():  # an interval is two columns
        expected += ["ci_low", "ci_high"] if c.endswith("_ci") else [c]
    df = run.layers
    assert list(df.columns) == expected and len(df) == len(res["layers"]) == 7
    assert df["layer"].tolist() == list(range(7))
    assert np.allclose(df["mean_cosine"], [r["mean_cosine"] for r in res["layers"]])
    assert np.allclose(df["ci_low"], [r["mean_cosine_ci"][0] for r in res["layers"]])
    assert df["outlier_dims"].tolist() == [" ".join(map(str, r["outlier_dims"])) for r in res["layers"]]


def test_the_sample_is_the_stored_one_with_its_tokens(run):
    from transformers import AutoTokenizer

    from core.inputs.models import minilm_folder

    X, tokens = run.sample(layer=3)
    stored = get_stats(run._resolved()).arrays
    assert X.shape == (K, 384) and np.array_equal(X, stored["sample"][3])
    assert list(tokens.columns[:6]) == ["text", "context", "token_id", "position", "document", "frequency"]
    tok = AutoTokenizer.from_pretrained(str(minilm_folder()))  # the tokens' text, read independently
    assert tokens["text"].tolist() == tok.convert_ids_to_tokens(tokens["token_id"].tolist())
    assert (tokens["frequency"] >= 1).all()
    assert tokens["document"].nunique() <= run.manifest["corpus"]["n_documents"]  # the corpus's own document index
    with pytest.raises(aniso.InputError, match=r"layer must be a layer index in 0..6"):
        run.sample(layer=7)


def test_results_json_validates_against_its_schema(cli_run, lm_ablation):
    import jsonschema

    schema = json.loads((ROOT / "docs" / "results.schema.json").read_text())
    res, _ = cli_run
    jsonschema.validate(res, schema, cls=jsonschema.Draft202012Validator)
    lm, ab = lm_ablation  # a causal LM's results, with an ablation section
    jsonschema.validate({**lm.results, "ablation": ab.result}, schema, cls=jsonschema.Draft202012Validator)
    broken = json.loads(json.dumps(res))
    broken["layers"][2]["mean_cosine"] = "high"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft202012Validator)


def test_the_ablation_of_the_planted_outlier_is_the_one_the_outliers_page_reads(lm_ablation, cache_dir):
    lm, ab = lm_ablation
    assert lm.outliers().persistent == [5] and ab.dims == [5]
    # the Outliers page reads data.cached_ablation(spec, dims): the same stored entry
    assert cached_ablation(lm._resolved(), [5], N_RANDOM, HELD_OUT, cache_dir) == ab.result
    assert ab.delta == ab.result["ablated_loss"] - ab.result["baseline_loss"]
    assert "Zeroing" in ab.sentence and ab.figure() is not None and len(ab.table) == 1 + N_RANDOM


def test_a_loaded_model_is_fingerprinted_from_its_weights(cache_dir):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, BertConfig, BertModel

    from core.inputs.models import minilm_folder

    torch.manual_seed(3)
    model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                 max_position_embeddings=128))
    tok = AutoTokenizer.from_pretrained(str(minilm_folder()))
    docs = ["a first small document about cats and dogs", "the second one is about the weather today",
            "and a third one, on numbers and letters"] * 4
    kw = dict(max_tokens=120, sample=40, cache_dir=cache_dir, progress=False)
    first = aniso.analyze(model, docs, tokenizer=tok, **kw)
    folder = Path(first.spec.model)
    saved = load_file(str(folder / "model.safetensors"))
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items() if k in saved)
    assert aniso.analyze((model, tok), docs, **kw).cache_hit  # the same weights: the same run
    with torch.no_grad():
        w = model.encoder.layer[0].attention.self.query.weight
        w[0, 0] += 1e-3
        changed = aniso.analyze(model, docs, tokenizer=tok, **kw)
        w[0, 0] -= 1e-3
    assert changed.key != first.key and changed.spec.model != first.spec.model
    assert aniso.analyze(model, docs, tokenizer=tok, **kw).key == first.key
    with pytest.raises(aniso.InputError, match="needs its tokenizer"):
        aniso.analyze(model, docs, **kw)


def test_exports_carry_the_manifest(run, tmp_path):
    import pyarrow.parquet as pq

    (pq_file,) = run.export(tmp_path / "layers.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(pq_file), run.layers)
    meta = json.loads(pq.read_schema(pq_file).metadata[b"aniso.manifest"])
    assert meta["manifest"]["runs"][0]["cache_key"] == run.key
    csv, side = run.export(tmp_path / "sample.csv", what="sample", layer=2)
    back = pd.read_csv(csv)
    X, tokens = run.sample(2)
    assert np.allclose(back[[f"h{d}" for d in range(X.shape[1])]].to_numpy(), X, atol=1e-6)
    assert back["position"].tolist() == tokens["position"].tolist()
    assert json.loads(side.read_text())["manifest"]["runs"][0]["cache_key"] == run.key
    with pytest.raises(aniso.InputError, match="write a table as .parquet or .csv"):
        run.export(tmp_path / "layers.xlsx")


def test_load_reads_a_results_json_and_finds_its_sample(cli_run, run, cache_dir):
    _, path = cli_run
    loaded = aniso.load(path, cache_dir=cache_dir)
    pd.testing.assert_frame_equal(loaded.layers, run.layers)
    assert np.array_equal(loaded.sample(1).vectors, run.sample(1).vectors)
    assert loaded.link() == run.link()


def test_a_dashboard_run_is_a_cache_hit_of_the_api(control_spec, cache_dir):
    control = aniso.analyze("untrained-minilm-l6", "wiki-en", max_tokens=TOKENS, sample=K, cache_dir=cache_dir,
                            progress=False)
    assert control.cache_hit and control.key == resolve(control_spec).key


def test_compare_and_its_link_name_the_same_runs(run, control_spec, cache_dir):
    from urllib.parse import parse_qs, urlparse

    control = aniso.analyze("untrained-minilm-l6", "wiki-en", max_tokens=TOKENS, sample=K, cache_dir=cache_dir,
                            progress=False)
    cmp = aniso.compare([run, control])
    names = [t.name for t in cmp.figure().data if t.name and "(N =" in t.name]
    assert any("MiniLM-L6-v2" in n for n in names) and any("untrained" in n for n in names)
    sel, problems = from_query_params(parse_qs(urlparse(cmp.link()).query))
    assert problems == [] and urlparse(cmp.link()).path == "/compare"
    assert [resolve(sel.spec(m)).key for m in sel.models] == [run.key, control.key]
    assert len(cmp.difference(0, 1).data) == len(run.layers)
    other = json.loads(json.dumps(run.results))
    other["manifest"]["spec"]["seed"] = 1
    with pytest.raises(aniso.InputError, match="differ in .*seed"):
        aniso.compare([run, aniso.Run(other, None, cache_dir)]).link()


def test_attention_and_chain_are_stored_where_the_pages_read_them(run):
    sel = Selection(models=("minilm-l6",), max_tokens=TOKENS, sample=K)
    page_run = resolve(sel.spec("minilm-l6"))
    assert page_run.key == run.key
    assert not A.is_cached(page_run, results=run.results)
    att = run.attention(progress=False)
    assert A.is_cached(page_run, results=run.results) and att["n_heads"] == 12
    chain = run.chain(progress=False)
    assert cached_chain_section(page_run) == {k: v for k, v in chain.items() if k != "cache_hit"}


def test_read_time_errors_are_the_clis(cache_dir, tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("a,b\nsome text,more text\n")
    for argv, kw in ((["--corpus", str(table)], {}),
                     (["--corpus", str(table), "--text-column", "a", "--encoding", "rot13"], {"encoding": "rot13",
                                                                                            "text_column": "a"})):
        code = cli_main(["analyze", "--model", "minilm-l6", *argv, "--max-tokens", "50", "--out",
                         str(tmp_path / "r.json"), "--quiet", "--cache-dir", str(cache_dir)])
        printed = capsys.readouterr().err.strip().splitlines()[-1]
        with pytest.raises(aniso.InputError) as e:
            aniso.analyze("minilm-l6", str(table), max_tokens=50, cache_dir=cache_dir, progress=False, **kw)
        assert code == 2 and printed == "error: " + " ".join(str(e.value).split())


# ----------------------------------------------------------------------------- the dashboard reads an API run
def test_the_dashboard_opens_an_api_run_on_a_python_corpus_as_computed(cache_dir, monkeypatch):
    import sys
    from urllib.parse import parse_qs, urlparse

    sys.path.insert(0, str(ROOT / "tests" / "app"))
    from app_helpers import APP, by_title, entrypoint_runs_every_time, no_exception
    from streamlit.testing.v1 import AppTest

    docs = [f"Document {i}: the workbench reads a list of strings as a corpus, and the dashboard reads it too."
            for i in range(12)]
    made = aniso.analyze("minilm-l6", docs, corpus_name="twelve notes", max_tokens=240, sample=80,
                         cache_dir=cache_dir, progress=False)
    query = parse_qs(urlparse(made.link()).query)
    assert query["corpus"][0].startswith("upload:")  # the dashboard names the saved corpus by its upload id
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")  # nothing to compute: no worker either
    before = len(jobs.list_jobs(cache_dir))
    with entrypoint_runs_every_time():
        at = AppTest.from_file(APP, default_timeout=120)
        for k, v in query.items():
            at.query_params[k] = v if len(v) > 1 else v[0]
        at.run()
    no_exception(at)
    assert not [c.value for c in at.caption if "not computed yet" in c.value]
    fig = by_title(at, "Mean cosine similarity by layer")
    measured = [t for t in fig["data"] if t.get("name", "").startswith(made.manifest["model"]["label"])]
    assert measured and np.allclose(measured[0]["y"], made.layers["mean_cosine"])
    assert "twelve notes" in measured[0]["name"]
    assert len(jobs.list_jobs(cache_dir)) == before  # read from the cache, nothing queued


# ----------------------------------------------------------------------------- docs/notebook.ipynb
@pytest.fixture(scope="module")
def notebook(run, control_spec, lm_ablation, planted_lm, cache_dir):
    """The notebook executed at this file's budget on the session's cache (its runs are this file's: cache hits),
    with the planted GPT-2 as its causal LM."""
    import notebook_helpers as H

    run.projection(layer=3)  # the notebook's projection, cached
    nb = H.with_parameters(H.read(), {"MAX_TOKENS": TOKENS, "SAMPLE": K, "LM": str(planted_lm),
                                      "HELD_OUT": HELD_OUT, "N_RANDOM": N_RANDOM})
    return H.execute(nb, env={"ANISO_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1"}, timeout=300)


def test_the_notebook_runs_and_shows_the_tour(notebook, run):
    import notebook_helpers as H

    assert H.errors(notebook) == []
    figs = H.figures(notebook)
    titles = [f["layout"]["title"]["text"] for f in figs]
    assert len(figs) == 4, titles  # the curve, the comparison, the projection, the ablation
    assert titles[0].startswith("Mean cosine similarity by layer") and titles[1].startswith("Mean cosine")
    assert "relative depth" in figs[1]["layout"]["xaxis"]["title"]["text"]
    assert "PCA" in titles[2] and "LM loss" in titles[3]
    html = H.table_html(notebook)
    for col in run.layers.columns:  # the table has the registry's columns
        assert f">{col}</th>" in html, col
    text = "".join(o.get("text", "") for outs in H.outputs(notebook) for o in outs)
    assert "persistent outlier dims: [5]" in text and run.link() in text


def test_the_committed_notebook_is_not_stale(notebook, run):
    """What docs/notebook.ipynb holds was computed from its current cells, holds no error, and shows what the
    notebook shows now; else rerun it: python tests/integration/notebook_helpers.py"""
    import notebook_helpers as H

    committed = H.read()
    hint = "docs/notebook.ipynb is stale: rerun it with `python tests/integration/notebook_helpers.py`"
    assert committed.metadata.get(H.META_KEY, {}).get("sources_sha256") == H.sources_sha(committed), \
        f"{hint} (a cell changed since its outputs were made)"
    assert H.errors(committed) == [], hint
    fresh = [k for c, k in zip([c for c in notebook.cells if c.cell_type == "code"], H.kinds(notebook))
             if "injected-parameters" not in c.metadata.get("tags", [])]
    shown = [[x for x in k if x != "stream"] for k in H.kinds(committed)]
    assert shown == [[x for x in k if x != "stream"] for k in fresh], f"{hint} (its outputs differ in kind)"
    html = H.table_html(committed)
    missing = [c for c in run.layers.columns if f">{c}</th>" not in html]
    assert not missing, f"{hint} (its table lacks the registry's columns {missing})"
