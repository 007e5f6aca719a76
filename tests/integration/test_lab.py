"""The lab (core/studies/lab.py) end to end on tiny trainings: lab.json has every field, its effects equal a hand
computation from the per-run numbers, a cancelled lab job keeps its finished runs and resumes without retraining
them, and the CLI prints the table (or one error line)."""

from __future__ import annotations

import json

import jobkinds  # noqa: F401 - registers cancel-at
import numpy as np
import pytest
from job_helpers import wait_done

from core.entry import jobs
from core.studies import lab as LAB

LETTERS = "abcdefghijklmnopqrstuvwxyz"
CANCEL_BOUND_S = 5.0


@pytest.fixture(scope="module")
def cycle_corpus(tmp_path_factory):
    """Documents that walk the alphabet from a random letter: the next token follows from the last one, so a tiny
    model gets below the unigram entropy in 20 steps (a run that learned)."""
    rng = np.random.default_rng(0)
    docs = []
    for _ in range(300):
        s, n = int(rng.integers(26)), int(rng.integers(10, 40))
        docs.append(" ".join(LETTERS[(s + i) % 26] for i in range(n)))
    path = tmp_path_factory.mktemp("corpus") / "cycle.txt"
    path.write_text("\n\n".join(docs))
    return str(path)


def tiny_base(corpus, **kw) -> dict:
    return {
        "corpus": corpus,
        "n_layers": 2,
        "d_model": 32,
        "n_heads": 2,
        "seq_len": 16,
        "batch_size": 8,
        "steps": 20,
        "vocab_size": 512,
        "eval_tokens": 256,
        "device": "cpu",
        **kw,
    }


def tiny_lab(corpus, **kw) -> LAB.LabSpec:
    return LAB.LabSpec(
        factors={"arch": ["gpt2", "llama"]},
        seeds=(0, 1),
        base=tiny_base(corpus),
        lr=1.5e-2,
        analysis_tokens=300,
        analysis_sample=100,
        **kw,
    )


@pytest.fixture(scope="module")
def done_lab(cycle_corpus, tmp_path_factory):
    cache = tmp_path_factory.mktemp("labcache")
    seen = []
    doc = LAB.run_lab(tiny_lab(cycle_corpus), cache_dir=cache, progress=seen.append)
    return doc, cache, seen


