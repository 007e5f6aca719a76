"""A model's normalisation layers: which norm of each block is analysed, its parameters, and the
LM-loss ablation of outlier dims (zeroed in every norm, restored bit-exactly afterwards).

After Puccetti, Rogers, Drozd & Dell'Orletta 2022 (the LM loss when the outlier dimensions are
zeroed). The numpy rules that find the dims are in core/stats/outliers.py. torch is imported at the top: a cache
hit never imports this module (core.compute.forward_run, a miss, does; core.compute.pipeline, the attention viewer and
the chain's ablations import it inside the functions that load a model).
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ..base.config import CONFIG
from ..inputs.anatomy import block_norms, hidden_size, is_norm
from ..stats.outliers import check_dims

try:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
except ImportError:  # pragma: no cover - transformers layout changed
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = {}

# ------------------------------------------------------------------------- model: norm modules
# Which norm of each block is analysed, and where it sits, is the architecture's entry in core/inputs/anatomy.py
# (`block_norms`): the norm whose parameters Puccetti et al. analyse. BERT/RoBERTa `output.LayerNorm` (post-norm, the
# block's final LayerNorm, as in Puccetti et al. and Kovaleva et al. 2021), GPT-2 `ln_1` (pre-norm: the gain applied
# to the residual stream as the block reads it), LLaMA-style `input_layernorm` (RMSNorm, weight only); without an
# entry, the longest `nn.ModuleList` whose items contain a *Norm module.


def norm_parameters(model: torch.nn.Module) -> dict:
    """The analysed norm parameters of every block, stacked, as float64 numpy arrays.

    Returns ``{"weights": (B, d), "biases": (B, d) or None (when any block's norm has no
    bias, e.g. RMSNorm), "modules": [qualified names], "kind": "LayerNorm" | "RMSNorm" |
    class name, "placement": "post" | "pre" | "unknown", "layer_offset": the hidden layer
    matching block b is b + layer_offset (1 for post-norm, 0 for pre-norm)}``.
    """
    sel = block_norms(model)
    with torch.no_grad():
        weights = np.stack([m.weight.detach().float().cpu().double().numpy() for _, _, m, _ in sel])
        has_bias = all(getattr(m, "bias", None) is not None for _, _, m, _ in sel)
        biases = (
            np.stack([m.bias.detach().float().cpu().double().numpy() for _, _, m, _ in sel])
            if has_bias
            else None
        )
    cls = type(sel[0][2]).__name__
    kind = "RMSNorm" if "rms" in cls.lower() else "LayerNorm" if "layernorm" in cls.lower() else cls
    placement = sel[0][3]
    return {
        "weights": weights,
        "biases": biases,
        "modules": [name for _, name, _, _ in sel],
        "kind": kind,
        "placement": placement,
        "layer_offset": 0 if placement == "pre" else 1,
    }


# ----------------------------------------------------------------------------- model: ablation


def ablation_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """Every norm module of width d_model in the model, with its qualified name.

    That is both norms of each block (e.g. GPT-2 ``ln_1``/``ln_2``, LLaMA
    ``input_layernorm``/``post_attention_layernorm``, BERT's two output LayerNorms), the final
    norm (``ln_f``, ``model.norm``) and an embedding norm where the architecture has one.
    Norms of another width (per-head q/k norms) are left alone.
    """
    d = hidden_size(model)
    if d is None:
        d = int(block_norms(model)[0][2].weight.shape[0])
    return [(n, m) for n, m in model.named_modules() if is_norm(m) and m.weight.shape[0] == d]


@functools.lru_cache(maxsize=None)
def _zero_gain_weight(cls: type) -> float:
    """The weight value that makes the norm's gain 0: -1 for Gemma-style norms computing
    x * (1 + weight) (Gemma, Qwen3-Next, ...), else 0. Read from the forward's source."""
    try:
        src = inspect.getsource(cls.forward).replace(" ", "")
    except (OSError, TypeError, AttributeError):
        return 0.0
    return -1.0 if "(1.0+self.weight" in src or "(1+self.weight" in src else 0.0


@contextmanager
def zeroed_dims(modules: list[torch.nn.Module], dims: list[int]) -> Iterator[None]:
    """Zero the gain (weight) and bias entries `dims` of each module; restore them on exit.

    Only the touched slices are saved, never the whole model; restoration is bit-exact and
    runs even when the body raises.
    """
    saved: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    try:
        with torch.no_grad():
            for mod in modules:
                w_zero = _zero_gain_weight(type(mod))
                for p, fill in ((mod.weight, w_zero), (getattr(mod, "bias", None), 0.0)):
                    if p is None:
                        continue
                    idx = torch.as_tensor(dims, dtype=torch.long, device=p.device)
                    saved.append((p, idx, p.index_select(0, idx).clone()))
                    p.index_fill_(0, idx, fill)
        yield
    finally:
        with torch.no_grad():
            for p, idx, old in reversed(saved):
                p.index_copy_(0, idx, old)


def _causal_lm_check(model: Any) -> None:
    cls = type(model).__name__
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    causal = set()
    for v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        causal.update(v if isinstance(v, (tuple, list)) else (v,))
    if not isinstance(head, torch.nn.Module) or not (cls.endswith("ForCausalLM") or cls in causal):
        raise ValueError(f"Ablation needs a causal language model with an LM head; {cls} has none")


def lm_loss(model: torch.nn.Module, batches: list[dict]) -> tuple[float, int]:
    """Token-weighted mean next-token cross-entropy over `batches`, and the token count.

    Labels are input_ids with padding (attention_mask 0) set to -100; each position predicts
    the next one. Call under torch.inference_mode().
    """
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for batch in batches:
        ids = batch["input_ids"].to(device)
        mask = batch.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        labels = ids.masked_fill(mask == 0, -100)[:, 1:]
        logits = logits[:, :-1].float()
        total += float(
            F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                labels.reshape(-1),
                ignore_index=-100,
                reduction="sum",
            )
        )
        count += int((labels != -100).sum())
    if count == 0:
        raise ValueError("batches hold no token to predict (need sequences of >= 2 tokens)")
    return total / count, count


