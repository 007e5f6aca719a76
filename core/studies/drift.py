"""Godey et al.'s mechanism in a controlled setting: query/key drift vs input drift, at a temperature.

One randomly initialised pre-norm Transformer block (d, heads; seeded; bias-free unless `biases`) reads
isotropic Gaussian token vectors g ~ N(0, I/d) (so E||g|| ~ 1). The attention logits are divided by a
temperature tau (q.k / (tau sqrt(d_h))). A shared direction of relative norm alpha is added in one of
four places (the experiment's `target`):

- ``query``, ``key``, ``query_key``: the isolated experiment. The residual input and the values stay
  isotropic; every query (key) of head h receives alpha r_q u_q[h] (alpha r_k u_k[h]), r the RMS
  query (key) norm of the undrifted block and u a seeded unit vector per head. ``query_key`` uses one
  common direction per head (u_k = u_q), as Godey et al. describe for trained models.
- ``input``: the named baseline, "input drift": x = g + alpha u (u a seeded unit vector in R^d). The
  inputs are then anisotropic themselves (mean cosine ~ alpha^2 / (1 + alpha^2)), so the output's
  anisotropy follows by construction; it is not the query/key mechanism.

For each (target, alpha, tau) we measure the block output's mean cosine over all ordered token pairs
(the exact closed form of DESIGN.md), the same over the pairs of one sequence only, and the attention
entropy normalised by log T (mean over heads and queries); per alpha, the input's mean cosine and the
measured drift ratios ||mu_Q|| / E||q|| and ||mu_K|| / E||k|| (mean over heads; the Attention page's
q_drift and k_drift of a real model). No trained weights, seconds on CPU; cached on the spec.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..base.cache import get_store
from ..base.config import cache_identity
from ..base.errors import InputError
from ..base.spec import stable_hash
from ..stats.kernels import mean_cosine_replicates
from .papers.claims import drift_experiments

# The experiment's targets: where the shared direction is added, in the order they are drawn.
TARGETS = ("query_key", "query", "key", "input")
ISOLATED = ("query_key", "query", "key")  # the residual input and the values stay isotropic
BASELINE = "input"
TARGET_NAMES = {"query_key": "query and key drift (isolated)", "query": "query drift (isolated)",
                "key": "key drift (isolated)", "input": "input drift (baseline)"}
TARGET_WHAT = {
    "query_key": "q + alpha r_q u, k + alpha r_k u (one common direction u per head); inputs and values isotropic",
    "query": "q + alpha r_q u_q per head; keys, values and inputs isotropic",
    "key": "k + alpha r_k u_k per head; queries, values and inputs isotropic",
    "input": "x = g + alpha u: the drift is in the inputs, so everything downstream (queries, keys, values and "
             "the residual) shares it",
}
QUANTITIES = ("output_mean_cosine", "output_within_sequence_cosine", "attention_entropy")  # (alphas, taus) grids
PER_ALPHA = ("input_mean_cosine", "q_drift", "k_drift")  # one value per alpha


@dataclass(frozen=True)
class DriftSpec:
    d: int = 64
    heads: int = 4
    seq_len: int = 32
    n_seq: int = 32
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
    taus: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    seed: int = 0
    biases: bool = False  # PyTorch's default bias init in the block's linear layers (a vector shared by all tokens)

    def __post_init__(self):
        for name in ("d", "heads", "seq_len", "n_seq"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"{name} must be a positive integer, got {v!r}.")
        if self.d % self.heads:
            raise InputError(f"d={self.d} is not divisible by heads={self.heads}.")
        if self.seq_len < 2:
            raise InputError("seq_len must be at least 2 (attention entropy needs two keys).")
        if self.d > 1024 or self.seq_len * self.n_seq > 65_536:
            raise InputError("The controlled experiment is meant to be small: d <= 1024 and seq_len x n_seq "
                             "<= 65,536 tokens.")
        if not isinstance(self.biases, bool):
            raise InputError(f"biases must be true or false, got {self.biases!r}.")
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


def _within_cosine(y) -> float:
    """Mean cosine over the ordered pairs i != j of one sequence, all sequences pooled; y (B, T, d)."""
    u = y / y.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    s = u.sum(1)  # (B, d)
    B, T = y.shape[:2]
    return float(((s * s).sum() - B * T) / (B * T * (T - 1)))


DRIFT_BOOT = 1000  # bootstrap replicates over the sequences (one set of sequence weights for every alpha and tau)
DRIFT_BOOT_SEED = 35


def _sequence_replicates(y) -> np.ndarray:
    """(DRIFT_BOOT,) bootstrap replicates of the output's mean cosine over all token pairs, resampling the
    sequences (`metrics.mean_cosine_replicates`, the sequences as groups; one seed, so the same weights at
    every alpha and tau: a difference of two cells has paired replicates)."""
    u = y / y.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    S = u.sum(1).numpy()  # (B, d)
    n = np.full(S.shape[0], float(y.shape[1]))
    q = (u * u).sum((1, 2)).numpy()
    return mean_cosine_replicates(S, n, n_boot=DRIFT_BOOT, seed=DRIFT_BOOT_SEED, group_u_sq=q)


def _rise_intervals(reps: np.ndarray, alphas) -> dict:
    """95% intervals of the output mean cosine's rise from the smallest to the largest alpha, per tau
    (`output_mean_cosine_rise_ci`) and of its mean over tau (`output_mean_cosine_rise_mean_ci`); reps
    (alphas, taus, DRIFT_BOOT). Empty with one sequence (no replicates)."""
    if reps.ndim != 3 or reps.shape[-1] == 0:
        return {}
    a = np.asarray(alphas, dtype=float)
    rise = reps[int(np.argmax(a))] - reps[int(np.argmin(a))]  # (taus, boot)

    def q(r):
        r = r[np.isfinite(r)]
        return [float(x) for x in np.quantile(r, [0.025, 0.975])] if r.size >= 2 else None

    return {"output_mean_cosine_rise_ci": [q(r) for r in rise], "output_mean_cosine_rise_mean_ci": q(rise.mean(0))}


def _block(d: int, heads: int, seed: int, biases: bool = True):
    """A pre-norm Transformer block with PyTorch's default (seeded) initialisation; biases zeroed unless asked."""
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
    if not biases:
        with torch.no_grad():
            for name in ("qkv", "out", "fc1", "fc2"):
                mods[name].bias.zero_()
    return mods.double().eval()


