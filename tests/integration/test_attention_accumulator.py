"""The attention accumulator's reductions (float32 rows, float64 sums, chunked entropy, geometry on
the analysed positions) against a float64 computation window by window, on synthetic batches with
what real runs rarely give the model-based tests: a window with no analysed position, a window of
one real token, long rows that the entropy splits into many chunks, causal and bidirectional
attention, grouped-query heads."""

import math

import numpy as np
import pytest
import torch

from core.studies.attention import Arch, AttentionAccumulator, AttnLayer
from core.studies.attention.stats import _Batch


def _batch(causal: bool, T: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = [T, T - 5, 1, T - 2]  # window 2: one real token
    B = len(lengths)
    real = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        real[b, :n] = True
    special = torch.zeros(B, T, dtype=torch.bool)
    special[:, 0] = True
    special[0, T - 1] = True
    special[1, 7] = True
    special &= real
    analysed = real & ~special
    analysed[3] = False  # a window with no analysed position
    logits = torch.randn(B, 1, T, T, generator=g) * 2
    mask = real[:, None, None, :].expand(B, 1, T, T).clone()
    if causal:
        mask &= torch.ones(T, T, dtype=torch.bool).tril()
    return real, special, analysed, logits, mask, g


def _naive(real, special, analysed, A, q, k, x, causal, rep):
    """Every sum of one layer from float64 copies, window by window."""
    A, q, k, x = A.double().numpy(), q.double().numpy(), k.double().numpy(), x.double().numpy()
    B, H, T, _ = A.shape
    out = {k_: 0.0 for k_ in ("n_q", "n_entropy", "qk_n", "pairs")}
    for k_ in ("sum_entropy", "sum_first", "sum_special", "sum_special_nf", "pair_qk", "sum_qnorm"):
        out[k_] = np.zeros(H)
    out["sum_q"] = np.zeros(q.shape[2:])
    out["sum_qu"] = np.zeros(q.shape[2:])
    out["pair_q"] = np.zeros(q.shape[2:])
    out["sum_k"] = np.zeros(k.shape[2:])
    out["sum_ku"] = np.zeros(k.shape[2:])
    out["sum_knorm"] = np.zeros(k.shape[2])
    out["pair_k"] = np.zeros(k.shape[2:])
    link = {s: dict(n=0.0, a=0, a2=0, s=0, s2=0, as_=0) for s in (0, 1)}
    for b in range(B):
        n = int(real[b].sum())
        an = analysed[b].numpy()
        sp = special[b].numpy()
        S = np.zeros((H, T))
        for t in range(n):
            seen_by = range(t, n) if causal else range(n)
            S[:, t] = np.mean([A[b, :, i, t] for i in seen_by], axis=0)
        for i in np.flatnonzero(an):
            vis = i + 1 if causal else n
            a = A[b, :, i, :vis]
            out["n_q"] += 1
            if vis >= 2:
                with np.errstate(divide="ignore", invalid="ignore"):
                    out["sum_entropy"] += -np.where(a > 0, a * np.log(a), 0).sum(-1) / math.log(vis)
                out["n_entropy"] += 1
            out["sum_first"] += A[b, :, i, 0]
            out["sum_special"] += A[b, :, i, :][:, sp].sum(-1)
            out["sum_special_nf"] += A[b, :, i, 1:][:, sp[1:]].sum(-1)
            out["qk_n"] += 1
            out["sum_q"] += q[b, i]
            out["sum_qnorm"] += np.linalg.norm(q[b, i], axis=-1)
            out["sum_qu"] += q[b, i] / np.linalg.norm(q[b, i], axis=-1, keepdims=True)
            out["sum_k"] += k[b, i]
            out["sum_knorm"] += np.linalg.norm(k[b, i], axis=-1)
            out["sum_ku"] += k[b, i] / np.linalg.norm(k[b, i], axis=-1, keepdims=True)
            js = [j for j in np.flatnonzero(an) if not (causal and j > i)]  # the keys query i sees
            kj = np.repeat(k[b, js], rep, axis=1)  # (n_js, H, dh): query head h reads key head h // rep
            out["pair_qk"] += (q[b, i][None] * kj).sum((0, 2))
            out["pair_q"] += len(js) * q[b, i]
            out["pair_k"] += k[b, js].sum(0)
            out["pairs"] += len(js)
        for s, keep in ((0, real[b].numpy()), (1, real[b].numpy() & ~sp)):
            xs, Ss = np.abs(x[b][keep]), S[:, keep]
            d = link[s]
            d["n"] += keep.sum()
            d["a"] = d["a"] + xs.sum(0)
            d["a2"] = d["a2"] + (xs ** 2).sum(0)
            d["s"] = d["s"] + Ss.sum(1)
            d["s2"] = d["s2"] + (Ss ** 2).sum(1)
            d["as_"] = d["as_"] + Ss @ xs
    out["link"] = link
    return out


@pytest.mark.parametrize("causal,H,Hkv,T,chunk", [(False, 2, 2, 40, None), (True, 4, 2, 40, None),
                                                   (True, 2, 1, 300, None), (False, 2, 2, 40, 300),
                                                   (True, 4, 2, 40, 300)],
                         ids=["bidirectional", "causal-gqa", "causal-long-rows", "bidirectional-small-chunks",
                              "causal-small-chunks"])
def test_accumulator_equals_float64_per_window(causal, H, Hkv, T, chunk, monkeypatch):
    if chunk is not None:  # the entropy's passes over many small chunks (one row or a few rows each)
        monkeypatch.setattr("core.studies.attention.stats._CHUNK", chunk)
    real, special, analysed, logits, mask, g = _batch(causal, T, seed=T + H)
    B, dh, D = real.shape[0], 8, 3
    scores = (torch.randn(B, H, T, T, generator=g) * 2).masked_fill(~mask, float("-inf"))
    A = torch.softmax(scores, -1).nan_to_num(0.0)  # (B, H, T, T) float32, 0 on masked keys
    q = torch.randn(B, T, H * dh, generator=g) + 1.5  # a shared offset: drift, as in trained models
    k = torch.randn(B, T, Hkv * dh, generator=g) - 0.5
    x = torch.randn(B, T, 6, generator=g)
    arch = Arch([AttnLayer(None, None, object(), causal)], H, Hkv, H * dh)
    acc = AttentionAccumulator(arch, [1, 3, 4][:D], "cpu", head_dim=dh)
    acc.batch = _Batch(real=real, analysed=analysed, special=special, n_real=real.sum(1).to(torch.float64))
    acc.batch.stash[(0, "q")], acc.batch.stash[(0, "k")] = q, k
    acc._attention(0, A)
    acc._geometry(0)
    acc.link([x])
    got = acc.numpy()
    want = _naive(real, special, analysed, A, q.view(B, T, H, dh), k.view(B, T, Hkv, dh),
                  x[..., [1, 3, 4]], causal, H // Hkv)
    tol = dict(rtol=1e-6, atol=1e-6)
    for key in ("n_q", "n_entropy", "qk_n", "pairs", "sum_entropy", "sum_first", "sum_special", "sum_special_nf",
                "sum_q", "sum_qnorm", "sum_qu", "sum_k", "sum_knorm", "sum_ku", "pair_qk", "pair_q", "pair_k"):
        np.testing.assert_allclose(got[key][0], want[key], err_msg=key, **tol)
    for s in (0, 1):
        w = want["link"][s]
        np.testing.assert_allclose(got["link_n"][0, s], w["n"], **tol)
        for key, name in (("link_a", "a"), ("link_a2", "a2"), ("link_s", "s"), ("link_s2", "s2"), ("link_as", "as_")):
            np.testing.assert_allclose(got[key][0, s], w[name], err_msg=f"{key} set {s}", **tol)
    assert got["n_q"][0] == int(analysed.sum()) and int(analysed[3].sum()) == 0
