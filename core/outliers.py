"""Outlier dimensions: activation outliers, norm-parameter outliers, frequency, ablation.

After Puccetti, Rogers, Drozd & Dell'Orletta 2022, "Outlier Dimensions that Disrupt
Transformers Are Driven by Frequency" (3-sigma rule on LayerNorm weights/biases, persistent
when flagged in more than 3 layers; correlation of |h_d| with log token frequency; LM loss
when the outlier dimensions are zeroed), with the activation rule of the design
(m_d = mean_t |x_{t,d}| > mean(m) + 3 std(m)) and the "massive activations" view of
Sun, Chen, Kolter & Liu 2024.

Layer 0 is the embedding output, layers 1..L the block outputs (``hidden_states`` order);
block b (0-based) produces hidden layer b + 1.

The numpy functions work on statistics already extracted (cheap, cache-friendly). The model
functions (``norm_modules``, ``norm_parameters``, ``ablation``) import torch lazily, so that
importing this module, e.g. on a cache hit, never imports torch.
"""

from __future__ import annotations

import functools
import inspect
import math
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from .config import CONFIG

if TYPE_CHECKING:  # pragma: no cover
    import torch

# Per block, the norm whose parameters are analysed, by relative name, in order of preference,
# with where it sits: "post" norms produce the block output (hidden layer b + 1), "pre" norms
# read the block input (hidden layer b). Used by `norm_modules`; unknown layouts fall back to
# the first norm of the block in module order.
NORM_PREFERENCE: tuple[tuple[str, str], ...] = (
    ("output.LayerNorm", "post"),  # BERT / RoBERTa / ELECTRA: the block's final LayerNorm
    ("ln_1", "pre"),  # GPT-2 / GPT-J / GPT-Neo: the norm in front of attention
    ("input_layernorm", "pre"),  # LLaMA / Mistral / Qwen / Gemma / Phi (RMSNorm)
    ("layernorm_before", "pre"),  # ViT / DeiT
    ("layer_norm1", "pre"),  # CLIP / SigLIP
    ("norm1", "pre"),  # DINOv2 / timm-style blocks
    ("attention_norm", "pre"),  # Falcon-style naming
    ("self_attn_layer_norm", "post"),  # BART / Whisper / OPT (OPT-350m is post-norm)
)


# --------------------------------------------------------------------------- numpy: activations


def _as_2d(a: Any, name: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_layers, d_model); got shape {arr.shape}")
    return arr


def sigma_rule(v: np.ndarray) -> tuple[float, float]:
    """The 3-sigma rule's reference for one vector: (mean, population std) over its finite entries.

    A value x is an outlier when ``x - mean > sigma * std`` (one-sided, activations) or
    ``|x - mean| > sigma * std`` (two-sided, norm parameters), sigma = ``CONFIG.outlier_sigma``.
    With n values, the largest possible deviation is
    ``sqrt(n - 1)`` std, so the rule cannot fire for n <= 10 at sigma 3.

    >>> sigma_rule(np.array([1.0, 1.0, 4.0, 2.0]))
    (2.0, 1.224744871391589)
    """
    v = np.asarray(v, dtype=np.float64)
    finite = v[np.isfinite(v)]
    if finite.size < 2:
        return float("nan"), float("nan")
    return float(finite.mean()), float(finite.std())


def sigma_threshold(v: np.ndarray, sigma: float | None = None) -> float:
    """mean + sigma std of `v` (see `sigma_rule`): the line the activation rule draws."""
    mu, sd = sigma_rule(v)
    return mu + (CONFIG.outlier_sigma if sigma is None else sigma) * sd


def _sigma_flags(v: np.ndarray, sigma: float | None = None, two_sided: bool = False) -> list[int]:
    """Indices of v more than `sigma` std above its mean (or away from it, if two_sided)."""
    sigma = CONFIG.outlier_sigma if sigma is None else sigma
    v = np.asarray(v, dtype=np.float64)
    mu, sd = sigma_rule(v)
    if not sd > 0:  # a constant vector (e.g. a freshly initialised LayerNorm) has no outliers
        return []
    dev = np.abs(v - mu) if two_sided else v - mu
    return [int(i) for i in np.flatnonzero(np.isfinite(v) & (dev > sigma * sd))]


def activation_outliers(mean_abs: np.ndarray) -> list[list[int]]:
    """Per layer, the dims whose mean |activation| is an outlier (3-sigma rule).

    Parameters
    ----------
    mean_abs : (L, d) array, m_{l,d} = mean_t |x_{t,d}| at layer l (layer 0 = embeddings).

    Returns
    -------
    One sorted list of dims per layer: d with m_d > mean(m) + 3 std(m), mean and (population)
    std taken over the d dimensions of that layer.

    With 20 dims at 1.0 and one at 9.0 the rule fires (for d <= 10 it never can, since no value
    lies more than sqrt(d - 1) std from the mean):

    >>> m = np.ones((2, 20)); m[:, 3] = 9.0
    >>> activation_outliers(m)
    [[3], [3]]
    """
    m = _as_2d(mean_abs, "mean_abs")
    return [_sigma_flags(row) for row in m]


