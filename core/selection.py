"""The dashboard's selection: one frozen dataclass, and its round trip through URL query params.

Everything a view depends on lives here (models, corpus, budget, advanced options, and the
page choices such as the metric and the layer), so a URL reproduces a view. Only values that
differ from the defaults are written to the URL; reading is tolerant: a bad value falls back to
its default and is reported, never raised.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Mapping

from .errors import InputError
from .postprocess import PostProcess
from .spec import DEVICES, DTYPES, SPECIAL_POLICIES, RunSpec

MAX_MODELS = 4
UI_MAX_TOKENS = 20_000  # the UI default budget: ~5 s of MiniLM forward on 2 CPU cores

# Metric keys of results["layers"], in menu order, with a label and what the y axis shows.
METRICS: dict[str, tuple[str, str]] = {
    "mean_cosine": ("Mean cosine similarity", "mean cos(x_i, x_j), all pairs i != j"),
    "cross_sequence_cosine": ("Cross-sequence cosine", "mean cos, pairs from different sequences"),
    "intra_sentence_similarity": ("Intra-sentence similarity", "mean cos(x_t, sequence mean)"),
    "intra_sentence_adjusted": ("Intra-sentence similarity, anisotropy-adjusted",
                                "intra-sentence similarity - mean cosine"),
    "self_similarity": ("Self-similarity", "mean cos between occurrences of a token id"),
    "self_similarity_adjusted": ("Self-similarity, anisotropy-adjusted", "self-similarity - mean cosine"),
    "mean_norm": ("Mean norm", "mean ||x_t|| (hidden-state units)"),
    "pc1_variance_ratio": ("PC1 variance ratio", "top eigenvalue / trace of the covariance"),
    "effective_rank": ("Effective rank", "exp(entropy of normalised eigenvalues), dimensions"),
    "isoscore": ("IsoScore", "IsoScore (0 = one direction, 1 = isotropic)"),
    "partition_isotropy": ("Partition isotropy", "min Z(c) / max Z(c) (1 = isotropic)"),
    "sample_mean_cosine": ("Mean cosine (sample)", "mean cos over pairs of the token sample"),
}
# Metrics computed on the token sample: these are the ones a post-processing what-if changes.
SAMPLE_METRICS = {"pc1_variance_ratio": "pc1_variance_ratio", "effective_rank": "effective_rank",
                  "isoscore": "isoscore", "partition_isotropy": "partition_isotropy",
                  "sample_mean_cosine": "mean_cosine", "mean_cosine": "mean_cosine"}
X_AXES = ("layer", "depth")
PROJ_METHODS = ("pca", "umap")
PROJ_COLORS = ("log_frequency", "position", "document", "search")


@dataclass(frozen=True)
class Selection:
    """What the user chose. `models` holds 1..4 identifiers (built-in, local folder or hub id)."""

    # -- the run (shared by every page; each model gives one RunSpec)
    models: tuple[str, ...] = ("minilm-l6",)
    corpus: str = "wiki-en"
    text_column: str | None = None
    max_tokens: int = UI_MAX_TOKENS
    max_seq_len: int = 512
    batch_size: int = 16
    device: str = "auto"
    dtype: str = "auto"
    special_tokens: str = "exclude"
    sample: int = 5000
    seed: int = 0
    # -- page choices
    focus: str | None = None  # the model of the single-model views (None: the first one)
    metric: str = "mean_cosine"
    x_axis: str = "layer"  # "layer" index or relative "depth" = layer / L
    layer: int | None = None  # None: each model's middle layer; else clipped to the model's depth
    depth: float = 0.5  # relative depth for the Compare page's projections
    reference: bool = True  # overlay the published curves
    post: PostProcess = field(default_factory=PostProcess)
    drop_outliers: bool = False  # also remove each model's own persistent outlier dims
    proj_method: str = "pca"
    proj_color: str = "log_frequency"
    n_neighbors: int = 15
    min_dist: float = 0.1
    search: str = ""

    def __post_init__(self):
        models = tuple(dict.fromkeys(str(m).strip() for m in self.models if str(m).strip()))
        if not models:
            raise InputError("Select at least one model.")
        if len(models) > MAX_MODELS:
            raise InputError(f"At most {MAX_MODELS} models at once, got {len(models)}.")
        object.__setattr__(self, "models", models)
        if self.focus is not None and self.focus not in models:
            object.__setattr__(self, "focus", None)
        if self.metric not in METRICS:
            raise InputError(f"Unknown metric {self.metric!r}; one of {', '.join(METRICS)}.")
        if self.x_axis not in X_AXES:
            raise InputError(f"x_axis must be one of {X_AXES}, got {self.x_axis!r}.")
        if self.proj_method not in PROJ_METHODS:
            raise InputError(f"proj_method must be one of {PROJ_METHODS}, got {self.proj_method!r}.")
        if self.proj_color not in PROJ_COLORS:
            raise InputError(f"proj_color must be one of {PROJ_COLORS}, got {self.proj_color!r}.")
        if not 0.0 <= float(self.depth) <= 1.0:
            raise InputError(f"depth must be in [0, 1], got {self.depth!r}.")
        if self.layer is not None and int(self.layer) < 0:
            raise InputError(f"layer must be >= 0, got {self.layer!r}.")
        if not 2 <= int(self.n_neighbors) <= 200:
            raise InputError(f"n_neighbors must be in [2, 200], got {self.n_neighbors!r}.")
        if not 0.0 <= float(self.min_dist) <= 1.0:
            raise InputError(f"min_dist must be in [0, 1], got {self.min_dist!r}.")
        self.spec(models[0])  # validates the run options once, with RunSpec's messages

    # ------------------------------------------------------------------ runs
    def spec(self, model: str) -> RunSpec:
        return RunSpec(model=model, corpus=self.corpus, text_column=self.text_column or None,
                       max_tokens=int(self.max_tokens), max_seq_len=int(self.max_seq_len),
                       batch_size=int(self.batch_size), device=self.device, dtype=self.dtype,
                       special_tokens=self.special_tokens, sample=int(self.sample), seed=int(self.seed))

    def specs(self) -> list[RunSpec]:
        return [self.spec(m) for m in self.models]

    @property
    def focus_model(self) -> str:
        return self.focus or self.models[0]

    def layer_for(self, n_layers: int) -> int:
        """The layer index for a model with `n_layers` hidden-state layers (embeddings included)."""
        if self.layer is None:
            return n_layers // 2
        return min(int(self.layer), n_layers - 1)

    def replace(self, **kw) -> "Selection":
        return dataclasses.replace(self, **kw)


DEFAULT = Selection()

# URL key -> Selection field, for the scalar fields (the post-processing keys are "pp_*").
_KEYS = {
    "models": "models", "corpus": "corpus", "col": "text_column", "tokens": "max_tokens",
    "seqlen": "max_seq_len", "batch": "batch_size", "device": "device", "dtype": "dtype",
    "special": "special_tokens", "sample": "sample", "seed": "seed", "focus": "focus",
    "metric": "metric", "x": "x_axis", "layer": "layer", "depth": "depth", "ref": "reference",
    "proj": "proj_method", "color": "proj_color", "nn": "n_neighbors", "md": "min_dist", "q": "search",
    "pp_outliers": "drop_outliers",
}
_PP_KEYS = {"pp_center": "center", "pp_zscore": "zscore", "pp_abtt": "abtt", "pp_whiten": "whiten",
            "pp_k": "whiten_k", "pp_drop": "remove"}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def to_query_params(sel: Selection) -> dict[str, str | list[str]]:
    """The non-default fields of `sel` as URL query params (models as a repeated key)."""
    out: dict[str, str | list[str]] = {}
    for key, name in _KEYS.items():
        v, d = getattr(sel, name), getattr(DEFAULT, name)
        if v == d or v is None:
            continue
        out[key] = list(v) if name == "models" else _fmt(v)
    post, dpost = sel.post, PostProcess()
    for key, name in _PP_KEYS.items():
        v = getattr(post, name)
        if v == getattr(dpost, name) or v is None:
            continue
        out[key] = ",".join(str(i) for i in v) if name == "remove" else _fmt(v)
    return out


def _parse_bool(s: str) -> bool:
    s = s.strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {s!r}")


def _parse(name: str, raw: str | list[str]):
    """One URL value -> the field's type (raises ValueError on a bad value)."""
    if name == "models":
        items = raw if isinstance(raw, list) else [raw]
        return tuple(m.strip() for it in items for m in str(it).split(",") if m.strip())
    s = raw[-1] if isinstance(raw, list) else raw
    if name in ("max_tokens", "max_seq_len", "batch_size", "sample", "seed", "n_neighbors", "layer"):
        return int(s)
    if name in ("depth", "min_dist"):
        return float(s)
    if name in ("reference", "drop_outliers"):
        return _parse_bool(s)
    if name in ("text_column", "focus"):
        return s or None
    if name == "device" and s not in DEVICES or name == "dtype" and s not in DTYPES \
            or name == "special_tokens" and s not in SPECIAL_POLICIES:
        raise ValueError(f"{s!r} is not one of the allowed values")
    return s