def ablation(
    model: torch.nn.Module,
    batches: Iterable[dict],
    dims: list[int],
    n_random: int | None = None,
    seed: int = 0,
    on_pass=None,
) -> dict:
    """LM loss change when `dims` are zeroed in every norm, against random dims (Puccetti et al.).

    The weights (and biases) of `dims` are zeroed in every module of `ablation_modules`
    (both norms of every block, the final norm, an embedding norm where present; for norms
    computing x * (1 + weight), as Gemma's, the weight is set to -1 so the gain is 0); the mean
    next-token loss on `batches` (dicts with ``input_ids``, ``attention_mask`` tensors) is
    measured before and after, then for `n_random` seeded draws of len(dims) other dims.
    The model is left bit-identical (only touched slices are saved and restored, also on
    error) and in its original train/eval mode; forward passes run in eval mode under
    torch.inference_mode(). `on_pass(i, n, what)`, when given, is called before each of the
    n = 2 + n_random forward passes over `batches` (progress; it may raise to stop, the model is
    restored all the same).

    Returns ``{"baseline_loss", "ablated_loss", "delta", "random_losses", "random_deltas",
    "random_delta_mean", "random_delta_std" (sample std, 0 for a single draw), "dims",
    "random_dims", "modules", "n_tokens"}``.
    """
    _causal_lm_check(model)
    n_random = CONFIG.ablation_random_draws if n_random is None else int(n_random)
    mods = ablation_modules(model)
    d = int(mods[0][1].weight.shape[0])
    dims = check_dims(dims, d)
    pool = np.setdiff1d(np.arange(d), dims)
    if n_random > 0 and pool.size < len(dims):
        raise ValueError(f"cannot draw {len(dims)} random dims out of the {pool.size} others")
    rng = np.random.default_rng(seed)
    random_dims = [
        sorted(int(i) for i in rng.choice(pool, size=len(dims), replace=False))
        for _ in range(max(0, int(n_random)))
    ]
    batches = list(batches)  # several passes
    modules = [m for _, m in mods]
    was_training = model.training
    model.eval()
    n_pass = 2 + len(random_dims)
    step = on_pass or (lambda i, n, what: None)
    try:
        step(0, n_pass, "baseline")
        with torch.inference_mode():
            base, n_tokens = lm_loss(model, batches)
        step(1, n_pass, f"{len(dims)} outlier dims zeroed")
        with zeroed_dims(modules, dims), torch.inference_mode():
            ablated, _ = lm_loss(model, batches)
        random_losses = []
        for i, rd in enumerate(random_dims):
            step(2 + i, n_pass, f"random dims, draw {i + 1} of {len(random_dims)}")
            with zeroed_dims(modules, rd), torch.inference_mode():
                random_losses.append(lm_loss(model, batches)[0])
    finally:
        model.train(was_training)
    deltas = np.asarray(random_losses) - base
    return {
        "baseline_loss": base,
        "ablated_loss": ablated,
        "delta": ablated - base,
        "random_losses": random_losses,
        "random_deltas": [float(x) for x in deltas],
        "random_delta_mean": float(deltas.mean()) if deltas.size else float("nan"),
        "random_delta_std": float(deltas.std(ddof=1)) if deltas.size > 1 else 0.0,
        "dims": dims,
        "random_dims": random_dims,
        "modules": [n for n, _ in mods],
        "n_tokens": n_tokens,
    }
