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

from .corpora import BUILTIN_CORPORA
from .errors import InputError
from .postprocess import PostProcess
from .spec import DEVICES, DTYPES, SPECIAL_POLICIES, RunSpec
from .uploads import is_upload_id, resolve

MAX_MODELS = 4
MAX_CORPORA = 4  # the main corpus and up to 3 more, each run with every model
MAX_RUNS = 6  # (model, corpus) runs at once
MAX_CONTROL_SEEDS = 5
UI_MAX_TOKENS = 20_000  # the UI default budget: ~5 s of MiniLM forward on 2 CPU cores

# Metric keys of results["layers"], in menu order, with a label and what the y axis shows.
METRICS: dict[str, tuple[str, str]] = {
    "mean_cosine": ("Mean cosine similarity", "mean cos(x_i, x_j), all pairs i != j"),
    "cross_sequence_cosine": ("Cross-sequence cosine", "mean cos, pairs from different documents"),
    "intra_sentence_similarity": ("Intra-sentence similarity", "mean cos(x_t, sequence mean)"),
    "intra_sentence_adjusted": ("Intra-sentence similarity, anisotropy-adjusted",
                                "intra-sentence similarity - mean cosine"),
    "self_similarity": ("Self-similarity", "mean cos between occurrences of a token id in different sequences"),
    "self_similarity_adjusted": ("Self-similarity, anisotropy-adjusted", "self-similarity - mean cosine"),
    "mean_norm": ("Mean norm", "mean ||x_t|| (hidden-state units)"),
    "pc1_variance_ratio": ("PC1 variance ratio", "top eigenvalue / trace of the covariance"),
    "effective_rank": ("Effective rank", "exp(entropy of normalised singular values), dimensions"),
    "isoscore": ("IsoScore", "IsoScore (0 = one direction, 1 = isotropic)"),
    "partition_isotropy": ("Partition isotropy", "min Z(c) / max Z(c) (1 = isotropic)"),
    "sample_mean_cosine": ("Mean cosine (sample)", "mean cos over pairs of the token sample"),
}
# Metrics computed on the token sample: these are the ones a post-processing what-if changes.
SAMPLE_METRICS = {"pc1_variance_ratio": "pc1_variance_ratio", "effective_rank": "effective_rank",
                  "isoscore": "isoscore", "partition_isotropy": "partition_isotropy",
                  "sample_mean_cosine": "mean_cosine", "mean_cosine": "mean_cosine"}
X_AXES = ("layer", "depth")
LAYER_BY = ("depth", "index")  # how the one-layer views pick each model's layer
PROJ_METHODS = ("pca", "umap")
PROJ_COLORS = ("log_frequency", "position", "document", "search")


