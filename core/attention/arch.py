"""Where a transformers model keeps its attention: the modules, their q/k projections (fused or
not), causality, head counts; and a context manager that switches attention to eager and back."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


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


# Fused projections whose layout is neither GPT-2's [q | k | v] nor GPT-NeoX's per-head one
# (GPT-BigCode: per head, or [q | k | v] with one key/value head)
_OTHER_FUSED = ("gpt_bigcode",)


def _record_targets(model) -> list:
    """The (class, layer-name suffix) transformers itself records as `attentions`."""
    spec = getattr(type(model), "_can_record_outputs", None) or {}
    got = spec.get("attentions")
    if got is None:
        return []
    items = got if isinstance(got, (list, tuple)) else [got]
    out = []
    for it in items:
        if isinstance(it, type):
            out.append((it, None))
        elif getattr(it, "target_class", None) is not None:
            out.append((it.target_class, getattr(it, "layer_name", None)))
    return out


def attention_arch(model) -> Arch:
    """Find every block's self-attention module and its query/key projections.

    Supported: separate projections named q_proj/k_proj (LLaMA, Mistral, Qwen, ...) or query/key
    (BERT, RoBERTa, ...), GPT-2's fused c_attn and GPT-NeoX's (Pythia's) fused query_key_value.
    Raises ValueError otherwise.
    """
    cfg = model.config
    if hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    H = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0))
    Hkv = int(getattr(cfg, "num_key_value_heads", 0) or H)
    d = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0))
    model_type = getattr(cfg, "model_type", "")
    targets = _record_targets(model)
    mods = []
    for name, m in model.named_modules():
        if targets:  # a recorder's layer name (GPT-2: ".attn") tells self- from cross-attention
            hit = any(isinstance(m, c) and (ln is None or name.rsplit(".", 1)[-1] == ln.rsplit(".", 1)[-1])
                      for c, ln in targets)
        else:
            hit = type(m).__name__.endswith(("SelfAttention", "Attention")) and not getattr(m, "is_cross_attention", False)
        if hit and not getattr(m, "is_cross_attention", False):
            mods.append(m)
    if not H or not mods:
        raise ValueError(f"{type(model).__name__}: no self-attention modules found for attention statistics")
    layers = []
    for m in mods:
        if hasattr(m, "q_proj") and hasattr(m, "k_proj"):
            q, k = m.q_proj, m.k_proj
        elif hasattr(m, "query") and hasattr(m, "key"):
            q, k = m.query, m.key
        elif hasattr(m, "c_attn") and model_type not in _OTHER_FUSED:
            q, k, fused = m.c_attn, None, "qkv"
        elif hasattr(m, "query_key_value") and model_type == "gpt_neox":
            q, k, fused = m.query_key_value, None, "per_head"
        elif hasattr(m, "c_attn") or hasattr(m, "query_key_value"):  # Falcon, Bloom, GPT-BigCode, ...: other layouts
            raise ValueError(f"{type(m).__name__}: the layout of its fused query/key/value projection is not "
                             f"among the known ones (GPT-2's c_attn, GPT-NeoX's query_key_value)")
        else:
            raise ValueError(f"{type(m).__name__}: query/key projections not recognised (q_proj/k_proj, "
                             f"query/key, c_attn or query_key_value expected)")
        layers.append(AttnLayer(m, q, k, bool(getattr(m, "is_causal", False)), fused if k is None else ""))
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
