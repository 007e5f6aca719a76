"""Where each architecture keeps its parts: one entry per family, read by every statistic that hooks a module.

    entry(model)      -> Anatomy of its family, or None (an architecture without an entry)
    blocks(model)     -> (qualified name, [block, ...]) of its list of Transformer blocks
    block_norms(model), mlp_sites(model), attention_sites(model), final_norm(model), unembedding(model)

An entry names, relative to a block: the norm whose parameters the Puccetti et al. outliers read and where it
sits ("pre": it reads the block input, hidden state b; "post": it makes the block output, hidden state b + 1),
the self-attention module with its query and key projections (fused or not), the MLP output projection and the
first projections that read the residual stream (the chain's super weights and LLM.int8 counts); relative to
the base model, the final norm (the logit lens). The norm-parameter outliers, the attention statistics, the
outlier chain, the ablations and the logit lens all look modules up here, so adding an architecture is one
entry. docs/models.md lists the entries (`python -m core models --anatomy` prints the same table).

A model whose family has no entry is analysed for what the generic discovery finds: the longest list of blocks,
the candidate names of every entry (`candidates`), transformers' own record of its attention modules; what is
not found is said by the statistic that needs it ("no self-attention modules found...").

Blocks are numbered from 0 as the model's module list numbers them: block b reads hidden_states[b] and writes
hidden_states[b + 1] (layer 0 = embeddings). torch is imported inside the functions (a cache hit imports none).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Anatomy", "FAMILIES", "entry", "blocks", "block_norms", "mlp_sites", "attention_sites", "final_norm",
           "unembedding", "is_norm", "get", "candidates", "family_table", "markdown_table"]


@dataclass(frozen=True)
class Anatomy:
    """One architecture family's module names (see the module docstring). None: the family has no such part."""

    family: str
    model_types: tuple[str, ...]  # config.model_type values of the family
    blocks: str  # the block list, relative to the base model ("encoder.layer", "layers", "h")
    norm: str | None  # the analysed norm, relative to a block; None: the block's first norm of width d
    placement: str  # of that norm: "pre", "post", or "unknown"
    attention: str | None  # the self-attention module, relative to a block
    q: str | None  # query projection, relative to the attention module (the fused q/k/v one when `fused`)
    k: str | None  # key projection; None with `fused`
    mlp_out: str | None  # MLP output projection, relative to a block
    attn_in: str | None  # the first projection of attention reading the residual stream, relative to a block
    mlp_in: str | None  # the first projection of the MLP reading the residual stream, relative to a block
    final_norm: str | None  # relative to the base model; None: none (post-norm encoders: the last block's)
    fused: str = ""  # "qkv": GPT-2's c_attn, [q | k | v]; "per_head": GPT-NeoX's query_key_value
    unembedding: str | None = None  # the LM head of a causal LM of the family ("lm_head")
    example: str = ""  # a hub id of the family
    not_applicable: dict = field(default_factory=dict)  # statistic -> why it does not apply to the family

    def parts(self) -> dict:
        """Each part's name as docs/models.md shows it (block-relative names prefixed by the block list)."""
        def at(rel):
            return f"{self.blocks}.N.{rel}" if rel else None
        att = at(self.attention)
        return {"blocks": self.blocks, "norm": at(self.norm), "attention": att,
                "q": f"{att}.{self.q}" if att and self.q else None,
                "k": f"{att}.{self.k}" if att and self.k else None,
                "mlp_out": at(self.mlp_out), "final_norm": self.final_norm, "unembedding": self.unembedding}


def _llama_like(family: str, model_type: str, example: str) -> Anatomy:
    return Anatomy(family, (model_type,), "layers", "input_layernorm", "pre", "self_attn", "q_proj", "k_proj",
                   "mlp.down_proj", "self_attn.q_proj", "mlp.up_proj", "norm", unembedding="lm_head", example=example)


