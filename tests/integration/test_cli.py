"""The headless interface: listings, results.json, and bad inputs (one `error:` line, no traceback)."""

import json
import math
import os
import shutil
import subprocess

import pandas as pd
import pytest
from foundation_helpers import ROOT, cli_cmd, cli_env, run_cli

from core.inputs.corpora import BUILTIN_CORPORA
from core.inputs.modalities import MODAL_CORPORA
from core.inputs.models import BUILTIN_MODELS

DESIGN_KEYS = ("layer", "n_tokens", "mean_cosine", "mean_cosine_ci", "cross_sequence_cosine",
               "intra_sentence_similarity", "self_similarity", "mean_norm", "pc1_variance_ratio", "effective_rank",
               "isoscore", "partition_isotropy", "outlier_dims", "cosine_contribution")


def _strict_json(text):
    def no_constants(name):
        raise AssertionError(f"results.json holds {name}: not strict JSON")
    return json.loads(text, parse_constant=no_constants)


def test_models_lists_every_registry_entry(tmp_path):
    r = run_cli("models", ANISO_CACHE_DIR=str(tmp_path))  # a fresh cache: no checkpoints trained by other tests
    assert r.returncode == 0, r.stderr
    listed = [line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith(("(", "#"))]
    by_modality = [k for m in ("text", "image", "audio") for k, e in BUILTIN_MODELS.items() if e.modality == m]
    assert listed == by_modality  # every model, grouped by modality under "# text", "# image", "# audio"
    assert [line for line in r.stdout.splitlines() if line.startswith("#")] == ["# text", "# image", "# audio"]
    assert "4-bit" in r.stdout  # SmolLM2's dequantized weights are stated


def test_corpora_lists_every_registry_entry():
    r = run_cli("corpora")
    assert r.returncode == 0, r.stderr
    listed = [line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith(("(", "#"))]
    by_modality = list(BUILTIN_CORPORA) + [k for m in ("image", "audio") for k, c in MODAL_CORPORA.items()
                                            if c.modality == m]
    assert listed == by_modality
    assert "--text-column" in r.stdout and "SYNTHETIC" in r.stdout  # synthetic speech is labelled


