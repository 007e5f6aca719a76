"""Training from scratch (core/studies/training.py), its checkpoints as models, and series analysis."""

import json

import numpy as np
import pytest

from core.base.errors import Cancelled, InputError
from core.inputs import checkpoints
from core.studies.train_spec import TrainSpec
from core.studies.training import build_data, byte_ids, bytes_tokenizer, checkpoint_schedule, make_tokenizer, train

WORDS = ("the cat dog sat ran on under a mat tree house quickly slowly red blue small big and then it was "
         "there here because of".split())


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    """~300 short documents of Zipf-distributed words with a little grammar (learnable)."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    docs = []
    for _ in range(300):
        n = int(rng.integers(8, 30))
        words = rng.choice(WORDS, size=n, p=p / p.sum())
        docs.append(" ".join(f"{w} the" if i % 3 == 0 else w for i, w in enumerate(words)) + ".")
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text("\n\n".join(docs))
    return str(path)


def tiny(corpus, **kw) -> TrainSpec:
    base = dict(corpus=corpus, n_layers=1, d_model=16, n_heads=2, seq_len=16, batch_size=4, steps=6,
                vocab_size=512, eval_tokens=256, lr=3e-3, device="cpu")
    return TrainSpec(**{**base, **kw})


# ----------------------------------------------------------------------------- tokenisation
TEXTS = ["", "plain ascii", "déjà vu — naïve café", "日本語のテキスト", "emoji 👩‍🔬🧪 and ZWJ", "tab\tnew\nline\r\n",
         "nul \x00 and \x7f", "</s> <pad> <unk> <extra_id_0> look like specials", "\U0010ffff\ue000 private use"]


@pytest.mark.slow
def test_bytes_tokenizer_round_trips_any_utf8():
    tok = bytes_tokenizer(64)
    rng = np.random.default_rng(1)
    randoms = []
    for _ in range(50):  # random code points from every plane (surrogates are not UTF-8)
        cps = rng.integers(0, 0x110000, size=int(rng.integers(1, 40)))
        randoms.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
    for text in TEXTS + randoms:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids == byte_ids(text).tolist()  # training's direct encoding = the saved tokenizer's
        assert len(ids) == len(text.encode("utf-8"))
        assert tok.decode(ids) == text


@pytest.mark.slow
def test_bpe_tokenizer_is_gpt2s_first_merges():
    from core.inputs.models import gpt2_tokenizer

    small, full = make_tokenizer(TrainSpec(vocab_size=1024)), gpt2_tokenizer()
    assert len(small) == 1024
    text = "The quick brown fox jumps over the lazy dog; anisotropy appears."
    ids = small(text, add_special_tokens=False)["input_ids"]
    assert max(ids) < 1022 and small.decode(ids) == text
    # tokens GPT-2 itself produces with ids below the cut are produced the same way
    common = [i for i in full(text)["input_ids"] if i < 300]
    assert set(common) <= set(ids)


@pytest.mark.slow
def test_uniform_control_same_lengths_and_flat_histogram(corpus_file):
    from scipy.stats import chisquare

    spec = tiny(corpus_file, steps=200, batch_size=8)
    nat = build_data(spec, make_tokenizer(spec))
    uni = build_data(spec.replace(tokenizer="uniform"), make_tokenizer(spec))
    assert uni.train.shape == nat.train.shape and uni.held_out.shape == nat.held_out.shape
    assert uni.train.shape[1] == spec.seq_len
    assert np.array_equal(uni.train == uni.eos_id, nat.train == nat.eos_id)  # same documents, same boundaries
    toks = uni.train[uni.train != uni.eos_id]
    assert toks.min() >= 0 and toks.max() < spec.vocab_size - 2
    counts = np.bincount(toks, minlength=spec.vocab_size - 2)
    assert chisquare(counts).pvalue > 1e-3  # flat over the whole vocabulary
    nat_counts = np.bincount(nat.train[nat.train != nat.eos_id], minlength=spec.vocab_size - 2)
    assert chisquare(nat_counts).pvalue < 1e-12  # the natural text is not: the test can tell


def test_checkpoint_schedule_is_log_spaced():
    assert checkpoint_schedule(6) == [0, 1, 2, 4, 6]
    assert checkpoint_schedule(8) == [0, 1, 2, 4, 8]
    assert checkpoint_schedule(1) == [0, 1]


@pytest.mark.slow
def test_bad_specs_say_why(corpus_file):
    with pytest.raises(InputError, match="multiple of n_heads"):
        tiny(corpus_file, d_model=18, n_heads=4)
    with pytest.raises(InputError, match="arch must be"):
        tiny(corpus_file, arch="rnn")
    with pytest.raises(InputError, match="too small"):
        train(tiny(corpus_file, batch_size=4096, name="too-small"))


# ----------------------------------------------------------------------------- training
@pytest.mark.slow
def test_same_seed_same_checkpoint_hashes(corpus_file, tmp_path):
    a = train(tiny(corpus_file), cache_dir=tmp_path / "a")
    b = train(tiny(corpus_file), cache_dir=tmp_path / "b")
    c = train(tiny(corpus_file, seed=1), cache_dir=tmp_path / "c")
    ha = [ck["sha256"] for ck in a["checkpoints"]]
    assert [ck["step"] for ck in a["checkpoints"]] == [0, 1, 2, 4, 6]
    assert ha == [ck["sha256"] for ck in b["checkpoints"]]
    assert len(set(ha)) == len(ha)  # every step changed the weights
    assert ha[0] != c["checkpoints"][0]["sha256"]
    assert a["run"] == b["run"] != c["run"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_loss_goes_down(corpus_file, tmp_path, arch):
    tokenizer = "bytes" if arch == "llama" else "bpe"
    rec = train(tiny(corpus_file, arch=arch, tokenizer=tokenizer, steps=60, d_model=32), cache_dir=tmp_path)
    ck = rec["checkpoints"]
    assert rec["status"] == "done" and ck[-1]["step"] == 60
    assert ck[-1]["held_out_loss"] < ck[0]["held_out_loss"] - 0.5
    assert rec["log"] and rec["log"][-1]["loss"] < rec["log"][0]["loss"]
    assert rec["objective"] == ("masked" if arch == "bert" else "causal")


@pytest.mark.slow
def test_cancel_then_resume_finishes_the_same_run(corpus_file, tmp_path):
    spec = tiny(corpus_file, steps=8)
    calls = {"n": 0}

    def cancel():
        calls["n"] += 1
        return calls["n"] >= 3

    with pytest.raises(Cancelled, match="resume"):
        train(spec, cache_dir=tmp_path, cancel=cancel)
    rec = checkpoints.read_run(spec.run_name(), tmp_path)
    assert rec["status"] == "cancelled" and rec["resume_step"] == 3
    done = train(spec, cache_dir=tmp_path)
    assert done["status"] == "done" and [c["step"] for c in done["checkpoints"]] == [0, 1, 2, 4, 8]
    straight = train(spec, cache_dir=tmp_path / "straight")
    assert done["checkpoints"][-1]["sha256"] == straight["checkpoints"][-1]["sha256"]


# ----------------------------------------------------------------------------- registry and series
@pytest.fixture(scope="module")
def three_checkpoints(corpus_file, cache_dir):
    """A run with checkpoints at steps 0, 1, 2 in the session cache (where the registry looks)."""
    return train(tiny(corpus_file, steps=2, name="series-test"))


@pytest.mark.slow
def test_checkpoints_are_models(three_checkpoints, cache_dir):
    from core.inputs.models import check_model_ident, describe_model, list_models, model_fingerprint

    ids = [m["id"] for m in list_models()]
    for step in (0, 1, 2):
        assert checkpoints.ident_of("series-test", step) in ids
    ident = "trained/series-test@step-2"
    check_model_ident(ident)
    info = describe_model(ident)
    assert info["causal_lm"] and info["step"] == 2
    assert model_fingerprint(ident) == model_fingerprint("trained/series-test")  # the last one
    assert model_fingerprint(ident) != model_fingerprint("trained/series-test@step-0")
    with pytest.raises(InputError, match="no checkpoint at step 3"):
        check_model_ident("trained/series-test@step-3")
    with pytest.raises(InputError, match="No trained run"):
        check_model_ident("trained/nope@step-1")


@pytest.mark.slow
def test_series_of_three_checkpoints_cached_per_checkpoint(three_checkpoints, cache_dir, monkeypatch):
    from core.compute import prepare
    from core.inputs import corpora
    from core.studies import series

    calls = {"n": 0}
    real = corpora.tokenize_budget

    def counting(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(prepare, "tokenize_budget", counting)  # every run plans its windows in prepare()
    kw = dict(max_tokens=600, sample=200)
    assert series.cached_steps("series-test", **kw) == []
    ser = series.analyze_series("series-test", **kw)
    assert ser["steps"] == [0, 1, 2] and len(ser["results"]) == 3
    assert calls["n"] == 1  # the corpus was tokenized once for the three checkpoints (and their attention)
    assert series.cached_steps("series-test", **kw) == [0, 1, 2]
    assert len(ser["attention"]) == 3 and not any(a["cache_hit"] for a in ser["attention"])
    keys = {r["manifest"]["cache_key"] for r in ser["results"]}
    assert len(keys) == 3  # one cache entry per checkpoint
    again = series.analyze_series("series-test", **kw)
    assert all(r["manifest"]["cache_hit"] for r in again["results"])
    assert all(a["cache_hit"] for a in again["attention"])  # cached per checkpoint too
    assert calls["n"] == 1

    from core.views import dynamics

    s = dynamics.summary(again)
    assert s["steps"] == [0, 1, 2] and s["findings"]
    heat = dynamics.metric_heatmap(again, "mean_cosine")
    assert heat.data["step"].tolist().count(2) == len(again["results"][0]["layers"])
    for view in (dynamics.cosine_curves(again), dynamics.outlier_counts(again), dynamics.loss_curves(again)):
        assert view.figure is not None and len(view.data)
    # query/key drift over training: one row per (step, block, head), equal to each checkpoint's section
    from core.views.common import View

    n_blocks, n_heads = len(again["attention"][0]["layers"]), len(again["attention"][0]["layers"][0]["q_drift"])
    for stat in dynamics.DRIFT_STATS:
        view = dynamics.qk_drift(again, stat)
        assert isinstance(view, View) and len(view.data) == 3 * n_blocks * n_heads
        got = view.data.set_index(["step", "block", "head"])[stat]
        for step, sec in zip(again["steps"], again["attention"]):
            for row in sec["layers"]:
                np.testing.assert_allclose(got.loc[step, row["layer"]].to_numpy(), row[stat], equal_nan=True)
        assert len(view.figure.data) == n_blocks * (1 + n_heads)  # a mean line and a dotted line per head
    assert any("Query/key drift of the last block" in line for line in s["findings"])
    assert s["qk"]["q_drift"]["last"][-1] == pytest.approx(
        np.nanmean(again["attention"][-1]["layers"][-1]["q_drift"]))
    with pytest.raises(ValueError, match="no attention statistics"):
        dynamics.qk_drift({**again, "attention": None})
    ident = dynamics.outlier_identity(again)
    assert list(ident.data.columns) == ["run", "dim", "first_step", "n_checkpoints"]
    assert len(ident.data) == len(set().union(*(r["outliers"]["activation"]["persistent"] for r in again["results"])))


@pytest.mark.slow
def test_cli_train_and_series(corpus_file, tmp_path):
    from core.entry.cli import main

    out = tmp_path / "run.json"
    assert main(["train", "--corpus", corpus_file, "--layers", "1", "--d-model", "16", "--heads", "2",
                 "--seq-len", "16", "--batch-size", "4", "--steps", "2", "--vocab-size", "512",
                 "--eval-tokens", "256", "--name", "cli-run", "--cache-dir", str(tmp_path), "--quiet",
                 "--out", str(out)]) == 0
    rec = json.loads(out.read_text())["runs"]["cli-run"]["record"]
    assert [c["step"] for c in rec["checkpoints"]] == [0, 1, 2]
    ser = tmp_path / "series.json"
    assert main(["series", "--run", "trained/cli-run", "--max-tokens", "500", "--sample", "100",
                 "--cache-dir", str(tmp_path), "--quiet", "--out", str(ser)]) == 0
    got = json.loads(ser.read_text())
    assert got["steps"] == [0, 1, 2] and len(got["results"]) == 3 and got["summary"]["findings"]
    assert main(["analyze", "--model", "trained/cli-run@step-1", "--corpus", corpus_file, "--max-tokens", "300",
                 "--sample", "50", "--cache-dir", str(tmp_path), "--quiet", "--out", str(tmp_path / "a.json")]) == 0


def test_cli_errors_are_one_line(tmp_path, capsys):
    from core.entry.cli import main

    assert main(["series", "--run", "nope", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No trained run 'nope'") and err.count("\n") == 1
    assert main(["train", "--d-model", "30", "--heads", "4", "--cache-dir", str(tmp_path)]) == 2
    assert "multiple of n_heads" in capsys.readouterr().err


# ----------------------------------------------------------------------------- issue 27 items 11-12
@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("tokenizer", ["bpe", "bytes"])
def test_parameter_formula_agrees_with_the_built_model(corpus_file, arch, tokenizer):
    from core.studies.train_spec import count_train_parameters, vocab_of
    from core.studies.training import build_model

    for d, L, H, T in ((16, 1, 2, 16), (96, 3, 4, 40)):
        spec = tiny(corpus_file, arch=arch, tokenizer=tokenizer, d_model=d, n_layers=L, n_heads=H, seq_len=T)
        model = build_model(spec, vocab_of(spec), 1, 0)
        assert count_train_parameters(spec) == sum(p.numel() for p in model.parameters())


def test_a_training_too_large_is_refused_before_anything_is_allocated(corpus_file, monkeypatch, tmp_path):
    """--layers 1000 --d-model 100000 was a traceback after tokenizing; the Train page's maxima need ~158 GiB."""
    import core.studies.train_spec as S
    import core.studies.training as T

    for name in ("make_tokenizer", "build_data", "build_model"):
        monkeypatch.setattr(T, name, lambda *a, **k: (_ for _ in ()).throw(AssertionError("allocated")))
    huge = tiny(corpus_file, n_layers=1000, d_model=100_000, n_heads=100)
    with pytest.raises(InputError, match=r"needs about [\d,.]+ GiB: 120,001,\d{3},\d{3},\d{3} parameters x 16 bytes"):
        train(huge, cache_dir=tmp_path)
    assert not (tmp_path / "trained").exists() or not any((tmp_path / "trained").iterdir())
    page_max = tiny(corpus_file, n_layers=48, d_model=4096, n_heads=32, seq_len=64, batch_size=16)
    with pytest.raises(InputError, match=r"needs about 15\d.\d GiB: 9,6\d\d,\d{3},\d{3} parameters.*cpu has 64.0 GiB free"):
        S.check_train_size(page_max, free=64 * 2**30)
    S.check_train_size(page_max, free=256 * 2**30)  # fits on a large machine
    S.check_train_size(TrainSpec(), free=1 * 2**30)  # the default training needs a few MB


