"""What a training run is, without torch: `TrainSpec` (the Train page's form, the CLI's flags, a job's
params), the presets that compare two runs, and the memory check made before anything is allocated.

The training itself (tokenizers, data, model, the Trainer loop) is core/studies/training.py, which imports
torch and transformers at its top; the Train page, the selection and the CLI read this module only.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from ..base.errors import InputError
from ..base.procfs import nvidia_driver_present
from ..base.spec import stable_hash
from ..inputs import checkpoints as trained
from ..inputs import models
from ..inputs.corpora import BUILTIN_CORPORA, corpus_fingerprint

ARCHS = {
    "gpt2": "GPT-2-style causal LM (pre-norm)",
    "llama": "LLaMA-style causal LM (pre-norm: RMSNorm, RoPE, SwiGLU)",
    "bert": "BERT-style masked LM (post-norm)",
    "bert-causal": "BERT-style causal LM (post-norm, BertLMHeadModel as a decoder)",
    "mamba": "Mamba-2 state-space LM (Mamba2ForCausalLM; no attention)",
    "rwkv": "RWKV-4 recurrent LM (RwkvForCausalLM; no attention)",
    "lstm": "LSTM LM (stacked torch LSTMs with projections; no attention, no norms)",
}
# asked for by name, refused with the measured reason
REFUSED_ARCHS = {
    "xlstm": "xLSTMForCausalLM does not train on CPU here (transformers 5.24): with every kernel setting "
             "(chunkwise and parallel native_autograd, modes train / train_with_padding / inference) the "
             "backward pass fails with \"one of the variables needed for gradient computation has been modified "
             "by an inplace operation\". Use arch 'lstm' (a plain LSTM language model) instead.",
}
# families without self-attention: their attention statistics (sinks, query/key drift) are not applicable
NO_ATTENTION = {
    "mamba": "Mamba-2 is a state-space model: it has no attention, so no attention sinks or query/key statistics",
    "rwkv": "RWKV mixes tokens with a recurrent time-mix (WKV), not attention: no attention sinks or query/key "
            "statistics",
    "lstm": "an LSTM has no attention: no attention sinks or query/key statistics",
}
CAUSAL_TRANSFORMERS = ("gpt2", "llama", "bert-causal")
TOKENIZERS = {
    "bpe": "GPT-2's byte-level BPE (first merges)",
    "bytes": "UTF-8 bytes, ByT5-style",
    "uniform": "uniform random tokens (control, same lengths as the BPE corpus)",
}
DEVICES = ("auto", "cpu", "cuda")
OPTIMIZERS = {
    "adamw": "AdamW (transformers' default: torch's fused AdamW)",
    "sgd": "SGD with momentum 0.9",
    "coupled-adam": "Coupled Adam (Stollenwerk & Stollenwerk 2025: the embeddings' second moment shared by every row)",
}


@dataclass(frozen=True)
class TrainSpec:
    """One training run. Defaults finish in about 5 minutes on 2 CPU cores."""

    corpus: str = "wiki-en"
    text_column: str | None = None
    arch: str = "gpt2"
    tokenizer: str = "bpe"
    vocab_size: int = 4096  # bpe / uniform only (bytes: ByT5's 384)
    n_layers: int = 2
    d_model: int = 128
    n_heads: int = 4
    seq_len: int = 64
    batch_size: int = 16
    steps: int = 2000
    lr: float = 1e-3
    warmup_steps: int = 0  # HF's warmup starts at lr 0: step 1 would repeat step 0's weights
    weight_decay: float = 0.01
    seed: int = 0
    eval_tokens: int = 8192
    device: str = "auto"
    name: str | None = None  # run name; default: built from the spec
    # issue 41 (the lab); fields added from here on stay out of the run name's hash at their defaults
    optimizer: str = "adamw"  # one of OPTIMIZERS; its learning rate: `default_lr`
    tied: bool = True  # input and output embeddings share one matrix (False: a separate output matrix)
    attn_gate: bool = False  # Qiu et al. 2025's sigmoid gate on the attention output (llama only)
    # the family's inner width (None: its own default): the MLP's (gpt2, bert, bert-causal: 4 d; llama: 8 d / 3),
    # RWKV's channel mix (4 d), Mamba-2's expanded width (2 d), the LSTM's cell (d); see matched_spec
    d_inner: int | None = None

    def __post_init__(self):
        if self.arch in REFUSED_ARCHS:
            raise InputError(f"arch {self.arch!r} is not available: {REFUSED_ARCHS[self.arch]}")
        if self.arch not in ARCHS:
            raise InputError(f"arch must be one of {', '.join(ARCHS)}, got {self.arch!r}.")
        if self.tokenizer not in TOKENIZERS:
            raise InputError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {self.tokenizer!r}.")
        if self.optimizer not in OPTIMIZERS:
            raise InputError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}.")
        if self.device not in DEVICES:
            raise InputError(f"device must be one of {DEVICES}, got {self.device!r}.")
        for k in ("n_layers", "d_model", "n_heads", "seq_len", "batch_size", "steps", "eval_tokens"):
            if int(getattr(self, k)) < 1:
                raise InputError(f"{k} must be a positive integer, got {getattr(self, k)!r}.")
        if self.d_model % self.n_heads:
            raise InputError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads}).")
        if self.arch == "llama" and (self.d_model // self.n_heads) % 2:
            raise InputError("LLaMA's rotary embeddings need an even head size (d_model / n_heads).")
        if not 512 <= self.vocab_size <= 50_000 and self.tokenizer != "bytes":
            raise InputError(f"vocab_size must be between 512 and 50000 (GPT-2 has 50,000 merges), got {self.vocab_size}.")
        if self.seq_len < 8:
            raise InputError(f"seq_len must be at least 8, got {self.seq_len}.")
        if not self.lr > 0:
            raise InputError(f"lr must be positive, got {self.lr}.")
        if self.attn_gate and self.arch != "llama":
            raise InputError(f"The attention output gate (attn_gate) is defined for arch 'llama' only, not {self.arch!r}.")
        if not isinstance(self.tied, bool) or not isinstance(self.attn_gate, bool):
            raise InputError(f"tied and attn_gate must be true or false, got {self.tied!r} and {self.attn_gate!r}.")
        if self.d_inner is not None and not (isinstance(self.d_inner, int) and 1 <= self.d_inner <= 64 * self.d_model):
            raise InputError(f"d_inner must be a positive integer of at most 64 x d_model, got {self.d_inner!r}.")
        if self.arch == "mamba" and self.d_inner is not None and self.d_inner % self.d_model:
            raise InputError(f"Mamba-2's inner width (d_inner {self.d_inner}) must be a multiple of d_model "
                             f"({self.d_model}): transformers' Mamba2Config takes an integer expansion factor.")
        if self.arch == "mamba" and (self.d_inner or 2 * self.d_model) % self.n_heads:
            raise InputError(f"Mamba-2's inner width ({self.d_inner or 2 * self.d_model}) must be a multiple of "
                             f"n_heads ({self.n_heads}).")
        if self.name is not None and not trained.RUN_NAME.match(self.name):
            raise InputError(f"Run name {self.name!r}: use letters, digits, '.', '_' and '-' (at most 100).")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def replace(self, **kw) -> "TrainSpec":
        return dataclasses.replace(self, **kw)

    @property
    def masked(self) -> bool:
        return self.arch == "bert"

    @property
    def has_attention(self) -> bool:
        return self.arch not in NO_ATTENTION

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        # lazy: keeps torch out of a cache hit
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def run_name(self) -> str:
        """The run's identifier: readable parts and a hash of everything that changes the weights."""
        if self.name:
            return self.name
        corpus = self.corpus if self.corpus in BUILTIN_CORPORA else "file"
        key = stable_hash(
            {
                **_hashed_fields(self),
                "name": None,
                "device": _device_class(self.device),
                "corpus_sha256": corpus_fingerprint(self.corpus, self.text_column),
            }
        )
        return f"{self.arch}-{self.tokenizer}-{corpus}-{self.n_layers}x{self.d_model}-s{self.seed}-{key[:8]}"


