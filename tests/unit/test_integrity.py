"""Checkpoint integrity (core/base/integrity.py): identical weights give one digest, and a series names
the checkpoints that repeat an earlier step instead of analysing them as distinct steps."""

from __future__ import annotations

import hashlib

from core.base import integrity as I


def test_digest_is_of_the_weight_files_only_in_name_order():
    a = I.weights_digest({"model.safetensors": "aa", "config.json": "cc"})
    assert a == I.weights_digest({"model.safetensors": "aa"}) == I.weights_digest({"x/model.safetensors": "aa"})
    assert a != I.weights_digest({"model.safetensors": "ab"})
    two = I.weights_digest({"b.safetensors": "2", "a.safetensors": "1"})
    assert two == I.weights_digest({"a.safetensors": "1", "b.safetensors": "2"})
    assert I.weights_digest({"config.json": "cc", "training_args.bin": "dd"}) is None


def test_folder_digest_reads_the_bytes(tmp_path):
    for name, data in (("a", b"w1"), ("b", b"w1"), ("c", b"w2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(data)
        (tmp_path / name / "config.json").write_text(name)  # not part of the weights
    d = {n: I.folder_digest(tmp_path / n) for n in "abc"}
    assert d["a"] == d["b"] != d["c"]
    assert d["a"] == I.weights_digest({"model.safetensors": hashlib.sha256(b"w1").hexdigest()})
    assert I.folder_digest(tmp_path / "missing") is None


def test_duplicate_steps_point_at_the_earliest_same_weights():
    ck = [{"step": 4, "weights_sha256": "x", "revision": "step4"}, {"step": 0, "weights_sha256": "a"},
          {"step": 2, "weights_sha256": "x", "revision": "step2"}, {"step": 8, "weights_sha256": "x"},
          {"step": 16, "weights_sha256": None}, {"step": 32}]
    assert I.duplicate_steps(ck) == {4: 2, 8: 2}
    notes = I.duplicate_notes(ck)
    assert [(n["step"], n["same_as"]) for n in notes] == [(4, 2), (8, 2)]
    assert notes[0]["same_as_revision"] == "step2"
    line = I.describe_duplicate(notes[0])
    assert "step4 (step 4)" in line and "step2 (step 2)" in line and "same weights" in line and "left out" in line


def test_a_trained_series_leaves_out_a_checkpoint_that_repeats_another(tmp_path):
    """A tiny trained run (records only: no model is loaded) whose step-2 checkpoint holds the same
    weights as step 1: the series has steps 0, 1 and names step 2 as a repeat of step 1."""
    import json

    from core.studies import series

    run = tmp_path / "trained" / "dup"
    ck = []
    for step, data in ((0, b"w0"), (1, b"w1"), (2, b"w1")):
        (run / f"step-{step}").mkdir(parents=True)
        (run / f"step-{step}" / "model.safetensors").write_bytes(data)
        ck.append({"step": step, "model": f"trained/dup@step-{step}"})
    ck[0]["sha256"] = hashlib.sha256(b"w0").hexdigest()  # as core/studies/training.py records it; the others from the folder
    (run / "run.json").write_text(json.dumps({"run": "dup", "checkpoints": ck,
                                              "spec": {"corpus": "wiki-en", "seq_len": 64}}))
    assert [s for s, _ in series.series_specs("dup", cache_dir=tmp_path)] == [0, 1]
    assert [(d["step"], d["same_as"]) for d in series.duplicates("dup", cache_dir=tmp_path)] == [(2, 1)]