def _inputs(spec: DriftSpec):
    """(g (n_seq, seq_len, d), u (d,), u_q (heads, d_h), u_k (heads, d_h)): the seeded isotropic tokens and
    the unit drift directions (input, query, key)."""
    # lazy: keeps torch out of a cache hit
    import torch

    gen = torch.Generator().manual_seed(spec.seed)
    g = torch.randn(spec.n_seq, spec.seq_len, spec.d, generator=gen, dtype=torch.float64) / math.sqrt(spec.d)
    u = torch.randn(spec.d, generator=gen, dtype=torch.float64)
    dh = spec.d // spec.heads
    uq = torch.randn(spec.heads, dh, generator=gen, dtype=torch.float64)
    uk = torch.randn(spec.heads, dh, generator=gen, dtype=torch.float64)
    return u.div(u.norm()), g, uq / uq.norm(dim=-1, keepdim=True), uk / uk.norm(dim=-1, keepdim=True)


def _qkv(m, x, heads: int):
    """Queries, keys, values (B, H, T, d_h) of one pre-norm block."""
    B, T, d = x.shape
    q, k, v = m["qkv"](m["ln1"](x)).split(d, dim=-1)
    return tuple(t.reshape(B, T, heads, d // heads).transpose(1, 2) for t in (q, k, v))


def _rest(m, x, q, k, v, tau: float):
    """(block output (B, T, d), attention probabilities (B, H, T, T)) from the residual input and q, k, v."""
    # lazy: keeps torch out of a cache hit
    import torch

    B, H, T, dh = q.shape
    a = torch.softmax(q @ k.transpose(-1, -2) / (tau * math.sqrt(dh)), dim=-1)
    h = x + m["out"]((a @ v).transpose(1, 2).reshape(B, T, H * dh))
    y = h + m["fc2"](torch.nn.functional.gelu(m["fc1"](m["ln2"](h))))
    return y, a


def _drift_ratio(t) -> float:
    """||mean over tokens|| / mean ||t||, per head, averaged over heads; t (B, H, T, d_h)."""
    flat = t.transpose(0, 1).reshape(t.shape[1], -1, t.shape[-1])  # (H, N, d_h)
    return float((flat.mean(1).norm(dim=-1) / flat.norm(dim=-1).mean(1)).mean())


def _rms(t) -> float:
    return float(t.pow(2).sum(-1).mean().sqrt())


def _drifted(m, g, u, uq, uk, target: str, alpha: float, heads: int, base):
    """(residual input x, q, k, v) of one target at drift alpha; `base` = (q, k, v) of the undrifted block."""
    if target == BASELINE:
        x = g + alpha * u
        return (x, *_qkv(m, x, heads))
    q, k, v = base
    if target in ("query", "query_key"):
        q = q + alpha * _rms(base[0]) * uq[None, :, None, :]
    if target in ("key", "query_key"):
        k = k + alpha * _rms(base[1]) * (uq if target == "query_key" else uk)[None, :, None, :]
    return g, q, k, v


def run_drift(spec: DriftSpec) -> dict:
    """The alpha x tau sweep of every target (no cache): {"spec", "experiments": {target: {"name", "what",
    <QUANTITIES>: lists over alphas of lists over taus, <PER_ALPHA>: lists over alphas}}, ...}."""
    # lazy: keeps torch out of a cache hit
    import torch

    block = _block(spec.d, spec.heads, spec.seed, spec.biases)
    u, g, uq, uk = _inputs(spec)
    experiments, reps = {}, {}
    with torch.inference_mode():
        base = _qkv(block, g, spec.heads)
        for target in TARGETS:
            got = {k: [] for k in (*QUANTITIES, *PER_ALPHA)}
            for alpha in spec.alphas:
                x, q, k, v = _drifted(block, g, u, uq, uk, target, alpha, spec.heads, base)
                got["input_mean_cosine"].append(_mean_cosine(x.reshape(-1, spec.d)))
                got["q_drift"].append(_drift_ratio(q))
                got["k_drift"].append(_drift_ratio(k))
                rows = {k: [] for k in QUANTITIES}
                reps.setdefault(target, []).append([])
                for tau in spec.taus:
                    y, a = _rest(block, x, q, k, v, tau)
                    reps[target][-1].append(_sequence_replicates(y))
                    rows["output_mean_cosine"].append(_mean_cosine(y.reshape(-1, spec.d)))
                    rows["output_within_sequence_cosine"].append(_within_cosine(y))
                    rows["attention_entropy"].append(float(torch.special.entr(a).sum(-1).mean()
                                                           / math.log(spec.seq_len)))
                for k in QUANTITIES:
                    got[k].append(rows[k])
            experiments[target] = {"name": TARGET_NAMES[target], "what": TARGET_WHAT[target], **got,
                                   **_rise_intervals(np.asarray(reps[target]), spec.alphas)}
    bias = "PyTorch default init with its biases" if spec.biases else "PyTorch default init, biases zeroed"
    return {"spec": spec.to_dict(), **cache_identity("drift"), "experiments": experiments,
            "n_tokens": spec.n_seq * spec.seq_len,
            "alpha_unit": "alpha is the drift's norm over the RMS norm of what it is added to (inputs, queries or keys)",
            "block": f"pre-norm: h = x + Attn(LN(x)), y = h + MLP(LN(h)); {bias}, float64"}


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


def grid(result: dict, key: str, target: str = "query_key") -> np.ndarray:
    """(alphas, taus) array of one measured quantity of one target (a per-alpha quantity: (alphas, 1)). A result
    from before the isolated experiment holds the input-drift baseline only."""
    exps = drift_experiments(result)
    if target not in exps or key not in exps[target]:
        raise KeyError(f"the drift result has no {key!r} for the {target!r} experiment")
    v = np.asarray(exps[target][key], dtype=float)
    return v[:, None] if v.ndim == 1 else v
