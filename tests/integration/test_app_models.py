"""AppTest flows that need a real model (moved from tests/app, whose pages run on synthetic runs): a local
model folder beside a built-in, the ablation job of a planted GPT-2 (stored, exported, restored from the URL,
equal to the CLI's), the Attention page's job with heatmaps equal to the section and the viewer's maps, and
training from the form then its dynamics. The real worker computes them in the session's cache.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
from app_helpers import (  # noqa: E402
    app_factory,
    by_title,
    entrypoint_runs_every_time,
    figures,
    no_exception,
    run_clicked,
    stop_worker,
    title,
    wait_for_jobs,
)

from core.compute.pipeline import analyze  # noqa: E402
from core.entry import jobs, worker
from core.inputs import checkpoints  # noqa: E402
from core.studies.attention import attention_maps, head_matrix, run_attention  # noqa: E402
from core.studies.attention import is_cached as attention_cached  # noqa: E402
from core.studies.selection import Selection  # noqa: E402
from core.views import attention as AV  # noqa: E402
from ui.state import KEY  # noqa: E402

PAGE = "pages/attention.py"
TOKENS = 1500  # not the other app tests' selection: their first test expects a cold cache
SEQ = 128  # windows of 128 tokens: long documents have several, picked by document in the viewer


@pytest.fixture(autouse=True, scope="module")
def _app_module(cache_dir):
    """As tests/app/conftest.py: the entrypoint on every rerun; the worker stopped at the end."""
    with entrypoint_runs_every_time():
        yield
    worker.stop_worker(cache_dir)


@pytest.fixture
def app(cache_dir):
    return app_factory()


@pytest.fixture
def fresh_worker(cache_dir):
    """The worker checks jobs against its own settings: stopped before and after a test that sets
    ANISO_DATA_DIR, so the one its Run starts has the test's settings."""
    stop_worker(cache_dir)
    yield
    stop_worker(cache_dir)


def _active_jobs():
    return [j for j in jobs.list_jobs() if j.active]


def test_a_local_model_folder_next_to_a_builtin(app, tiny_bert_dir, monkeypatch, fresh_worker):
    monkeypatch.setenv("ANISO_DATA_DIR", str(tiny_bert_dir.parent))  # the URL names folders in the data dir
    at = app(models=("minilm-l6", f"data:{tiny_bert_dir.name}"), tokens="600", sample="200")
    no_exception(at)
    assert any("not computed yet" in c.value for c in at.caption)
    run_clicked(at)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    names = [t["name"] for t in by_title(at, "Mean cosine similarity by layer")["data"] if t.get("fill") != "toself"]
    assert any(tiny_bert_dir.name in n for n in names) and any("MiniLM" in n for n in names)


