"""A researcher's own model from the hub, against the loopback hub (tests/hub_server.py) with the real
huggingface_hub client: sized before it is fetched, its revisions resolved to commits and recorded, every refusal
one line that says what to do, pickles and remote code only with their opt-ins. Nothing of huggingface_hub or
transformers is mocked."""

from __future__ import annotations

import json
import socket
import subprocess

import numpy as np
import pytest
from foundation_helpers import ROOT, cli_cmd, cli_env

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute import pipeline
from core.inputs import hub_fetch, models
from core.inputs.hub import resolve
from tests.hub_fixtures import forget
from tests.hub_repos import GRANTED_TOKEN, OTHER_TOKEN


def _cli(hub, *args, **env):
    e = cli_env(**hub.env, **env)
    e.pop("HF_HUB_OFFLINE")
    return subprocess.run(cli_cmd(*args), cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)


def _header_parameters(path) -> dict:
    """{dtype: parameters} read from a safetensors file's own header here (8-byte length, then JSON)."""
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    out: dict = {}
    for k, v in header.items():
        if k != "__metadata__":
            out[v["dtype"]] = out.get(v["dtype"], 0) + int(np.prod(v["shape"], dtype=np.int64))
    return out


def test_model_info_sizes_a_model_before_its_weights_are_fetched(hub):
    repo = hub.server.repos["testorg/minilm"]
    commit = repo.branches["main"]
    r = _cli(hub, "model-info", "testorg/minilm", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    files = repo.commits[commit]
    expect = _header_parameters(files["model.safetensors"].source)
    n = sum(expect.values())
    small = sorted(p for p in files if p.endswith((".json", ".txt")))
    assert got["id"] == "testorg/minilm" and got["commit"] == commit and got["dtype"] == "float32"
    assert sorted(f["path"] for f in got["files"]) == sorted(small + ["model.safetensors"])  # not README, .gitattributes
    assert got["bytes"] == sum(files[f["path"]].size for f in got["files"])
    assert got["n_params"] == n == 22_713_728 and got["stored_dtypes"] == expect
    assert got["memory_bytes"] == int(n * 4 * hub_fetch.MEMORY_MARGIN) and got["fits"] is True
    assert got["reason"].startswith("fits:")
    assert got["summary"] == "found: 23M parameters, 91 MB safetensors, needs ~0.1 GB at float32"
    # what was fetched: the listing, config.json, and the first 100 kB of the weights (their header)
    weights = [q for q in hub.server.downloads("testorg/minilm", "model.safetensors")]
    assert [q["range"] for q in weights] == ["bytes=0-100000"] and weights[0]["sent"] == 100_001
    assert {q["file"] for q in hub.server.downloads()} == {"config.json", "model.safetensors"}
    # the same at bfloat16 (in this process): half the memory; a server's cap refuses with the numbers
    plan = hub_fetch.plan_of("testorg/minilm")
    assert hub_fetch.size_report(plan, "bfloat16")["memory_bytes"] == int(n * 2 * hub_fetch.MEMORY_MARGIN)
    r = _cli(hub, "model-info", "testorg/minilm", "--json", ANISO_MAX_MODEL_GB="0.05")
    capped = json.loads(r.stdout)
    assert r.returncode == 1 and capped["fits"] is False and capped["max_model_bytes"] == 50_000_000
    assert "91 MB" in capped["reason"] and "50 MB" in capped["reason"] and "ANISO_MAX_MODEL_GB" in capped["reason"]


def test_a_model_that_does_not_fit_is_refused_before_its_weights(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_MAX_MODEL_GB", "0.05")
    corpus = tmp_path / "c.txt"
    corpus.write_text("Some text about cats.\n\nAnother document about dogs.\n")
    with pytest.raises(InputError, match=r"not fetched: .*91 MB.*over this server's cap of 50 MB \(ANISO_MAX_MODEL_GB\)"):
        pipeline.analyze(RunSpec(model="testorg/minilm", corpus=str(corpus), max_tokens=50, device="cpu"),
                         cache_dir=tmp_path / "cache")
    assert [q["range"] for q in hub.server.downloads(path="model.safetensors")] == ["bytes=0-100000"]


@pytest.mark.slow
def test_revisions_resolve_to_commits_that_the_manifest_records(hub, tmp_path, cache_dir):
    """step0 holds MiniLM's own weights: through the hub its numbers are the built-in minilm-l6's, exactly;
    step1000 (= main) holds other weights."""
    repo = hub.server.repos["testorg/minilm"]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(f"Document {i}: the cat sat on the mat and looked at the {w}." for i, w in
                                  enumerate(["door", "tree", "sky", "dog", "window", "river"] * 5)))

    def run(model, cache):
        return pipeline.analyze(RunSpec(model=model, corpus=str(corpus), max_tokens=300, sample=64, device="cpu",
                                        dtype="float32"), cache_dir=cache)

    step0, step1000, main = (run(m, tmp_path / "cache") for m in
                             ("testorg/minilm@step0", "testorg/minilm@step1000", "testorg/minilm"))
    builtin = run("minilm-l6", cache_dir)
    m0, m1, mm = (r["manifest"]["model"] for r in (step0, step1000, main))
    assert (m0["commit"], m0["revision"]) == (repo.tags["step0"], "step0")
    assert (m1["commit"], mm["commit"]) == (repo.branches["step1000"], repo.branches["main"]) and m1["commit"] != m0["commit"]
    cos = {k: [row["mean_cosine"] for row in r["layers"]] for k, r in
           (("step0", step0), ("step1000", step1000), ("main", main), ("builtin", builtin))}
    assert cos["step0"] == cos["builtin"] and cos["step1000"] == cos["main"] != cos["step0"]
    # main and step1000 are one commit: its weights were fetched once
    assert len([q for q in hub.server.downloads("testorg/minilm", "model.safetensors") if not q["range"]]) == 2
    assert (hub.home / "hub" / "models--testorg--minilm" / "refs" / "step1000").read_text() == m1["commit"]


def test_refusals_say_what_to_do(hub, monkeypatch):
    suggest = list(models.BUILTIN_MODELS)
    cases = {
        "minilm-l": "No such model 'minilm-l' on the hub .*closest built-in models: minilm-l6",
        "testorg/no-such-model": "No such model 'testorg/no-such-model' on the hub",
        "testorg/minilm@step9": r"no revision 'step9': its branches are main, step1000; its tags step0",
        "testorg/gated-minilm": r"is gated: it needs access; .*set HF_TOKEN",
        "testorg/no-weights": r"has no weights transformers can load .*nothing to analyse",
        "testorg/tiny-custom": r"ships its own Python code \(auto_map.*--trust-remote-code.*ANISO_ALLOW_REMOTE_CODE=1",
        "testorg/tiny-bin": r"only pickled weights .*ANISO_ALLOW_PICKLE=1 \(never on a shared server",
    }
    for ident, message in cases.items():
        with pytest.raises(InputError, match=message):
            hub_fetch.plan_of(ident, suggest=suggest)
    monkeypatch.setenv("HF_TOKEN", OTHER_TOKEN)
    with pytest.raises(InputError, match="gated and the token in HF_TOKEN has no access to it: request access"):
        hub_fetch.plan_of("testorg/gated-minilm")
    monkeypatch.setenv("HF_TOKEN", GRANTED_TOKEN)
    assert hub_fetch.plan_of("testorg/gated-minilm").n_params == 22_713_728
    gated = [q for q in hub.server.requests if q["repo"] == "testorg/gated-minilm" and q["kind"] == "file"]
    assert [q["status"] for q in gated][:2] == [401, 403] and gated[-1]["status"] in (200, 206)


def test_through_the_cli_one_error_line(hub, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("A short text.\n")
    r = _cli(hub, "analyze", "--model", "testorg/gated-minilm", "--corpus", corpus, "--cache-dir", tmp_path / "cache",
             "--out", tmp_path / "r.json", "--quiet")
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: Model testorg/gated-minilm is gated: it needs access") and "HF_TOKEN" in r.stderr
    assert not (tmp_path / "r.json").exists()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_unreachable_hub_says_what_is_cached_and_uses_it(hub, monkeypatch, tmp_path):
    got = hub_fetch.fetch("testorg/tiny-bert", cache_dir=tmp_path / "cache")
    commit = hub.server.repos["testorg/tiny-bert"].branches["main"]
    assert got.commit == commit and (got.folder / "model.safetensors").exists()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("ANISO_HUB_TIMEOUT_S", "1")
    forget()
    rev = resolve("testorg/tiny-bert")  # the cached revision: the run goes on without the hub
    assert (rev.commit, rev.source) == (commit, "cache")
    lm = models.load_model("testorg/tiny-bert", cache_dir=tmp_path / "cache")
    assert lm.info["commit"] == commit
    with pytest.raises(InputError) as e:
        resolve("testorg/tiny-bert@v2")
    msg = str(e.value)
    assert "cannot be reached from here" in msg and f"holds testorg/tiny-bert at main ({commit[:12]})" in msg
    with pytest.raises(InputError, match="holds nothing of testorg/minilm"):
        resolve("testorg/minilm")


def test_pickled_weights_and_remote_code_only_with_their_opt_ins(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("ANISO_ALLOW_PICKLE", "1")
    monkeypatch.setenv("ANISO_SHARED", "1")  # a shared server refuses pickles whatever ANISO_ALLOW_PICKLE says
    with pytest.raises(InputError, match="only pickled weights"):
        hub_fetch.plan_of("testorg/tiny-bin")
    monkeypatch.delenv("ANISO_SHARED")
    lm = models.load_model("testorg/tiny-bin", cache_dir=tmp_path / "cache")
    assert type(lm.model).__name__ == "BertModel" and lm.info["commit"]
    assert [q["file"] for q in hub.server.downloads("testorg/tiny-bin") if q["file"].endswith(".bin")] == \
        ["pytorch_model.bin"]
    with pytest.raises(InputError, match="ships its own Python code"):
        models.load_model("testorg/tiny-custom", cache_dir=tmp_path / "cache")
    assert not hub.server.downloads("testorg/tiny-custom", "modeling_tiny.py")  # its code is not even fetched
    lm = models.load_model("testorg/tiny-custom", cache_dir=tmp_path / "cache", trust_remote_code=True)
    assert type(lm.model).__name__ == "TinyCustomModel"
    # a job's trust_remote_code is the worker's to allow (ANISO_ALLOW_REMOTE_CODE), as a URL's hub id is its
    from core.base.settings import current
    from core.inputs.access import check_job_params, check_model

    with pytest.raises(InputError, match="ANISO_ALLOW_REMOTE_CODE=1"):
        check_job_params({"spec": RunSpec(model="testorg/tiny-custom", trust_remote_code=True).to_dict()})
    monkeypatch.setenv("ANISO_SHARED", "1")
    with pytest.raises(InputError, match="hub identifiers .*switched off"):
        check_model("testorg/tiny-custom", current())