# ----------------------------------------------------------------------------- bad inputs
def _bad_inputs(d, tiny_bert_dir):
    """name -> (extra CLI args); every one must fail with one clear line."""
    (d / "empty.txt").write_text("")
    (d / "blank.md").write_text("\n\n   \n\t\n")
    (d / "binary.txt").write_bytes(b"GIF89a\x00\x01\x02" + bytes(range(256)) * 4)
    (d / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e".encode("latin-1"))
    (d / "doc.pdf").write_bytes(b"%PDF-1.4 whatever")
    (d / "a_folder").mkdir()
    pd.DataFrame({"id": [1, 2], "body": ["one text", "another text"]}).to_csv(d / "table.csv", index=False)
    pd.DataFrame({"id": [1, 2], "body": ["one text", "another text"]}).to_parquet(d / "table.parquet")
    (d / "config_only").mkdir()
    shutil.copy(tiny_bert_dir / "config.json", d / "config_only" / "config.json")
    (d / "no_tokenizer").mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert_dir / f, d / "no_tokenizer" / f)
    shutil.copytree(tiny_bert_dir, d / "bad_weights")
    (d / "bad_weights" / "model.safetensors").write_bytes(os.urandom(4000))
    (d / "ok.txt").write_text("A perfectly fine document.\n\nAnd another one.\n")
    os.mkfifo(d / "pipe.txt")  # would block a reader forever
    (d / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "also fine"}\n{"text": broken\n{"text": "ok"}\n')
    pd.DataFrame({"id": [1, 2], "score": [0.5, 0.7]}).to_parquet(d / "numbers.parquet")
    (d / "existing_dir").mkdir()
    m, ok = str(tiny_bert_dir), str(d / "ok.txt")
    return {
        "fifo as corpus": ["--model", m, "--corpus", str(d / "pipe.txt")],
        "unknown encoding": ["--model", m, "--corpus", str(d / "latin1.txt"), "--encoding", "nope-42"],
        "malformed jsonl": ["--model", m, "--corpus", str(d / "bad.jsonl"), "--text-column", "text"],
        "parquet without text": ["--model", m, "--corpus", str(d / "numbers.parquet"), "--text-column", "score"],
        "negative seed": ["--model", m, "--corpus", ok, "--seed", "-1"],
        "out is a folder": ["--model", m, "--corpus", ok, "--out", str(d / "existing_dir")],
        "out in a missing folder": ["--model", m, "--corpus", ok, "--out", str(d / "nowhere" / "r.json")],
        "uniform-random huge budget": ["--model", m, "--corpus", "uniform-random", "--max-tokens", str(10**12)],
        "n-random 0": ["outliers", "--model", m, "--corpus", ok, "--ablate", "--n-random", "0"],
        "dims not integers": ["outliers", "--model", m, "--corpus", ok, "--ablate", "--dims", "a,b,7"],
        "dims without ablate": ["outliers", "--model", m, "--corpus", ok, "--dims", "3,7"],
        "held-out tokens 0": ["outliers", "--model", m, "--corpus", ok, "--ablate", "--held-out-tokens", "0"],
        "unknown model": ["--model", "no-such-model", "--corpus", ok],
        "unknown hub model offline": ["--model", "someone/no-such-model", "--corpus", ok],
        "unknown corpus": ["--model", m, "--corpus", "no-such-corpus"],
        "missing file": ["--model", m, "--corpus", str(d / "missing.txt")],
        "empty file": ["--model", m, "--corpus", str(d / "empty.txt")],
        "blank file": ["--model", m, "--corpus", str(d / "blank.md")],
        "binary file": ["--model", m, "--corpus", str(d / "binary.txt")],
        "not utf-8": ["--model", m, "--corpus", str(d / "latin1.txt")],
        "unsupported type": ["--model", m, "--corpus", str(d / "doc.pdf")],
        "folder as corpus": ["--model", m, "--corpus", str(d / "a_folder")],
        "table without text column": ["--model", m, "--corpus", str(d / "table.csv")],
        "wrong text column": ["--model", m, "--corpus", str(d / "table.parquet"), "--text-column", "text"],
        "model folder without weights": ["--model", str(d / "config_only"), "--corpus", ok],
        "model folder without tokenizer": ["--model", str(d / "no_tokenizer"), "--corpus", ok],
        "unreadable weights": ["--model", str(d / "bad_weights"), "--corpus", ok],
        "missing model folder": ["--model", str(d / "nowhere" / "model"), "--corpus", ok],
        "zero budget": ["--model", m, "--corpus", ok, "--max-tokens", "0"],
    }


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory, tiny_bert_dir):
    """All bad-input runs started at once (they are independent), then collected."""
    d = tmp_path_factory.mktemp("bad")
    procs = {}
    for name, args in _bad_inputs(d, tiny_bert_dir).items():
        out = d / f"{name.replace(' ', '_')}.json"
        sub = args.pop(0) if args[0] == "outliers" else "analyze"
        cmd = cli_cmd(sub, "--cache-dir", d / "cache", "--out", out, *args)  # a case's own --out wins
        procs[name] = (subprocess.Popen(cmd, cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True), out)
    done = {}
    for name, (p, out) in procs.items():
        stdout, stderr = p.communicate(timeout=300)
        done[name] = (p.returncode, stdout, stderr, out)
    return done


BAD_NAMES = ["unknown model", "unknown hub model offline", "unknown corpus", "missing file", "empty file",
             "blank file", "binary file", "not utf-8", "unsupported type", "folder as corpus",
             "table without text column", "wrong text column", "model folder without weights",
             "model folder without tokenizer", "unreadable weights", "missing model folder", "zero budget",
             "fifo as corpus", "unknown encoding", "malformed jsonl", "parquet without text", "negative seed",
             "out is a folder", "out in a missing folder", "uniform-random huge budget", "n-random 0",
             "dims not integers", "dims without ablate", "held-out tokens 0"]
# These fail while the run reads its corpus or loads its model: the progress line of that step comes first.
PROGRESS_FIRST = {"unreadable weights", "empty file", "blank file", "binary file", "not utf-8", "unsupported type",
                  "table without text column", "wrong text column", "unknown encoding", "malformed jsonl",
                  "parquet without text"}
EXPECTED = {"unknown model": "no-such-model", "unknown corpus": "no-such-corpus", "missing file": "missing.txt",
            "empty file": "empty", "blank file": "empty", "binary file": "not a text file",
            "not utf-8": "UTF-8", "unsupported type": ".pdf", "folder as corpus": "folder",
            "table without text column": "--text-column", "wrong text column": "no column 'text'",
            "model folder without weights": "no weights", "model folder without tokenizer": "no tokenizer",
            "unreadable weights": "Could not load the weights", "missing model folder": "does not exist",
            "zero budget": "max_tokens", "unknown hub model offline": "offline",
            "fifo as corpus": "not a regular file", "unknown encoding": "unknown encoding",
            "malformed jsonl": "line 3", "parquet without text": "holds no text", "negative seed": "seed",
            "out is a folder": "is a folder", "out in a missing folder": "does not exist",
            "uniform-random huge budget": "at most", "n-random 0": "--n-random", "dims not integers": "'a'",
            "dims without ablate": "--ablate", "held-out tokens 0": "--held-out-tokens"}