def persistent_dims(flags: list[list[int]], min_layers: int) -> list[int]:
    """Dims flagged in at least `min_layers` of the per-layer lists, sorted."""
    counts: dict[int, int] = {}
    for layer in flags:
        for d in set(layer):
            counts[int(d)] = counts.get(int(d), 0) + 1
    return sorted(d for d, c in counts.items() if c >= min_layers)


def persistent_activation_outliers(flags: list[list[int]]) -> list[int]:
    """Activation outliers flagged in >= 25% of the layers (ceil(0.25 L), at least 1)."""
    return persistent_dims(flags, max(1, math.ceil(CONFIG.activation_persistence * len(flags))))


def run_outlier_dims(outliers: dict) -> list[int]:
    """The outlier dims of a run: the persistent dims of either definition (activation rule and
    norm-parameter rule), sorted. `outliers` is ``results["outliers"]`` (see `analysis`).

    >>> run_outlier_dims({"activation": {"persistent": [7, 2]}, "norm_parameters": {"persistent": [2, 9]}})
    [2, 7, 9]
    >>> run_outlier_dims({"activation": {"persistent": [5]}, "norm_parameters": {"error": "none"}})
    [5]
    """
    norm = outliers.get("norm_parameters") or {}
    return sorted(set(outliers["activation"]["persistent"]) | set(norm.get("persistent") or []))


def massive_activations(
    max_abs: np.ndarray, median_abs: np.ndarray | None = None, top: int | None = None
) -> list[dict]:
    """Per layer, the dims with the largest max |x_d| and how far above typical they are.

    After Sun et al. 2024, "Massive Activations in Large Language Models".

    Parameters
    ----------
    max_abs : (L, d) array, max_t |x_{t,d}| at layer l.
    median_abs : (L,) array, the median of |x| over the sample's values at layer l. When None,
        the median of the layer's row of `max_abs` stands in for it.
    top : how many dims to report per layer.

    Returns
    -------
    One dict per layer: ``layer``, ``dims`` (top dims, largest first), ``values`` (their max
    |x|), ``median_abs``, ``ratio`` = max |x| / median_abs (inf when the median is 0).
    """
    mx = _as_2d(max_abs, "max_abs")
    n_layers, d = mx.shape
    if median_abs is None:
        med = np.median(mx, axis=1)
    else:
        med = np.asarray(median_abs, dtype=np.float64).reshape(-1)
        if med.shape != (n_layers,):
            raise ValueError(f"median_abs must have shape ({n_layers},); got {med.shape}")
    k = max(0, min(int(CONFIG.massive_top if top is None else top), d))
    out = []
    for layer, row in enumerate(mx):
        order = np.argsort(-row, kind="stable")[:k]
        peak = float(row.max()) if d else float("nan")
        m = float(med[layer])
        ratio = peak / m if m > 0 else float("inf")
        out.append(
            {
                "layer": layer,
                "dims": [int(i) for i in order],
                "values": [float(row[i]) for i in order],
                "median_abs": m,
                "ratio": ratio,
            }
        )
    return out


# ---------------------------------------------------------------- numpy: norm-parameter rule


def norm_param_outliers(weights: np.ndarray, biases: np.ndarray | None = None) -> dict:
    """Puccetti et al.'s outlier dimensions from the norm parameters of each block.

    Parameters
    ----------
    weights : (B, d) array, the norm weight (gain) vector of each block.
    biases : (B, d) array or None (RMSNorm has no bias).

    Returns
    -------
    ``{"weight": [[dims] per block], "bias": [[dims] per block] or None,
    "union": [[dims] per block], "persistent": [dims]}``: a dim is flagged in a block when its
    weight (bias) lies more than 3 std from that vector's mean, in either direction; it is
    persistent when flagged (in the union) in more than 3 blocks.
    """
    w = _as_2d(weights, "weights")
    w_flags = [_sigma_flags(row, two_sided=True) for row in w]
    b_flags = None
    if biases is not None:
        b = _as_2d(biases, "biases")
        if b.shape != w.shape:
            raise ValueError(f"biases shape {b.shape} != weights shape {w.shape}")
        b_flags = [_sigma_flags(row, two_sided=True) for row in b]
    union = [
        sorted(set(wf) | set(b_flags[i] if b_flags is not None else ()))
        for i, wf in enumerate(w_flags)
    ]
    return {
        "weight": w_flags,
        "bias": b_flags,
        "union": union,
        "persistent": persistent_dims(union, CONFIG.norm_persistence_blocks + 1),
    }