@pytest.mark.fast
def test_lab_json_has_every_field(done_lab):
    doc, cache, seen = done_lab
    assert doc["kind"] == "lab" and doc["version"] == 1 and doc["status"] == "done"
    assert LAB.list_labs(cache) == [doc["id"]] and LAB.load_lab(doc["id"], cache) == doc  # stored as returned
    assert set(doc["spec"]) >= {"factors", "seeds", "base", "thresholds", "mid_layer"}
    assert doc["spec"]["factors"] == {"arch": ["gpt2", "llama"]} and doc["spec"]["seeds"] == [0, 1]
    assert [c["cell"] for c in doc["cells"]] == ["arch=gpt2", "arch=llama"]
    for cell in doc["cells"]:
        assert [r["seed"] for r in cell["runs"]] == [0, 1]
        for r in cell["runs"]:
            assert r["status"] == "done" and r["spec"]["arch"] == cell["levels"]["arch"]
            assert r["params"]["total"] > 0 and r["lr"] == 1.5e-2 and r["lr_source"]
            assert r["held_out_loss"] > 0 and r["unigram_entropy"] > 0
            assert r["learned"] == (r["held_out_loss"] < r["unigram_entropy"])
            assert r["steps"] == [0, 1, 2, 4, 8, 16, 20] and len(r["mid_mean_cosine_by_step"]) == 7
            f = r["final"]
            assert f["layers"] == [0, 1, 2] and r["mid_layer"] == 1
            for k in (
                "mean_cosine",
                "centred_mean_cosine",
                "input_shared",
                "massive_ratio",
                "outlier_dims",
                "sink_share",
                "sink_rate",
            ):
                assert len(f[k]) == 3, k
            assert f["input_shared"][1] == pytest.approx(f["mean_cosine"][1] - f["centred_mean_cosine"][1])
            assert f["sink_share"][0] is None and 0 <= f["sink_share"][1] <= 1  # the embeddings have no attention
            assert r["scalars"]["mid_mean_cosine"] == f["mean_cosine"][1] == r["mid_mean_cosine_by_step"][-1]
            assert r["scalars"]["max_massive_ratio"] == max(f["massive_ratio"][1:])
            for t in ("0.2", "0.5"):
                want = next((s for s, v in zip(r["steps"], r["mid_mean_cosine_by_step"]) if v >= float(t)), None)
                assert r["first_crossing"][t] == want
            assert r["not_applicable"] == {}  # both have attention
        assert set(cell["summary"]) >= set(LAB.SCALARS) | {"mean_cosine_by_layer", "first_crossing"}
    assert {c["id"] for c in doc["claims"]} == {"non_transformer_anisotropic", "coupled_adam_lowers", "gate_removes_massive"}
    assert all(c["verdict"] == "not tested" and "python -m core lab" in c["why"] for c in doc["claims"])
    runs = [r for c in doc["cells"] for r in c["runs"]]
    assert sum(r["learned"] for r in runs) >= 2, [(r["held_out_loss"], r["unigram_entropy"]) for r in runs]
    msgs = [p.message for p in seen]
    assert any(m.startswith("run 3 of 4: llama / seed 0, step ") for m in msgs)
    assert any(m.startswith("run 4 of 4: llama / seed 1, analysis, checkpoint ") for m in msgs)


@pytest.mark.fast
def test_effects_and_summaries_equal_a_hand_computation(done_lab):
    from scipy import stats

    from core.inputs import checkpoints as trained
    from core.studies import training

    doc, cache, _ = done_lab
    by = {(c["levels"]["arch"], r["seed"]): r for c in doc["cells"] for r in c["runs"]}

    def emb(r):  # read back from the saved weights of the run's last checkpoint, not from the scalars
        rec = trained.read_run(r["run"], cache)
        return training.checkpoint_embedding_mean_cosine(rec, rec["checkpoints"][-1]["step"], cache)

    for stat in LAB.EFFECT_STATS:
        e = next(e for e in doc["effects"] if e["statistic"] == stat)
        assert (e["factor"], e["from"], e["to"]) == ("arch", "gpt2", "llama")
        per = [by["llama", s]["final"] for s in (0, 1)]  # read the per-layer numbers, not the scalars
        deltas = []
        for s in (0, 1):
            a, b = by["gpt2", s], by["llama", s]
            if not (a["learned"] and b["learned"]):
                continue
            if stat == "max_massive_ratio":
                va, vb = max(a["final"]["massive_ratio"][1:]), max(b["final"]["massive_ratio"][1:])
            elif stat == "embedding_mean_cosine":
                va, vb = emb(a), emb(b)
            else:
                key = "mean_cosine" if stat == "mid_mean_cosine" else "centred_mean_cosine"
                va, vb = a["final"][key][1], b["final"][key][1]
            deltas.append(vb - va)
        assert per and e["n"] == len(deltas)
        if deltas:
            assert e["delta"] == pytest.approx(np.mean(deltas))
        if len(deltas) == 2:
            lo, hi = stats.t.interval(0.95, 1, loc=np.mean(deltas), scale=stats.sem(deltas))
            assert (e["lo"], e["hi"]) == pytest.approx((lo, hi))
        else:
            assert e["lo"] is None
    for cell in doc["cells"]:
        good = [r for r in cell["runs"] if r["learned"]]
        s = cell["summary"]["held_out_loss"]
        assert s["n"] == len(good) and [x["seed"] for x in cell["excluded"]] == [
            r["seed"] for r in cell["runs"] if not r["learned"]
        ]
        if good:
            assert s["mean"] == pytest.approx(np.mean([r["held_out_loss"] for r in good]))
            layer2 = cell["summary"]["mean_cosine_by_layer"]["mean"][2]
            assert layer2 == pytest.approx(np.mean([r["final"]["mean_cosine"][2] for r in good]))


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    return tmp_path