@pytest.fixture(scope="module")
def planted_gpt2(tmp_path_factory):
    """A tiny GPT-2 whose LayerNorm gain of dim 5 is 8 in every block: a persistent norm outlier."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from core.inputs.models import gpt2_tokenizer

    d = tmp_path_factory.mktemp("planted-gpt2")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=5, n_head=2, n_positions=128))
    with torch.no_grad():
        for block in model.transformer.h:
            block.ln_1.weight[5] = 8.0
            block.ln_2.weight[5] = 8.0
    model.save_pretrained(d)
    gpt2_tokenizer().save_pretrained(d)
    return d


@pytest.mark.slow
def test_ablation_is_a_job_stored_with_the_run_and_restored_from_the_url(app, planted_gpt2, tmp_path, fresh_worker,
                                                                        monkeypatch):
    """Run ablation queues a job; its result is shown, goes into results.json (CLI), the report
    zip and the URL (`ablate=1`), and a fresh session opened on that URL shows it again."""
    import io
    import subprocess
    import sys
    import time
    import zipfile

    from core.entry import jobs
    from core.views.report import build_report

    q = {"tokens": "800", "sample": "200", "seqlen": "64"}
    monkeypatch.setenv("ANISO_DATA_DIR", str(planted_gpt2.parent))  # the URL names folders in the data dir
    model = f"data:{planted_gpt2.name}"
    at = app(models=(model,), page="pages/outliers.py", **q)
    run_clicked(at)
    no_exception(at)
    at.session_state["outliers_section"] = "Ablation"
    at.run()
    at.button(key="ablate").click().run()
    no_exception(at)
    [job] = _active_jobs()
    assert job.kind == "ablation"
    assert any("ablation job is running" in c.value for c in at.caption)
    t0 = time.monotonic()
    while jobs.status(job.id).active:
        assert time.monotonic() - t0 < 900
        time.sleep(0.5)
    assert jobs.status(job.id).status == jobs.DONE, jobs.status(job.id).error
    at.run()
    no_exception(at)
    assert by_title(at, "zeroed in every norm")
    qp = {k: (v if isinstance(v, str) else v[-1]) for k, v in at.query_params.items()}
    assert qp.get("ablate") == "1"
    # A fresh session on the shared URL: the ablation is there, nothing recomputed.
    again = app(models=(model,), page="pages/outliers.py", ablate="1", **q)
    no_exception(again)
    assert by_title(again, "zeroed in every norm")
    sel = Selection(models=(str(planted_gpt2),), max_tokens=800, sample=200, max_seq_len=64)
    names = zipfile.ZipFile(io.BytesIO(build_report(sel, image_formats=()))).namelist()
    assert any("ablation" in n for n in names if n.startswith("data/"))
    out = tmp_path / "r.json"
    cli = subprocess.run([sys.executable, "-m", "core", "analyze", "--model", str(planted_gpt2), "--max-tokens", "800",
                          "--sample", "200", "--max-seq-len", "64", "--out", str(out)], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ})
    assert cli.returncode == 0, cli.stderr
    assert 5 in json.loads(out.read_text())["ablation"]["dims"]


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
    from core.views.figures import esc

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
    # every choice of the view is in the link: a fresh session opened on it draws the same (issue 28 item 2)
    link = {k: at.query_params[k] for k in at.query_params}
    assert link["win"] in (str(window), [str(window)]) and link["block"] in ("2", ["2"])
    assert {"astat", "akeys", "alink"} <= set(link)
    fresh = app(page=PAGE, **link)
    no_exception(fresh)
    drawn = [(title(f), str(f["data"])) for f in figures(at)]
    assert [(title(f), str(f["data"])) for f in figures(fresh)] == drawn
    at.session_state[KEY] = at.session_state[KEY].replace(attn_window=10**7)
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


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = "the cat dog sat ran on a mat tree red blue small big and then".split()
    docs = [" ".join(rng.choice(words, size=int(rng.integers(8, 25)))) + "." for _ in range(200)]
    p = tmp_path_factory.mktemp("train-corpus") / "small.txt"
    p.write_text("\n\n".join(docs))
    return str(p)


def _set(at, key, value):
    at.number_input(key=key).set_value(value) if key != "t_path" else at.text_input(key=key).set_value(value)


@pytest.mark.slow
def test_train_from_the_form_then_dynamics(app, cache_dir, corpus_file, monkeypatch, fresh_worker):
    monkeypatch.setenv("ANISO_DATA_DIR", str(Path(corpus_file).parent))  # the form names files in the data directory
    at = app(page="pages/train.py")
    no_exception(at)
    before = set(checkpoints.list_runs())
    for key, value in {"t_path": "data:" + Path(corpus_file).name, "t_layers": 1, "t_width": 16, "t_heads": 2, "t_steps": 2,
                       "t_batch": 4, "t_seq": 16, "t_vocab": 512}.items():
        _set(at, key, value)
    at.button(key="FormSubmitter:train_form-Train").click().run(timeout=120)
    no_exception(at)
    # The page may rightly flag a run already in the session's cache that did not learn (the lab tests' 5-step
    # trainings share it): that is not about this form. Any other warning or error is.
    problems = [e.value for e in at.error] + [w.value for w in at.warning if not w.value.startswith("Did not learn")]
    assert not problems, problems
    queued = jobs.list_jobs(kinds=("train",))
    assert queued and queued[0].kind == "train"  # a job of the queue, not the page's script run
    wait_for_jobs(900)
    assert jobs.status(queued[0].id).status == jobs.DONE, jobs.status(queued[0].id).error
    at = app(page="pages/train.py")
    new = set(checkpoints.list_runs()) - before
    assert len(new) == 1
    run = new.pop()
    rec = checkpoints.read_run(run)
    assert rec["status"] == "done" and [c["step"] for c in rec["checkpoints"]] == [0, 1, 2]
    at.run()
    assert any(run in e.label for e in at.expander)
    assert any(f"trained/{run}@step-2" in str(df.value) for df in at.dataframe)

    dyn = app(page="pages/dynamics.py")
    no_exception(dyn)
    dyn.multiselect(key="dyn_pick").set_value([run]).run()
    dyn.number_input(key="dyn_tokens").set_value(1000).run()
    assert not figures(dyn)  # nothing analysed yet: a button, no figures
    dyn.button(key=f"an_{run}").click().run(timeout=120)
    wait_for_jobs(900)
    dyn.run(timeout=300)
    no_exception(dyn)
    titles = [title(f) for f in figures(dyn)]
    assert any("by layer over training" in t for t in titles)
    assert any("loss over training" in t.lower() for t in titles)
    assert any("Persistent outlier dimensions over training" in t for t in titles)
    assert any("The outlier chain over training" in t for t in titles)  # top-1/median, sink rate... (issue 24)
    for stat in ("query drift", "key drift", "cos(μ_Q, μ_K)"):  # the attention statistics over training
        assert any(t.startswith(stat) and "over training" in t for t in titles), (stat, titles)
    text = " ".join(m.value for m in dyn.markdown)
    assert "Held-out loss went from" in text and "Mean cosine of the last layer" in text
    assert "Query/key drift of the last block" in text
