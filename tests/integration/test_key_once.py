"""Resolve once, key once: one analysis run through the job path computes the run key at most once
per process and asks the hub at most once per process (core.compute.pipeline.resolve, carried in the job's parameters),
counted at the loopback hub (tests/hub_server.py) that serves the model.

The app's side is what ui/run.py does on Run (resolve, look up the cache, submit the job) and what
the pages do afterwards (read the results); the worker's side runs the queued job's function with
the job's stored parameters, here in this process, its counters read apart from the app's (and what this
process remembers of the hub forgotten in between, as a worker process would not have it).
"""

from __future__ import annotations

import pytest

from core.base.spec import RunSpec
from core.compute import pipeline
from core.entry import job_records, jobs
from tests.hub_fixtures import forget
from tests.hub_server import HubRepo

HUB_ID = "test-org/tiny-bert"


@pytest.fixture
def counted(monkeypatch, tiny_bert_dir, tmp_path, hub):
    """Counters of key computations; HUB_ID is `tiny_bert_dir` on the loopback hub."""
    n = {"keys": 0}
    real_key = pipeline._spec_key

    def spec_key(*a, **kw):
        n["keys"] += 1
        return real_key(*a, **kw)

    repo = HubRepo(HUB_ID)
    n["commit"] = repo.commit({p.name: p for p in tiny_bert_dir.iterdir() if p.is_file()}, branches=["main"])
    hub.server.add(repo)
    monkeypatch.setattr(pipeline, "_spec_key", spec_key)
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    monkeypatch.setenv("ANISO_TORCHRUN_NPROC", "1")
    n["server"] = hub.server
    return n


def _api(n) -> list[dict]:
    """The hub's API calls since the last look (model info: the resolutions and listings)."""
    got = [r for r in n["server"].requests if r["kind"] == "api"]
    n["server"].clear()
    return got


def _one_run_through_the_job_path(spec: RunSpec, n: dict) -> dict:
    got = {}
    _api(n)
    # the app, on Run (ui/run.py): resolve, look the run up, queue it
    run = pipeline.resolve(spec)
    assert not pipeline.is_cached(run)
    jid = jobs.submit("analyze", pipeline.analyze_params(run), label="key-once")
    got["app_submit"], got["hub_app"] = n["keys"], _api(n)
    # the worker (another process): the queued job's function on the job's stored parameters
    n["keys"] = 0
    forget()  # a worker process does not share the app's memory of the hub
    job = jobs.status(jid)
    fn = job_records.resolve_target(job_records.lookup(job.kind).run)
    out = fn(dict(job.params), lambda *a, **kw: None, lambda: False)
    assert out["layers"] > 0 and not out["cache_hit"]
    got["worker"], got["hub_worker"] = n["keys"], _api(n)
    # the app again, drawing the results with the run it resolved (ui/data.py keeps it per spec)
    n["keys"] = 0
    assert pipeline.is_cached(run)
    res = pipeline.analyze(run)
    assert res["manifest"]["cache_key"] == run.key and res["manifest"]["model"]["commit"] == n["commit"]
    got["app_read"], got["hub_read"] = n["keys"], _api(n)
    return got


def test_a_run_through_the_job_path_keys_once_per_process(counted, varied_txt):
    spec = RunSpec(model=HUB_ID, corpus=str(varied_txt), max_tokens=200, max_seq_len=24, sample=32,
                   device="cpu", dtype="float32")
    got = _one_run_through_the_job_path(spec, counted)
    assert got["app_submit"] + got["app_read"] <= 1, got  # the app process: one key computation for the run
    assert got["worker"] <= 1, got  # the worker process: at most one (none: the key travels in the job)
    # the app asks the hub once (the revision's commit and listing); the worker, which gets the commit with the
    # job, once for the listing at that commit (the files to fetch), never for the revision; the read none
    assert [r["revision"] for r in got["hub_app"]] == ["main"], got["hub_app"]
    assert [r["revision"] for r in got["hub_worker"]] == [counted["commit"]], got["hub_worker"]
    assert got["hub_read"] == []
    # the job's id is the run key: the queue computes none of its own
    assert jobs.job_id("analyze", pipeline.analyze_params(pipeline.resolve(spec))).startswith("analyze-")


def test_a_carried_resolution_that_does_not_hold_together_is_resolved_again(counted, varied_txt):
    """A job record is read from the queue: a key that is not the hash of its parts, or parts of
    another spec, are not trusted (the worker resolves the spec itself, once)."""
    spec = RunSpec(model=HUB_ID, corpus=str(varied_txt), max_tokens=200, max_seq_len=24, sample=32,
                   device="cpu", dtype="float32")
    good = pipeline.analyze_params(pipeline.resolve(spec))
    assert isinstance(pipeline.run_of(good), pipeline.ResolvedRun)
    forged_key = {**good, "resolved": {**good["resolved"], "key": "stats:" + "0" * 64}}
    other = pipeline.analyze_params(pipeline.resolve(RunSpec(**{**spec.__dict__, "max_tokens": 300})))
    foreign_parts = {**good, "resolved": other["resolved"]}
    for params in (forged_key, foreign_parts, {**good, "resolved": {"key": 1}}):
        run = pipeline.run_of(params)
        assert isinstance(run, RunSpec)
        counted["keys"] = 0
        assert pipeline.resolve(run).key == good["resolved"]["key"]  # resolved here, once
        assert counted["keys"] == 1
