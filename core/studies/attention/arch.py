"""A transformers model's attention as the statistics read it: the modules and their q/k projections (fused or
not; where they are is the architecture's entry in core/inputs/anatomy.py), causality, head counts; and a context
manager that switches attention to eager and back."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from ...inputs.anatomy import attention_sites


@dataclass
class AttnLayer:
    """One block's attention module and where its q and k come from."""

    module: object
    q_mod: object
    k_mod: object | None  # None: q_mod is a fused q/k/v projection, laid out as `fused` says
    causal: bool
    fused: str = ""  # "qkv": GPT-2's c_attn, [q | k | v]; "per_head": GPT-NeoX's query_key_value, [q_h | k_h | v_h] per head

    def split(self, out, n_heads: int):
        """(q, k) (..., H * dh) from a fused projection's output (..., 3 * H * dh)."""
        if self.fused == "qkv":
            d = out.shape[-1] // 3
            return out[..., :d], out[..., d:2 * d]
        qkv = out.unflatten(-1, (n_heads, 3, out.shape[-1] // (3 * n_heads)))  # GPT-NeoX: view(..., H, 3 dh).chunk(3)
        return qkv[..., 0, :].flatten(-2), qkv[..., 1, :].flatten(-2)


@dataclass
class Arch:
    layers: list[AttnLayer]
    n_heads: int
    n_kv_heads: int
    d_model: int


def attention_arch(model) -> Arch:
    """Every block's self-attention module and its query/key projections, where the architecture's entry in
    core/inputs/anatomy.py says they are: separate projections (LLaMA, Mistral, Qwen2, Gemma, Phi, OPT: q_proj/k_proj;
    BERT, RoBERTa: query/key), GPT-2's fused c_attn or GPT-NeoX's (Pythia's) fused query_key_value; without an
    entry, the modules transformers records as attentions, with those names. Raises ValueError otherwise.
    """
    cfg = model.config
    if hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    H = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0))
    Hkv = int(getattr(cfg, "num_key_value_heads", 0) or H)
    d = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0))
    sites = attention_sites(model)
    if not H:
        raise ValueError(f"{type(model).__name__}: no self-attention modules found for attention statistics")
    layers = [AttnLayer(m, q, k, bool(getattr(m, "is_causal", False)), fused if k is None else "")
              for m, q, k, fused in sites]
    return Arch(layers, H, Hkv, d)


@contextmanager
def eager_attention(model) -> Iterator[None]:
    """Eager attention (which returns the probabilities) for the duration; the previous
    implementation (SDPA by default) is restored on exit, so runs without attention keep it."""
    prev = getattr(model.config, "_attn_implementation", None)
    if prev == "eager":
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if prev is not None:
            model.set_attn_implementation(prev)


def probabilities(out):
    """The attention probabilities (batch, heads, T, T) in an attention module's output, which
    eager attention returns as its second item; RuntimeError when they are missing."""
    w = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
    if w is None:
        raise RuntimeError("the attention module returned no probabilities (eager attention needed)")
    return w


@contextmanager
def hook_handles() -> Iterator[list]:
    """A list for the handles of registered hooks; every handle in it is removed on exit (also when
    the body, or a registration in it, fails)."""
    handles: list = []
    try:
        yield handles
    finally:
        for h in handles:
            h.remove()


def head_dim(model, arch: Arch) -> int:
    cfg = model.config
    hd = getattr(cfg, "head_dim", None)
    return int(hd) if isinstance(hd, int) and hd > 0 else arch.d_model // arch.n_heads
