"""A hub model with revisions as a series (core/hub_series.py), end to end without the hub: a local
hub cache (HF_HOME) laid out as huggingface_hub writes it, with tiny GPT-NeoX models at revisions
step0, step1, step2 (refs/<revision> -> commit -> snapshots/<commit>/), HF_HUB_OFFLINE=1."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from foundation_helpers import ROOT, cli_cmd, cli_env

from core import hub_series
from core.errors import InputError

HUB_ID = "test-org/tiny-neox"
REVISIONS = ("step0", "step1", "step2")


DUP_ID = "test-org/tiny-neox-dup"  # its step2 holds the same weights as step1 (as some Pythia revisions do)
OTHER_ID = "test-org/tiny-bloom"  # an architecture without attention statistics (Bloom's fused layout)


def _hub_model(home, hub_id, revisions, make):
    repo = home / "hub" / ("models--" + hub_id.replace("/", "--"))
    for i, rev in enumerate(revisions):
        commit = hashlib.sha1((hub_id + rev).encode()).hexdigest()
        make(i, repo / "snapshots" / commit)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / rev).write_text(commit)


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """HF_HOME with HUB_ID at REVISIONS, each a differently seeded tiny GPT-NeoX (the Pythia
    architecture), and OTHER_ID (a tiny Bloom) at step0, step1."""
    import torch
    from transformers import BloomConfig, BloomForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM

    from core.train import bpe_tokenizer

    home = tmp_path_factory.mktemp("hf-home")
    tok = bpe_tokenizer(512, 64)

    def neox(i, snap):
        torch.manual_seed(i)
        cfg = GPTNeoXConfig(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=128, bos_token_id=tok.eos_token_id,
                            eos_token_id=tok.eos_token_id)
        GPTNeoXForCausalLM(cfg).save_pretrained(snap)
        tok.save_pretrained(snap)

    def bloom(i, snap):
        torch.manual_seed(i)
        BloomForCausalLM(BloomConfig(vocab_size=512, hidden_size=32, n_layer=2, n_head=2)).save_pretrained(snap)
        tok.save_pretrained(snap)

    _hub_model(home, HUB_ID, REVISIONS, neox)
    _hub_model(home, DUP_ID, ("step0", "step1", "step2"), lambda i, snap: neox(min(i, 1), snap))  # step2 = step1
    _hub_model(home, OTHER_ID, ("step0", "step1"), bloom)
    return home


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


def _run(hf_home, *args):
    env = cli_env(HF_HOME=str(hf_home))
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run(cli_cmd(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_hub_revisions_series_offline_from_a_local_hub_cache(hf_home, tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"Document {i} says the cat sat on the mat, then ran under a tree." for i in range(60)))
    cache, out = tmp_path / "cache", tmp_path / "series.json"
    args = ("series", "--hub", HUB_ID, "--revisions", ",".join(reversed(REVISIONS)), "--corpus", str(corpus),
            "--max-tokens", "400", "--sample", "100", "--cache-dir", str(cache), "--quiet", "--out", str(out))
    r = _run(hf_home, *args)
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["run"] == "hub:" + HUB_ID and got["steps"] == [0, 1, 2]
    models = [res["manifest"]["model"]["id"] for res in got["results"]]
    assert models == [f"{HUB_ID}@{rev}" for rev in REVISIONS]
    assert len({res["manifest"]["cache_key"] for res in got["results"]}) == 3  # one cache entry per revision
    # each revision resolved to its own weights: the seeds differ, so do the measured numbers
    cos = [tuple(round(row["mean_cosine"], 6) for row in res["layers"]) for res in got["results"]]
    assert len(set(cos)) == 3
    assert got["summary"]["findings"]
    # GPT-NeoX (fused per-head query_key_value, partial rotary) has attention statistics: each
    # revision's own section, query/key drift per block and head
    assert got["attention_note"] is None and "no query/key drift" not in r.stderr
    att = got["attention"]
    assert [a["run_key"] for a in att] == [res["manifest"]["cache_key"] for res in got["results"]]
    assert all(a["n_blocks"] == 2 and a["n_heads"] == 2 and a["causal"] for a in att)
    drift = [tuple(round(h, 6) for row in a["layers"] for h in row["q_drift"]) for a in att]
    assert len(set(drift)) == 3 and all(0 < h < 1 for d in drift for h in d)
    assert got["summary"]["qk"] and any("Query/key drift" in line for line in got["summary"]["findings"])
    assert (cache / "hub-series" / "test-org--tiny-neox.json").exists()
    # the Dynamics views of it: no losses (no loss curve, no loss sentence), revisions in the subtitle
    from core.views import dynamics as D

    ser = {k: got[k] for k in ("run", "record", "steps", "results", "attention")}
    assert not D.has_loss(ser) and got["summary"]["held_out_loss_first"] is None
    assert not any("loss" in line for line in got["summary"]["findings"])
    assert "hub revisions step0, step1, step2" in D.metric_heatmap(ser, "mean_cosine").figure.layout.title.subtitle.text
    assert D.has_attention(ser)
    for view in (D.cosine_curves(ser), D.outlier_counts(ser), *(D.qk_drift(ser, st) for st in D.DRIFT_STATS)):
        assert view.figure is not None and len(view.data)
    # again, by the series' name: everything comes from the cache, checkpoint by checkpoint
    r = _run(hf_home, "series", "--run", "hub:" + HUB_ID, "--corpus", str(corpus), "--max-tokens", "400",
             "--sample", "100", "--cache-dir", str(cache), "--quiet", "--out", str(out))
    assert r.returncode == 0, r.stderr
    again = json.loads(out.read_text())
    assert all(res["manifest"]["cache_hit"] for res in again["results"])
    assert all(a["cache_hit"] for a in again["attention"]) and again["attention_note"] is None
    from huggingface_hub import constants

    from core import series

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))  # this process's hub cache
    assert series.cached_steps("hub:" + HUB_ID, cache_dir=cache, corpus=str(corpus), max_tokens=400,
                               sample=100) == [0, 1, 2]
    # a revision that the local hub cache does not hold, offline: one clear line, nothing loaded
    r = _run(hf_home, "series", "--hub", HUB_ID, "--revisions", "step0,step9", "--cache-dir", str(cache),
             "--quiet", "--out", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error:") and "step9" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_series_of_an_architecture_without_attention_statistics(hf_home, tmp_path):
    """Bloom's fused query_key_value is not among core.attention's layouts: the series is analysed
    without query/key drift, says why, and counts as complete without it; the record keeps why, with
    the attention code's version (another version of that code tries again)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"Document {i} says the dog sat on a rug, then slept." for i in range(30)))
    cache, out = tmp_path / "cache", tmp_path / "series.json"
    r = _run(hf_home, "series", "--hub", OTHER_ID, "--revisions", "step0,step1", "--corpus", str(corpus),
             "--max-tokens", "200", "--sample", "50", "--cache-dir", str(cache), "--quiet", "--out", str(out))
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["steps"] == [0, 1] and len(got["results"]) == 2
    assert got["attention"] is None and "BloomAttention" in got["attention_note"]
    assert "not available" in got["attention_note"] and "no query/key drift" in r.stderr
    rec = hub_series.read("hub:" + OTHER_ID, cache)
    assert hub_series.no_attention(rec) == got["attention_note"]
    assert hub_series.no_attention({**rec, "no_attention_code": "an older version"}) is None