_BERT = Anatomy("BERT", ("bert",), "encoder.layer", "output.LayerNorm", "post", "attention.self", "query", "key",
                "output.dense", "attention.self.query", "intermediate.dense", None,
                example="bert-base-uncased (the built-in minilm-l6)")
_NO_LENS = "an encoder: no LM head to read hidden states into"
_NO_ATTN_T5 = ("T5's attention module returns its relative position bias where the others return the attention "
               "probabilities, and scales no logit by 1/sqrt(d_h): not among the layouts the attention statistics read")
_NO_MLP_T5 = "T5's feed-forward (DenseReluDense wi/wo, gated in ByT5) is not declared for the chain"

FAMILIES: tuple[Anatomy, ...] = (
    _BERT,
    replace(_BERT, family="RoBERTa", model_types=("roberta",), example="roberta-base"),
    replace(_BERT, family="CANINE", model_types=("canine",), attention=None, q=None, k=None,
            example="google/canine-s (the built-in untrained-canine-s)",
            not_applicable={"attention": "CANINE attends over characters in its first and last layers and over "
                                         "molecules in its deep ones: not one sequence of blocks"}),
    Anatomy("GPT-2", ("gpt2",), "h", "ln_1", "pre", "attn", "c_attn", None, "mlp.c_proj", "attn.c_attn", "mlp.c_fc",
            "ln_f", fused="qkv", unembedding="lm_head", example="gpt2"),
    Anatomy("GPT-NeoX", ("gpt_neox",), "layers", "input_layernorm", "pre", "attention", "query_key_value", None,
            "mlp.dense_4h_to_h", "attention.query_key_value", "mlp.dense_h_to_4h", "final_layer_norm",
            fused="per_head", unembedding="lm_head", example="EleutherAI/pythia-160m"),
    _llama_like("LLaMA", "llama", "meta-llama/Llama-3.2-1B (the built-in smollm2-135m)"),
    _llama_like("Mistral", "mistral", "mistralai/Mistral-7B-v0.1"),
    _llama_like("Qwen2", "qwen2", "Qwen/Qwen2.5-0.5B"),
    _llama_like("Gemma", "gemma", "google/gemma-2b"),
    Anatomy("Phi", ("phi",), "layers", "input_layernorm", "pre", "self_attn", "q_proj", "k_proj", "mlp.fc2",
            "self_attn.q_proj", "mlp.fc1", "final_layernorm", unembedding="lm_head", example="microsoft/phi-2"),
    # OPT's norms are read as post-norm, as before this table (OPT-350m is post-norm; the other sizes are pre-norm)
    Anatomy("OPT", ("opt",), "decoder.layers", "self_attn_layer_norm", "post", "self_attn", "q_proj", "k_proj", "fc2",
            "self_attn.q_proj", "fc1", "decoder.final_layer_norm", unembedding="lm_head", example="facebook/opt-125m"),
    # T5's norms: no name declared (the block's first norm, placement unknown), as before this table
    Anatomy("T5 encoder", ("t5",), "encoder.block", None, "unknown", None, None, None, None, None, None,
            "encoder.final_layer_norm", example="google-t5/t5-small, google/byt5-small (the built-in untrained-byt5-small)",
            not_applicable={"attention": _NO_ATTN_T5, "chain": _NO_MLP_T5, "lens": _NO_LENS}),
    Anatomy("ViT", ("vit",), "layers", "layernorm_before", "pre", "attention", "q_proj", "k_proj", "mlp.fc2",
            "attention.q_proj", "mlp.fc1", "layernorm", example="google/vit-base-patch16-224-in21k"),
    Anatomy("DINOv2", ("dinov2",), "encoder.layer", "norm1", "pre", "attention", "q_proj", "k_proj", "mlp.fc2",
            "attention.q_proj", "mlp.fc1", "layernorm", example="facebook/dinov2-small (the built-in dinov2-vits14)"),
    # Whisper's encoder norms are read as post-norm, as before this table (they are in front of attention and MLP)
    Anatomy("Whisper encoder", ("whisper",), "layers", "self_attn_layer_norm", "post", "self_attn", "q_proj",
            "k_proj", "fc2", "self_attn.q_proj", "fc1", "layer_norm",
            example="openai/whisper-tiny.en (the built-in whisper-tiny-en)"),
    Anatomy("Mamba", ("mamba",), "layers", None, "unknown", None, None, None, None, None, None, "norm_f",
            unembedding="lm_head", example="state-spaces/mamba-130m-hf",
            not_applicable={"attention": "a state-space model: no attention",
                            "chain": "a state-space model: no MLP output projection (its mixer's out_proj is not one)"}),
    # the lab's families (core/studies/train_spec.py ARCHS): Mamba-2, RWKV-4 and the LSTM LM have no attention; the
    # gated LLaMA is LLaMA's layout (its gate_proj sits beside q_proj, after the attention probabilities)
    Anatomy("Mamba-2", ("mamba2",), "layers", "norm", "pre", None, None, None, None, None, None, "norm_f",
            unembedding="lm_head", example="state-spaces/mamba2-130m (the lab's arch mamba)",
            not_applicable={"attention": "a state-space model: no attention",
                            "chain": "a state-space model: no MLP output projection (its mixer's out_proj is not one)"}),
    Anatomy("RWKV", ("rwkv",), "blocks", "ln1", "pre", None, None, None, "feed_forward.value", None,
            "feed_forward.key", "ln_out", unembedding="head", example="RWKV/rwkv-4-169m-pile (the lab's arch rwkv)",
            not_applicable={"attention": "RWKV mixes tokens with a recurrent time mix (WKV): no attention"}),
    Anatomy("LSTM LM", ("lstm_lm",), "layers", None, "unknown", None, None, None, "mlp_out", None, "mlp_in", None,
            unembedding="lm_head", example="the lab's arch lstm (core/inputs/lab_models.py)",
            not_applicable={"attention": "an LSTM: no attention", "norms": "an LSTM LM has no norms (no norm-parameter outliers)",
                            "lens": "an LSTM LM has no final norm for the logit lens to apply"}),
    _llama_like("LLaMA, gated attention", "gated_llama", "the lab's arch llama with attn_gate (core/inputs/lab_models.py)"),
)
_NO_LENS_FAMILIES = ("BERT", "RoBERTa", "CANINE", "ViT", "DINOv2", "Whisper encoder")
FAMILIES = tuple(replace(e, not_applicable={"lens": _NO_LENS, **e.not_applicable}) if e.family in _NO_LENS_FAMILIES
                 else e for e in FAMILIES)
