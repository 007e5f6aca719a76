"""The first curve soon after Run (issue 26): the worker the app starts warms up before its first job, and a
worker thread keeps the corpus it read and tokenized for the next job on it (keyed on the corpus's sha256).

Cheap: a tiny random BERT on a small text file; no worker process is warmed for real (that imports torch
and loads MiniLM: the browser benchmark `python -m bench.live` measures it)."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import types

import pytest
from foundation_helpers import make_documents, write_txt

from core.base.cache import get_store
from core.base.spec import RunSpec
from core.compute import analysis_jobs, pipeline, prepare
from core.compute.analysis_jobs import job_analyze
from core.compute.pipeline import analyze_params
from core.entry import worker


@pytest.fixture
def queue_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    monkeypatch.setenv("ANISO_ALLOW_SERVER_PATHS", "1")  # the tiny model and the corpus are temporary files
    return tmp_path


@pytest.fixture
def counted(monkeypatch):
    """How often the corpus is read and tokenized (through prepare's own references)."""
    n = {"read": 0, "tokenize": 0}
    load, tok = prepare.load_documents, prepare.tokenize_budget

    def load_counted(*a, **k):
        n["read"] += 1
        return load(*a, **k)

    def tok_counted(*a, **k):
        n["tokenize"] += 1
        return tok(*a, **k)

    monkeypatch.setattr(prepare, "load_documents", load_counted)
    monkeypatch.setattr(prepare, "tokenize_budget", tok_counted)
    return n


def _run(spec: RunSpec, force_cache_miss: bool = True) -> dict:
    """One "analyze" job's work in this thread, its statistics and results dropped first (a new Run)."""
    if force_cache_miss:
        store = get_store()
        for k in list(store.keys()):
            if k.startswith(("stats:", "results:")):
                store.delete(k)
    return job_analyze(analyze_params(spec), lambda *a, **k: None, lambda: False)


def _layers(spec: RunSpec) -> list:
    return pipeline.analyze(spec)["layers"]


def test_a_worker_thread_reads_and_tokenizes_a_corpus_once_for_its_jobs(queue_cache, tiny_bert_dir, counted):
    corpus = write_txt(queue_cache / "c.txt", make_documents([30, 8, 50, 20, 12], seed=4))
    spec = RunSpec(model=str(tiny_bert_dir), corpus=str(corpus), max_tokens=400, max_seq_len=24, sample=20)
    analysis_jobs._thread_memo.__dict__.clear()
    _run(spec)
    first = _layers(spec)
    assert counted == {"read": 1, "tokenize": 1}
    _run(spec)  # the same corpus, budget and tokenizer: neither read nor tokenized again
    assert counted == {"read": 1, "tokenize": 1}
    assert _layers(spec) == first  # the same numbers (bit for bit: JSON floats)
    _run(dataclasses.replace(spec, max_tokens=300))  # another budget of the same corpus: tokenized, not read
    assert counted == {"read": 1, "tokenize": 2}
    # The file changes: its sha256 is in the memo's key, so the next job reads and tokenizes it again.
    write_txt(corpus, make_documents([30, 8, 50, 20, 13], seed=5))
    _run(spec)
    assert counted == {"read": 2, "tokenize": 3}
    assert _layers(spec) != first
    # Another thread (ANISO_WORKERS=2) has a memo of its own: it reads the corpus itself.
    t = threading.Thread(target=_run, args=(spec,))
    t.start()
    t.join()
    assert counted == {"read": 3, "tokenize": 4}


def test_the_memo_drops_a_large_corpus_and_many_windows(monkeypatch):
    memo = {("documents", "c", None, "utf-8", "sha"): ["x" * 10, "y" * 10]}
    analysis_jobs._trim_memo(memo)
    assert len(memo) == 1  # small: kept
    monkeypatch.setattr(analysis_jobs, "MEMO_MAX_CHARS", 15)
    analysis_jobs._trim_memo(memo)
    assert memo == {}
    memo = {("windows", i): None for i in range(analysis_jobs.MEMO_MAX_ENTRIES + 1)}
    analysis_jobs._trim_memo(memo)
    assert memo == {}


def test_the_worker_the_app_starts_warms_up(tmp_path, monkeypatch):
    """ensure_worker asks the worker it spawns for a warm-up (--warm), unless ANISO_WORKER_WARM=0."""
    spawned = []

    def popen(argv, **kw):
        spawned.append(argv)
        return types.SimpleNamespace(pid=os.getpid())  # alive: no second spawn within the minute

    monkeypatch.setattr(worker.subprocess, "Popen", popen)
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "1")
    monkeypatch.delenv("ANISO_WORKER_WARM", raising=False)
    worker.ensure_worker(tmp_path / "a")
    monkeypatch.setenv("ANISO_WORKER_WARM", "0")
    worker.ensure_worker(tmp_path / "b")
    assert spawned[0][:4] == [sys.executable, "-m", "core", "worker"] and "--warm" in spawned[0]
    assert "--warm" not in spawned[1]