def agreement(
    act_flags: list[list[int]], norm_flags: list[list[int]], layer_offset: int = 1
) -> list[dict]:
    """Per block b, overlap of activation outliers at hidden layer b + offset and norm outliers.

    offset 1 pairs block b with its output (post-norm models, BERT); a pre-norm model's input
    norm reads hidden layer b (offset 0; `norm_parameters` returns the right one).

    Returns one dict per block with a matching layer: ``block``, ``layer``, ``activation``,
    ``norm``, ``intersection`` (sorted dims), ``jaccard`` = |A & N| / |A | N| (None when both
    sets are empty: no outliers on either side is no evidence of agreement).
    """
    out = []
    for b, nf in enumerate(norm_flags):
        layer = b + layer_offset
        if not 0 <= layer < len(act_flags):
            continue
        a, n = set(act_flags[layer]), set(nf)
        inter, uni = a & n, a | n
        out.append(
            {
                "block": b,
                "layer": layer,
                "activation": sorted(a),
                "norm": sorted(n),
                "intersection": sorted(inter),
                "jaccard": len(inter) / len(uni) if uni else None,
            }
        )
    return out


def frequency_correlation(
    r: np.ndarray, outlier_dims: list[int], n_random: int | None = None, seed: int = 0
) -> dict:
    """Correlation of |x_d| with log token frequency: outlier dims vs random other dims.

    Parameters
    ----------
    r : (L, d) array, per layer the Pearson r between log frequency and |x_{t,d}| for every
        dim (NaN where undefined, e.g. a constant dim).
    outlier_dims : the dims to report.
    n_random : how many random non-outlier dims form the baseline (fewer if fewer exist).
    seed : the draw's seed; the same random dims serve every layer.

    Returns
    -------
    ``{"outlier_dims", "random_dims", "layers": [{"layer", "outlier_r" (aligned with
    outlier_dims), "random_r", "baseline" (mean |r| of the random dims, NaN ignored)}]}``.
    """
    rr = _as_2d(r, "r")
    d = rr.shape[1]
    dims = _check_dims(outlier_dims, d, allow_empty=True)
    pool = np.setdiff1d(np.arange(d), dims)
    rng = np.random.default_rng(seed)
    k = min(int(CONFIG.frequency_random_dims if n_random is None else n_random), pool.size)
    rand = sorted(int(i) for i in rng.choice(pool, size=k, replace=False)) if k > 0 else []
    layers = []
    for layer, row in enumerate(rr):
        rand_r = row[rand] if rand else np.array([])
        finite = rand_r[np.isfinite(rand_r)]
        layers.append(
            {
                "layer": layer,
                "outlier_r": [float(row[i]) for i in dims],
                "random_r": [float(v) for v in rand_r],
                "baseline": float(np.abs(finite).mean()) if finite.size else float("nan"),
            }
        )
    return {"outlier_dims": dims, "random_dims": rand, "layers": layers}


def _check_dims(dims: Iterable[int], d: int, allow_empty: bool = False) -> list[int]:
    out = sorted({int(i) for i in dims})
    if not out and not allow_empty:
        raise ValueError("dims is empty: give at least one dimension")
    bad = [i for i in out if not 0 <= i < d]
    if bad:
        raise ValueError(f"dims {bad} out of range for d_model={d}")
    return out


# ------------------------------------------------------------------------- model: norm modules


def _is_norm(module: Any) -> bool:
    """A normalisation layer: class name mentions Norm and it has a 1-D weight."""
    w = getattr(module, "weight", None)
    return "norm" in type(module).__name__.lower() and w is not None and w.ndim == 1


def _hidden_size(model: Any) -> int | None:
    cfg = getattr(model, "config", None)
    if hasattr(cfg, "get_text_config"):  # multimodal configs nest the text model's
        cfg = cfg.get_text_config()
    for key in ("hidden_size", "n_embd", "d_model", "dim"):
        v = getattr(cfg, key, None)
        if isinstance(v, int):
            return v
    return None


def _blocks(model: Any) -> tuple[str, list]:
    """(qualified name, children) of the block list: the longest ModuleList whose every item
    contains a norm (so MoE expert lists and head lists are not mistaken for blocks)."""
    import torch.nn as nn

    best: tuple[int, int, str, list] | None = None
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) == 0:
            continue
        items = list(mod)
        if not all(any(_is_norm(m) for m in it.modules()) for it in items):
            continue
        key = (len(items), -name.count("."))  # longest, then shallowest
        if best is None or key > best[:2]:
            best = (*key, name, items)
    if best is None:
        raise ValueError(
            f"{type(model).__name__}: no list of transformer blocks with normalisation layers "
            "found (looked for an nn.ModuleList whose items contain a *Norm module)"
        )
    return best[2], best[3]