_BY_TYPE = {t: e for e in FAMILIES for t in e.model_types}

# Names tried for a model whose family has no entry, besides every entry's: other layouts' norms (CLIP/SigLIP's
# layer_norm1, a Falcon-style attention_norm) and older transformers' ViT/DINOv2 attention projections.
_OTHER_NORMS = (("layer_norm1", "pre"), ("attention_norm", "pre"))
_OTHER_ATTN_IN = ("attention.attention.query", "attention.query")


def _unique(names) -> tuple:
    return tuple(dict.fromkeys(n for n in names if n))


def candidates() -> dict:
    """The names tried, in the order of FAMILIES, for a model whose family has no entry: every entry's, and a few more."""
    return {"norm": tuple(dict.fromkeys([*((e.norm, e.placement) for e in FAMILIES if e.norm), *_OTHER_NORMS])),
            "mlp_out": _unique(e.mlp_out for e in FAMILIES),
            "attn_in": _unique([*(e.attn_in for e in FAMILIES), *_OTHER_ATTN_IN]),
            "mlp_in": _unique(e.mlp_in for e in FAMILIES),
            # direct attributes of a causal LM's base model (encoders' final norms are not the lens's)
            "final_norm": _unique(e.final_norm for e in FAMILIES if e.unembedding and "." not in (e.final_norm or "."))}