def test_a_warm_up_that_fails_is_logged_and_the_worker_goes_on(tmp_path, monkeypatch, caplog):
    called = []
    mod = types.ModuleType("warm_probe")
    mod.ok = lambda root: called.append(root)
    mod.bad = lambda root: 1 / 0
    monkeypatch.setitem(sys.modules, "warm_probe", mod)
    monkeypatch.setattr(worker, "WARM_UP", ("warm_probe:bad", "warm_probe:ok"))
    assert worker._warm_up(tmp_path, _Queue([0, 0])) == ["warm_probe:ok"]
    assert called == [tmp_path]
    assert "warm-up warm_probe:bad failed: ZeroDivisionError" in caplog.text


class _Queue:
    """A huey stand-in whose queue holds the given number of messages at each look."""

    def __init__(self, sizes):
        self.sizes = list(sizes)
        self.storage = self

    def queue_size(self):
        return self.sizes.pop(0) if self.sizes else 1


def test_the_warm_up_yields_to_a_queued_job(tmp_path, monkeypatch, capsys):
    """Issue 36: the first job never waits behind a warm-up. Before each step the warm-up looks at the queue;
    once a job waits there it stops (the consumer then takes the job), and a worker started by a Run (its job
    already queued) skips it entirely."""
    assert worker.WARM_UP[0] == "core.compute.analysis_jobs:warm_imports"  # what any job imports comes first
    called = []
    mod = types.ModuleType("warm_probe")
    mod.a = lambda root: called.append("a")
    mod.b = lambda root: called.append("b")
    monkeypatch.setitem(sys.modules, "warm_probe", mod)
    monkeypatch.setattr(worker, "WARM_UP", ("warm_probe:a", "warm_probe:b"))
    assert worker._warm_up(tmp_path, _Queue([0, 1])) == ["warm_probe:a"]  # a job came during step a
    assert called == ["a"] and "the warm-up stops before warm_probe:b" in capsys.readouterr().err
    assert worker._warm_up(tmp_path, _Queue([1])) == [] and called == ["a"]  # queued before the worker started
    assert worker._warm_up(tmp_path, _Queue([0, 0])) == ["warm_probe:a", "warm_probe:b"]  # nothing waits: all


def test_warm_up_imports_the_default_models_classes(tmp_path, monkeypatch):
    """The real warm-up: the default model is loaded once, so its classes (what the first from_pretrained
    imports: most of a fresh worker's CPU before its first batch) are imported."""
    loaded = []
    load = analysis_jobs.load_model

    def spy(ident, **kw):
        got = load(ident, **kw)
        loaded.append((ident, type(got.base).__module__))
        return got

    monkeypatch.setattr(analysis_jobs, "load_model", spy)
    analysis_jobs.warm_up(tmp_path)
    assert loaded == [(RunSpec().model, "transformers.models.bert.modeling_bert")]
    assert "transformers.models.bert.modeling_bert" in sys.modules and "core.stats.assemble" in sys.modules
