"""Godey et al.'s mechanism in a controlled setting: drift of the inputs vs sharpness of attention.

One randomly initialised pre-norm Transformer block (d, heads; seeded) reads isotropic Gaussian
token vectors g ~ N(0, I/d) (so E||g|| ~ 1) plus one drift vector shared by every token,
x = g + alpha * u (u a seeded unit vector, alpha its norm). The attention logits are divided by a
temperature tau (q.k / (tau sqrt(d_h))). For each (alpha, tau) we measure the block output's mean
cosine over all ordered token pairs (the exact closed form of DESIGN.md), the input's mean cosine,
and the attention entropy normalised by log T (mean over heads and queries). No trained weights,
seconds on CPU; cached on the spec.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .config import cache_identity
from .errors import InputError
from .pipeline import get_store
from .spec import stable_hash


@dataclass(frozen=True)
class DriftSpec:
    d: int = 64
    heads: int = 4
    seq_len: int = 32
    n_seq: int = 32
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
    taus: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    seed: int = 0

    def __post_init__(self):
        for name in ("d", "heads", "seq_len", "n_seq"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive integer, got {v!r}.")
        if self.d % self.heads:
            raise InputError(f"d={self.d} is not divisible by heads={self.heads}.")
        if self.seq_len < 2:
            raise InputError("seq_len must be at least 2 (attention entropy needs two keys).")
        if self.d > 1024 or self.seq_len * self.n_seq > 65_536:
            raise InputError("The controlled experiment is meant to be small: d <= 1024 and seq_len x n_seq "
                             "<= 65,536 tokens.")
        if not self.alphas or not self.taus:
            raise InputError("Give at least one alpha and one tau.")
        if any(not math.isfinite(a) or a < 0 for a in self.alphas):
            raise InputError("alphas (drift norms) must be finite and >= 0.")
        if any(not math.isfinite(t) or t <= 0 for t in self.taus):
            raise InputError("taus (temperatures) must be finite and > 0.")
        object.__setattr__(self, "alphas", tuple(float(a) for a in self.alphas))
        object.__setattr__(self, "taus", tuple(float(t) for t in self.taus))

    def to_dict(self) -> dict:
        return asdict(self)


def _mean_cosine(x) -> float:
    """Exact mean cosine over ordered pairs i != j of the rows of x (N, d): (||sum u||^2 - N) / (N (N - 1))."""
    u = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    s = u.sum(0)
    n = x.shape[0]
    return float(((s @ s) - n) / (n * (n - 1)))


def _block(d: int, heads: int, seed: int):
    """A pre-norm Transformer block with PyTorch's default (seeded) initialisation."""
    # lazy: keeps torch out of a cache hit
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    try:
        mods = nn.ModuleDict({"ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d), "out": nn.Linear(d, d),
                              "ln2": nn.LayerNorm(d), "fc1": nn.Linear(d, 4 * d), "fc2": nn.Linear(4 * d, d)})
    finally:
        torch.random.set_rng_state(torch_state)
    return mods.double().eval()


def _forward(m, x, heads: int, tau: float):
    """(block output (B, T, d), attention probabilities (B, H, T, T)) of one pre-norm block."""
    # lazy: keeps torch out of a cache hit
    import torch

    B, T, d = x.shape
    dh = d // heads
    q, k, v = m["qkv"](m["ln1"](x)).split(d, dim=-1)
    q, k, v = (t.reshape(B, T, heads, dh).transpose(1, 2) for t in (q, k, v))  # (B, H, T, dh)
    a = torch.softmax(q @ k.transpose(-1, -2) / (tau * math.sqrt(dh)), dim=-1)
    h = x + m["out"]((a @ v).transpose(1, 2).reshape(B, T, d))
    y = h + m["fc2"](torch.nn.functional.gelu(m["fc1"](m["ln2"](h))))
    return y, a


def run_drift(spec: DriftSpec) -> dict:
    """The alpha x tau sweep (no cache): {"spec", "output_mean_cosine", "input_mean_cosine",
    "attention_entropy"}, each a list over alphas of lists over taus."""
    # lazy: keeps torch out of a cache hit
    import torch

    gen = torch.Generator().manual_seed(spec.seed)
    block = _block(spec.d, spec.heads, spec.seed)
    g = torch.randn(spec.n_seq, spec.seq_len, spec.d, generator=gen, dtype=torch.float64) / math.sqrt(spec.d)
    u = torch.randn(spec.d, generator=gen, dtype=torch.float64)
    u = u / u.norm()
    out_cos, in_cos, ent = [], [], []
    with torch.inference_mode():
        for alpha in spec.alphas:
            x = g + alpha * u
            in_cos.append(_mean_cosine(x.reshape(-1, spec.d)))
            row_c, row_e = [], []
            for tau in spec.taus:
                y, a = _forward(block, x, spec.heads, tau)
                row_c.append(_mean_cosine(y.reshape(-1, spec.d)))
                row_e.append(float(torch.special.entr(a).sum(-1).mean() / math.log(spec.seq_len)))
            out_cos.append(row_c)
            ent.append(row_e)
    return {"spec": spec.to_dict(), **cache_identity("drift"), "output_mean_cosine": out_cos,
            "input_mean_cosine": [[c] * len(spec.taus) for c in in_cos], "attention_entropy": ent,
            "n_tokens": spec.n_seq * spec.seq_len,
            "block": "pre-norm: h = x + Attn(LN(x)), y = h + MLP(LN(h)); PyTorch default init, float64"}


def drift_experiment(spec: DriftSpec, cache_dir=None) -> dict:
    """`run_drift`, cached on the spec."""

    store = get_store(cache_dir)
    key = "drift:" + stable_hash({"spec": spec.to_dict(), **cache_identity("drift")})
    got = store.get_json(key)
    if got is not None:
        return {**got, "cache_hit": True}
    got = run_drift(spec)
    store.put(key, got)
    return {**got, "cache_hit": False}


def grid(result: dict, key: str) -> np.ndarray:
    """(alphas, taus) array of one measured quantity."""
    return np.asarray(result[key], dtype=float)