def _norms_in(block: Any, d: int | None) -> list[tuple[str, Any]]:
    return [
        (n, m)
        for n, m in block.named_modules()
        if _is_norm(m) and (d is None or m.weight.shape[0] == d)
    ]


def _pick_norm(norms: list[tuple[str, Any]]) -> tuple[str, Any, str]:
    by_name = dict(norms)
    for rel, placement in NORM_PREFERENCE:
        if rel in by_name:
            return rel, by_name[rel], placement
    rel, mod = norms[0]
    return rel, mod, "unknown"


def _select(model: Any) -> list[tuple[int, str, Any, str]]:
    list_name, blocks = _blocks(model)
    d = _hidden_size(model)
    out = []
    for b, block in enumerate(blocks):
        norms = _norms_in(block, d)
        if not norms:
            raise ValueError(
                f"{type(model).__name__}: block {b} ({list_name}.{b}) has no norm module "
                f"of width {d}"
            )
        rel, mod, placement = _pick_norm(norms)
        prefix = f"{list_name}.{b}." if list_name else f"{b}."
        out.append((b, prefix + rel, mod, placement))
    return out


def norm_modules(model: "torch.nn.Module") -> list[tuple[int, str, "torch.nn.Module"]]:
    """Per transformer block b, the norm module whose parameters Puccetti et al. analyse.

    Blocks are the longest ``nn.ModuleList`` whose items contain a *Norm module; within a block
    the norm is chosen by `NORM_PREFERENCE`: BERT/RoBERTa ``output.LayerNorm`` (post-norm, the
    block's final LayerNorm, as in Puccetti et al. and Kovaleva et al. 2021), GPT-2 ``ln_1``
    (pre-norm: the gain applied to the residual stream as the block reads it), LLaMA-style
    ``input_layernorm`` (RMSNorm, weight only), else the block's first norm of width d_model.

    Returns ``[(block, qualified name, module), ...]``; raises ValueError when none is found.
    """
    return [(b, name, mod) for b, name, mod, _ in _select(model)]


def norm_parameters(model: "torch.nn.Module") -> dict:
    """The analysed norm parameters of every block, stacked, as float64 numpy arrays.

    Returns ``{"weights": (B, d), "biases": (B, d) or None (when any block's norm has no
    bias, e.g. RMSNorm), "modules": [qualified names], "kind": "LayerNorm" | "RMSNorm" |
    class name, "placement": "post" | "pre" | "unknown", "layer_offset": the hidden layer
    matching block b is b + layer_offset (1 for post-norm, 0 for pre-norm)}``.
    """
    import torch

    sel = _select(model)
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


def ablation_modules(model: "torch.nn.Module") -> list[tuple[str, "torch.nn.Module"]]:
    """Every norm module of width d_model in the model, with its qualified name.

    That is both norms of each block (e.g. GPT-2 ``ln_1``/``ln_2``, LLaMA
    ``input_layernorm``/``post_attention_layernorm``, BERT's two output LayerNorms), the final
    norm (``ln_f``, ``model.norm``) and an embedding norm where the architecture has one.
    Norms of another width (per-head q/k norms) are left alone.
    """
    d = _hidden_size(model)
    if d is None:
        d = int(_select(model)[0][2].weight.shape[0])
    return [(n, m) for n, m in model.named_modules() if _is_norm(m) and m.weight.shape[0] == d]


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
def zeroed_dims(modules: list["torch.nn.Module"], dims: list[int]) -> Iterator[None]:
    """Zero the gain (weight) and bias entries `dims` of each module; restore them on exit.

    Only the touched slices are saved, never the whole model; restoration is bit-exact and
    runs even when the body raises.
    """
    import torch

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
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        causal = set()
        for v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
            causal.update(v if isinstance(v, (tuple, list)) else (v,))
    except ImportError:  # pragma: no cover - transformers layout changed
        causal = set()
    import torch.nn as nn

    if not isinstance(head, nn.Module) or not (cls.endswith("ForCausalLM") or cls in causal):
        raise ValueError(f"Ablation needs a causal language model with an LM head; {cls} has none")


def lm_loss(model: "torch.nn.Module", batches: list[dict]) -> tuple[float, int]:
    """Token-weighted mean next-token cross-entropy over `batches`, and the token count.

    Labels are input_ids with padding (attention_mask 0) set to -100; each position predicts
    the next one. Call under torch.inference_mode().
    """
    import torch
    import torch.nn.functional as F

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
    model: "torch.nn.Module",
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
    import torch

    _causal_lm_check(model)
    n_random = CONFIG.ablation_random_draws if n_random is None else int(n_random)
    mods = ablation_modules(model)
    d = int(mods[0][1].weight.shape[0])
    dims = _check_dims(dims, d)
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
