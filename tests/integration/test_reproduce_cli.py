"""`python -m core reproduce` on tiny settings: one random-init model at 64 positions and the drift experiment
(a few seconds). Its run is an ordinary analysis (same cache key, same numbers), its record is cached, and
every figure and table is written through the export path."""

import json

from core.cli import main
from core.papers import claims as C
from core.pipeline import analyze
from core.spec import RunSpec

ARGS = ["--models", "untrained-minilm-l6", "--max-tokens", "64", "--sample", "32", "--quiet"]


def test_reproduce_godey_tiny(tmp_path, cache_dir, capsys):
    out = tmp_path / "out"
    rc = main(["reproduce", "godey", *ARGS, "--cache-dir", str(cache_dir), "--out", str(out), "--formats", "html,csv"])
    err = capsys.readouterr().err
    assert rc == 0, err
    rec = json.loads((out / "godey.json").read_text())
    assert [r["model"] for r in rec["runs"]] == ["untrained-minilm-l6"]
    res = analyze(RunSpec(model="untrained-minilm-l6", corpus="wiki-en", max_tokens=64, sample=32), cache_dir=cache_dir)
    assert res["manifest"]["cache_hit"]  # the reproduction's run is the analysis of the same spec
    assert rec["runs"][0]["curves"]["mean_cosine"] == [lay["mean_cosine"] for lay in res["layers"]]
    verdicts = {c["claim"]: c["verdict"] for c in rec["claims"]}
    assert verdicts["Trained Transformers are anisotropic (text)"] == C.UNTESTED  # no trained model in this subset
    assert rec["drift"]["alphas"] and verdicts[C.drift_claims(rec["drift"])[0]["claim"]] in C.VERDICTS
    names = {p.name for p in out.iterdir()}
    assert {"godey_text__wiki-en.html", "godey_claims__wiki-en.csv", "drift_output_mean_cosine.html"} <= names
    assert "manifest" in (out / "godey_text__wiki-en.html").read_text()  # the export path: manifest inside
    rc = main(["reproduce", "godey", *ARGS, "--cache-dir", str(cache_dir)])
    assert rc == 0 and "cache hit" in capsys.readouterr().err
    rc = main(["reproduce", "godey", "--models", "gpt2", "--cache-dir", str(cache_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "not among the runs of godey" in err