@pytest.mark.slow
def test_a_revision_with_the_same_weights_as_another_is_flagged_and_analysed_once(hf_home, tmp_path):
    """Checkpoint integrity: the weights of every revision are hashed when the series is made; a revision
    that repeats an earlier step's weights is named (record, CLI output, findings) and not analysed as a
    distinct step."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"Document {i} says the cat sat on the mat." for i in range(30)))
    cache, out = tmp_path / "cache", tmp_path / "series.json"
    r = _run(hf_home, "series", "--hub", DUP_ID, "--revisions", "step0,step1,step2", "--corpus", str(corpus),
             "--max-tokens", "200", "--sample", "50", "--cache-dir", str(cache), "--quiet", "--out", str(out))
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    ck = got["record"]["checkpoints"]
    assert all(len(c["weights_sha256"]) == 64 for c in ck)
    assert ck[1]["weights_sha256"] == ck[2]["weights_sha256"] != ck[0]["weights_sha256"]
    assert got["record"]["integrity"]["duplicates"] == got["duplicates"]
    assert [(d["step"], d["same_as"], d["revision"]) for d in got["duplicates"]] == [(2, 1, "step2")]
    assert got["steps"] == [0, 1] and len(got["results"]) == 2
    assert "same weights as revision step1" in got["summary"]["findings"][0]
    assert "same weights as revision step1" in r.stderr
