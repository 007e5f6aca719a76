"""A run parses its model reference once (core.inputs.models.parse_model, carried in core.compute.pipeline.ResolvedRun), and the
anatomy family each built-in entry names is the one core.inputs.anatomy resolves for a tiny model of that architecture."""

from __future__ import annotations

import dataclasses

import pytest

from core.base.spec import RunSpec
from core.compute import pipeline
from core.inputs import anatomy
from core.inputs import models as M
from tests import families as F

pytestmark = pytest.mark.fast


def test_a_run_parses_its_model_reference_once(tiny_bert_dir, cache_dir):
    M._parse.cache_clear()
    before = M.PARSES["n"]
    spec = RunSpec(model=str(tiny_bert_dir), corpus="wiki-en", max_tokens=200, max_seq_len=32, sample=100, device="cpu")
    run = pipeline.resolve(spec, cache_dir)
    assert run.model.kind == "local" and run.model.ident == str(tiny_bert_dir)
    res = pipeline.analyze(run, cache_dir, force=True)
    assert res["manifest"]["model"]["description"] == "local folder"
    # the job path: the worker rebuilds the run from its parameters, with the same reference
    again = pipeline.ResolvedRun.from_params(spec, run.to_params())
    assert again is not None and again.model is run.model
    assert M.PARSES["n"] - before == 1


@pytest.mark.parametrize("family", sorted({e.anatomy for e in M.BUILTIN_MODELS.values()} & set(F.NAMES.values())))
def test_the_anatomy_a_builtin_names_resolves_for_its_architecture(family):
    tiny = next(f for f, name in F.NAMES.items() if name == family)
    model = F.build(tiny)
    model = model.get_encoder() if tiny == "whisper" else model
    e = anatomy.entry(model)
    assert e is not None and e.family == family
    assert len(anatomy.blocks(model)[1]) == 2 and anatomy.block_norms(model)


def test_a_builtin_loads_as_the_anatomy_family_its_entry_declares(monkeypatch):
    e = M.BUILTIN_MODELS["untrained-whisper-tiny"]
    assert anatomy.entry(M.load_model(e.id).model).family == e.anatomy
    monkeypatch.setitem(M.BUILTIN_MODELS, e.id, dataclasses.replace(e, anatomy="BERT"))
    M._parse.cache_clear()  # the reference carries its entry
    try:
        with pytest.raises(RuntimeError, match="declared a BERT model"):
            M.load_model(e.id)
    finally:
        M._parse.cache_clear()