# ----------------------------------------------------------------------------- looking modules up
def _config(model: Any):
    cfg = getattr(model, "config", None)
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def entry(model: Any) -> Anatomy | None:
    """The entry of `model`'s family (by its config's model_type), None when it has none."""
    return _BY_TYPE.get(getattr(_config(model), "model_type", None) or "")


def get(module: Any, path: str | None):
    """The submodule at dotted `path` (None when any part is missing)."""
    if not path:
        return None
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def is_norm(module: Any) -> bool:
    """A normalisation layer: class name mentions Norm and it has a 1-D weight."""
    w = getattr(module, "weight", None)
    return "norm" in type(module).__name__.lower() and w is not None and w.ndim == 1


def hidden_size(model: Any) -> int | None:
    cfg = _config(model)
    for key in ("hidden_size", "n_embd", "d_model", "dim"):
        v = getattr(cfg, key, None)
        if isinstance(v, int):
            return v
    return None


def _declared_blocks(model: Any, e: Anatomy) -> tuple[str, list] | None:
    """The ModuleList named `e.blocks` (the shortest qualified name ending with it; an encoder-decoder's
    decoder only where the entry names it)."""
    # lazy: keeps torch out of a cache hit
    import torch.nn as nn

    found = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m)
             and (n == e.blocks or n.endswith("." + e.blocks))
             and ("decoder" not in n.split(".") or "decoder" in e.blocks.split("."))]
    if not found:
        return None
    name, mods = min(found, key=lambda nm: len(nm[0]))
    return name, list(mods)


def _blocks_with_norms(model: Any) -> tuple[str, list]:
    """The longest ModuleList whose every item contains a norm (so MoE expert lists and head lists are not
    mistaken for blocks), the shallowest of equally long ones."""
    # lazy: keeps torch out of a cache hit
    import torch.nn as nn

    best: tuple[int, int, str, list] | None = None
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) == 0:
            continue
        items = list(mod)
        if not all(any(is_norm(m) for m in it.modules()) for it in items):
            continue
        key = (len(items), -name.count("."))  # longest, then shallowest
        if best is None or key > best[:2]:
            best = (*key, name, items)
    if best is None:
        raise ValueError(f"{type(model).__name__}: no list of transformer blocks with normalisation layers found "
                         "(looked for an nn.ModuleList whose items contain a *Norm module)")
    return best[2], best[3]


def _blocks_with_mlp(model: Any) -> tuple[str, list]:
    """The longest ModuleList whose items have one of the MLP output projections (an encoder-decoder's encoder only)."""
    # lazy: keeps torch out of a cache hit
    import torch.nn as nn

    names = candidates()["mlp_out"]
    best: tuple[str, list] = ("", [])
    for name, m in model.named_modules():
        if "decoder" in name.split("."):
            continue
        if isinstance(m, nn.ModuleList) and len(m) > len(best[1]):
            if all(any(get(b, p) is not None for p in names) for b in m):
                best = (name, list(m))
    return best


def blocks(model: Any, require: str = "norm") -> tuple[str, list]:
    """(qualified name, modules) of the model's Transformer blocks: the entry's block list, else the longest
    list whose blocks have what the caller needs (`require`: "norm" or "mlp_out"). ValueError when none."""
    e = entry(model)
    got = _declared_blocks(model, e) if e is not None else None
    if got is not None:
        return got
    if require == "mlp_out":
        name, mods = _blocks_with_mlp(model)
        if not mods:
            raise ValueError(f"{type(model).__name__}: no block with an MLP output projection among "
                             + ", ".join(candidates()["mlp_out"]))
        return name, mods
    return _blocks_with_norms(model)


