"""TrainSpec's optimizer, the learning rate per family (`default_lr`) and the "did it learn" floor
(core/studies/train_spec.py; no torch)."""

import math

import numpy as np
import pytest

from core.base.errors import InputError
from core.studies import train_spec
from core.studies.train_spec import (
    NOT_SWEPT,
    OPTIMIZERS,
    TrainSpec,
    default_lr,
    learned_note,
    lr_source,
    unigram_entropy,
)

# Names computed before the optimizer field existed (the commit before it): cached runs keep them.
KNOWN_NAMES = {
    "gpt2-bpe-wiki-en-2x128-s0-b70064cd": TrainSpec(device="cpu"),
    "llama-bpe-wiki-en-2x128-s1-eaf83355": TrainSpec(device="cpu", arch="llama", seed=1, lr=3e-3, steps=300, batch_size=2),
}


@pytest.mark.parametrize("name", list(KNOWN_NAMES))
def test_an_adamw_run_keeps_its_name(name):
    spec = KNOWN_NAMES[name]
    assert spec.optimizer == "adamw"
    assert spec.run_name() == name
    assert spec.replace(optimizer="adamw").run_name() == name


def test_another_optimizer_is_another_run():
    names = {TrainSpec(device="cpu", optimizer=o).run_name() for o in OPTIMIZERS}
    assert len(names) == len(OPTIMIZERS)
    assert TrainSpec.from_dict(TrainSpec(optimizer="sgd").to_dict()).optimizer == "sgd"


def test_unknown_optimizer_is_refused():
    with pytest.raises(InputError, match="optimizer must be one of adamw, sgd, coupled-adam"):
        TrainSpec(optimizer="adam")


TABLE = {
    "kind": "lab-lr",
    "steps": 300,
    "n_layers": 2,
    "d_model": 128,
    "corpus": "wiki-en",
    "date_utc": "2026-12-03T15:00:00+00:00",
    "entries": {
        "gpt2/adamw": {"lr": 3e-3, "losses": {"0.0003": 6.1, "0.001": 5.8, "0.003": 5.6}},
        "gpt2/sgd": {"lr": 0.3, "losses": {"0.1": 6.9, "0.3": 6.7, "1.0": 7.5}},
    },
}


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setattr(train_spec, "lr_table", lambda: TABLE)


def test_default_lr_reads_the_sweep(table):
    lr, source = default_lr("gpt2", "adamw")
    assert lr == 3e-3 and "swept" in source and "0.0003, 0.001, 0.003" in source and "300 steps" in source
    assert "2026-12-03" in source
    assert default_lr("gpt2", "sgd")[0] == 0.3
    lr, source = default_lr("gpt2", "coupled-adam")  # AdamW's rate: one factor changed at a time
    assert lr == 3e-3 and source.startswith("AdamW's rate")
    assert default_lr("llama", "sgd") == (0.1, NOT_SWEPT)
    assert default_lr("llama", "adamw") == (1e-3, NOT_SWEPT)
    with pytest.raises(InputError, match="arch must be one of"):
        default_lr("transformer", "adamw")
    with pytest.raises(InputError, match="optimizer must be one of"):
        default_lr("gpt2", "lion")


def test_lr_source_says_where_the_rate_comes_from(table):
    assert "swept" in lr_source(TrainSpec(lr=3e-3))
    assert lr_source(TrainSpec()) == "the Train default (1e-3), not swept"
    assert lr_source(TrainSpec(lr=5e-4)) == "set by hand (--lr)"
    assert lr_source(TrainSpec(arch="llama", optimizer="sgd", lr=0.1)) == NOT_SWEPT


def test_the_shipped_sweep_is_read_as_written():
    """core/data/lab_lr.json (python -m bench lab-lr): every entry's rate is the one with the lowest loss."""
    table = train_spec.lr_table()
    assert table, "core/data/lab_lr.json is missing"
    for key, e in table["entries"].items():
        arch, opt = key.split("/")
        assert arch in train_spec.ARCHS and opt in OPTIMIZERS
        best = min(e["losses"], key=lambda k: e["losses"][k] if e["losses"][k] is not None else math.inf)
        assert float(best) == e["lr"] == default_lr(arch, opt)[0], key


def test_unigram_entropy_against_its_definition():
    assert unigram_entropy(np.arange(8), 8) == pytest.approx(math.log(8))  # uniform over 8 ids
    assert unigram_entropy(np.zeros((3, 5), dtype=int), 10) == 0.0
    rng = np.random.default_rng(0)
    ids = rng.zipf(1.5, size=(40, 16)) % 300
    counts = {}
    for i in ids.ravel():
        counts[i] = counts.get(i, 0) + 1
    naive = -sum(c / ids.size * math.log(c / ids.size) for c in counts.values())
    assert unigram_entropy(ids, 300) == pytest.approx(naive, rel=1e-12)


def test_learned_note():
    rec = {"learned": False, "unigram_entropy": 6.2, "checkpoints": [{"held_out_loss": 8.3}, {"held_out_loss": 6.31}]}
    assert learned_note(rec).startswith("Did not learn: held-out loss 6.310 is not below the corpus's unigram entropy 6.200")
    assert learned_note({**rec, "learned": True}) is None
    assert learned_note({"checkpoints": []}) is None  # a record from before the flag


def test_train_cli_optimizer_and_lr(table):
    from core.entry.cli import _train_spec, build_parser

    def spec(*argv):
        return _train_spec(build_parser().parse_args(["train", *argv]))

    assert spec().optimizer == "adamw" and spec().lr == 1e-3  # the unchanged default: the same run as before
    assert spec("--optimizer", "sgd").lr == 0.3  # the family's swept rate
    assert spec("--optimizer", "coupled-adam").lr == 3e-3  # AdamW's
    assert spec("--lr", "swept").lr == 3e-3
    assert spec("--optimizer", "sgd", "--lr", "0.05").lr == 0.05
    with pytest.raises(InputError, match="--lr must be a number or 'swept'"):
        spec("--lr", "fast")