@dataclass(frozen=True)
class Selection:
    """What the user chose. `models` holds 1..4 identifiers (built-in, local folder or hub id)."""

    # -- the run (shared by every page; each model gives one RunSpec)
    models: tuple[str, ...] = ("minilm-l6",)
    corpus: str = "wiki-en"  # a built-in id or an upload id (core.uploads: "upload:<sha256>.<ext>"), never a path
    text_column: str | None = None
    # More corpora to compare (wiki-en vs wiki-fr vs uniform-random...): every model runs on each. An upload
    # table names its text column after '#': "upload:<sha256>.csv#text".
    more_corpora: tuple[str, ...] = ()
    control_seeds: int = 3  # an untrained control runs with this many seeds, drawn as a band (1: no band)
    max_tokens: int = UI_MAX_TOKENS
    max_seq_len: int = 512
    batch_size: int = 16
    device: str = "auto"
    dtype: str = "auto"
    special_tokens: str = "exclude"
    sample: int = 5000
    seed: int = 0
    # -- page choices
    focus: str | None = None  # the model of the single-run views (None: the first one)
    focus_corpus: str | None = None  # ... and its corpus (None: the main corpus)
    metric: str = "mean_cosine"
    x_axis: str | None = None  # "layer" index, relative "depth" = layer / L, None: auto (see x_axis_for)
    layer_by: str = "depth"  # the one-layer views: each model at relative `depth`, or at layer index `layer`
    layer: int | None = None  # layer index (layer_by="index"); None: the middle layer; past a model's last: clamped
    depth: float = 0.5  # relative depth (0 = embeddings, 1 = last layer) of the one-layer views and projections
    reference: bool = True  # overlay the published curves
    post: PostProcess = field(default_factory=PostProcess)
    drop_outliers: bool = False  # also remove each model's own persistent outlier dims
    proj_method: str = "pca"
    proj_color: str = "log_frequency"
    n_neighbors: int = 15
    min_dist: float = 0.1
    search: str = ""
    dim: int | None = None  # the dimension drilled into on the Outliers page (None: the first outlier)
    ablation: bool = False  # show the focused run's LM-loss ablation (Outliers page)

    def __post_init__(self):
        models = tuple(dict.fromkeys(str(m).strip() for m in self.models if str(m).strip()))
        if not models:
            raise InputError("Select at least one model.")
        if len(models) > MAX_MODELS:
            raise InputError(f"At most {MAX_MODELS} models at once, got {len(models)}.")
        object.__setattr__(self, "models", models)
        more = tuple(c for c in dict.fromkeys(str(c).strip() for c in self.more_corpora if str(c).strip())
                     if c != self.corpus)
        for c in more:
            base = split_corpus(c)[0]
            if base not in BUILTIN_CORPORA and not is_upload_id(base):
                raise InputError(f"Corpus {base[:80]!r} to compare is not a built-in corpus "
                                 f"({', '.join(BUILTIN_CORPORA)}) nor an upload of this app.")
        if 1 + len(more) > MAX_CORPORA:
            raise InputError(f"At most {MAX_CORPORA} corpora at once, got {1 + len(more)}.")
        if len(models) * (1 + len(more)) > MAX_RUNS:
            raise InputError(f"At most {MAX_RUNS} runs (models x corpora) at once, got {len(models)} x "
                             f"{1 + len(more)}: remove a model or a corpus.")
        object.__setattr__(self, "more_corpora", more)
        if self.focus_corpus is not None and self.focus_corpus not in more:
            object.__setattr__(self, "focus_corpus", None)
        if self.focus is not None and self.focus not in models:
            object.__setattr__(self, "focus", None)
        if self.metric not in METRICS:
            raise InputError(f"Unknown metric {self.metric!r}; one of {', '.join(METRICS)}.")
        if not 1 <= int(self.control_seeds) <= MAX_CONTROL_SEEDS:
            raise InputError(f"control_seeds must be in [1, {MAX_CONTROL_SEEDS}], got {self.control_seeds!r}.")
        if self.layer_by not in LAYER_BY:
            raise InputError(f"layer_by must be one of {LAYER_BY}, got {self.layer_by!r}.")
        if self.x_axis is not None and self.x_axis not in X_AXES:
            raise InputError(f"x_axis must be one of {X_AXES}, got {self.x_axis!r}.")
        if self.proj_method not in PROJ_METHODS:
            raise InputError(f"proj_method must be one of {PROJ_METHODS}, got {self.proj_method!r}.")
        if self.proj_color not in PROJ_COLORS:
            raise InputError(f"proj_color must be one of {PROJ_COLORS}, got {self.proj_color!r}.")
        if not 0.0 <= float(self.depth) <= 1.0:
            raise InputError(f"depth must be in [0, 1], got {self.depth!r}.")
        if self.dim is not None and int(self.dim) < 0:
            raise InputError(f"dim must be >= 0, got {self.dim!r}.")
        if self.layer is not None and int(self.layer) < 0:
            raise InputError(f"layer must be >= 0, got {self.layer!r}.")
        if not 2 <= int(self.n_neighbors) <= 200:
            raise InputError(f"n_neighbors must be in [2, 200], got {self.n_neighbors!r}.")
        if not 0.0 <= float(self.min_dist) <= 1.0:
            raise InputError(f"min_dist must be in [0, 1], got {self.min_dist!r}.")
        self.spec(models[0])  # validates the run options once, with RunSpec's messages

    # ------------------------------------------------------------------ runs
    def spec(self, model: str, corpus: str | None = None) -> RunSpec:
        """The run of `model` on `corpus` (default: the main corpus, with the selection's text column)."""
        corpus, col = (self.corpus, self.text_column) if corpus in (None, self.corpus) else split_corpus(corpus)
        # An upload is named by its id (URL, widgets); the run reads its saved file.
        path = str(resolve(corpus)) if is_upload_id(corpus) else corpus
        return RunSpec(model=model, corpus=path, text_column=col or None,
                       max_tokens=int(self.max_tokens), max_seq_len=int(self.max_seq_len),
                       batch_size=int(self.batch_size), device=self.device, dtype=self.dtype,
                       special_tokens=self.special_tokens, sample=int(self.sample), seed=int(self.seed))

    @property
    def corpora(self) -> tuple[str, ...]:
        return (self.corpus,) + self.more_corpora

    def specs(self) -> list[RunSpec]:
        """Every (model, corpus) run, model by model, then the extra seeds of the untrained controls."""
        main = [self.spec(m, c) for m in self.models for c in self.corpora]
        return main + [s for m in self.models for c in self.corpora for s in self.control_specs(m, c)]

    def control_specs(self, model: str, corpus: str | None = None) -> list[RunSpec]:
        """The runs of an untrained control with its other seeds (none for a trained model)."""
        from .models import BUILTIN_MODELS, control_variant

        e = BUILTIN_MODELS.get(model)
        if e is None or e.trained or e.large:  # a real-size model: one draw is costly enough
            return []
        return [self.spec(control_variant(model, k), corpus) for k in range(1, int(self.control_seeds))]

    @property
    def focus_model(self) -> str:
        return self.focus or self.models[0]

    def layer_for(self, n_layers: int) -> int:
        """The layer index for a model with `n_layers` hidden-state layers (embeddings included):
        round(depth * L) by relative depth, else the chosen index clamped to the last layer."""
        if self.layer_by == "depth":
            return int(round(float(self.depth) * (n_layers - 1)))
        if self.layer is None:
            return n_layers // 2
        return min(int(self.layer), n_layers - 1)

    def layer_clamped(self, n_layers: int) -> bool:
        """True when the chosen layer index lies past this model's last layer (shown as its last)."""
        return self.layer_by == "index" and self.layer is not None and int(self.layer) > n_layers - 1

    def x_axis_for(self, layer_counts) -> str:
        """The x axis of the layer curves: the chosen one, else relative depth when the models have
        different depths or published curves are overlaid (their depth is not ours), else layer index."""
        if self.x_axis is not None:
            return self.x_axis
        return "depth" if self.reference or len(set(layer_counts)) > 1 else "layer"

    def dim_for(self, results: dict) -> int:
        """The dimension drilled into for a run: the chosen one (within the model's d), else its first
        persistent outlier (either definition), else 0."""
        d = int(results["manifest"]["model"].get("hidden_size") or 1)
        if self.dim is not None and int(self.dim) < d:
            return int(self.dim)
        o = results["outliers"]
        outs = sorted(set(o["activation"]["persistent"]) | set(o.get("norm_parameters", {}).get("persistent") or []))
        return int(outs[0]) if outs else 0

    def replace(self, **kw) -> "Selection":
        return dataclasses.replace(self, **kw)


