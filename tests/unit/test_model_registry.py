"""The model registry (core/inputs/models.py): every built-in is one complete entry, and a model reference is parsed into
a ModelRef once, which every reader of the identifier then uses (no torch: nothing here builds a model)."""

from __future__ import annotations

import importlib.metadata as md

import pytest

from core.inputs import anatomy
from core.inputs import models as M

FAMILIES = {e.family for e in anatomy.FAMILIES}


@pytest.mark.parametrize("ident", list(M.BUILTIN_MODELS))
def test_every_builtin_entry_is_complete(ident):
    e = M.BUILTIN_MODELS[ident]
    assert e.id == ident and e.label and e.description
    assert e.modality in ("text", "image", "audio") and e.architecture in ("transformer", "cnn")
    assert e.versions in ("all", "transformers", "none")
    # its architecture's parts are declared: a Transformer names its core.inputs.anatomy family, a CNN has none
    assert (e.anatomy is None) == (e.architecture == "cnn")
    assert e.anatomy is None or e.anatomy in FAMILIES, e.anatomy
    if e.shared_of:  # a control without its shared input: drawn as another control, something zeroed
        base = M.BUILTIN_MODELS[e.shared_of]
        assert e.build is None and base.build is not None and not base.shared_of
        assert not e.trained and not base.trained and e.zeroes
        assert (e.modality, e.architecture, e.anatomy, e.causal_lm) == (
            base.modality,
            base.architecture,
            base.anatomy,
            base.causal_lm,
        )
        assert all(part in ("", "mean") for part in (z.partition(":")[2] for z in e.zeroes))
    else:
        assert callable(e.build) and not e.zeroes
        # a model made from real weights keys the files they come from (installed distributions)
        assert not e.trained or e.sources
    for dists in e.sources.values():
        for dist in [dists] if isinstance(dists, str) else dists:
            assert md.distribution(dist) is not None


def test_every_builtin_has_its_own_fingerprint_and_every_seed_its_own(tmp_path):
    fps = {m: M.model_fingerprint(m, tmp_path) for m, e in M.BUILTIN_MODELS.items()}
    assert len(set(fps.values())) == len(fps)
    seeded = [m for m, e in M.BUILTIN_MODELS.items() if not e.trained and not e.large]
    assert {M.model_fingerprint(f"{m}@seed1", tmp_path) for m in seeded}.isdisjoint(fps.values())
    assert not M.NO_SHARED.keys() - M.BUILTIN_MODELS.keys()
    assert set(M.SHARED_INPUTS) == set(M.NO_SHARED.values())


@pytest.mark.parametrize(
    "ident, kind, base, seed",
    [
        ("minilm-l6", "builtin", "minilm-l6", 0),
        ("untrained-gpt2@seed2", "builtin", "untrained-gpt2", 2),
        ("untrained-minilm-l6-noshared@seed1", "builtin", "untrained-minilm-l6-noshared", 1),
        ("minilm-l6@seed2", "hub", None, 0),  # a trained model has no other draws: a hub id with a revision
        ("untrained-llama-8b@seed1", "hub", None, 0),  # nor a large one
        ("trained/run@step-100", "trained", None, 0),
        ("./folder", "local", None, 0),
        ("/abs/folder@rev", "local", None, 0),
        ("a/b/c", "local", None, 0),
        ("org/name@step1000", "hub", None, 0),
        ("gpt2", "hub", None, 0),
    ],
)
def test_a_reference_is_classified_by_its_text(ident, kind, base, seed):
    ref = M.parse_model(ident)
    assert (ref.ident, ref.kind, ref.base, ref.seed) == (ident, kind, base, seed)
    assert M.parse_model(ref) is ref  # a parsed reference passes through
    assert M.is_hub_model(ident) == M.is_hub_model(ref) == (kind == "hub")


def test_a_reference_is_parsed_once_per_process():
    M._parse.cache_clear()
    before = M.PARSES["n"]
    for _ in range(3):
        M.describe_model("untrained-gpt2@seed3")
        M.model_modality("untrained-gpt2@seed3")
        M.check_model_ident("untrained-gpt2@seed3")
        M.is_hub_model("untrained-gpt2@seed3")
    assert M.PARSES["n"] - before == 1
    assert M.describe_model("untrained-gpt2@seed3")["label"] == "untrained GPT-2 (seed +3)"


def test_an_entry_and_a_reference_pickle_as_the_registry_s():
    """The UI caches them (st.cache_data pickles): an entry's builder is a closure, so an entry pickles as its id."""
    import pickle

    for ident in ("minilm-l6", "untrained-whisper-noshared"):
        e = M.BUILTIN_MODELS[ident]
        assert pickle.loads(pickle.dumps(e)) is e
    ref = M.parse_model("untrained-gpt2@seed2")
    back = pickle.loads(pickle.dumps(ref))
    assert back == ref and back.entry is ref.entry
