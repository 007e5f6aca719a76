"""Every streamed attention statistic against a naive per-sequence computation.

The run streams batches of windows of different lengths (padding in every batch) through tiny
random BERT, GPT-2, LLaMA (with grouped-query attention: 4 query heads on 2 key/value heads) and
GPT-NeoX (Pythia's architecture: fused per-head query_key_value, partial rotary) models. The
reference runs each window alone (no padding) with output_attentions=True, captures the query/key
projections with hooks, and computes each definition of core/studies/attention/ literally, query by query.
"""

import math

import numpy as np
import pytest
import torch

from core.base.spec import RunSpec
from core.compute.extract import analysed_masks
from core.inputs.corpora import load_documents, tokenize_budget
from core.inputs.models import load_model
from core.studies.attention import attention_arch, eager_attention, link_matrix, run_attention

SEQ = 24
SEED = 3
TOL = 1e-6


def _spec(model_dir, corpus, policy):
    return RunSpec(model=str(model_dir), corpus=str(corpus), max_tokens=100_000, max_seq_len=SEQ, batch_size=4,
                   device="cpu", dtype="float32", special_tokens=policy, sample=100_000, seed=SEED)


def _reference(model_dir, corpus, dims):
    """Per window: attention probabilities (L, H, T, T), q (L, T, H, dh), k (L, T, Hkv, dh), |x_dims| (L, T, D)."""
    lm = load_model(str(model_dir))
    windows = tokenize_budget(load_documents(str(corpus)), lm.tokenizer, 100_000, SEQ, SEED, str(corpus))
    arch = attention_arch(lm.base)
    H, Hkv, d = arch.n_heads, arch.n_kv_heads, arch.d_model
    grabbed = {}
    hooks = []
    for l, al in enumerate(arch.layers):
        hooks.append(al.q_mod.register_forward_hook(lambda m, a, o, l=l: grabbed.__setitem__((l, "q"), o)))
        if al.k_mod is not None:
            hooks.append(al.k_mod.register_forward_hook(lambda m, a, o, l=l: grabbed.__setitem__((l, "k"), o)))
    per = []
    try:
        with eager_attention(lm.base), torch.inference_mode():
            for ids in windows.ids:
                t = torch.as_tensor(ids)[None]
                out = lm.base(input_ids=t, attention_mask=torch.ones_like(t), output_attentions=True,
                              output_hidden_states=True)
                A = np.stack([a[0].double().numpy() for a in out.attentions])
                qs, ks = [], []
                for l, al in enumerate(arch.layers):
                    q = grabbed[(l, "q")][0].double()
                    if hasattr(al.module, "query_key_value"):  # GPT-NeoX, as its forward does: view(T, H, 3 dh).chunk(3, -1)
                        q, k, _ = q.view(len(ids), H, -1).chunk(3, dim=-1)
                    else:
                        k = q[:, d:2 * d] if al.k_mod is None else grabbed[(l, "k")][0].double()
                        q = q[:, :d] if al.k_mod is None else q
                    qs.append(q.reshape(len(ids), H, -1).numpy())
                    ks.append(k.reshape(len(ids), Hkv, -1).numpy())
                X = np.stack([np.abs(out.hidden_states[l][0].double().numpy()[:, dims]) for l in range(len(arch.layers))])
                per.append(dict(A=A, q=np.stack(qs), k=np.stack(ks), X=X))
    finally:
        for h in hooks:
            h.remove()
    return windows, arch, per