def test_bad_input_cases_are_all_listed(tmp_path, tiny_bert_dir):
    assert set(_bad_inputs(tmp_path, tiny_bert_dir)) == set(BAD_NAMES) == set(EXPECTED)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_input_is_one_clear_error_line(bad_runs, name):
    rc, stdout, stderr, out = bad_runs[name]
    assert rc != 0
    assert "Traceback" not in stderr and "Traceback" not in stdout
    lines = [ln for ln in stderr.replace("\r", "\n").splitlines() if ln.strip()]
    if name in PROGRESS_FIRST:
        assert lines[:-1] and all(ln.startswith(("read:", "load:", "tokenize:")) for ln in lines[:-1]), stderr
        assert "\nerror: " in stderr  # the error starts a line of its own
    else:
        assert len(lines) == 1, stderr
    assert lines[-1].startswith("error: "), stderr
    assert EXPECTED[name].lower() in lines[-1].lower(), lines[-1]
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if ".tmp" in p.name]  # no stray temporary file


# ----------------------------------------------------------------------------- results.json
@pytest.fixture(scope="module")
def minilm_results(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("results") / "results.json"
    r = run_cli("analyze", "--model", "minilm-l6", "--corpus", "wiki-en", "--max-tokens", "4000",
                "--cache-dir", cache_dir, "--out", out, "--quiet")
    assert r.returncode == 0, r.stderr
    return _strict_json(out.read_text()), r


def test_results_json_manifest(minilm_results):
    res, r = minilm_results
    assert "Traceback" not in r.stderr
    assert "computed" in r.stderr or "cache hit" in r.stderr
    m = res["manifest"]
    assert len(m["model"]["fingerprint"]) >= 32 and m["model"]["id"] == "minilm-l6"
    assert len(m["corpus"]["sha256"]) == 64 and m["corpus"]["id"] == "wiki-en"
    t = m["tokens"]
    assert t["analysed"] >= 4000 and t["fed_to_model"] > t["analysed"] and t["content"] == t["analysed"]
    assert t["special_tokens"] == "exclude" and t["sample"] == min(5000, t["analysed"])
    assert m["device"] == "cpu" and m["dtype"] == "float32" and m["seed"] == 0
    for pkg in ("python", "torch", "transformers", "numpy", "core"):
        assert m["versions"][pkg], pkg
    assert m["spec"]["max_tokens"] == 4000 and m["spec"]["max_seq_len"] == 512
    assert m["corpus"]["n_documents"] >= 2 and m["corpus"]["n_windows"] >= m["corpus"]["n_documents"]


def test_results_json_layers(minilm_results):
    res, _ = minilm_results
    layers = res["layers"]
    assert [row["layer"] for row in layers] == list(range(7))
    for row in layers:
        for key in DESIGN_KEYS:
            assert key in row, key
        for key in ("mean_cosine", "cross_sequence_cosine", "intra_sentence_similarity", "self_similarity",
                    "mean_norm", "pc1_variance_ratio", "effective_rank", "isoscore", "partition_isotropy"):
            assert isinstance(row[key], float) and math.isfinite(row[key]), (row["layer"], key, row[key])
        assert row["n_tokens"] == res["manifest"]["tokens"]["analysed"]
        lo, hi = row["mean_cosine_ci"]
        assert math.isfinite(lo) and math.isfinite(hi) and lo <= hi
        assert all(isinstance(d, int) and 0 <= d < 384 for d in row["outlier_dims"])
        cc = row["cosine_contribution"]
        assert all(isinstance(d, int) for d in cc["dims"]) and all(math.isfinite(v) for v in cc["share"])
        assert 0 < row["pc1_variance_ratio"] <= 1 and 1 <= row["effective_rank"] <= 384
        assert 0 <= row["isoscore"] <= 1 and 0 <= row["partition_isotropy"] <= 1
    # a trained sentence encoder is anisotropic in its middle layers (Ethayarajh 2019)
    assert max(row["mean_cosine"] for row in layers) > 0.1
