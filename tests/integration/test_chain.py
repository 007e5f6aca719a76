"""The outlier chain's statistics (core/chain, issue 24) on a tiny LLaMA with a planted super weight:
found at the planted coordinates, the massive dim it makes found with the ratio computed here from the
hidden states, the int8 counts, alpha_1 and the sink rate against naive computations, and the CLI's
chain.json sections."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from foundation_helpers import make_documents, write_txt

from core import chainstats as C
from core.attention.arch import eager_attention
from core.chain.hooks import mlp_modules
from core.chain.run import chain_section
from core.cli import main
from core.corpora import load_documents, tokenize_budget
from core.models import load_model
from core.spec import RunSpec

ROW, COL, BLOCK = 7, 13, 1


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A tiny 4-block LLaMA whose block-1 down_proj[7, 13] is 30 (the others ~0.02) and whose input
    channel 13 is made large (gate and up rows scaled): a super weight that writes a massive dim 7."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.models import _gpt2_tokenizer

    d = tmp_path_factory.mktemp("planted-chain-llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
                                         num_key_value_heads=2, vocab_size=50257, max_position_embeddings=128,
                                         bos_token_id=50256, eos_token_id=50256, pad_token_id=50256))
    with torch.no_grad():
        mlp = model.model.layers[BLOCK].mlp
        mlp.down_proj.weight[ROW, COL] = 30.0
        mlp.gate_proj.weight[COL] *= 60.0
        mlp.up_proj.weight[COL] *= 60.0
    model.save_pretrained(d)
    _gpt2_tokenizer().save_pretrained(d)
    corpus = write_txt(d / "corpus.txt", make_documents([40] * 12, seed=5))
    spec = RunSpec(model=str(d), corpus=str(corpus), max_tokens=100_000, max_seq_len=32, sample=100_000,
                   batch_size=4, device="cpu", dtype="float32")
    cache = d / "cache"
    return spec, cache, chain_section(spec, cache_dir=cache)


@pytest.fixture(scope="module")
def hidden(planted):
    return _hidden(planted[0])


def _hidden(spec):
    """Every window's hidden states (run here, one window at a time) and the analysed masks."""
    lm = load_model(spec.model)
    w = tokenize_budget(load_documents(spec.corpus), lm.tokenizer, spec.max_tokens, spec.max_seq_len, spec.seed,
                        spec.corpus)
    hs, inputs = [], []
    hooks = mlp_modules(lm.base)
    with eager_attention(lm.base), torch.inference_mode():
        for ids in w.ids:
            t = torch.as_tensor(ids)[None]
            got: dict = {}
            hk = [hooks[b].attn_in.register_forward_pre_hook(lambda m, a, b=b: got.__setitem__(b, a[0][0].numpy().copy()))
                  for b in range(len(hooks))]
            out = lm.base(input_ids=t, attention_mask=torch.ones_like(t), output_hidden_states=True,
                          output_attentions=True)
            for h in hk:
                h.remove()
            hs.append(([h[0].numpy().astype(np.float64) for h in out.hidden_states],
                       [a[0].numpy().astype(np.float64) for a in out.attentions]))
            inputs.append(got)
    return w, hs, inputs


def test_planted_super_weight_is_found_at_its_coordinates(planted):
    _, _, sec = planted
    sw = sec["super_weights"]
    assert [(s["block"], s["module"], s["row"], s["col"]) for s in sw] == [(BLOCK, "mlp.down_proj", ROW, COL)]
    assert sw[0]["value"] == pytest.approx(30.0) and sw[0]["rank"] == 1 and sw[0]["ratio_to_max_other"] > 10
    assert sw[0]["on_probe"]  # the probe prompt finds it too
    scan = sec["super_weight_scan"]["corpus"][BLOCK]
    assert (scan["argmax_in"], scan["argmax_out"]) == (COL, ROW)


def test_planted_massive_dim_and_its_ratio(planted, hidden):
    spec, _, sec = planted
    w, hs, _ = hidden
    for l, m in enumerate(sec["massive"]):
        X = np.concatenate([h[0][l] for h in hs])  # every token is analysed (GPT-2 BPE adds no special token)
        top, med = np.abs(X).max(), np.median(np.abs(X))  # the sample holds every token
        assert m["top"] == pytest.approx(top, rel=1e-5) and m["median"] == pytest.approx(med, rel=1e-5)
        assert m["ratio"] == pytest.approx(top / med, rel=1e-5)
        assert m["values_above_100x"] == int((np.abs(X) > 100 * med).sum())
        if l > BLOCK:  # from the planted block's output on, dim ROW is massive
            assert m["dim"] == ROW and m["ratio"] > 100


def test_int8_counts_and_sink_rate_against_naive(planted, hidden):
    spec, _, sec = planted
    w, hs, inputs = hidden
    L = len(inputs[0])
    counts = np.stack([sum((np.abs(inp[b]) >= 6).sum(0) for inp in inputs) for b in range(L)])
    n = np.full(L, sum(len(i) for i in w.ids))
    naive = C.int8_outliers(counts, n)
    assert sec["int8_outliers"]["sites"]["attention"]["dims"] == naive["dims"]
    assert sec["int8_outliers"]["sites"]["attention"]["per_block"] == naive["per_layer"]
    # alpha_1: per window the mean over its queries of A[i, 0], then the mean over windows
    alpha = np.stack([np.mean([h[1][l][:, :, 0].mean(1) for h in hs], axis=0) for l in range(L)])  # (L, H)
    np.testing.assert_allclose(sec["sink_rate"]["alpha_first"], alpha, atol=1e-5)
    assert sec["sink_rate"]["rate"] == pytest.approx(float((alpha > 0.3).mean()))


def test_cli_chain_json_and_analyze_chain(planted, tmp_path, capsys):
    spec, cache, sec = planted
    args = ["--model", spec.model, "--corpus", spec.corpus, "--max-tokens", str(spec.max_tokens), "--max-seq-len",
            str(spec.max_seq_len), "--sample", str(spec.sample), "--batch-size", "4", "--device", "cpu",
            "--dtype", "float32", "--cache-dir", str(cache), "--quiet"]
    assert main(["chain", *args, "--out", str(tmp_path / "chain.json")]) == 0
    got = json.loads((tmp_path / "chain.json").read_text())
    for k in ("super_weights", "massive", "high_norm", "sink_rate", "int8_outliers", "ablations"):
        assert k in got, k
    assert got["super_weights"] == sec["super_weights"] and got["cache_hit"]
    assert "super weights: block 1 mlp.down_proj[7, 13]" in capsys.readouterr().err
    assert main(["analyze", *args, "--chain", "--out", str(tmp_path / "results.json")]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["chain"]["super_weights"] == sec["super_weights"]
    assert [m["ratio"] for m in res["chain"]["massive"]] == pytest.approx([r["massive_ratio"] for r in res["layers"]])
