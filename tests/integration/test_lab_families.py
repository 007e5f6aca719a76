"""The lab's architecture families (issue 41): every family trains, its checkpoints go through the one extraction and
the statistic registry, the same seed gives the same checkpoint, the parameter counts are matched to GPT-2's, the
attention output gate is what Qiu et al. define, and a family without attention says why it has no attention
statistics."""

import math

import pytest
import torch
from foundation_helpers import tiny_train_spec, zipf_corpus

from core.base.errors import InputError
from core.studies.train_spec import (
    ARCHS,
    MATCH_TOLERANCE,
    NO_ATTENTION,
    TrainSpec,
    count_parameters,
    matched_spec,
    vocab_of,
)
from core.studies.training import build_model, model_parameters, train

# Not in the fast tier: training every family twice takes about 10 s of its 60 s (the whole suite runs it).

# (arch, extra spec fields): the new families, the gated LLaMA and an untied GPT-2
FAMILIES = [
    ("bert-causal", {}),
    ("mamba", {}),
    ("rwkv", {}),
    ("lstm", {}),
    ("llama", {"attn_gate": True}),
    ("gpt2", {"tied": False}),
]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return zipf_corpus(tmp_path_factory.mktemp("corpus") / "lab.txt", n_docs=120)


def tiny(corpus, **kw) -> TrainSpec:
    return tiny_train_spec(corpus, **{"n_layers": 2, "d_model": 32, "steps": 5, **kw})


def _label(arch, extra):
    return arch + "".join(f"-{k}={v}" for k, v in extra.items())


@pytest.fixture(scope="module")
def runs(corpus_file, cache_dir):
    """Each family trained five steps twice with the same seed (two names, so two folders), in the session cache."""
    out = {}
    for arch, extra in FAMILIES:
        lab = _label(arch, extra)
        spec = tiny(corpus_file, arch=arch, **extra)
        out[lab] = (
            spec,
            train(spec.replace(name=f"fam-{lab}-a".replace("=", "_"))),
            train(spec.replace(name=f"fam-{lab}-b".replace("=", "_"))),
        )
    return out


@pytest.mark.parametrize("arch,extra", FAMILIES, ids=[_label(*f) for f in FAMILIES])
def test_each_family_trains_and_its_checkpoint_is_analysed(runs, arch, extra, cache_dir):
    from core.base.spec import RunSpec
    from core.compute import pipeline

    spec, rec, again = runs[_label(arch, extra)]
    assert rec["status"] == "done" and [c["step"] for c in rec["checkpoints"]] == [0, 1, 2, 4, 5]
    assert all(math.isfinite(c["held_out_loss"]) for c in rec["checkpoints"])
    assert rec["params"] == count_parameters(spec)  # both counts kept in the run record
    # the same seed: the same weights at every checkpoint (CPU, at the thread count the record states)
    assert rec["torch_threads"] == again["torch_threads"] >= 1
    assert [c["sha256"] for c in rec["checkpoints"]] == [c["sha256"] for c in again["checkpoints"]]
    assert rec["checkpoints"][0]["sha256"] != rec["checkpoints"][-1]["sha256"]  # and training changed them
    # the input embedding matrix's mean cosine, recorded at each save, equals the one read back from the saved weights
    from core.studies import training

    last = rec["checkpoints"][-1]
    assert all(-1 <= c["embedding_mean_cosine"] <= 1 for c in rec["checkpoints"])
    assert training.checkpoint_embedding_mean_cosine(rec, last["step"], cache_dir) == pytest.approx(
        last["embedding_mean_cosine"], abs=1e-6)
    # the last checkpoint through the one extraction (from_pretrained of the saved folder) and the registry
    res = pipeline.analyze(
        RunSpec(model=rec["checkpoints"][-1]["model"], corpus=spec.corpus, max_tokens=300, max_seq_len=16, sample=100), cache_dir
    )
    layers = res["layers"]
    assert [r["layer"] for r in layers] == [0, 1, 2]  # embeddings and both blocks
    assert len({r["n_tokens"] for r in layers}) == 1 and layers[0]["n_tokens"] >= 200  # the same tokens at every layer
    assert all(-1 <= r["mean_cosine"] <= 1 and math.isfinite(r["effective_rank"]) for r in layers)
    assert res["manifest"]["model"]["model_class"] == rec["model_class"]


def test_a_family_without_attention_says_why(runs, cache_dir):
    """A trained LSTM's series: no attention statistics, the reason instead; the chain view says it in its panel."""
    from core.studies import series
    from core.views.chain import chain_dynamics

    spec, rec, _ = runs["lstm"]
    ser = series.analyze_series(rec["run"], max_tokens=200, sample=100)
    assert ser["attention"] is None and ser["attention_note"] == f"not applicable: {NO_ATTENTION['lstm']}"
    assert series.cached_steps(rec["run"], max_tokens=200, sample=100) == ser["steps"]
    view = chain_dynamics(ser)
    assert any(NO_ATTENTION["lstm"] in line for line in view.notes)
    shown = " ".join(a.text for a in view.figure.layout.annotations)
    assert "no attention" in shown  # in the sink-rate panel, not an empty chart
    # a family with attention keeps its statistics
    _, gated, _ = runs["llama-attn_gate=True"]
    assert series.trained_no_attention(gated) is None