def naive(windows, arch, per, policy, n_out):
    """Each statistic of one run, literally (loops over windows, layers, heads, queries)."""
    masks = analysed_masks(windows, policy)
    L, H, Hkv = len(arch.layers), arch.n_heads, arch.n_kv_heads
    rep = H // Hkv
    causal = arch.layers[0].causal
    out = []
    for l in range(L):
        ent, first, spec, spec_nf = [[] for _ in range(H)], [[] for _ in range(H)], [[] for _ in range(H)], [[] for _ in range(H)]
        alpha = [[] for _ in range(H)]  # Gu et al.'s alpha_1 of each window
        S_all, X_all, sp_all = [], [], []
        Q, K = [], []  # analysed q and k vectors per window
        pair_sum = np.zeros(H)
        pair_n = 0
        pair_mean_q, pair_mean_k = np.zeros((H, per[0]["q"].shape[-1])), np.zeros((H, per[0]["q"].shape[-1]))
        for w, (ids, sp, an, p) in enumerate(zip(windows.ids, windows.special, masks, per)):
            T = len(ids)
            A = p["A"][l]
            for h in range(H):
                alpha[h].append(np.mean([A[h, i, 0] for i in range(T)]))  # every query of the window
                for i in range(T):
                    if not an[i]:
                        continue
                    vis = i + 1 if causal else T
                    a = A[h, i, :vis]
                    if vis >= 2:
                        ent[h].append(-(a[a > 0] * np.log(a[a > 0])).sum() / math.log(vis))
                    first[h].append(A[h, i, 0])
                    spec[h].append(sum(A[h, i, j] for j in range(T) if sp[j]))
                    spec_nf[h].append(sum(A[h, i, j] for j in range(1, T) if sp[j]))
            S = np.zeros((H, T))
            for j in range(T):
                qs = range(j, T) if causal else range(T)
                S[:, j] = np.mean([A[:, i, j] for i in qs], axis=0)
            S_all.append(S)
            X_all.append(p["X"][l])
            sp_all.append(sp)
            q, k = p["q"][l], p["k"][l]
            Q.append(q[an])
            K.append(k[an])
            for i in np.flatnonzero(an):
                for j in np.flatnonzero(an):
                    if causal and j > i:
                        continue
                    for h in range(H):
                        pair_sum[h] += q[i, h] @ k[j, h // rep]
                        pair_mean_q[h] += q[i, h]
                        pair_mean_k[h] += k[j, h // rep]
                    pair_n += 1
        Q, K = np.concatenate(Q), np.concatenate(K)
        dh = Q.shape[-1]
        mu_q, mu_k = Q.mean(0), K.mean(0)  # (H, dh), (Hkv, dh)
        row = {"entropy": [np.mean(e) for e in ent], "sink_first": [np.mean(e) for e in first],
               "alpha_first": [np.mean(e) for e in alpha],
               "sink_special": [np.mean(e) for e in spec], "sink_special_not_first": [np.mean(e) for e in spec_nf]}
        row["q_drift"] = [np.linalg.norm(mu_q[h]) / np.linalg.norm(Q[:, h], axis=1).mean() for h in range(H)]
        row["k_drift"] = [np.linalg.norm(mu_k[h // rep]) / np.linalg.norm(K[:, h // rep], axis=1).mean() for h in range(H)]
        row["cos_mu_qk"] = [mu_q[h] @ mu_k[h // rep] / np.linalg.norm(mu_q[h]) / np.linalg.norm(mu_k[h // rep])
                            for h in range(H)]

        def mean_pair_cos(V):
            U = V / np.linalg.norm(V, axis=1, keepdims=True)
            C = U @ U.T
            return C[~np.eye(len(U), dtype=bool)].mean()

        row["q_mean_cosine"] = [mean_pair_cos(Q[:, h]) for h in range(H)]
        row["k_mean_cosine"] = [mean_pair_cos(K[:, h // rep]) for h in range(H)]
        logit = pair_sum / pair_n / math.sqrt(dh)
        row["mean_logit"] = logit.tolist()
        terms = [(mu_q[h] @ mu_k[h // rep] + mu_q[h] @ (pair_mean_k[h] / pair_n - mu_k[h // rep])
                  + (pair_mean_q[h] / pair_n - mu_q[h]) @ mu_k[h // rep]) / math.sqrt(dh) for h in range(H)]
        row["mean_term_share"] = [t / lg for t, lg in zip(terms, logit)]
        # Outlier link: Pearson r over real key positions, specials included / excluded.
        S_cat = np.concatenate(S_all, axis=1)  # (H, N_real)
        X_cat = np.concatenate(X_all)  # (N_real, D)
        sp_cat = np.concatenate(sp_all)
        link = {}
        for name, keep in (("included", np.ones_like(sp_cat)), ("excluded", ~sp_cat)):
            r = np.array([[np.corrcoef(X_cat[keep, dd], S_cat[h, keep])[0, 1] for dd in range(X_cat.shape[1])]
                          for h in range(H)])
            link[name] = r
        row["link"] = link
        out.append(row)
    return out


FAST = pytest.mark.fast  # the fast tier: the attention statistics of a tiny random encoder and causal LM


@pytest.fixture(scope="module", params=[pytest.param(("bert", "exclude"), marks=FAST), ("bert", "include"),
                                        pytest.param(("gpt2", "exclude"), marks=FAST), ("llama_gqa", "exclude"),
                                        ("neox", "exclude")], ids=lambda p: "-".join(p))
def case(request, cache_dir, varied_txt):
    kind, policy = request.param
    model_dir = request.getfixturevalue(f"tiny_{kind}_dir")
    sec = run_attention(_spec(model_dir, varied_txt, policy), cache_dir)
    dims = sec["outlier_dims"] + sec["random_dims"]
    windows, arch, per = _reference(model_dir, varied_txt, dims)
    return dict(kind=kind, policy=policy, sec=sec, ref=naive(windows, arch, per, policy, len(sec["outlier_dims"])),
                windows=windows, arch=arch)


def test_layout(case):
    sec, w = case["sec"], case["windows"]
    assert sec["code"] and sec["config"]  # the code and rules that made it are in the cache key
    assert sec["n_blocks"] == len(sec["layers"]) == 2
    assert (sec["n_heads"], sec["n_kv_heads"]) == ((4, 2) if case["kind"] == "llama_gqa" else (2, 2))
    assert sec["causal"] == (case["kind"] != "bert")
    assert len({len(i) for i in w.ids}) > 1, "windows of different lengths: padding in the batches"
    assert len(sec["random_dims"]) == 10 and not set(sec["random_dims"]) & set(sec["outlier_dims"])
    assert [r["layer"] for r in sec["layers"]] == [1, 2]


def test_streamed_equals_naive(case):
    sec, ref = case["sec"], case["ref"]
    for row, want in zip(sec["layers"], ref):
        for key in ("entropy", "sink_first", "alpha_first", "sink_special", "sink_special_not_first", "q_drift", "k_drift",
                    "cos_mu_qk", "q_mean_cosine", "k_mean_cosine", "mean_logit", "mean_term_share"):
            np.testing.assert_allclose(np.asarray(row[key], dtype=float), want[key], atol=TOL, rtol=TOL,
                                       err_msg=f"block {row['layer']} {key}")
        D_o = len(sec["outlier_dims"])
        for s in ("included", "excluded"):
            got = np.concatenate([np.asarray(row["link"][s]["outlier_r"], dtype=float).reshape(len(want["entropy"]), D_o),
                                  np.asarray(row["link"][s]["random_r"], dtype=float)], axis=1)
            np.testing.assert_allclose(got, want["link"][s], atol=TOL, err_msg=f"block {row['layer']} link {s}")
    if case["kind"] == "bert":
        # [CLS] and [SEP] are the special tokens: their share is first + the rest
        for row in sec["layers"]:
            np.testing.assert_allclose(row["sink_special"],
                                       np.add(row["sink_first"], row["sink_special_not_first"]), atol=TOL)
    else:
        assert all(v == 0 for row in sec["layers"] for v in row["sink_special"])


def test_cached_apart_from_results(cache_dir, tiny_bert_dir, varied_txt):
    """The section has its own cache entry: a second call is a hit, the run's results stay a hit."""
    from core.compute.pipeline import analyze

    spec = _spec(tiny_bert_dir, varied_txt, "exclude")
    first = run_attention(spec, cache_dir)
    again = run_attention(spec, cache_dir)
    assert again["cache_hit"] and again["layers"] == first["layers"]
    res = analyze(spec, cache_dir)
    assert res["manifest"]["cache_hit"] and again["run_key"] == res["manifest"]["cache_key"]
    assert link_matrix(again, "excluded").shape == (2, 2, len(again["outlier_dims"]))


def test_sdpa_restored_and_no_hook_left(tiny_llama_gqa_dir, varied_txt):
    """Statistics off: the model keeps its SDPA attention; after a run no hook or matrix is left."""
    from core.studies.attention import extract_attention

    lm = load_model(str(tiny_llama_gqa_dir))
    impl = lm.base.config._attn_implementation
    assert impl == "sdpa"
    windows = tokenize_budget(load_documents(str(varied_txt)), lm.tokenizer, 100_000, SEQ, SEED, str(varied_txt))
    with torch.inference_mode():  # transformers installs its own output recorders on a first forward
        lm.base(input_ids=torch.as_tensor(windows.ids[0])[None], output_hidden_states=True, output_attentions=True)
    n_hooks = sum(len(m._forward_hooks) for m in lm.base.modules())
    sums, timing, arch = extract_attention(lm.base, windows, [0, 1], batch_size=4,
                                           pad_id=int(lm.tokenizer.pad_token_id))
    assert lm.base.config._attn_implementation == impl
    assert sum(len(m._forward_hooks) for m in lm.base.modules()) == n_hooks
    assert all(v.ndim <= 4 and v.shape[0] == 2 for k, v in sums.items())  # per-block sums, no (T, T) matrices
    assert sums["link_as"].shape == (2, 2, 4, 2) and sums["sum_k"].shape[1] == 2


def test_neox_split_gives_the_models_queries_and_keys(tiny_neox_dir, varied_txt):
    """The reference's GPT-NeoX q and k are the model's: rotated as the model rotates them (the first
    quarter of each head's dims), their scaled, causally masked softmax is the probabilities it returns;
    and core.studies.attention's split of the fused projection is the same as the reference's."""
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

    windows, arch, per = _reference(tiny_neox_dir, varied_txt, [0])
    lm = load_model(str(tiny_neox_dir))
    assert [al.fused for al in arch.layers] == ["per_head", "per_head"] and arch.layers[0].causal
    head = arch.d_model // arch.n_heads
    for ids, p in list(zip(windows.ids, per))[:3]:
        T = len(ids)
        cos, sin = lm.base.rotary_emb(torch.zeros(1, T, 1, dtype=torch.float64), torch.arange(T)[None])
        assert cos.shape[-1] == head // 4  # partial rotary: the other 3/4 of the dims are not rotated
        for l in range(len(arch.layers)):
            q = torch.as_tensor(p["q"][l]).transpose(0, 1)[None]  # (1, H, T, dh)
            k = torch.as_tensor(p["k"][l]).transpose(0, 1)[None]
            qr, kr = apply_rotary_pos_emb(q, k, cos.double(), sin.double())
            logits = qr @ kr.transpose(-1, -2) / math.sqrt(head)
            logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            np.testing.assert_allclose(torch.softmax(logits, -1)[0].numpy(), p["A"][l], atol=1e-5)
    out = torch.randn(5, 3 * arch.d_model, dtype=torch.float64)
    q_ref, k_ref, _ = out.view(5, arch.n_heads, -1).chunk(3, dim=-1)
    q_got, k_got = arch.layers[0].split(out, arch.n_heads)
    assert torch.equal(q_got, q_ref.reshape(5, -1)) and torch.equal(k_got, k_ref.reshape(5, -1))


def test_unknown_fused_layouts_are_refused():
    """Fused projections of other layouts (Falcon, Bloom: query_key_value; GPT-BigCode: c_attn) are
    refused, not split as GPT-2's or GPT-NeoX's."""
    from transformers import BloomConfig, BloomModel, FalconConfig, FalconModel, GPTBigCodeConfig, GPTBigCodeModel

    for model in (FalconModel(FalconConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2)),
                  BloomModel(BloomConfig(hidden_size=32, n_layer=1, n_head=2)),
                  GPTBigCodeModel(GPTBigCodeConfig(n_embd=32, n_layer=1, n_head=2))):
        with pytest.raises(ValueError, match="layout of its fused query/key/value projection"):
            attention_arch(model)


def test_viewer_maps_of_a_neox_window(cache_dir, tiny_neox_dir, varied_txt):
    """The attention viewer's maps of a GPT-NeoX window are the model's probabilities of that window."""
    from core.studies.attention import attention_maps

    spec = _spec(tiny_neox_dir, varied_txt, "exclude")
    windows, _, per = _reference(tiny_neox_dir, varied_txt, [0])
    got = attention_maps(spec, 2, cache_dir)
    n = got["n_shown"]
    assert got["causal"] and got["maps"].shape == (2, 2, n, n) and n == len(windows.ids[2])
    np.testing.assert_allclose(got["maps"], per[2]["A"][:, :, :n, :n], atol=1e-6)
