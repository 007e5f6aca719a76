"""RunSpec: every input that determines the numbers of one extraction run.

The cache key is derived from the spec plus the model and corpus fingerprints, so two specs
that describe the same computation share one cache entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from .errors import InputError
from .procfs import nvidia_driver_present

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
SPECIAL_POLICIES = ("exclude", "include")
DEVICE_MAPS = (None, "auto")  # "auto": one model spread over the GPUs of a node (accelerate)

DEFAULT_MODEL = "minilm-l6"
DEFAULT_CORPUS = "wiki-en"
DEFAULT_MAX_TOKENS = 40_000
DEFAULT_MAX_SEQ_LEN = 512
DEFAULT_BATCH_SIZE = 16
DEFAULT_SAMPLE = 5000
MAX_UNIFORM_TOKENS = 10_000_000  # the uniform-random control is built in memory
# The analysis rules (bootstrap groups, frequency bins, tracked ids, sigmas...) are in core.base.config.


@dataclass(frozen=True)
class RunSpec:
    """One extraction run. Layer 0 is the embedding output, layers 1..L the block outputs."""

    model: str = DEFAULT_MODEL
    corpus: str = DEFAULT_CORPUS
    text_column: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_seq_len: int = DEFAULT_MAX_SEQ_LEN
    batch_size: int = DEFAULT_BATCH_SIZE
    device: str = "auto"
    dtype: str = "auto"
    special_tokens: str = "exclude"
    sample: int = DEFAULT_SAMPLE
    seed: int = 0
    trust_remote_code: bool = False  # run a model folder's own Python code: only when the user asks
    device_map: str | None = None  # "auto": spread the model over this node's GPUs (models too large for one)
    layers: tuple[int, ...] | None = None  # hidden-state layers to keep statistics for (0 = embeddings); None: all
    encoding: str | None = None  # of a text/CSV corpus file without a byte-order mark (None: UTF-8)
    logit_lens: bool = False  # opt-in: the logit lens of a causal LM on the sample (core.compute.lens; costs > 10% of a run)

    def __post_init__(self):
        if not self.model or not str(self.model).strip():
            raise InputError("No model given.")
        if not self.corpus or not str(self.corpus).strip():
            raise InputError("No corpus given.")
        for name in ("max_tokens", "max_seq_len", "batch_size", "sample"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be a positive integer, got {getattr(self, name)!r}.")
        if not 0 <= int(self.seed) < 2**32:
            raise InputError(f"seed must be in [0, 2**32 - 1], got {self.seed!r}.")
        if self.corpus == "uniform-random" and int(self.max_tokens) > MAX_UNIFORM_TOKENS:
            raise InputError(f"uniform-random is generated in memory: at most {MAX_UNIFORM_TOKENS:,} tokens, "
                             f"got {int(self.max_tokens):,}.")
        if self.max_seq_len < 8:
            raise InputError(f"max_seq_len must be at least 8, got {self.max_seq_len}.")
        if self.device not in DEVICES:
            raise InputError(f"device must be one of {DEVICES}, got {self.device!r}.")
        if self.dtype not in DTYPES:
            raise InputError(f"dtype must be one of {DTYPES}, got {self.dtype!r}.")
        if self.layers is not None:
            try:
                layers = tuple(sorted({int(x) for x in self.layers}))
            except (TypeError, ValueError):
                raise InputError(f"layers must be layer indices (0 = embeddings), got {self.layers!r}.") from None
            if not layers or layers[0] < 0:
                raise InputError(f"layers must be non-negative layer indices (0 = embeddings), got {self.layers!r}.")
            object.__setattr__(self, "layers", layers)
        if self.device_map not in DEVICE_MAPS:
            raise InputError(f"device_map must be 'auto' or not set, got {self.device_map!r}.")
        if self.special_tokens not in SPECIAL_POLICIES:
            raise InputError(f"special_tokens must be one of {SPECIAL_POLICIES}, got {self.special_tokens!r}.")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if d["encoding"] is None:  # absent unless set: the keys of earlier runs stay valid
            del d["encoding"]
        if not d["logit_lens"]:  # likewise
            del d["logit_lens"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def replace(self, **kw) -> "RunSpec":
        return dataclasses.replace(self, **kw)

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        # Probe without importing torch (a cache hit must not pay for it) before asking torch.

        if not nvidia_driver_present():
            return "cpu"
        # lazy: keeps torch out of a cache hit
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_dtype(self, device: str | None = None) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if (device or self.resolved_device()) == "cuda" else "float32"


def stable_hash(obj) -> str:
    """sha256 of a JSON-serialisable object, key order independent."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()
