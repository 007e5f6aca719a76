"""A hub model's revisions as a series (core/inputs/hub_series.py) through the loopback hub (tests/hub_server.py) with
the real huggingface_hub client: Pythia-style tags step0, step1, step2 of a tiny GPT-NeoX, step2 holding step1's
weights (pythia#205). The digests are compared from the hub's listing before any weight is fetched, the repeated
revision is flagged and not analysed, each analysed revision records its commit; the same series then runs
offline from the local hub cache the first run filled (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import json
import subprocess

import pytest
from foundation_helpers import ROOT, cli_cmd, cli_env

from core.base.errors import InputError
from core.inputs import hub_fetch, hub_series
from tests import hub_repos

HUB_ID = "testorg/tiny-neox"
OTHER_ID = "testorg/tiny-bloom"  # an architecture without attention statistics (Bloom's fused layout)


@pytest.fixture(scope="module")
def repos(hub_server, hub_work):
    neox = hub_server.add(hub_repos.series_repo(hub_work, same=2))
    bloom = hub_server.add(_bloom_repo(hub_work))
    return neox, bloom


def _bloom_repo(work):
    import torch
    from transformers import BloomConfig, BloomForCausalLM

    from tests.hub_server import HubRepo

    repo = HubRepo(OTHER_ID)
    for s in (0, 1):
        folder = work / f"series-bloom-{s}"
        if not (folder / "config.json").exists():
            torch.manual_seed(s)
            hub_repos._save(BloomForCausalLM(BloomConfig(vocab_size=512, hidden_size=32, n_layer=2, n_head=2)), folder)
        repo.commit(hub_repos._files(folder), branches=["main"], tags=[f"step{s}"])
    return repo


def test_revision_names_give_steps():
    assert [hub_series.step_of(r) for r in ("step0", "step1000", "step-64", "global_step8")] == [0, 1000, 64, 8]
    assert hub_series.parse_revisions(" step0, step1000,,step2 ") == ["step0", "step1000", "step2"]
    with pytest.raises(InputError, match="does not name a training step"):
        hub_series.step_of("main")


def test_register_refuses_bad_input(tmp_path):
    with pytest.raises(InputError, match="not a hub model id"):
        hub_series.register("no-org", "step0,step1", tmp_path)
    with pytest.raises(InputError, match="at least two revisions"):
        hub_series.register("org/name", "step0", tmp_path)
    with pytest.raises(InputError, match="same step"):
        hub_series.register("org/name", "step1,step-1", tmp_path)
    with pytest.raises(InputError, match="No hub series"):
        hub_series.read("hub:org/never-made", tmp_path)


def _run(hub, *args, **env):
    e = cli_env(**hub.env, **env)
    e.pop("HF_HUB_OFFLINE")
    e.update(env)
    return subprocess.run(cli_cmd(*args), cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_series_of_hub_revisions_through_the_hub_then_offline(repos, hub, tmp_path, monkeypatch):
    neox = repos[0]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"Document {i} says the cat sat on the mat, then ran under a tree." for i in range(60)))
    cache, out = tmp_path / "cache", tmp_path / "series.json"
    args = ("series", "--hub", HUB_ID, "--revisions", "step2,step1,step0", "--corpus", str(corpus),
            "--max-tokens", "400", "--sample", "100", "--cache-dir", str(cache), "--quiet", "--out", str(out))
    r = _run(hub, *args)
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    ck = got["record"]["checkpoints"]
    assert all(len(c["weights_sha256"]) == 64 for c in ck) and ck[1]["weights_sha256"] == ck[2]["weights_sha256"]
    assert [(d["step"], d["same_as"], d["revision"]) for d in got["duplicates"]] == [(2, 1, "step2")]
    assert "same weights as revision step1" in got["summary"]["findings"][0] and "same weights" in r.stderr
    assert got["run"] == "hub:" + HUB_ID and got["steps"] == [0, 1]  # step2 is step1 again: not analysed twice
    assert [res["manifest"]["model"]["commit"] for res in got["results"]] == [neox.tags["step0"], neox.tags["step1"]]
    cos = [tuple(round(row["mean_cosine"], 6) for row in res["layers"]) for res in got["results"]]
    assert len(set(cos)) == 2  # each revision's own weights
    # the weights fetched: those of the two analysed commits, once each; step2's never
    fetched = [q["commit"] for q in hub.server.downloads(HUB_ID, "model.safetensors") if not q["range"]]
    assert sorted(fetched) == sorted([neox.tags["step0"], neox.tags["step1"]])
    # GPT-NeoX (fused per-head query_key_value) has attention statistics: each revision's query/key drift
    assert got["attention_note"] is None and all(a["n_blocks"] == 2 and a["causal"] for a in got["attention"])
    from core.views import dynamics as D

    ser = {k: got[k] for k in ("run", "record", "steps", "results", "attention")}
    assert not D.has_loss(ser) and D.has_attention(ser)
    assert "hub revisions step0, step1" in D.metric_heatmap(ser, "mean_cosine").figure.layout.title.subtitle.text
    # offline, from the local hub cache the first run filled: every checkpoint a cache hit, nothing asked
    hub.server.clear()
    r = _run(hub, "series", "--run", "hub:" + HUB_ID, "--corpus", str(corpus), "--max-tokens", "400", "--sample",
             "100", "--cache-dir", str(cache), "--quiet", "--out", str(out), HF_HUB_OFFLINE="1")
    assert r.returncode == 0, r.stderr
    again = json.loads(out.read_text())
    assert all(res["manifest"]["cache_hit"] for res in again["results"]) and not hub.server.requests
    from core.studies import series

    assert series.cached_steps("hub:" + HUB_ID, cache_dir=cache, corpus=str(corpus), max_tokens=400,
                               sample=100) == [0, 1]
    # a revision the repository does not have: one line naming those it has, nothing analysed
    r = _run(hub, "series", "--hub", HUB_ID, "--revisions", "step0,step9", "--cache-dir", str(cache), "--quiet",
             "--out", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "no revision 'step9': its branches are main; its tags step0, step1, step2" in r.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_series_of_an_architecture_without_attention_statistics(repos, hub, tmp_path):
    """Bloom's fused query_key_value is not among core.studies.attention's layouts (nor has it an anatomy entry): the
    series is analysed without query/key drift, says why, and counts as complete without it; the record keeps
    why, with the attention code's version (another version of that code tries again)."""
    from core.studies.series import analyze_series

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"Document {i} says the dog sat on a rug, then slept." for i in range(30)))
    cache = tmp_path / "cache"
    run = hub_series.register(OTHER_ID, "step0,step1", cache)
    got = analyze_series(run, cache_dir=cache, corpus=str(corpus), max_tokens=200, sample=50)
    assert got["steps"] == [0, 1] and len(got["results"]) == 2
    assert got["attention"] is None and "BloomAttention" in got["attention_note"]
    assert "not available" in got["attention_note"]
    rec = hub_series.read(run, cache)
    assert hub_series.no_attention(rec) == got["attention_note"]
    assert hub_series.no_attention({**rec, "no_attention_code": "an older version"}) is None