@pytest.mark.slow
def test_a_cancelled_lab_job_keeps_its_finished_runs_and_resumes_without_retraining_them(here, cycle_corpus, monkeypatch):
    from core.studies import series, training

    spec = LAB.LabSpec(
        factors={"arch": ["gpt2"]},
        seeds=(0, 1),
        base=tiny_base(cycle_corpus, steps=300),
        analysis_tokens=300,
        analysis_sample=100,
    )
    params = {"lab": spec.to_dict()}
    marker = here / "pressed.txt"
    probe = {"kind": "lab", "params": params, "stage": "train", "done": 5, "message": "run 2 of 2", "marker": str(marker)}
    job = wait_done(jobs.run_here("cancel-at", probe), timeout=180)
    took = job.finished - float(marker.read_text())
    assert job.status == jobs.CANCELLED and took < CANCEL_BOUND_S, (job.status, job.error, took)
    doc = LAB.load_lab(spec.lab_id)
    assert doc["status"] == "cancelled" and [r["status"] for r in doc["cells"][0]["runs"]] == ["done", "cancelled"]
    first = doc["cells"][0]["runs"][0]
    assert first["final"]["mean_cosine"] and doc["progress"] == {"done": 1, "total": 2}

    calls = {"train": [], "series": []}
    real_train, real_series = training._train, series.analyze_series

    def counting_train(spec_, run, *a, **k):
        calls["train"].append(run)
        return real_train(spec_, run, *a, **k)

    def counting_series(run, *a, **k):
        calls["series"].append(run)
        return real_series(run, *a, **k)

    monkeypatch.setattr(training, "_train", counting_train)
    monkeypatch.setattr(series, "analyze_series", counting_series)
    job = wait_done(jobs.run_here("lab", params), timeout=180)
    assert job.status == jobs.DONE, job.error
    second = doc["cells"][0]["runs"][1]["run"]
    assert calls == {"train": [second], "series": [second]}  # the finished run neither retrained nor reanalysed
    done = LAB.load_lab(spec.lab_id)
    assert done["status"] == "done" and done["cells"][0]["runs"][0] == first
    rec = json.loads((here / "cache" / "trained" / second / "run.json").read_text())
    assert rec["status"] == "done" and 0 < rec["timing"]["steps"] < 300  # resumed from its Trainer checkpoint