def block_norms(model: Any) -> list[tuple[int, str, Any, str]]:
    """Per block b: (b, qualified name, module, placement) of the norm whose parameters Puccetti et al. analyse:
    the entry's norm, else the first of the candidate names the block has, else its first norm of width
    d_model (placement "unknown"). ValueError when a block has no norm of that width."""
    list_name, mods = blocks(model, "norm")
    d = hidden_size(model)
    e = entry(model)
    prefs = ((e.norm, e.placement),) if e is not None and e.norm else candidates()["norm"]
    out = []
    for b, block in enumerate(mods):
        norms = [(n, m) for n, m in block.named_modules() if is_norm(m) and (d is None or m.weight.shape[0] == d)]
        if not norms:
            raise ValueError(f"{type(model).__name__}: block {b} ({list_name}.{b}) has no norm module of width {d}")
        by_name = dict(norms)
        rel, placement = next(((r, p) for r, p in prefs if r in by_name), (norms[0][0], "unknown"))
        prefix = f"{list_name}.{b}." if list_name else f"{b}."
        out.append((b, prefix + rel, by_name[rel], placement))
    return out


@dataclass
class MlpSites:
    """One block's modules of the outlier chain (`out_name`: the MLP output projection's name in the model)."""

    block: int
    out_proj: Any
    out_name: str
    out_rel: str  # its name relative to the block ("mlp.down_proj")
    attn_in: Any | None
    mlp_in: Any | None


def mlp_sites(model: Any) -> list[MlpSites]:
    """Every block's MLP output projection and the first projections reading the residual stream.
    ValueError when the model has no such blocks, or its entry declares none (with the reason)."""
    e = entry(model)
    if e is not None and e.mlp_out is None:
        raise ValueError(f"{type(model).__name__}: {e.not_applicable.get('chain', 'no MLP output projection declared')}")
    name, mods = blocks(model, "mlp_out")
    c = candidates()
    outs, ains, mins = (((e.mlp_out,), (e.attn_in,), (e.mlp_in,)) if e is not None
                        else (c["mlp_out"], c["attn_in"], c["mlp_in"]))
    out = []
    for b, blk in enumerate(mods):
        rel = next((p for p in outs if get(blk, p) is not None), None)
        if rel is None:
            raise ValueError(f"{type(model).__name__}: block {b} has no MLP output projection {outs[0]}")
        out.append(MlpSites(b, get(blk, rel), f"{name}.{b}.{rel}" if name else f"{b}.{rel}", rel,
                            next((get(blk, p) for p in ains if get(blk, p) is not None), None),
                            next((get(blk, p) for p in mins if get(blk, p) is not None), None)))
    return out


# Fused projections whose layout is neither GPT-2's [q | k | v] nor GPT-NeoX's per-head one
# (GPT-BigCode: per head, or [q | k | v] with one key/value head)
_OTHER_FUSED = ("gpt_bigcode",)


def _record_targets(model: Any) -> list:
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


def _found_attention(model: Any) -> list:
    """Self-attention modules found without an entry: what transformers records as attentions, else modules
    whose class name ends with Attention (never cross-attention)."""
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
    return mods


def _found_qk(m: Any, model_type: str) -> tuple[Any, Any, str]:
    """(q, k, fused) of an attention module found without an entry, by the names every entry uses."""
    if hasattr(m, "q_proj") and hasattr(m, "k_proj"):
        return m.q_proj, m.k_proj, ""
    if hasattr(m, "query") and hasattr(m, "key"):
        return m.query, m.key, ""
    if hasattr(m, "c_attn") and model_type not in _OTHER_FUSED:
        return m.c_attn, None, "qkv"
    if hasattr(m, "query_key_value") and model_type == "gpt_neox":
        return m.query_key_value, None, "per_head"
    if hasattr(m, "c_attn") or hasattr(m, "query_key_value"):  # Falcon, Bloom, GPT-BigCode, ...: other layouts
        raise ValueError(f"{type(m).__name__}: the layout of its fused query/key/value projection is not "
                         f"among the known ones (GPT-2's c_attn, GPT-NeoX's query_key_value)")
    raise ValueError(f"{type(m).__name__}: query/key projections not recognised (q_proj/k_proj, "
                     f"query/key, c_attn or query_key_value expected)")


