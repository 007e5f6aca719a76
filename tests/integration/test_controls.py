"""Random-init controls and their shared input (issue 35): a control without it, and a planted shared vector.

A random-init BERT adds one token-type row to every token: its mean cosine is then mostly that shared vector.
The `-noshared` built-ins are the same seeded draw with that table zeroed; the centred mean cosine (the
sample minus its mean) is blind to any vector added alike to every token.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.base.spec import RunSpec
from core.compute.pipeline import analyze
from core.inputs.models import (
    BUILTIN_MODELS,
    NO_SHARED,
    SHARED_INPUTS,
    control_variant,
    load_model,
    model_fingerprint,
    zero_shared_inputs,
)
from core.studies.papers import claims as C

pytestmark = pytest.mark.fast


def test_noshared_control_is_the_same_draw_with_only_its_shared_input_zeroed(cache_dir):
    ctl = load_model("untrained-minilm-l6", device="cpu", dtype="float32")
    ns = load_model("untrained-minilm-l6-noshared", device="cpu", dtype="float32")
    a, b = dict(ctl.model.named_parameters()), dict(ns.model.named_parameters())
    assert set(a) == set(b)
    zeroed = set(SHARED_INPUTS[NO_SHARED["untrained-minilm-l6-noshared"]])
    for name in a:
        if name in zeroed:
            assert float(a[name].detach().abs().max()) > 0 and float(b[name].detach().abs().max()) == 0.0, name
        else:
            assert bool((a[name] == b[name]).all()), name
    fps = {
        model_fingerprint(m)
        for m in (
            "untrained-minilm-l6",
            "untrained-minilm-l6-noshared",
            control_variant("untrained-minilm-l6-noshared", 1),
            "untrained-bert-base-noshared",
        )
    }
    assert len(fps) == 4  # its own cache key, and another seed is another draw
    assert not BUILTIN_MODELS["untrained-minilm-l6-noshared"].trained


@pytest.mark.parametrize(
    "ident", [pytest.param(m, marks=[pytest.mark.slow] if m == "untrained-bert-base-noshared" else []) for m in NO_SHARED]
)
def test_every_noshared_variant_changes_only_what_its_entry_zeroes(ident, cache_dir):
    """Every -noshared entry against the control it is drawn as: the same weights but for the parameters its entry
    names; a whole parameter is zero, a ":mean" one lost exactly its mean over positions (the rest kept)."""
    import torch

    e = BUILTIN_MODELS[ident]
    a = dict(load_model(e.shared_of, device="cpu", dtype="float32").model.named_parameters())
    b = dict(load_model(ident, device="cpu", dtype="float32").model.named_parameters())
    assert set(a) == set(b)
    parts = dict(z.partition(":")[::2] for z in e.zeroes)
    for name in a:
        x, y = a[name].detach().double(), b[name].detach().double()
        if name not in parts:
            assert torch.equal(x, y), name
        elif parts[name] == "mean":
            mean = x.mean(dim=-2, keepdim=True)
            assert float(mean.norm()) > 1e-3 and float(y.mean(dim=-2).norm()) < 1e-5 * float(x.norm()), name
            assert torch.allclose(y, x - mean, atol=1e-6), name
        else:
            assert float(x.abs().max()) > 0 and float(y.abs().max()) == 0.0, name
    assert model_fingerprint(ident) not in {model_fingerprint(e.shared_of), model_fingerprint(control_variant(ident, 1))}


def test_zeroing_a_parameter_mean_keeps_the_differences_between_positions():
    import torch

    table = torch.nn.Embedding(6, 4)
    before = table.weight.detach().clone()
    assert zero_shared_inputs(table, ("weight:mean",)) == ["weight:mean"]
    w = table.weight.detach()
    assert float(w.mean(0).abs().max()) < 1e-6
    assert torch.allclose(w[1:] - w[:-1], before[1:] - before[:-1], atol=1e-6)
    with pytest.raises(ValueError, match="unknown part"):
        zero_shared_inputs(table, ("weight:median",))


def test_zeroing_a_parameter_the_model_lacks_is_an_error():
    import torch

    with pytest.raises(KeyError, match="no parameter"):
        zero_shared_inputs(torch.nn.Linear(2, 2), ("embeddings.token_type_embeddings.weight",))


def _tiny_bert(folder, shared_scale: float):
    """A tiny random BERT whose token-type row 0 (added to every token) is a planted vector of norm^2 equal to
    `shared_scale` times a word embedding's expected norm^2; its position table is zeroed, so the tokens differ
    only by their word vectors (and the planted vector is the only shared input)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from core.inputs.models import minilm_folder

    torch.manual_seed(3)
    cfg = BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, max_position_embeddings=128
    )
    model = BertModel(cfg)
    with torch.no_grad():
        e = model.embeddings
        word_sq = float((e.word_embeddings.weight**2).sum(1).mean())
        v = torch.randn(64, generator=torch.Generator().manual_seed(4))
        e.token_type_embeddings.weight[0] = v * (shared_scale * word_sq / float((v**2).sum())) ** 0.5
        e.position_embeddings.weight.zero_()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(minilm_folder())).save_pretrained(folder)
    return folder


def _zeroed_copy(src, dst):
    from transformers import AutoTokenizer, BertModel

    model = BertModel.from_pretrained(str(src))
    zero_shared_inputs(model, SHARED_INPUTS["untrained-minilm-l6"])
    model.save_pretrained(dst)
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(dst)
    return dst


def test_a_planted_shared_input_is_explained_by_its_share_and_invisible_to_the_centred_cosine(tmp_path, cache_dir):
    """The issue's test: plant a shared input vector in a random-init model; the shared-input share (the part of
    the control's mean cosine that goes when the vector is zeroed) explains it, and the centred value is ~0."""
    planted = _tiny_bert(tmp_path / "planted", shared_scale=0.5)  # expected raw cosine ~ 0.5 / 1.5 = 1/3
    zeroed = _zeroed_copy(planted, tmp_path / "zeroed")
    run = {}
    for name, folder in (("planted", planted), ("zeroed", zeroed)):
        res = analyze(RunSpec(model=str(folder), corpus="wiki-en", max_tokens=400, sample=400, seed=0), cache_dir=cache_dir)
        run[name] = {k: np.array([lay[k] for lay in res["layers"]], dtype=float) for k in ("mean_cosine", "centred_mean_cosine")}
    p, z = run["planted"], run["zeroed"]
    # at the input (LayerNorm of word + planted vector): about a third, as the issue computes for BERT
    assert 0.2 < p["mean_cosine"][0] < 0.5
    assert abs(z["mean_cosine"][0]) < 0.06  # without it: word vectors alone (repeated words give a little)
    assert abs(p["centred_mean_cosine"][0]) < 0.06  # the centred value does not see the planted vector
    assert abs(p["centred_mean_cosine"][0] - z["centred_mean_cosine"][0]) < 0.03
    share = C.shared_share(C.level(p["mean_cosine"]), C.level(z["mean_cosine"]))
    assert share > 0.8  # the shared input explains the control's anisotropy in every layer
    assert C.shared_share(C.level(z["mean_cosine"]), C.level(z["mean_cosine"])) == 0.0
    # and every layer of the planted model is anisotropic raw, not centred
    assert (p["mean_cosine"][1:] > 0.15).all() and (np.abs(p["centred_mean_cosine"][1:]) < 0.1).all()
