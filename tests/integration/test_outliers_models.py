"""core.stats.outliers on tiny randomly initialised models (built from configs, seeded, no download)."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForMaskedLM,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

from core.compute.ablation import ablation, ablation_modules, norm_parameters, zeroed_dims  # noqa: E402
from core.inputs.anatomy import block_norms  # noqa: E402
from core.stats.outliers import (  # noqa: E402
    activation_outliers,
    agreement,
    norm_param_outliers,
    persistent_activation_outliers,
)

PLANTED = [5, 17]
D, N_BLOCKS, VOCAB = 64, 4, 200


def _bert(cls=BertModel):
    torch.manual_seed(0)
    cfg = BertConfig(
        hidden_size=D,
        num_hidden_layers=N_BLOCKS,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=VOCAB,
    )
    return cls(cfg).eval()


def _gpt2():
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=D, n_layer=N_BLOCKS, n_head=4, n_positions=64, vocab_size=VOCAB)
    return GPT2LMHeadModel(cfg).eval()


def _llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=D,
        intermediate_size=128,
        num_hidden_layers=N_BLOCKS,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


def _batches():
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(2):
        ids = torch.randint(0, VOCAB, (4, 32), generator=g)
        mask = torch.ones_like(ids)
        mask[1, 20:] = 0  # one padded sequence
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def _plant_norms(model, dims=PLANTED, value=20.0):
    """Set the weights of `dims` to `value` in every norm of width d_model."""
    with torch.no_grad():
        for _, mod in ablation_modules(model):
            mod.weight[dims] = value


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _identical(model, snap):
    sd = model.state_dict()
    return sd.keys() == snap.keys() and all(torch.equal(sd[k], snap[k]) for k in snap)


EXPECTED = {
    "bert": (_bert, "encoder.layer.{b}.output.LayerNorm", "LayerNorm", True, 1),
    "gpt2": (_gpt2, "transformer.h.{b}.ln_1", "LayerNorm", True, 0),
    "llama": (_llama, "model.layers.{b}.input_layernorm", "RMSNorm", False, 0),
}


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_block_norms_one_per_block(arch):
    build, pattern, kind, has_bias, offset = EXPECTED[arch]
    model = build()
    found = [(b, name, mod) for b, name, mod, _ in block_norms(model)]
    assert [b for b, _, _ in found] == list(range(N_BLOCKS))
    assert [name for _, name, _ in found] == [pattern.format(b=b) for b in range(N_BLOCKS)]
    named = dict(model.named_modules())
    assert all(named[name] is mod for _, name, mod in found)
    params = norm_parameters(model)
    assert params["weights"].shape == (N_BLOCKS, D) and params["weights"].dtype == np.float64
    assert (params["biases"] is not None) == has_bias
    assert params["kind"] == kind and params["layer_offset"] == offset
    # freshly initialised norms (ones / zeros) have no outlier
    assert norm_param_outliers(params["weights"], params["biases"])["persistent"] == []


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_planted_norm_outliers_are_found_exactly(arch):
    model = EXPECTED[arch][0]()
    _plant_norms(model)
    params = norm_parameters(model)
    out = norm_param_outliers(params["weights"], params["biases"])
    assert out["persistent"] == PLANTED
    assert out["union"] == [PLANTED] * N_BLOCKS


def test_block_norms_rejects_a_model_without_norms():
    with pytest.raises(ValueError, match="no list of transformer blocks"):
        block_norms(torch.nn.Sequential(torch.nn.Linear(4, 4)))


def _llama_with_planted_outliers():
    """A tiny LLaMA whose residual stream carries dims 5 and 17, as trained models' do.

    Planting large norm weights alone does not make activation outliers in a random model:
    the norms' output feeds randomly initialised projections that spread it over every dim.
    So the embeddings also get a large shared offset in the planted dims (a strong planted
    effect, much larger than the blocks' random contributions); the residual stream carries
    it through every layer.
    """
    model = _llama()
    _plant_norms(model)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, PLANTED] += 10.0
    return model


def test_planted_llama_outliers_show_in_hidden_states():
    model = _llama_with_planted_outliers()
    batch = _batches()[0]
    with torch.inference_mode():
        hs = model(**batch, output_hidden_states=True).hidden_states  # L+1 of (B, T, d)
    keep = batch["attention_mask"].bool()
    mean_abs = np.stack([h[keep].abs().mean(0).double().numpy() for h in hs])  # (L+1, d)
    flags = activation_outliers(mean_abs)
    assert all(set(PLANTED) <= set(f) for f in flags[1:])  # every block output, the deepest too
    assert persistent_activation_outliers(flags) == PLANTED
    params = norm_parameters(model)
    norm_flags = norm_param_outliers(params["weights"], params["biases"])["union"]
    agree = agreement(flags, norm_flags, layer_offset=params["layer_offset"])
    assert len(agree) == N_BLOCKS and all(a["intersection"] == PLANTED for a in agree)


def test_ablation_of_planted_dims_beats_random_and_restores_model():
    model = _llama_with_planted_outliers()
    model.train()  # ablation evaluates in eval mode and puts the mode back
    snap = _snapshot(model)
    out = ablation(model, _batches(), PLANTED, n_random=5, seed=0)
    assert _identical(model, snap) and model.training
    assert out["dims"] == PLANTED
    assert len(out["random_dims"]) == 5
    assert all(len(r) == 2 and not set(r) & set(PLANTED) for r in out["random_dims"])
    assert out["n_tokens"] == 2 * (4 * 31 - 12)  # next-token targets, padding excluded
    assert out["delta"] == pytest.approx(out["ablated_loss"] - out["baseline_loss"])
    assert "model.norm" in out["modules"] and len(out["modules"]) == 2 * N_BLOCKS + 1
    # In a random model the planted dims dominate the logits: zeroing them moves the loss
    # (here down, toward the uniform log V) far more than zeroing random dims does.
    spread = abs(out["random_delta_mean"]) + 3 * out["random_delta_std"]
    assert abs(out["delta"]) > max(spread, 0.1)
    # same seed, same draws
    again = ablation(model, _batches(), PLANTED, n_random=5, seed=0)
    assert again["random_dims"] == out["random_dims"]
    assert again["baseline_loss"] == out["baseline_loss"]
    assert _identical(model, snap)


def test_ablation_on_gpt2_covers_both_norms_and_ln_f():
    model = _gpt2()
    snap = _snapshot(model)
    out = ablation(model, _batches(), [3], n_random=2)
    expected = {f"transformer.h.{b}.ln_{i}" for b in range(N_BLOCKS) for i in (1, 2)}
    assert set(out["modules"]) == expected | {"transformer.ln_f"}
    assert np.isfinite(out["baseline_loss"]) and np.isfinite(out["ablated_loss"])
    assert _identical(model, snap)


class _FailsOnSecondRead(dict):
    """A batch that raises the second time its input_ids are read (during the ablated pass)."""

    reads = 0

    def __getitem__(self, key):
        if key == "input_ids":
            type(self).reads += 1
            if type(self).reads > 1:
                raise RuntimeError("boom")
        return super().__getitem__(key)


def test_ablation_restores_model_on_error():
    model = _llama_with_planted_outliers()
    snap = _snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        ablation(model, [_FailsOnSecondRead(_batches()[0])], PLANTED, n_random=1)
    assert _identical(model, snap)
    mods = [m for _, m in ablation_modules(model)]
    with pytest.raises(KeyError):
        with zeroed_dims(mods, PLANTED):
            assert all(float(m.weight.detach()[PLANTED].abs().sum()) == 0.0 for m in mods)
            raise KeyError("inside")
    assert _identical(model, snap)


@pytest.mark.parametrize("cls", [BertModel, BertForMaskedLM])
def test_ablation_needs_a_causal_lm(cls):
    model = _bert(cls)
    with pytest.raises(ValueError, match=f"causal language model with an LM head; {cls.__name__}"):
        ablation(model, _batches(), PLANTED)


def test_ablation_rejects_bad_dims():
    model = _llama()
    with pytest.raises(ValueError, match="out of range"):
        ablation(model, _batches(), [D])
    with pytest.raises(ValueError, match="empty"):
        ablation(model, _batches(), [])


def test_zeroing_a_one_plus_weight_norm_sets_its_gain_to_zero():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    norm = GemmaRMSNorm(D)  # computes x * (1 + weight)
    x = torch.randn(3, D, generator=torch.Generator().manual_seed(0))
    with zeroed_dims([norm], PLANTED):
        assert torch.all(norm(x)[:, PLANTED] == 0)
    assert torch.equal(norm.weight.detach(), torch.zeros(D))