def test_parameter_counts_agree_with_the_built_models():
    """count_parameters (a formula) = the built model's counts, for every family, tied and untied, at two shapes."""
    for arch in ARCHS:
        for tied in (True, False):
            for gate in (False, True) if arch == "llama" else (False,):
                for L, d, H in ((1, 32, 2), (2, 64, 4)):
                    spec = TrainSpec(
                        arch=arch, n_layers=L, d_model=d, n_heads=H, seq_len=24, vocab_size=600, tied=tied, attn_gate=gate
                    )
                    for s in (spec, spec.replace(d_inner=3 * d)):  # the default width and another
                        with torch.device("meta"):
                            model = build_model(s, vocab_of(s), 1, 0)
                        assert model_parameters(model) == count_parameters(s), (arch, tied, gate, L, d, s.d_inner)


@pytest.mark.parametrize("L,d", [(2, 128), (4, 256)])
def test_matched_specs_are_within_ten_percent_of_gpt2(L, d):
    for tied in (True, False):
        ref = count_parameters(TrainSpec(n_layers=L, d_model=d, tied=tied))
        for arch in ARCHS:
            for gate in (False, True) if arch == "llama" else (False,):
                spec = TrainSpec(arch=arch, n_layers=L, d_model=d, tied=tied, attn_gate=gate)
                m = matched_spec(spec)
                assert (m.n_layers, m.d_model, m.vocab_size, m.tied) == (L, d, spec.vocab_size, tied)
                with torch.device("meta"):  # the built model's counts, not the formula's alone
                    got = model_parameters(build_model(m, vocab_of(m), 1, 0))
                for k in ("total", "non_embedding"):
                    assert abs(got[k] / ref[k] - 1) <= MATCH_TOLERANCE, (arch, gate, tied, k, got, ref)
    # the default Mamba-2 (expand 2) is not matched: the match is what makes it within 10%
    mamba = count_parameters(TrainSpec(arch="mamba", n_layers=L, d_model=d))
    assert mamba["non_embedding"] < 0.8 * count_parameters(TrainSpec(n_layers=L, d_model=d))["non_embedding"]


def test_the_run_name_of_a_spec_at_the_new_defaults_is_unchanged():
    """Runs trained before issue 41 keep their names (and their cached checkpoints and numbers)."""
    assert TrainSpec(device="cpu").run_name() == "gpt2-bpe-wiki-en-2x128-s0-b70064cd"
    assert (
        TrainSpec(device="cpu", arch="llama", tokenizer="bytes", seed=3, steps=50).run_name()
        == "llama-bytes-wiki-en-2x128-s3-7b3ab603"
    )
    assert TrainSpec(device="cuda", arch="bert").run_name() == "bert-bpe-wiki-en-2x128-s0-1dfb7e29"
    base = TrainSpec(device="cpu")
    names = {
        base.run_name(),
        base.replace(tied=False).run_name(),
        base.replace(d_inner=256).run_name(),
        base.replace(arch="llama").run_name(),
        base.replace(arch="llama", attn_gate=True).run_name(),
    }
    assert len(names) == 5  # each new field changes the weights, so the name


def test_bad_family_options_are_refused_with_a_reason():
    with pytest.raises(InputError, match="xLSTMForCausalLM does not train on CPU.*Use arch 'lstm'"):
        TrainSpec(arch="xlstm")
    with pytest.raises(InputError, match="attn_gate.*'llama' only"):
        TrainSpec(arch="gpt2", attn_gate=True)
    with pytest.raises(InputError, match="d_inner must be a positive integer"):
        TrainSpec(d_inner=0)
    with pytest.raises(InputError, match="multiple of d_model"):
        TrainSpec(arch="mamba", d_inner=200)
    with pytest.raises(InputError, match="tied and attn_gate must be true or false"):
        TrainSpec(tied="no")


# ----------------------------------------------------------------------------- the attention output gate
def _gated_and_plain(seed=0):
    import transformers as tf

    from core.inputs.lab_models import GatedLlamaConfig, GatedLlamaForCausalLM

    kw = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=16,
    )
    torch.manual_seed(seed)
    gated = GatedLlamaForCausalLM(GatedLlamaConfig(**kw)).eval()
    plain = tf.LlamaForCausalLM(tf.LlamaConfig(**kw)).eval()
    missing, unexpected = plain.load_state_dict(gated.state_dict(), strict=False)
    assert not missing and all(".gate_proj." in k for k in unexpected) and unexpected
    return gated, plain


