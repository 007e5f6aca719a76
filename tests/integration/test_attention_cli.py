"""`python -m core attention`, `analyze --attention` and `drift-experiment` from a subprocess."""

import json

import pytest
from foundation_helpers import run_cli


@pytest.mark.slow
def test_attention_command_and_analyze_flag(tmp_path, tiny_gpt2_dir, varied_txt):
    cache = tmp_path / "cache"
    common = ["--model", tiny_gpt2_dir, "--corpus", varied_txt, "--max-seq-len", "24", "--batch-size", "4",
              "--cache-dir", cache, "--quiet"]
    p = run_cli("analyze", *common, "--out", tmp_path / "plain.json")
    assert p.returncode == 0, p.stderr
    assert "attention" not in json.loads((tmp_path / "plain.json").read_text())
    p = run_cli("attention", *common, "--out", tmp_path / "att.json")
    assert p.returncode == 0, p.stderr
    assert "attention to the first position by block" in p.stderr
    att = json.loads((tmp_path / "att.json").read_text())["attention"]
    assert att["n_blocks"] == 2 and att["causal"] and not att["cache_hit"]
    p = run_cli("analyze", *common, "--attention", "--out", tmp_path / "both.json")
    assert p.returncode == 0, p.stderr
    both = json.loads((tmp_path / "both.json").read_text())
    assert both["manifest"]["cache_hit"] and both["attention"]["cache_hit"]  # neither recomputed
    assert both["attention"]["layers"] == att["layers"]
    assert both["layers"] == json.loads((tmp_path / "plain.json").read_text())["layers"]


@pytest.mark.slow
def test_drift_experiment_command(tmp_path):
    out = tmp_path / "drift.json"
    p = run_cli("drift-experiment", "--d", "32", "--heads", "2", "--seq-len", "8", "--alphas", "0,1,2",
                "--taus", "1", "--cache-dir", tmp_path / "c", "--out", out)
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert set(res["experiments"]) == {"query_key", "query", "key", "input"}
    cos = [row[0] for row in res["experiments"]["input"]["output_mean_cosine"]]
    assert cos == sorted(cos) and len(cos) == 3  # the baseline: anisotropic inputs, anisotropic output
    assert "- Queries and keys drifting" in p.stderr and "- Baseline, input drift" in p.stderr  # the verdicts, named
    p = run_cli("drift-experiment", "--taus", "0,x", "--out", out)
    assert p.returncode != 0 and p.stderr.startswith("error:") and "Traceback" not in p.stderr
    p = run_cli("drift-experiment", "--d", "30", "--heads", "4", "--out", out)
    assert p.returncode != 0 and "divisible" in p.stderr and "Traceback" not in p.stderr
