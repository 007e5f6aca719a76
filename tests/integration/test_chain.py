"""The outlier chain's statistics (core/studies/chain, issue 24) on a tiny LLaMA with a planted super weight:
found at the planted coordinates, the massive dim it makes found with the ratio computed here from the
hidden states, the int8 counts, alpha_1 and the sink rate against naive computations, and the CLI's
chain.json sections."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from foundation_helpers import make_documents, write_txt

from core.base.spec import RunSpec
from core.entry.cli import main
from core.inputs.corpora import load_documents, tokenize_budget
from core.inputs.models import load_model
from core.stats import chain_rules as C
from core.studies.attention.arch import eager_attention
from core.studies.chain.hooks import mlp_modules
from core.studies.chain.run import chain_section

ROW, COL, BLOCK = 7, 13, 1
AMP, ERA = 2, 5  # the blocks of the planted amplifier and eraser of dim ROW


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A tiny 7-block LLaMA with three planted weights of dim 7 (the others ~0.02):
    - block 1 down_proj[7, 13] = 30, its input channel 13 made large (gate and up rows equal and scaled): it
      creates a massive dim 7 (a super weight);
    - block 2: input channels 20 and 21 read dim 7 and write only dim 7, 30% and 70% of the block's rise; channel
      20's input is the larger, so the scan's candidate is W[7, 20]: an amplifier;
    - block 5: channel 30 reads dim 7 and writes -0.8 x its largest value: an eraser."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.inputs.models import gpt2_tokenizer

    d = tmp_path_factory.mktemp("planted-chain-llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=7, num_attention_heads=2,
                                         num_key_value_heads=2, vocab_size=50257, max_position_embeddings=128,
                                         bos_token_id=50256, eos_token_id=50256, pad_token_id=50256))
    layers = model.model.layers

    def reader(block, ch, g):  # channel `ch` of `block`'s MLP: silu(g x_7) g x_7, written to dim ROW only
        m = layers[block].mlp
        for p in (m.gate_proj, m.up_proj):
            p.weight[ch] = 0.0
            p.weight[ch, ROW] = g
        m.down_proj.weight[:, ch] = 0.0

    def largest(block, ids):  # the largest |x_ROW| that `block` reads
        return float(model(input_ids=ids, output_hidden_states=True).hidden_states[block][..., ROW].abs().max())

    with torch.no_grad():
        mlp = layers[BLOCK].mlp
        mlp.down_proj.weight[ROW, COL] = 30.0
        mlp.gate_proj.weight[COL] *= 60.0
        mlp.up_proj.weight[COL] = mlp.gate_proj.weight[COL]  # silu(z) z >= 0: dim ROW rises at every token
        ids = torch.randint(0, 50000, (4, 32), generator=torch.Generator().manual_seed(0))
        reader(AMP, 20, 4.0)
        reader(AMP, 21, 2.0)
        act = {g: float(torch.nn.functional.silu(torch.tensor(g * 32 ** 0.5)) * g * 32 ** 0.5) for g in (4.0, 2.0)}
        v = largest(AMP, ids)
        layers[AMP].mlp.down_proj.weight[ROW, 20] = 0.3 * v / act[4.0]
        layers[AMP].mlp.down_proj.weight[ROW, 21] = 0.7 * v / act[2.0]
        reader(ERA, 30, 4.0)
        layers[ERA].mlp.down_proj.weight[ROW, 30] = -0.8 * largest(ERA, ids) / act[4.0]
    model.save_pretrained(d)
    gpt2_tokenizer().save_pretrained(d)
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


def test_planted_amplifier_and_eraser_are_classified_and_only_the_creator_is_confirmed(planted):
    _, _, sec = planted
    got = {(c["block"], c["row"], c["col"]): c for c in sec["super_weight_candidates"]}
    assert set(got) == {(BLOCK, ROW, COL), (AMP, ROW, 20), (ERA, ROW, 30)}
    creator, amp, era = got[(BLOCK, ROW, COL)], got[(AMP, ROW, 20)], got[(ERA, ROW, 30)]
    assert creator["class"] == "confirmed" and creator["share"] > 0.9  # zeroing it removes the massive value
    assert creator["ratio_out_zeroed"] < 100 < creator["ratio_out"]
    # the amplifier: its block raises dim 7 further, zeroing its weight removes its channel's ~30% of that rise
    assert amp["class"] == "amplifier" and amp["change"] == "rises" and 0.2 < amp["share"] < 0.4
    # the eraser: the ratio falls across its block; zeroing it undoes the fall; it writes against the dim's sign
    assert era["class"] == "eraser" and era["change"] == "falls" and era["share"] > 0.8
    assert era["sign"]["contribution"] < 0 < era["sign"]["dim_value_in"]
    assert [(s["block"], s["row"], s["col"]) for s in sec["super_weights"]] == [(BLOCK, ROW, COL)]
    # every statement indexed by the hidden state its block writes; the last block's before the final norm
    assert (era["hidden_state_in"], era["hidden_state_out"]) == (ERA, ERA + 1)
    assert len(era["ratios"]) == 8 and len(sec["probe_states"]["top_ratio"]) == 8
    # the onset: hidden state 2, written by block 1, whose largest contribution is the planted weight
    on = sec["onset"]
    assert (on["hidden_state"], on["block"], on["dim"]) == (BLOCK + 1, BLOCK, ROW)
    assert on["top_channels"][0]["col"] == COL and on["top_weight"]["class"] == "confirmed"
    assert on["mlp_part"] == pytest.approx(on["change"], rel=0.05)  # the MLP writes it, not attention


def test_the_probe_states_are_the_blocks_outputs_before_the_final_norm(planted):
    """The probe's hidden states, naively: transformers' hidden states 0..L-1 and the last block's output
    (hidden_states[L] is after the final norm)."""
    spec, _, sec = planted
    lm = load_model(spec.model)
    from core.studies.chain.run import PROBE_PROMPT

    ids = torch.as_tensor(lm.tokenizer(PROBE_PROMPT)["input_ids"])[None]
    last = {}
    h = lm.base.layers[-1].register_forward_hook(lambda m, a, o: last.__setitem__(0, o[0] if isinstance(o, tuple) else o))
    with torch.inference_mode():
        hs = [x[0].double().numpy() for x in lm.base(input_ids=ids, output_hidden_states=True).hidden_states]
    h.remove()
    states = hs[:-1] + [last[0][0].double().numpy()]
    assert not np.allclose(states[-1], hs[-1])  # the final norm changes it
    np.testing.assert_allclose(sec["super_weight_candidates"][0]["ratios"], C.dim_ratios(states, ROW), rtol=1e-4)


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


def test_core_chain_reads_the_corpus_and_loads_the_model_once(planted, tmp_path, monkeypatch):
    """`core chain --ablate` on a cold cache: the analysis, the chain pass and the ablations share one load."""
    import core.compute.prepare as PR

    spec = planted[0]
    loads, reads = [], []
    load, read = PR.load_model, PR.load_documents
    monkeypatch.setattr(PR, "load_model", lambda *a, **k: loads.append(a[0]) or load(*a, **k))
    monkeypatch.setattr(PR, "load_documents", lambda *a, **k: reads.append(a[0]) or read(*a, **k))
    args = ["--model", spec.model, "--corpus", spec.corpus, "--max-tokens", "300", "--max-seq-len", "32",
            "--sample", "200", "--device", "cpu", "--dtype", "float32", "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(["chain", *args, "--ablate", "--out", str(tmp_path / "chain.json")]) == 0
    got = json.loads((tmp_path / "chain.json").read_text())
    assert got["ablations"]["ablations"] and not got["cache_hit"]
    assert loads == [spec.model] and reads == [spec.corpus]
    # each candidate alone, with its own two controls, beside the joint ablation (the corpus's candidates)
    ab = got["ablations"]["ablations"]
    cands = [(c["block"], c["row"], c["col"]) for c in got["super_weight_candidates"]]
    for b, r, c in cands:
        alone, rnd, big = (ab[f"{k}:{b}:{r}:{c}"] for k in ("single", "single_random", "single_largest"))
        assert alone["targets"] == [{"block": b, "module": "mlp.down_proj", "row": r, "col": c}]
        for ctl in (rnd, big):
            assert ctl["control_of"] == f"single:{b}:{r}:{c}" and ctl["targets"][0]["block"] == b
            assert (ctl["targets"][0]["row"], ctl["targets"][0]["col"]) not in {(r2, c2) for _, r2, c2 in cands}
        assert alone["loss_before"] == got["ablations"]["baseline"]["loss"]
    assert len(ab["super_weights"]["targets"]) == len(cands)
    creator = ab[f"single:{BLOCK}:{ROW}:{COL}"]
    at = creator["top1_median_before"][BLOCK + 1]  # the hidden state the creator's block writes, held-out text
    assert creator["top1_median_after"][BLOCK + 1] < at / 3  # zeroing the creator alone takes most of it away
    assert ab[f"single_random:{BLOCK}:{ROW}:{COL}"]["top1_median_after"][BLOCK + 1] > 0.9 * at