@pytest.mark.slow
def test_smollm2_sized_and_its_identical_revisions_flagged_before_any_weight(hub, hub_work, cache_dir, tmp_path):
    """SmolLM2-135M as a hub repository (its safetensors, made once from the GGUF): its size from the header,
    and the series of its two revisions with one weight file flagged as one, from the listing alone."""
    from core.inputs.models import smollm2_folder

    folder = smollm2_folder(cache_dir)
    repo = hub.server.add(hub_repos.smollm2_repo(folder))
    with open(folder / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    n = 0
    for k, v in header.items():
        if k != "__metadata__":
            size = 1
            for d in v["shape"]:
                size *= d
            n += size
    rep = hub_fetch.size_report(hub_fetch.plan_of("testorg/smollm2@step1000"), "float32")
    assert rep["n_params"] == n and rep["commit"] == repo.tags["step1000"] and rep["fits"]
    assert rep["summary"] == f"found: {hub_fetch.fmt_params(n)} parameters, " \
        f"{hub_fetch.fmt_bytes((folder / 'model.safetensors').stat().st_size)} safetensors, " \
        f"needs ~{n * 4 * hub_fetch.MEMORY_MARGIN / 1e9:.1f} GB at float32"
    run = hub_series.register("testorg/smollm2", "step1000,step2000", tmp_path / "cache")
    rec = hub_series.read(run, tmp_path / "cache")
    assert rec["checkpoints"][0]["weights_sha256"] == rec["checkpoints"][1]["weights_sha256"]
    assert [(d["step"], d["same_as"]) for d in rec["integrity"]["duplicates"]] == [(2000, 1000)]
    # nothing but headers was read of the weights: the digests are the hub's listing
    assert {q["range"] for q in hub.server.downloads("testorg/smollm2", "model.safetensors")} == {"bytes=0-100000"}
