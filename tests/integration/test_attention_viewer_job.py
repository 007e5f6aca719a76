"""The attention viewer's forward pass is a job ("attention-maps"): the page only reads stored maps
(`cached_maps`, which never loads a model) and queues the job on a miss."""

from __future__ import annotations

import numpy as np

from core.base.spec import RunSpec
from core.compute import pipeline
from core.entry import job_records, jobs
from core.studies.attention import attention_maps, cached_maps, maps_params


def test_viewer_maps_are_computed_by_a_job_and_read_back(tiny_llama_dir, varied_txt, tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    spec = RunSpec(model=str(tiny_llama_dir), corpus=str(varied_txt), max_tokens=200, max_seq_len=24, sample=32,
                   device="cpu", dtype="float32")
    run = pipeline.resolve(spec)
    assert cached_maps(run, 1) is None  # the run itself is not computed: nothing, and no model loaded
    pipeline.analyze(run)
    assert cached_maps(run, 1) is None
    params = maps_params(run, 1)
    jid = jobs.submit("attention-maps", params, label="viewer")
    assert jobs.submit("attention-maps", maps_params(spec, 1)) == jid  # one job per (run, window)
    assert jobs.submit("attention-maps", maps_params(run, 2)) != jid
    job = jobs.status(jid)
    seen = []
    run_kind = job_records.resolve_target(job_records.lookup(job.kind).run)
    out = run_kind(dict(job.params), lambda p=None, **kw: seen.append(p), lambda: False)
    assert out["window"] == 1 and out["blocks"] == 2
    assert [p.stage for p in seen if p is not None][-1] == "ablation"  # the job reports its passes (as is, dims zeroed)
    got = cached_maps(run, 1)
    assert got is not None and got["window"] == 1
    again = attention_maps(spec, 1)  # what the CLI and tests call: the same stored maps
    np.testing.assert_array_equal(got["maps"], again["maps"])
    np.testing.assert_array_equal(got["zeroed"], again["zeroed"])
