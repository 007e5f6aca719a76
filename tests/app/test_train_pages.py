"""The Train and Dynamics pages (AppTest): train from the form, list checkpoints, show a series."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from app_helpers import figures, no_exception, title, wait_for_jobs

from core import jobs, trained


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
def test_train_from_the_form_then_dynamics(app, cache_dir, corpus_file, monkeypatch):
    monkeypatch.setenv("ANISO_DATA_DIR", str(Path(corpus_file).parent))  # the form names files in the data directory
    at = app(page="pages/train.py")
    no_exception(at)
    before = set(trained.list_runs())
    for key, value in {"t_path": "data:" + Path(corpus_file).name, "t_layers": 1, "t_width": 16, "t_heads": 2, "t_steps": 2,
                       "t_batch": 4, "t_seq": 16, "t_vocab": 512}.items():
        _set(at, key, value)
    at.button(key="FormSubmitter:train_form-Train").click().run(timeout=120)
    no_exception(at)
    assert not at.error and not at.warning, [e.value for e in list(at.error) + list(at.warning)]
    queued = jobs.list_jobs(kinds=("train",))
    assert queued and queued[0].kind == "train"  # a job of the queue, not the page's script run
    wait_for_jobs(900)
    assert jobs.status(queued[0].id).status == jobs.DONE, jobs.status(queued[0].id).error
    at = app(page="pages/train.py")
    new = set(trained.list_runs()) - before
    assert len(new) == 1
    run = new.pop()
    rec = trained.read_run(run)
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
    for stat in ("query drift", "key drift", "cos(μ_Q, μ_K)"):  # the attention statistics over training
        assert any(t.startswith(stat) and "over training" in t for t in titles), (stat, titles)
    text = " ".join(m.value for m in dyn.markdown)
    assert "Held-out loss went from" in text and "Mean cosine of the last layer" in text
    assert "Query/key drift of the last block" in text


def test_pages_without_runs(app, tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
    for p in ("pages/train.py", "pages/dynamics.py"):
        at = app(page=p)
        no_exception(at)
        assert any("No trained run yet" in i.value for i in at.info)


def test_train_form_names_no_server_file_outside_the_data_directory(app, tmp_path, corpus_file, monkeypatch):
    """A lab server's Train form takes the sidebar's rule: no path outside the data directory."""
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    at = app(page="pages/train.py")
    for path in (corpus_file, "/etc/passwd", "data:../../etc/passwd"):
        at.text_input(key="t_path").set_value(path)
        at.button(key="FormSubmitter:train_form-Train").click().run(timeout=60)
        no_exception(at)
        assert any("is not available here" in e.value for e in at.error), [e.value for e in at.error]
    assert not jobs.list_jobs(kinds=("train",))  # nothing was queued


def test_train_form_lists_the_sidebars_own_corpus_by_its_name(app, tmp_path, monkeypatch):
    from core import uploads

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
    uid = uploads.upload_id(uploads.save_upload(b"Some words of our own. " * 50, "my lab notes.txt"))
    at = app(page="pages/train.py", corpus=uid)
    no_exception(at)
    box = at.selectbox(key="t_corpus")
    assert "my lab notes.txt" in box.options, box.options  # shown by its own name
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")  # queued, not run: the job's parameters are what counts
    box.set_value("my lab notes.txt")
    at.button(key="FormSubmitter:train_form-Train").click().run(timeout=60)
    no_exception(at)
    (job,) = jobs.list_jobs(kinds=("train",))
    assert job.params["spec"]["corpus"] == uid, job.params


def test_dynamics_hub_series_form_says_why_offline(app, tmp_path, monkeypatch):
    """A hub model's revisions, offline and not in the local hub cache: an error line, nothing queued."""
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
    at = app(page="pages/dynamics.py")
    at.text_input(key="dyn_hub").set_value("test-org/never-downloaded")
    at.text_input(key="dyn_hub_revs").set_value("step0,step1000")
    at.button(key="FormSubmitter:hub_series_form-Add and analyse").click().run()
    no_exception(at)
    errs = [e.value for e in at.error]
    assert len(errs) == 1 and "cannot be reached" in errs[0] and "step0, step1000" in errs[0]
    at.text_input(key="dyn_hub_revs").set_value("main,step1000")
    at.button(key="FormSubmitter:hub_series_form-Add and analyse").click().run()
    assert "does not name a training step" in at.error[0].value
    assert not jobs.list_jobs(kinds=("series",))


def test_dynamics_hub_series_form_takes_the_sidebars_model_rule(app, tmp_path, monkeypatch):
    """A server with the hub switched off (or a name that is a folder of the server) refuses a hub series."""
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANISO_ALLOW_HUB", "0")
    at = app(page="pages/dynamics.py")
    at.text_input(key="dyn_hub").set_value("EleutherAI/pythia-70m")
    at.text_input(key="dyn_hub_revs").set_value("step0,step1000")
    at.button(key="FormSubmitter:hub_series_form-Add and analyse").click().run()
    no_exception(at)
    assert any("hub identifiers are switched off" in e.value for e in at.error), [e.value for e in at.error]
    monkeypatch.setenv("ANISO_ALLOW_HUB", "1")
    monkeypatch.setenv("ANISO_ALLOW_MODEL_FOLDERS", "0")
    at.text_input(key="dyn_hub").set_value("docs/training")  # a folder of the server, relative to the app
    at.button(key="FormSubmitter:hub_series_form-Add and analyse").click().run()
    assert any("local model folders are switched off" in e.value for e in at.error), [e.value for e in at.error]
    assert not jobs.list_jobs(kinds=("series",)) and not hub_series_list(tmp_path)


def hub_series_list(cache):
    from core import hub_series

    return hub_series.list_series(cache)


@pytest.mark.parametrize("page", ["pages/train.py", "pages/dynamics.py"])
def test_the_sidebars_run_acts_on_every_page(app, monkeypatch, page):
    """Run pressed on a page that shows no run (Train, Dynamics) queues the selection's jobs, and
    that page shows them (the click was once read only by the analysis pages' header)."""
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")  # the test needs the queued job, not its computation
    at = app(page=page, tokens="2100")  # a budget no other test computes
    no_exception(at)
    before = {j.id for j in jobs.list_jobs(kinds=("analyze",)) if j.active}
    at.sidebar.button(key="run").click().run()
    no_exception(at)
    new = [j for j in jobs.list_jobs(kinds=("analyze",)) if j.active and j.id not in before]
    try:
        assert new and all("2,100 tokens" in j.label for j in new)
        assert any(new[0].id in m.value for m in at.markdown)  # its progress panel, on this page
    finally:
        for j in new:
            jobs.cancel(j.id)