@pytest.mark.fast
def test_cli_lab_errors_are_one_line(tmp_path, capsys):
    from core.entry.cli import main

    for argv, want in (
        (["--factor", "arch=gpt2,nope"], "Factor arch has no level 'nope'"),
        (["--factor", "arch"], "write NAME=LEVEL,LEVEL"),
        ([], "Give at least one --factor"),
        (["--factor", "arch=gpt2", "--factor", "norm=pre,post"], "both set the training's 'arch'"),
        (["--factor", "arch=gpt2,llama", "--seeds", "two"], "--seeds 'two'"),
        (["--factor", "arch=gpt2", "--d-model", "30"], "multiple of n_heads"),
    ):
        assert main(["lab", *argv, "--cache-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and want in err and err.count("\n") == 1, err
    assert not (tmp_path / "trained").exists()


@pytest.mark.slow
def test_cli_lab_prints_the_effects_and_writes_lab_json(done_lab, cycle_corpus, tmp_path, capsys):
    from core.entry.cli import main

    doc, cache, _ = done_lab
    out = tmp_path / "lab.json"
    base = tiny_base(cycle_corpus)
    argv = [
        "lab",
        "--factor",
        "arch=gpt2,llama",
        "--seeds",
        "2",
        "--steps",
        "20",
        "--layers",
        "2",
        "--d-model",
        "32",
        "--heads",
        "2",
        "--seq-len",
        "16",
        "--batch-size",
        "8",
        "--vocab-size",
        "512",
        "--eval-tokens",
        "256",
        "--corpus",
        base["corpus"],
        "--device",
        "cpu",
        "--lr",
        "1.5e-2",
        "--analysis-tokens",
        "300",
        "--analysis-sample",
        "100",
        "--cache-dir",
        str(cache),
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    got = json.loads(out.read_text())
    assert got["id"] == doc["id"] and got["effects"] == doc["effects"]  # the same lab: every run reused
    printed = capsys.readouterr().out
    assert "Main effects" in printed and "gpt2 -> llama" in printed and "Claims:" in printed
    row = next(line for line in printed.splitlines() if "mid_mean_cosine" in line and "centred" not in line)
    e = next(e for e in doc["effects"] if e["statistic"] == "mid_mean_cosine")
    assert (f"{e['delta']:.3f}" if e["delta"] is not None else "n/a") in row


@pytest.mark.fast
def test_a_run_that_fails_is_said_and_the_others_go_on(done_lab, cycle_corpus, monkeypatch):
    """Another lab over the same runs reuses them from the cache (no training); a failing family is listed with its
    error, left out of the effects, and the lab still finishes."""
    from core.studies import training

    _, cache, _ = done_lab
    real_train, trained = training.train, []

    def train(spec, *a, **k):
        if spec.arch == "llama":
            raise RuntimeError("boom in the model")
        return real_train(spec, *a, **k)

    monkeypatch.setattr(training, "train", train)
    monkeypatch.setattr(training, "_train", lambda *a, **k: trained.append(a) or pytest.fail("retrained"))
    doc = LAB.run_lab(tiny_lab(cycle_corpus, thresholds=(0.3,)), cache_dir=cache)
    assert doc["status"] == "done" and not trained
    gpt2, llama = doc["cells"]
    assert [r["status"] for r in gpt2["runs"]] == ["done", "done"]
    assert [r["status"] for r in llama["runs"]] == ["failed", "failed"]
    assert llama["excluded"] == [{"seed": s, "why": "failed: RuntimeError: boom in the model"} for s in (0, 1)]
    assert all(e["delta"] is None and e["n"] == 0 for e in doc["effects"])
    assert gpt2["runs"][0]["first_crossing"].keys() == {"0.3"}


def test_a_stored_lab_without_the_embedding_number_gets_it_from_the_weights(done_lab, cycle_corpus, monkeypatch):
    """A lab.json written before runs kept the input embedding matrix's mean cosine: running the lab again adds it to
    each finished run (read back from the saved weights, equal to the run record's), retraining nothing."""
    from core.inputs import checkpoints as trained
    from core.studies import training

    doc, cache, _ = done_lab
    old = LAB.load_lab(doc["id"], cache)
    for c in old["cells"]:
        for r in c["runs"]:
            r["scalars"].pop("embedding_mean_cosine")
            rec = trained.read_run(r["run"], cache)
            rec["checkpoints"][-1].pop("embedding_mean_cosine")  # as a run trained before records held it
            trained.write_run(r["run"], rec, cache)
    LAB.save_lab(old, cache)
    monkeypatch.setattr(training, "_train", lambda *a, **k: pytest.fail("retrained"))
    again = LAB.run_lab(tiny_lab(cycle_corpus), cache_dir=cache)
    for c, c0 in zip(again["cells"], doc["cells"]):
        for r, r0 in zip(c["runs"], c0["runs"]):
            assert r["scalars"]["embedding_mean_cosine"] == pytest.approx(r0["scalars"]["embedding_mean_cosine"], abs=1e-6)
