"""The logit lens (nostalgebraist 2020) of a causal LM, computed at run time on the run's token sample.

Each hidden state h_l of a sampled position is read by the model's own final norm and unembedding:
lens_l = softmax(W_U norm(h_l)). transformers returns the last hidden state with the final norm
already applied, so the last layer is read by W_U alone: lens_L is exactly the model's output
distribution ("final"). Per layer, over a seeded subset of at most LENS_POSITIONS of the sampled
positions (the full vocabulary at every layer costs V x d per position and layer):

- `kl`: mean KL(final || lens_l) in nats (0 at the last layer);
- `entropy`: mean entropy of lens_l in nats;
- `agreement`: share of positions whose lens top-1 token is the final top-1 token;
- the most frequent lens top-1 tokens (decoded text and count).

Opt-in (RunSpec.logit_lens): it costs more than the 10% of a run that the other statistics keep to.
torch is imported at the top: only core.compute.forward_run (a cache miss) imports this module (the lens's
views, which read the stored arrays, are core/views/lens.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..inputs.anatomy import candidates, final_norm, hidden_size, unembedding
from ..stats.geometry import cka_positions
from ..stats.registry import LENS_POSITIONS

__all__ = ["LENS_POSITIONS", "LENS_TOP", "final_norm", "unembedding", "lens_logits", "logit_lens", "not_applicable"]

# LENS_POSITIONS (core.stats.registry): positions of the sample read by the lens (a seeded subset, the same in every layer)
LENS_TOP = 10  # most frequent lens top-1 tokens kept per layer
LENS_CHUNK = 64  # positions per product with the unembedding (memory: chunk x vocabulary floats)


def not_applicable(model: Any, modality: str = "text") -> str | None:
    """Why the lens does not apply to `model` (None when it does)."""
    if modality != "text":
        return f"{modality} encoders have no vocabulary to read hidden states into"
    cls = type(model).__name__
    if not (cls.endswith("ForCausalLM") or cls.endswith("LMHeadModel")) or unembedding(model) is None:
        return f"{cls} has no LM head (the lens reads hidden states with a causal LM's own unembedding)"
    if final_norm(model) is None:
        return f"{cls}: no final norm module found ({', '.join(candidates()['final_norm'])})"
    d, d_in = hidden_size(model), getattr(unembedding(model), "in_features", None)
    if d and d_in and d_in != d:  # OPT-350m: a projection between the last hidden state and its unembedding
        return f"{cls}'s unembedding reads {d_in} dimensions, its hidden states have {d}"
    return None


def lens_logits(model: Any, h, last: bool):
    """(n, V) float32 logits of the lens on hidden states h (n, d): W_U norm(h), or W_U h for the last
    hidden state (transformers has applied the final norm to it)."""
    head, norm = unembedding(model), final_norm(model)
    w = head.weight
    h = torch.as_tensor(h).to(device=w.device, dtype=w.dtype)
    with torch.inference_mode():
        return head(h if last else norm(h)).float()


def logit_lens(model: Any, tokenizer: Any, sample: np.ndarray, layer_ids, n_hidden: int, seed: int = 0,
               positions: int = LENS_POSITIONS) -> tuple[dict, dict]:
    """(arrays, meta) of the lens over the run's sample (L+1, K, d) of kept layers `layer_ids`.

    arrays: `lens_kl`, `lens_entropy`, `lens_agreement` (one value per kept layer, NaN where the lens
    cannot be read); meta: positions used, top tokens per layer. Needs the last hidden state
    (index n_hidden - 1) among the kept layers: the model's output distribution."""
    ids = [int(i) for i in layer_ids]
    L1, K = sample.shape[0], sample.shape[1]
    nan = np.full(L1, np.nan)
    if (n_hidden - 1) not in ids or K < 1:
        why = "the run did not keep the last layer (the model's output)" if K else "no sampled position"
        return {"lens_kl": nan, "lens_entropy": nan.copy(), "lens_agreement": nan.copy()}, {"not_applicable": why}
    idx = cka_positions(K, positions, seed)
    last = ids.index(n_hidden - 1)
    kl, ent, agree = np.zeros(L1), np.zeros(L1), np.zeros(L1)
    top1 = np.zeros((L1, len(idx)), dtype=np.int64)
    for a in range(0, len(idx), LENS_CHUNK):
        rows = idx[a:a + LENS_CHUNK]
        logp_f = torch.log_softmax(lens_logits(model, sample[last, rows], True), -1)
        p_f, arg_f = logp_f.exp(), logp_f.argmax(-1)
        for l in range(L1):
            logp = logp_f if l == last else torch.log_softmax(lens_logits(model, sample[l, rows], ids[l] == n_hidden - 1), -1)
            kl[l] += float((p_f * (logp_f - logp)).sum())
            ent[l] += float(-(logp.exp() * logp).sum())
            arg = logp.argmax(-1)
            agree[l] += float((arg == arg_f).sum())
            top1[l, a:a + len(rows)] = arg.cpu().numpy()
    n = len(idx)
    top = []
    for l in range(L1):
        tok, cnt = np.unique(top1[l], return_counts=True)
        order = np.lexsort((tok, -cnt))[:LENS_TOP]  # by count, ties by smaller id
        top.append([{"token_id": int(tok[i]), "text": tokenizer.decode([int(tok[i])]), "count": int(cnt[i])}
                    for i in order])
    meta = {"n_positions": int(n), "sample_size": int(K),
            "positions": (f"a seeded subset of {n} of the {K} sampled positions" if n < K else f"all {K} sampled positions"),
            "top_tokens": top}
    return {"lens_kl": kl / n, "lens_entropy": ent / n, "lens_agreement": agree / n}, meta
