"""The outlier chain ablated link by link (core/studies/chain/ablate_links.py) on a tiny LLaMA with one planted
super weight: zeroing it changes the loss more than its controls, every ablation restores the model
bit-exactly, the result is stored with the run, and a cancelled job stores nothing."""

from __future__ import annotations

import pytest
from foundation_helpers import make_documents, write_txt

from core.base.errors import Cancelled
from core.base.spec import RunSpec
from core.studies.chain import ablate_links as CA

ROW, COL, BLOCK = 5, 17, 1


@pytest.fixture(scope="module")
def planted_llama(tmp_path_factory):
    """A tiny LLaMA whose block-1 down_proj[5, 17] is 40 (the others ~0.02): a planted super weight."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.studies.training import bpe_tokenizer

    d = tmp_path_factory.mktemp("planted-llama")
    torch.manual_seed(0)
    tok = bpe_tokenizer(512, 64)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                         bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id))
    with torch.no_grad():
        model.model.layers[BLOCK].mlp.down_proj.weight[ROW, COL] = 40.0
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.mark.slow
def test_planted_super_weight_matters_more_than_its_controls(planted_llama, tmp_path):
    corpus = write_txt(tmp_path / "c.txt", make_documents([40] * 30, seed=3))
    spec = RunSpec(model=str(planted_llama), corpus=str(corpus), max_tokens=300, max_seq_len=64, sample=100,
                   device="cpu", dtype="float32")
    cache = tmp_path / "cache"
    targets = {"super_weights": [{"block": BLOCK, "module": "mlp.down_proj", "row": ROW, "col": COL}],
               "massive": {"dims": [ROW], "from_block": BLOCK}, "outlier_dims": [ROW]}
    calls = {"n": 0}

    def cancel():  # cancelled after the baseline pass
        calls["n"] += 1
        return calls["n"] > 1

    with pytest.raises(Cancelled):
        CA.run_chain_ablation(spec, targets, held_out_tokens=600, cache_dir=cache, cancel=cancel)
    assert CA.cached_chain_ablation(spec, targets, held_out_tokens=600, cache_dir=cache) is None  # nothing stored
    seen = []
    got = CA.run_chain_ablation(spec, targets, held_out_tokens=600, cache_dir=cache, progress=seen.append)
    assert {p.stage for p in seen} >= {"ablation"}
    ab = got["ablations"]
    assert set(ab) == set(CA.ABLATIONS) and got["loss"] == "causal"
    delta = {k: abs(a["loss_delta"]) for k, a in ab.items()}
    assert delta["super_weights"] > 3 * max(delta["super_random"], delta["super_largest"])
    assert delta["massive_dims"] > delta["massive_random"]
    assert ab["super_random"]["targets"][0]["row"] * 64 + ab["super_random"]["targets"][0]["col"] != ROW * 64 + COL
    L = len(got["baseline"]["mean_cosine"])
    assert L == 4 and len(got["baseline"]["sink_share"]) == 3
    for a in ab.values():  # before/after curves of every statistic
        assert len(a["mean_cosine_after"]) == len(a["top1_median_after"]) == len(a["outlier_count_after"]) == L
        assert a["loss_before"] == got["baseline"]["loss"]
    # the planted weight makes dim ROW massive after block BLOCK; zeroing it (or the dim) removes that
    assert ab["super_weights"]["top1_median_after"][BLOCK + 1] < ab["super_weights"]["top1_median_before"][BLOCK + 1] / 3
    assert ab["massive_dims"]["top1_median_after"][BLOCK + 1] < ab["massive_dims"]["top1_median_before"][BLOCK + 1] / 3
    # stored: the same call is a cache hit, and the cached reader finds it
    assert CA.cached_chain_ablation(spec, targets, held_out_tokens=600, cache_dir=cache) == got


def test_the_model_is_restored_bit_exactly(planted_llama):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(planted_llama)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 512, (2, 12))
    chosen = CA.plan(model, [{"block": BLOCK, "module": "mlp.down_proj", "row": ROW, "col": COL}],
                     {"dims": [ROW], "from_block": BLOCK}, [ROW])
    with torch.inference_mode():  # transformers adds its own hooks (recording hidden states) at the first call
        model(input_ids=ids, output_hidden_states=True)
    hooks = [len(b._forward_hooks) for b in model.model.layers]
    CA.run_all(model, [{"input_ids": ids, "attention_mask": torch.ones_like(ids)}], chosen)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert [len(b._forward_hooks) for b in model.model.layers] == hooks