DEFAULT = Selection()

# URL key -> Selection field, for the scalar fields (the post-processing keys are "pp_*").
_KEYS = {
    "models": "models", "corpus": "corpus", "col": "text_column", "vs": "more_corpora", "tokens": "max_tokens",
    "seqlen": "max_seq_len", "batch": "batch_size", "device": "device", "dtype": "dtype",
    "special": "special_tokens", "sample": "sample", "seed": "seed", "focus": "focus", "focus_corpus": "focus_corpus",
    "metric": "metric", "x": "x_axis", "layer_by": "layer_by", "layer": "layer", "depth": "depth",
    "ref": "reference",
    "proj": "proj_method", "color": "proj_color", "nn": "n_neighbors", "md": "min_dist", "q": "search",
    "pp_outliers": "drop_outliers", "dim": "dim", "seeds": "control_seeds", "ablate": "ablation",
}
_PP_KEYS = {"pp_center": "center", "pp_zscore": "zscore", "pp_abtt": "abtt", "pp_whiten": "whiten",
            "pp_k": "whiten_k", "pp_drop": "remove"}


def split_corpus(entry: str) -> tuple[str, str | None]:
    """"upload:<sha256>.csv#text" -> ("upload:<sha256>.csv", "text"); "wiki-fr" -> ("wiki-fr", None)."""
    c, _, col = str(entry).partition("#")
    return c, (col or None)


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
        out[key] = list(v) if name in ("models", "more_corpora") else _fmt(v)
    if "layer" in out and "layer_by" not in out:  # a bare layer= reads as an index (older links)
        out["layer_by"] = sel.layer_by
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
    if name == "more_corpora":
        items = raw if isinstance(raw, list) else [raw]
        return tuple(str(it).strip() for it in items if str(it).strip())
    s = raw[-1] if isinstance(raw, list) else raw
    if name in ("max_tokens", "max_seq_len", "batch_size", "sample", "seed", "n_neighbors", "layer", "dim",
                "control_seeds"):
        return int(s)
    if name in ("depth", "min_dist"):
        return float(s)
    if name in ("reference", "drop_outliers", "ablation"):
        return _parse_bool(s)
    if name in ("text_column", "focus", "focus_corpus"):
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
    if "layer" in kw and "layer_by" not in kw:  # links from before layer_by: a layer index
        kw["layer_by"] = "index"
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
