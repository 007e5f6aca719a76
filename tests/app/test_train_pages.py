"""The Train and Dynamics pages (AppTest) without training: no run yet, the form's checks and the
corpora it lists, the hub-series form. Training from the form, then its dynamics, is in
tests/integration/test_app_models.py."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import no_exception

from core.entry import jobs


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = "the cat dog sat ran on a mat tree red blue small big and then".split()
    docs = [" ".join(rng.choice(words, size=int(rng.integers(8, 25)))) + "." for _ in range(200)]
    p = tmp_path_factory.mktemp("train-corpus") / "small.txt"
    p.write_text("\n\n".join(docs))
    return str(p)


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
    from core.inputs import uploads

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
    answers = []  # a folder of the server, relative to the app, and a name that is none: the same answer (a hub id
    for name in ("docs/training", "docs/nothing-here"):  # either way, issue 37 item 3), never a local folder
        at.text_input(key="dyn_hub").set_value(name)
        at.button(key="FormSubmitter:hub_series_form-Add and analyse").click().run()
        no_exception(at)
        answers.append([e.value.replace(name.replace("_", "\\_"), "NAME").replace(name, "NAME") for e in at.error])
    assert answers[0] and answers[0] == answers[1], answers
    assert not any("local model folder" in e for e in answers[0]), answers
    assert not jobs.list_jobs(kinds=("series",)) and not hub_series_list(tmp_path)


def hub_series_list(cache):
    from core.inputs import hub_series

    return hub_series.list_series(cache)


@pytest.mark.parametrize("page", ["pages/train.py", "pages/dynamics.py"])
def test_a_run_started_elsewhere_shows_on_every_page(app, monkeypatch, page):
    """Train and Dynamics have no Run of their own (issue 28 item 11: the run block does nothing there), but a
    job that Run queued on another page shows in their job panel."""
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")  # the test needs the queued job, not its computation
    at = app(page="pages/layers.py", tokens="2100")  # a budget no other test computes
    no_exception(at)
    before = {j.id for j in jobs.list_jobs(kinds=("analyze",)) if j.active}
    at.sidebar.button(key="run").click().run()
    new = [j for j in jobs.list_jobs(kinds=("analyze",)) if j.active and j.id not in before]
    try:
        at.switch_page(page).run()
        no_exception(at)
        assert not [b for b in at.sidebar.button if b.key == "run"]
        assert new and all("2,100 tokens" in j.label for j in new)
        assert any(new[0].id in m.value for m in at.markdown)  # its progress panel, on this page
    finally:
        for j in new:
            jobs.cancel(j.id)


def test_a_run_that_did_not_learn_says_so_beside_its_losses(app, tmp_path, monkeypatch):
    """The run record's `learned` flag (held-out loss not below the unigram entropy): a warning in its expander."""
    from core.inputs import checkpoints
    from core.studies.train_spec import TrainSpec

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path))
    spec = TrainSpec(optimizer="sgd", lr=1e-4, steps=2).to_dict()

    def record(run, learned, last):
        ck = [{"step": s, "model": checkpoints.ident_of(run, s), "held_out_loss": loss, "train_loss": None,
               "tokens_seen": s * 1024} for s, loss in ((0, 8.4), (2, last))]
        checkpoints.write_run(run, {"run": run, "spec": spec, "status": "done", "device": "cpu", "checkpoints": ck,
                                    "optimizer": "sgd", "lr": 1e-4, "unigram_entropy": 6.25, "learned": learned})

    record("stuck-run", False, 8.125)
    record("fine-run", True, 5.5)
    at = app(page="pages/train.py")
    no_exception(at)
    warnings = [w.value for w in at.warning]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("Did not learn: held-out loss 8.125 is not below the corpus's unigram entropy 6.250")