def from_query_params(params: Mapping[str, str | list[str]]) -> tuple[Selection, list[str]]:
    """A Selection from URL query params, and the problems found (each bad value is ignored)."""
    problems: list[str] = []
    kw: dict = {}
    for key, name in _KEYS.items():
        if key in params:
            try:
                kw[name] = _parse(name, params[key])
            except (ValueError, TypeError) as e:
                problems.append(f"URL parameter {key}={params[key]!r} ignored: {e}")
    pkw: dict = {}
    for key, name in _PP_KEYS.items():
        if key not in params:
            continue
        raw = params[key]
        s = raw[-1] if isinstance(raw, list) else raw
        try:
            if name in ("center", "zscore", "whiten"):
                pkw[name] = _parse_bool(s)
            elif name == "remove":
                pkw[name] = tuple(int(x) for x in s.replace(" ", "").split(",") if x)
            else:
                pkw[name] = int(s)
        except ValueError as e:
            problems.append(f"URL parameter {key}={s!r} ignored: {e}")
    try:
        kw["post"] = PostProcess(**pkw)
    except ValueError as e:
        problems.append(f"post-processing from the URL ignored: {e}")
    # Validate field by field so one bad value does not discard the others.
    sel = DEFAULT
    for name, value in kw.items():
        try:
            sel = sel.replace(**{name: value})
        except (InputError, ValueError, TypeError) as e:
            problems.append(f"URL value for {name} ignored: {e}")
    return sel, problems


def field_names() -> list[str]:
    return [f.name for f in fields(Selection)]