# the fields of TrainSpec before issue 41: every run name and cached number was computed from exactly these
_HASHED_ALWAYS = frozenset({
    "corpus", "text_column", "arch", "tokenizer", "vocab_size", "n_layers", "d_model", "n_heads", "seq_len",
    "batch_size", "steps", "lr", "warmup_steps", "weight_decay", "seed", "eval_tokens", "device", "name"})


def _hashed_fields(spec: TrainSpec) -> dict:
    """The spec's fields as the run name hashes them: a field added later is left out at its default, so the runs
    trained before it existed keep their names (and their cached checkpoints and numbers)."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainSpec)}
    return {k: v for k, v in spec.to_dict().items() if k in _HASHED_ALWAYS or v != defaults[k]}


def _device_class(device: str) -> str:
    """cpu and cuda give different weights; auto is whatever the machine has."""
    if device != "auto":
        return device

    return "cuda" if nvidia_driver_present() else "cpu"


# ----------------------------------------------------------------------------- presets
PRESETS: dict[str, dict] = {
    "bpe-vs-bytes": {
        "title": "BPE vs characters (bytes) on the same text",
        "question": "Do both a subword model and a byte-level model become anisotropic?",
        "runs": {"BPE": {"tokenizer": "bpe"}, "bytes": {"tokenizer": "bytes"}},
    },
    "natural-vs-uniform": {
        "title": "Natural text vs uniform random tokens",
        "question": "Do outlier dimensions and their link to token frequency appear without a long-tailed token distribution?",
        "runs": {"natural text": {"tokenizer": "bpe"}, "uniform tokens": {"tokenizer": "uniform"}},
    },
    "causal-vs-masked": {
        "title": "Causal vs masked LM on the same text",
        "question": "Does the training objective change how anisotropy and outlier dimensions develop?",
        "runs": {"causal (GPT-2)": {"arch": "gpt2"}, "masked (BERT)": {"arch": "bert"}},
    },
}


def preset_specs(preset: str, base: TrainSpec | None = None) -> dict[str, TrainSpec]:
    """The runs of a preset: the base spec (same budget and seed) with only the compared field changed."""
    if preset not in PRESETS:
        raise InputError(f"Unknown preset {preset!r}; one of {', '.join(PRESETS)}.")
    base = (base or TrainSpec()).replace(name=None)
    return {label: base.replace(**over) for label, over in PRESETS[preset]["runs"].items()}


# ----------------------------------------------------------------------------- learning rate per family
LR_FILE = "lab_lr.json"  # core/data/: written by `python -m bench lab-lr`
FALLBACK_LR = {"adamw": 1e-3, "coupled-adam": 1e-3, "sgd": 0.1}
NOT_SWEPT = "default, not swept"


@lru_cache(maxsize=1)
def lr_table() -> dict:
    """core/data/lab_lr.json: the learning-rate sweep (`python -m bench lab-lr`); {} when there is none."""
    try:
        text = resources.files("core").joinpath("data", LR_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return json.loads(text)


def _sweep_source(entry: dict, table: dict) -> str:
    tried = ", ".join(f"{float(k):g}" for k in sorted(entry["losses"], key=float))
    at = {k: entry.get(k, table.get(k)) for k in ("steps", "n_layers", "d_model", "corpus", "date_utc")}
    return (f"swept: the lowest held-out loss of lr {tried} at {at['steps']} steps, "
            f"{at['n_layers']}x{at['d_model']} on {at['corpus']} "
            f"({str(at['date_utc'] or '')[:10]}; python -m bench lab-lr, BENCHMARKS.md)")


def default_lr(arch: str, optimizer: str) -> tuple[float, str]:
    """(learning rate, its source) the lab uses for `arch` trained with `optimizer`.

    The rate is the sweep's (core/data/lab_lr.json: the one with the lowest held-out loss among a few, at a
    short stated budget). Coupled Adam without an entry of its own takes AdamW's swept rate: it changes only the
    embeddings' second moment, so the two are compared at one rate (as Stollenwerk & Stollenwerk compare them).
    With no entry: 1e-3 for the Adams, 0.1 for SGD, said to be "default, not swept"."""
    if arch not in ARCHS:
        raise InputError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}.")
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}.")
    table = lr_table()
    entries = table.get("entries", {})
    if (e := entries.get(f"{arch}/{optimizer}")) is not None:
        return float(e["lr"]), _sweep_source(e, table)
    if optimizer == "coupled-adam" and (e := entries.get(f"{arch}/adamw")) is not None:
        return float(e["lr"]), "AdamW's rate, " + _sweep_source(e, table)
    return FALLBACK_LR[optimizer], NOT_SWEPT


def lr_source(spec: TrainSpec) -> str:
    """Where `spec.lr` comes from, in words (the run record's "lr_source")."""
    lr, source = default_lr(spec.arch, spec.optimizer)
    if spec.lr == lr:
        return source
    if spec.optimizer == "adamw" and spec.lr == TrainSpec.lr:
        return "the Train default (1e-3), not swept"
    return "set by hand (--lr)"


def unigram_entropy(ids, vocab_size: int) -> float:
    """Entropy in nats per token of the unigram distribution of `ids` (any shape of ints in [0, vocab_size)):
    H = -sum_v p_v log p_v with p_v = count_v / N. A model whose held-out loss is not below it has learned
    less than the token frequencies."""
    counts = np.bincount(np.asarray(ids).ravel(), minlength=vocab_size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def learned_note(rec: dict) -> str | None:
    """The warning the Train page shows for a run that did not learn (None for one that did, or an old record)."""
    if rec.get("learned") is not False:
        return None
    loss = rec["checkpoints"][-1]["held_out_loss"]
    return (f"Did not learn: held-out loss {loss:.3f} is not below the corpus's unigram entropy "
            f"{rec['unigram_entropy']:.3f} nats per token, so this run is not evidence (the lab flags it and "
            f"leaves it out of its averages).")


BYTES_VOCAB = 384  # ByT5's tokenizer: 3 specials + 256 bytes + 125 sentinels
TRAIN_BYTES_PER_PARAM = 16  # float32 weights, gradients and AdamW's two moments
MEMORY_SHARE = 0.8  # a training may plan to use this share of the free memory


def vocab_of(spec: TrainSpec) -> int:
    return BYTES_VOCAB if spec.tokenizer == "bytes" else spec.vocab_size


MAMBA_STATE = 16  # Mamba-2's SSM state per head (Mamba-1's default; Mamba-2's 128 is for large models)
MAMBA_CHUNK = 16  # the SSD chunk length of Mamba-2's torch path
MAMBA_CONV = 4  # its causal convolution's width (transformers' default)


def inner_width(spec: TrainSpec) -> int:
    """The family's inner width: `spec.d_inner`, or the family's default (see TrainSpec.d_inner)."""
    if spec.d_inner is not None:
        return int(spec.d_inner)
    d = spec.d_model
    if spec.arch == "llama":
        return int(math.ceil(8 * d / 3 / 32) * 32)
    return {"mamba": 2 * d, "lstm": 2 * d}.get(spec.arch, 4 * d)


def count_parameters(spec: TrainSpec) -> dict:
    """{"total", "non_embedding"} parameters of `spec`'s model, by formula (nothing built; training.model_parameters
    of the built model gives the same numbers, a test checks every family). Non-embedding leaves out the token and
    position embeddings and the output layer (its matrix where untied, BERT's output bias): the convention of
    Kaplan et al. 2020, so that the blocks are compared."""
    V, T, d, L, f = vocab_of(spec), spec.seq_len, spec.d_model, spec.n_layers, inner_width(spec)
    emb, head = V * d, (0 if spec.tied else V * d)
    if spec.arch == "gpt2":  # ln_1, c_attn, c_proj, ln_2, c_fc, c_proj (all with biases); final LayerNorm
        body = L * (4 * d * d + 2 * d * f + 9 * d + f) + 2 * d
        emb += T * d
    elif spec.arch == "llama":  # q, k, v, o; SwiGLU's gate, up, down; two RMSNorms; the gate's W_g, b_g; final norm
        body = L * (4 * d * d + 3 * d * f + 2 * d + (d * d + d if spec.attn_gate else 0)) + d
    elif spec.arch in ("bert", "bert-causal"):  # blocks as GPT-2's; embedding LayerNorm; the head's transform
        body = L * (4 * d * d + 2 * d * f + 9 * d + f) + 2 * d + d * d + 3 * d
        emb += T * d + d  # position embeddings and the one token-type vector
        head += V  # the output bias
        if not spec.tied:  # transformers keeps cls.predictions.bias beside the untied decoder's own (then unused)
            body += V
    elif spec.arch == "mamba":  # Mamba-2 block: norm, in_proj (x, z, B, C, dt), conv over (x, B, C), dt_bias, A, D,
        H, N = spec.n_heads, MAMBA_STATE  # gated RMSNorm, out_proj; final norm
        conv = f + 2 * N
        body = L * (d + d * (2 * f + 2 * N + H) + conv * (MAMBA_CONV + 1) + 3 * H + f + f * d) + d
    elif spec.arch == "rwkv":  # ln1, ln2; time mix: decay, first, 3 mixes, key, value, receptance, output; channel
        # mix: 2 mixes, key, receptance, value; the first block's pre_ln; ln_out
        body = L * (4 * d + 5 * d + 4 * d * d + 2 * d + 2 * d * f + d * d) + 2 * d + 2 * d
    elif spec.arch == "lstm":  # LSTM (4 gates: input and recurrent weights, two biases), the MLP
        body = L * (8 * d * d + 8 * d + 2 * d * f + f + d)
    else:
        raise InputError(f"No parameter count for arch {spec.arch!r}.")
    return {"total": int(emb + head + body), "non_embedding": int(body)}


def count_train_parameters(spec: TrainSpec) -> int:
    """Parameters of `spec`'s model, by formula (nothing built; `build_model` gives the same count)."""
    return count_parameters(spec)["total"]


MATCH_TOLERANCE = 0.10  # the lab's families are matched to GPT-2 within this share, total and non-embedding


def _width_candidates(spec: TrainSpec) -> list[int]:
    d, H = spec.d_model, spec.n_heads
    if spec.arch == "mamba":  # transformers' Mamba2Config takes an integer expansion factor, divisible into heads
        return [e * d for e in range(1, 17) if (e * d) % H == 0]
    return list(range(8, 16 * d + 1, 8))  # multiples of 8 (LLaMA's default rounds to 32: too coarse at d = 32)


def matched_spec(spec: TrainSpec) -> TrainSpec:
    """`spec` with its family's inner width (`d_inner`) chosen so that the total and the non-embedding parameter
    counts are as close as can be (the larger of the two relative gaps, smallest) to those of the GPT-2 spec of the
    same depth, width, vocabulary and tying; d_model and n_layers are never changed. GPT-2 itself is returned as
    it is (its default MLP, 4 d). Raises InputError when no width comes within MATCH_TOLERANCE."""
    ref = count_parameters(spec.replace(arch="gpt2", attn_gate=False, d_inner=None))
    if spec.arch == "gpt2":
        return spec.replace(d_inner=None)

    def gap(f: int) -> float:
        got = count_parameters(spec.replace(d_inner=f))
        return max(abs(got[k] - ref[k]) / ref[k] for k in ("total", "non_embedding"))

    best = min(_width_candidates(spec), key=lambda f: (gap(f), f))
    if gap(best) > MATCH_TOLERANCE:
        raise InputError(f"No inner width of {spec.arch} at {spec.n_layers} x {spec.d_model} comes within "
                         f"{MATCH_TOLERANCE:.0%} of GPT-2's parameter counts (best {best}: {gap(best):.1%} off).")
    return spec.replace(d_inner=best)


def training_memory(spec: TrainSpec) -> tuple[int, int, int]:
    """(parameters, bytes for weights + gradients + AdamW, bytes of activations) of one training step.

    Activations after Korthikanti et al. 2022 (per block s b h (34 + 5 a s / h) in 16 bits, doubled for
    float32) plus the logits and their gradient: an estimate, stated as one."""
    n = count_train_parameters(spec)
    b, s, h, a, L = spec.batch_size, spec.seq_len, spec.d_model, spec.n_heads, spec.n_layers
    act = 2 * L * s * b * (34 * h + 5 * a * s) + 2 * 4 * b * s * vocab_of(spec)
    return n, n * TRAIN_BYTES_PER_PARAM, act


def check_train_size(spec: TrainSpec, free: int | None = None) -> None:
    """Refuse, with the numbers, a training that would not fit in memory (before anything is allocated)."""
    n, state, act = training_memory(spec)
    device = spec.resolved_device()
    free = models.available_memory(device) if free is None else free  # read at call time: a test's stand-in applies
    if state + act > MEMORY_SHARE * free:
        raise InputError(
            f"This training needs about {(state + act) / 2**30:,.1f} GiB: {n:,} parameters x "
            f"{TRAIN_BYTES_PER_PARAM} bytes (weights, gradients, AdamW) = {state / 2**30:,.1f} GiB, plus about "
            f"{act / 2**30:,.1f} GiB of activations for batch {spec.batch_size} x {spec.seq_len} tokens; {device} "
            f"has {free / 2**30:,.1f} GiB free. Lower --layers, --d-model, --batch-size or --seq-len."
        )
