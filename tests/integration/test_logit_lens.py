"""The logit lens (core/compute/lens.py) against the model's own forward and an independent numpy computation.

Tiny random LLaMA (RMSNorm) and GPT-2 (LayerNorm): the lens at the last layer is the model's logits
(transformers returns the last hidden state already normed) and its KL is 0; at every layer the
per-layer KL, entropy and top-1 agreement equal a float64 numpy computation from the model's weights
on the sampled hidden states. A model without an LM head (tiny BERT) is said not to apply.
"""

import numpy as np
import pytest
import torch

from core.base.spec import RunSpec
from core.compute.lens import lens_logits
from core.compute.pipeline import get_stats
from core.inputs.models import load_model
from core.stats.assemble import build_results

SEQ = 24


def _spec(model_dir, corpus, **kw):
    return RunSpec(model=str(model_dir), corpus=str(corpus), max_tokens=400, max_seq_len=SEQ, batch_size=4,
                   device="cpu", dtype="float32", sample=400, seed=3, logit_lens=True, **kw)


def _norm_np(kind, model, h):
    """The final norm written out in numpy (float64), from the model's parameters."""
    if kind == "llama":
        w, eps = model.model.norm.weight.detach().double().numpy(), model.config.rms_norm_eps
        return h / np.sqrt((h * h).mean(1, keepdims=True) + eps) * w
    ln = model.transformer.ln_f
    mu, var = h.mean(1, keepdims=True), h.var(1, keepdims=True)
    return (h - mu) / np.sqrt(var + ln.eps) * ln.weight.detach().double().numpy() + ln.bias.detach().double().numpy()


def _log_softmax(z):
    z = z - z.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


@pytest.mark.parametrize("kind", ["llama", pytest.param("gpt2", marks=pytest.mark.slow)])  # GPT-2: LayerNorm, tied head
def test_lens_matches_the_model_and_a_numpy_computation(kind, request, cache_dir, varied_txt):
    model_dir = request.getfixturevalue(f"tiny_{kind}_dir")
    stats = get_stats(_spec(model_dir, varied_txt), cache_dir)
    a, lens = stats.arrays, stats.meta["logit_lens"]
    K = a["sample"].shape[1]
    assert lens["n_positions"] == K <= 400 and "all" in lens["positions"]
    lm = load_model(str(model_dir))
    model = lm.model
    # The last layer's lens is the model's own output at every sampled position.
    from core.inputs.corpora import load_documents, tokenize_budget

    windows = tokenize_budget(load_documents(str(varied_txt)), lm.tokenizer, 400, SEQ, 3, str(varied_txt))
    with torch.inference_mode():
        logits = [model(input_ids=torch.as_tensor(ids)[None]).logits[0].numpy() for ids in windows.ids]
    want = np.stack([logits[w][p] for w, p in zip(a["sample_window"], a["sample_position"])])
    got = lens_logits(model, a["sample"][-1], last=True).numpy()
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
    assert a["lens_kl"][-1] == pytest.approx(0.0, abs=1e-7) and a["lens_agreement"][-1] == 1.0
    # Every layer against numpy in float64 (the middle layers through the final norm).
    W = model.get_output_embeddings().weight.detach().double().numpy()
    logp_f = _log_softmax(a["sample"][-1].astype(np.float64) @ W.T)
    for l in range(a["sample"].shape[0]):
        h = a["sample"][l].astype(np.float64)
        logp = logp_f if l == a["sample"].shape[0] - 1 else _log_softmax(_norm_np(kind, model, h) @ W.T)
        p_f, p = np.exp(logp_f), np.exp(logp)
        assert a["lens_kl"][l] == pytest.approx((p_f * (logp_f - logp)).sum(1).mean(), rel=1e-4, abs=1e-6)
        assert a["lens_entropy"][l] == pytest.approx(-(p * logp).sum(1).mean(), rel=1e-5)
        assert a["lens_agreement"][l] == pytest.approx((logp.argmax(1) == logp_f.argmax(1)).mean())
        top = np.bincount(logp.argmax(1)).max()
        assert lens["top_tokens"][l][0]["count"] == top
    res = build_results(stats)
    assert [r["logit_lens_kl"] for r in res["layers"]] == pytest.approx(a["lens_kl"].tolist())
    assert res["logit_lens"]["top_tokens"][0][0]["text"] == lm.tokenizer.decode([lens["top_tokens"][0][0]["token_id"]])


def test_lens_is_not_applicable_without_an_lm_head(tiny_bert_dir, cache_dir, varied_txt):
    stats = get_stats(_spec(tiny_bert_dir, varied_txt), cache_dir)
    res = build_results(stats)
    assert "LM head" in res["logit_lens"]["not_applicable"]
    assert all(r["logit_lens_kl"] is None for r in res["layers"])