def attention_sites(model: Any) -> list[tuple[Any, Any, Any, str]]:
    """Per block, (self-attention module, its query projection, its key projection or None, fused layout).
    ValueError when there are none, or the model's entry says why attention statistics do not apply."""
    e = entry(model)
    cls = type(model).__name__
    if e is not None and e.attention is None:
        raise ValueError(f"{cls}: {e.not_applicable.get('attention', 'no self-attention declared')}")
    if e is not None:
        got = _declared_blocks(model, e)
        if got is not None:
            out = []
            for b, blk in enumerate(got[1]):
                m = get(blk, e.attention)
                q, k = get(m, e.q), get(m, e.k) if e.k else None
                if m is None or q is None or (e.k and k is None):
                    raise ValueError(f"{cls}: block {b} has no {e.attention}.{e.q} (the {e.family} layout)")
                out.append((m, q, k, e.fused))
            return out
    mods = _found_attention(model)
    if not mods:
        raise ValueError(f"{cls}: no self-attention modules found for attention statistics")
    model_type = getattr(_config(model), "model_type", "") or ""
    return [(m, *_found_qk(m, model_type)) for m in mods]


def _base(model: Any):
    return getattr(model, "base_model", model) or model


def final_norm(model: Any):
    """The final norm module of a causal LM (LLaMA's `model.norm`, GPT-2's `transformer.ln_f`), or None."""
    # lazy: keeps torch out of a cache hit
    import torch.nn as nn

    base, e = _base(model), entry(model)
    names = (e.final_norm,) if e is not None else candidates()["final_norm"]
    for name in names:
        m = get(base, name)
        if isinstance(m, nn.Module):
            return m
    return None


def unembedding(model: Any):
    """The LM head (unembedding) of a causal LM, or None (transformers' own `get_output_embeddings`)."""
    # lazy: keeps torch out of a cache hit
    import torch.nn as nn

    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    return head if isinstance(head, nn.Module) else None


# ----------------------------------------------------------------------------- the table of docs/models.md
STATISTICS = ("hidden states", "norm outliers", "attention", "chain", "lens")


def markdown_table() -> str:
    """docs/models.md's table of the families: module names and what applies (`python -m core models --anatomy`)."""
    def code(x):
        return f"`{x}`" if x else "none"

    lines = ["| family (model_type) | blocks | analysed norm | attention q / k | MLP output | final norm | "
             "attention, chain, lens |", "|---|---|---|---|---|---|---|"]
    for r in family_table():
        qk = f"`{r['q']}` / `{r['k']}`" if r["k"] else (f"`{r['q']}` (fused)" if r["q"] else "none")
        ok = ", ".join(("yes" if r["applies"][k] else "no") for k in ("attention", "chain", "lens"))
        lines.append(f"| {r['family']} ({', '.join(r['model_types'])}) | `{r['blocks']}` | "
                     f"{code(r['norm'])} ({r['placement']}) | {qk} | {code(r['mlp_out'])} | {code(r['final_norm'])} | "
                     f"{ok} |")
    return "\n".join(lines)


def family_table() -> list[dict]:
    """One row per family: its model types, module names and which statistics apply (docs/models.md)."""
    rows = []
    for e in FAMILIES:
        applies = {"hidden states": True, "norm outliers": True, "attention": e.attention is not None,
                   "chain": e.mlp_out is not None, "lens": e.unembedding is not None and e.final_norm is not None}
        rows.append({"family": e.family, "model_types": list(e.model_types), "example": e.example, **e.parts(),
                     "placement": e.placement, "applies": applies, "not_applicable": dict(e.not_applicable)})
    return rows