def test_train_out_into_a_missing_folder_fails_before_training(corpus_file, monkeypatch, tmp_path, capsys):
    import core.studies.training as T
    from core.entry.cli import main

    monkeypatch.setattr(T, "train", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    rc = main(["train", "--corpus", corpus_file, "--steps", "4", "--out", str(tmp_path / "missing" / "run.json"),
               "--cache-dir", str(tmp_path)])
    assert rc != 0 and "does not exist" in capsys.readouterr().err
    rc = main(["train", "--corpus", corpus_file, "--layers", "1000", "--d-model", "100000", "--heads", "100",
               "--cache-dir", str(tmp_path)])
    assert rc != 0 and "needs about" in capsys.readouterr().err


def test_a_one_document_corpus_is_told_what_helps(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("a single long document " * 500)
    with pytest.raises(InputError, match="holds 1 document with text: training needs at least two") as e:
        build_data(tiny(str(one)), make_tokenizer(tiny(str(one))))
    assert "--batch-size" not in str(e.value)


def test_trained_checkpoints_open_on_a_shared_server(monkeypatch):
    from core.inputs.access import check_model
    from core.studies.selection import Selection

    monkeypatch.setenv("ANISO_SHARED", "1")
    assert check_model("trained/my-run@step-64") == "trained/my-run@step-64"
    assert Selection(models=("trained/my-run@step-64",)).models == ("trained/my-run@step-64",)
    for bad in ("trained/../etc@step-1", "trained/a b@step-1", "trained/x@main"):
        with pytest.raises(InputError):
            check_model(bad)