def test_a_gate_of_one_is_plain_llama():
    gated, plain = _gated_and_plain()
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        assert not torch.allclose(gated(ids).logits, plain(ids).logits, atol=1e-4)  # the gate acts at init
        for layer in gated.model.layers:
            layer.self_attn.gate_proj.weight.zero_()
            layer.self_attn.gate_proj.bias.fill_(math.inf)  # sigmoid(+inf) = 1
        a, b = gated(ids, output_hidden_states=True), plain(ids, output_hidden_states=True)
    assert torch.equal(a.logits, b.logits)
    assert all(torch.equal(x, y) for x, y in zip(a.hidden_states, b.hidden_states))


def test_the_gate_is_an_elementwise_head_specific_sigmoid_of_the_block_input():
    """o_proj's input = the plain attention output * sigmoid(X W_g + b_g), X the normed block input (Qiu et al. G1)."""
    gated, plain = _gated_and_plain(1)
    ids = torch.randint(0, 64, (2, 10))
    seen = {}

    def keep(name):
        def hook(mod, args):
            seen.setdefault(name, []).append(args[0].detach().clone())

        return hook

    hooks = [
        gated.model.layers[0].self_attn.o_proj.register_forward_pre_hook(keep("gated_in")),
        plain.model.layers[0].self_attn.o_proj.register_forward_pre_hook(keep("plain_in")),
        gated.model.layers[0].self_attn.register_forward_pre_hook(
            lambda m, args, kwargs: (
                seen.setdefault("x", []).append(kwargs["hidden_states"].clone())
                if "hidden_states" in kwargs
                else seen.setdefault("x", []).append(args[0].clone())
            ),
            with_kwargs=True,
        ),
    ]
    try:
        with torch.no_grad():
            gated(ids), plain(ids)
    finally:
        for h in hooks:
            h.remove()
    att = gated.model.layers[0].self_attn
    x = seen["x"][0]  # (B, T, d): the block input after input_layernorm
    W, bias = att.gate_proj.weight, att.gate_proj.bias  # (H * d_h, d), (H * d_h,)
    gate = 1 / (1 + torch.exp(-(x @ W.T + bias)))  # one value per position, head and channel
    assert gate.shape == seen["gated_in"][0].shape == (2, 10, 4 * 8)
    assert torch.allclose(seen["gated_in"][0], seen["plain_in"][0] * gate, atol=1e-6)
    assert gate.std() > 0.01  # not a constant: it depends on the input


def test_gated_and_lstm_checkpoints_reload_through_from_pretrained(tmp_path):
    """The registered model types load with AutoModelForCausalLM (what the extraction calls)."""
    import transformers as tf

    from core.inputs import lab_models  # noqa: F401 - registers the model types

    for spec in (
        TrainSpec(arch="llama", attn_gate=True, n_layers=1, d_model=32, n_heads=2, vocab_size=512),
        TrainSpec(arch="lstm", n_layers=1, d_model=32, n_heads=2, vocab_size=512, tied=False),
    ):
        torch.manual_seed(0)
        m = build_model(spec, 512, 510, 510).eval()
        m.save_pretrained(tmp_path / spec.arch)
        back = tf.AutoModelForCausalLM.from_pretrained(tmp_path / spec.arch).eval()
        assert type(back) is type(m)
        ids = torch.randint(0, 510, (1, 8))
        with torch.no_grad():
            assert torch.equal(back(ids).logits, m(ids).logits)
        assert (back.get_output_embeddings().weight is back.get_input_embeddings().weight) == spec.tied


def test_the_cli_trains_a_family_with_the_new_options(corpus_file, tmp_path, capsys):
    from core.entry.cli import main

    flags = ["--corpus", corpus_file, "--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "16",
             "--batch-size", "4", "--steps", "2", "--vocab-size", "512", "--eval-tokens", "256", "--device", "cpu",
             "--cache-dir", str(tmp_path), "--quiet"]  # fmt: skip
    out = tmp_path / "run.json"
    assert main(["train", "--arch", "lstm", "--untied", "--matched", *flags, "--out", str(out)]) == 0
    import json

    rec = next(iter(json.loads(out.read_text())["runs"].values()))["record"]
    spec = TrainSpec.from_dict(rec["spec"])
    assert spec.arch == "lstm" and spec.tied is False and spec == matched_spec(spec)
    assert rec["params"] == count_parameters(spec) and f"{rec['params']['total']:,} parameters" in capsys.readouterr().err
    assert main(["train", "--arch", "xlstm", *flags]) == 2
    assert "xLSTMForCausalLM does not train on CPU" in capsys.readouterr().err
    assert main(["train", "--arch", "rwkv", "--attn-gate", *flags]) == 2
    assert "'llama' only" in capsys.readouterr().err
