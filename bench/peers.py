"""The naive peer, the way papers' scripts do it: one forward per document (batch of 1, no padding), every analysed
token's hidden states kept in numpy, then per layer the mean cosine on all pairs (sklearn's N x N matrix) or on
sampled pairs. Same windows and analysed positions as the tool, so its numbers compare with the exact mean_cosine."""

from __future__ import annotations

from typing import Callable

import numpy as np


def gather_hidden_states(model, windows, analysed: list[np.ndarray], stage: Callable[[str], None],
                         device: str = "cpu") -> list[np.ndarray]:
    """Per layer (N, d) float32 hidden states of all analysed tokens, one forward per document."""
    import torch  # lazy: torch only in the sections that run a model

    per_layer: list[list[np.ndarray]] | None = None
    with torch.no_grad():
        for ids, mask in zip(windows.ids, analysed):
            out = model(input_ids=torch.as_tensor(ids)[None, :].to(device), output_hidden_states=True)
            hs = out.hidden_states
            if per_layer is None:
                per_layer = [[] for _ in hs]
            m = torch.as_tensor(mask).to(device)
            for layer, h in enumerate(hs):
                per_layer[layer].append(h[0][m].float().cpu().numpy().copy())
    stage("concatenate")
    return [np.concatenate(chunks) for chunks in (per_layer or [])]


def sampled_pairs_mean_cosine(H: np.ndarray, n_pairs: int, seed: int = 0) -> float:
    """Mean cosine over n_pairs random ordered pairs (i, j), i != j (an estimate)."""
    rng = np.random.default_rng(seed)
    N = len(H)
    i = rng.integers(0, N, size=n_pairs)
    j = rng.integers(0, N - 1, size=n_pairs)
    j = j + (j >= i)  # uniform over j != i
    U = H / np.maximum(np.linalg.norm(H, axis=1, keepdims=True), 1e-30)
    return float(np.einsum("nd,nd->n", U[i], U[j]).mean())


def all_pairs_mean_cosine(H: np.ndarray) -> float:
    """Mean cosine over all ordered pairs i != j, the way scripts do it: the full N x N matrix."""
    from sklearn.metrics.pairwise import cosine_similarity

    S = cosine_similarity(H)
    off = ~np.eye(len(H), dtype=bool)
    return float(S[off].mean(dtype=np.float64))


def run_peer(model, windows, analysed, mode: str, n_pairs: int = 10_000, stage: Callable[[str], None] = lambda s: None,
             device: str = "cpu") -> dict:
    """The whole peer after model load and tokenization (`stage`: told each stage's name as it starts). mode: "sampled"
    (layer l's pairs drawn with seed l) or "allpairs"."""
    if mode not in ("sampled", "allpairs"):
        raise ValueError(f"mode must be 'sampled' or 'allpairs', got {mode!r}")
    stage("forward+gather")
    H = gather_hidden_states(model, windows, analysed, stage, device)
    stage("similarity")
    vals = [sampled_pairs_mean_cosine(h, n_pairs, l) if mode == "sampled" else all_pairs_mean_cosine(h) for l, h in enumerate(H)]
    return {"mean_cosine": vals, "n_tokens": int(len(H[0])) if H else 0,
            "hidden_bytes": int(sum(h.nbytes for h in H))}
