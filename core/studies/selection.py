"""The dashboard's selection: one frozen dataclass, and its round trip through URL query params.

Everything a view depends on lives here (models, corpus, budget, advanced options, and the
page choices such as the metric and the layer), so a URL reproduces a view. Only values that
differ from the defaults are written to the URL; reading is tolerant: a bad value falls back to
its default and is reported, a number out of range is clamped and reported, never raised.

What a URL or a sidebar field may name is restricted (`check_corpus`, `check_modal_corpus`,
`check_model`): built-in corpora and models, uploads by the id the app gave them
(``upload:<sha256>.<ext>``), files, folders and model folders under the configured data directory
(``data:<relative path>``), hub identifiers unless switched off; any server path only when
core.base.settings allows it (the CLI always may). Every field that names a file, a folder or a model is
listed in `NAMED_FIELDS` with its check, and every path goes through the one `_allowed_path`; the
answer is decided on the text alone, never on what exists.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..base.errors import InputError
from ..base.settings import Settings
from ..base.settings import current as current_settings
from ..base.spec import DEVICES, DTYPES, SPECIAL_POLICIES, RunSpec
from ..inputs.access import (
    check_corpus,
    check_modal_corpus,
    check_model,
    check_more_corpus,
    check_series_run,
    quote_ident,
    split_corpus,
    url_ident,
)
from ..inputs.checkpoints import is_trained
from ..inputs.checkpoints import resolve as resolve_trained
from ..inputs.corpora import META_PREFIX, TABLE_SUFFIXES
from ..inputs.models import BUILTIN_MODELS, control_variant, model_modality
from ..inputs.uploads import is_upload_id, resolve
from ..stats.outliers import run_outlier_dims
from ..stats.postprocess import PostProcess
from ..stats.reference import reference_curves
from ..stats.registry import picker, sample_metrics_map
from .drift import DriftSpec
from .papers import run as papers
from .train_spec import PRESETS as TRAIN_PRESETS
from .train_spec import TrainSpec

MAX_MODELS = 8  # four models and their untrained controls (the Godey preset)
MAX_CORPORA = 4  # the main corpus and up to 3 more, each run with every model
MAX_RUNS = 8  # (model, corpus) runs at once
MAX_CONTROL_SEEDS = 5
# Godey et al. 2023's comparison across modalities (Compare page preset): a text, an image, a speech
# Transformer and a CNN, read by relative depth.
# Each model is followed by its untrained control (same architecture, random weights): the geometry that
# training made, beside the one the architecture gives by itself.
GODEY_MODELS = ("minilm-l6", "dinov2-vits14", "whisper-tiny-en", "mobilenet-v2")
GODEY_CONTROLS = {"minilm-l6": "untrained-minilm-l6", "dinov2-vits14": "untrained-vit-s14",
                  "whisper-tiny-en": "untrained-whisper-tiny", "mobilenet-v2": "untrained-mobilenet-v2"}
GODEY_PRESET = tuple(m for g in GODEY_MODELS for m in (g, GODEY_CONTROLS[g]))
# The UI default budget: a first look. MiniLM on wiki-en at 8,000 tokens took 26 s of CPU in all (imports, corpus,
# model, forward, metrics; 20,000: 52 s), about a minute on the clock from a cold start on 2 cores;
# the sidebar offers more (FULL_LOOK_TOKENS).
UI_MAX_TOKENS = 8_000
FULL_LOOK_TOKENS = 50_000

# Metric keys of results["layers"], in menu order, with a label and what the y axis shows (core.stats.registry).
METRICS: dict[str, tuple[str, str]] = picker()
# Metrics computed on the token sample: these are the ones a post-processing what-if changes
# (key -> its key in the post-processed rows).
SAMPLE_METRICS: dict[str, str] = sample_metrics_map()
X_AXES = ("layer", "depth")
LAYER_BY = ("depth", "index")  # how the one-layer views pick each model's layer
PROJ_METHODS = ("pca", "umap")
PROJ_COLORS = ("log_frequency", "position", "document", "search")
# A projection coloured by a column of an uploaded table corpus (e.g. its topic): "meta:<column name>". The
# name is checked against the run's columns where the projection is drawn (core.views.projection).
MAX_COLUMN_CHARS = 200
# The outlier dims the Frequency, drill-down and ablation tabs use: the run's persistent dims (either
# definition), the dims over the 3-sigma rule at the page's layer, or dims the user typed (typed_dims).
OUTLIER_SETS = ("persistent", "layer", "typed")
MAX_TYPED_DIMS = 64  # dims one can type for the Outliers tabs (and ablate)
# The Attention page's choices (core.views.attention's HEATMAP_STATS and LINK_SUMMARIES: a unit test holds them
# equal) and Compare's sections, as written in the URL.
ATTN_STATS = ("entropy", "sink_first", "sink_special", "cos_mu_qk", "q_drift", "k_drift")
ATTN_KEYS = ("excluded", "included")  # special tokens among the key positions of the outlier link
ATTN_SUMMARIES = ("mean_abs", "strongest", "mean")
COMPARE_SECTIONS = ("depth", "outliers", "attention", "projections")
# Compare's attention curves (core.views.attention's CURVE_STATS: a unit test holds them equal).
ATTN_CURVE_STATS = ("entropy", "sink_first", "sink_special", "cos_mu_qk", "q_drift", "k_drift", "q_mean_cosine",
                    "mean_term_share")
# The sections of Layers and Outliers, as written in the URL (the pages' tabs, in their order).
LAYERS_SECTIONS = ("curves", "numbers", "layer", "lens")
OUTLIERS_SECTIONS = ("dims", "across", "definitions", "frequency", "dimension", "ablation")
# The Papers page: which reproduction, its positions per run (the findings' setting or a quick look), and a
# subset of its runs (None: all of them).
PAPER_DEFAULT = "godey"
PAPER_BUDGETS = (papers.DEFAULT_MAX_TOKENS, 1000)
MAX_DYNAMICS_RUNS = 4  # the Dynamics page compares up to four trained runs
# The Lab page: the stored lab on show (a file stem of <cache_dir>/labs/, core.studies.lab) and the statistic of its
# main-effects chart (one the lab computed effects for; the page checks it against the lab's).
LAB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
LAB_STAT = re.compile(r"[a-z][a-z0-9_]{0,59}")
# Bounds of the numeric fields (the sidebar's widgets use the same): a URL value outside is clamped.
LIMITS: dict[str, tuple[int, int]] = {
    "max_tokens": (1, 10_000_000), "max_seq_len": (8, 8192), "batch_size": (1, 512),
    "sample": (1, 50_000), "seed": (0, 2**31 - 1), "n_neighbors": (2, 200), "layer": (0, 100_000),
    "dim": (0, 65_536), "control_seeds": (1, MAX_CONTROL_SEEDS),
    "attn_window": (0, 10_000_000), "attn_block": (1, 100_000), "attn_head": (1, 100_000),
    "dyn_tokens": (500, 1_000_000),
}
# The Train form's fields (core.studies.train_spec.TrainSpec) and the controlled drift experiment's (core.studies.drift.DriftSpec)
# in the
# URL: key -> the spec's field, and the bounds of their numbers (the forms' widgets use the same).
TRAIN_KEYS = {"tcorpus": "corpus", "tcol": "text_column", "tarch": "arch", "ttok": "tokenizer", "tvocab": "vocab_size",
              "tlayers": "n_layers", "twidth": "d_model", "theads": "n_heads", "tsteps": "steps", "tbatch": "batch_size",
              "tseq": "seq_len", "tlr": "lr", "tseed": "seed", "topt": "optimizer", "ttied": "tied", "tgate": "attn_gate",
              "tinner": "d_inner"}
TRAIN_LIMITS: dict[str, tuple[float, float]] = {
    "vocab_size": (512, 50_000), "n_layers": (1, 48), "d_model": (16, 4096), "n_heads": (1, 64),
    "steps": (1, 1_000_000), "batch_size": (1, 4096), "seq_len": (8, 8192), "seed": (0, 2**31 - 1), "lr": (1e-6, 1.0),
    "d_inner": (1, 65_536)}
DRIFT_KEYS = {"dr_d": "d", "dr_heads": "heads", "dr_seq": "seq_len", "dr_seed": "seed", "dr_alphas": "alphas",
              "dr_taus": "taus", "dr_bias": "biases"}
DRIFT_LIMITS: dict[str, tuple[int, int]] = {"d": (8, 1024), "heads": (1, 64), "seq_len": (2, 512),
                                            "seed": (0, 2**31 - 1)}
MAX_GRID = 32  # alphas or taus of the drift experiment from the URL
# URL keys that only one page reads: the URL of another page leaves them out (the selection keeps them, so
# going back restores that page's view), so a link shows the page's own choices and nothing of the others'.
PAGE_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("ltab",),
    "outliers": ("dim", "ablate", "oset", "odims", "otab"),
    "attention": ("astat", "akeys", "alink", "win", "block", "head", "drift", *DRIFT_KEYS),
    "compare": ("ctab", "ca", "ca_corpus", "cb", "cb_corpus", "cattn"),
    "chain": ("cabl",),
    "papers": ("paper", "pbudget", "pruns"),
    "train": ("tpreset", *TRAIN_KEYS),
    "dynamics": ("druns", "dtokens"),
    "lab": ("lab", "lstat"),
}
MAX_SEARCH_CHARS = 100
MAX_DIM = 65_536  # hidden-size bound for post-processing values from the URL


def parse_dims(text: str) -> tuple[int, ...]:
    """"308, 8" -> (8, 308): dims typed by a user or read from a URL (commas or spaces between them).
    ValueError with a message a person can act on."""
    text = str(text)
    if len(text) > 8 * MAX_TYPED_DIMS:
        raise ValueError(f"too long: at most {MAX_TYPED_DIMS} dims")
    items = [t for t in re.split(r"[,;\s]+", text.strip()) if t]
    bad = [t for t in items if not re.fullmatch(r"\d{1,6}", t)]
    if bad:
        raise ValueError(f"{quote_ident(bad[0])} is not a dimension number (whole numbers from 0, e.g. 308, 8)")
    return check_typed_dims(int(t) for t in items)


def check_lab_id(lab_id) -> str:
    """A lab's id as a file stem: letters, digits, '.', '_', '-' (at most 100, not starting with '.' or '-')."""
    if not isinstance(lab_id, str) or not LAB_ID.fullmatch(lab_id) or ".." in lab_id:
        raise InputError(f"{quote_ident(str(lab_id))} is not a lab id (letters, digits, '.', '_' and '-', at most "
                         "100; the Lab page lists the stored labs).")
    return lab_id


def check_typed_dims(dims) -> tuple[int, ...]:
    """Typed dims, sorted and distinct; at most MAX_TYPED_DIMS, each in [0, MAX_DIM] (a run's own width is
    checked where the dims are used: `typed_dims_for`)."""
    out = tuple(sorted({int(d) for d in dims}))
    if len(out) > MAX_TYPED_DIMS:
        raise InputError(f"At most {MAX_TYPED_DIMS} typed dims, got {len(out)}.")
    if out and not 0 <= out[0] <= out[-1] <= MAX_DIM:
        raise InputError(f"Typed dims must be in [0, {MAX_DIM:,}].")
    return out


def typed_dims_for(dims, d: int) -> list[int]:
    """The typed dims checked against a model of width d; InputError naming the dims out of range."""
    dims = list(check_typed_dims(dims))
    if not dims:
        raise InputError("Type one or more dimensions (e.g. 308, 8).")
    over = [x for x in dims if x >= d]
    if over:
        raise InputError(f"This model has {d} dims (0 to {d - 1}): {', '.join(map(str, over))} "
                         f"{'is' if len(over) == 1 else 'are'} out of range.")
    if len(dims) > d // 2:
        raise InputError(f"At most {d // 2} dims of this model's {d} (half of them: the ablation compares them "
                         "with as many random other dims).")
    return dims


@dataclass(frozen=True)
class Selection:
    """What the user chose. `models` holds 1..4 identifiers (built-in, local folder or hub id)."""

    # -- the run (shared by every page; each model gives one RunSpec)
    models: tuple[str, ...] = ("minilm-l6",)
    corpus: str = "wiki-en"  # a built-in id or an upload id (core.inputs.uploads: "upload:<sha256>.<ext>"), never a path
    image_corpus: str = "images-crops"  # the corpus of image models (ViT, CNN): a built-in or an upload id (zip)
    audio_corpus: str = "speech-human"  # the corpus of speech models
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
    logit_lens: bool = False  # opt-in: causal LMs' runs also read each layer through the model's unembedding
    # -- page choices
    focus: str | None = None  # the model of the single-run views (None: the first one)
    focus_corpus: str | None = None  # ... and its corpus (None: the main corpus)
    metric: str = "mean_cosine"
    x_axis: str | None = None  # "layer" index, relative "depth" = layer / L, None: auto (see x_axis_for)
    layer_by: str = "depth"  # the one-layer views: each model at relative `depth`, or at layer index `layer`
    layer: int | None = None  # layer index (layer_by="index"); None: the middle layer; past a model's last: clamped
    depth: float = 0.5  # relative depth (0 = embeddings, 1 = last layer) of the one-layer views and projections
    # overlay the published curves (Ethayarajh 2019): off by default, since their range (up to 0.7 or 0.99) would set
    # the y axis of curves that stay far lower, and they exist for two metrics only
    reference: bool = False
    post: PostProcess = field(default_factory=PostProcess)
    drop_outliers: bool = False  # also remove each model's own persistent outlier dims
    proj_method: str = "pca"
    proj_color: str = "log_frequency"
    n_neighbors: int = 15
    min_dist: float = 0.1
    search: str = ""
    dim: int | None = None  # the dimension drilled into on the Outliers page (None: the first outlier)
    ablation: bool = False  # show the focused run's LM-loss ablation (Outliers page)
    chain_ablation: bool = False  # show the focused run's chain ablations (Chain page)
    outlier_set: str = "persistent"  # the dims of the Frequency, drill-down and ablation tabs (OUTLIER_SETS)
    typed_dims: tuple[int, ...] = ()  # outlier_set="typed": the dims the user typed (sorted, distinct)
    # -- the Attention page: heatmap statistic, the outlier link's key positions and summary, and the attention
    # map on show (its window, None: no map shown; block and head numbered from 1)
    attn_stat: str = "entropy"
    attn_keys: str = "excluded"
    attn_summary: str = "mean_abs"
    attn_window: int | None = None
    attn_block: int = 1
    attn_head: int = 1
    compare_section: str = "depth"  # Compare's open section (COMPARE_SECTIONS)
    # Compare's two runs of "A minus B" (model and corpus; None: the first two runs, the main corpus) and the
    # statistic of its attention curves
    compare_a: str | None = None
    compare_a_corpus: str | None = None
    compare_b: str | None = None
    compare_b_corpus: str | None = None
    compare_attn_stat: str = "entropy"
    layers_section: str = "curves"  # Layers' open section (LAYERS_SECTIONS)
    outliers_section: str | None = None  # Outliers' (OUTLIERS_SECTIONS; None: the drill-down when a dim is chosen,
    # the ablation when it is shown, else the first)
    drift: DriftSpec | None = None  # the Attention page's controlled experiment on show (None: none)
    # -- the Papers page: the reproduction, its positions per run, a subset of its runs (None: all)
    paper: str = PAPER_DEFAULT
    paper_tokens: int = PAPER_BUDGETS[0]
    paper_runs: tuple[str, ...] | None = None
    # -- the Train form (what Train would queue) and its preset; the runs and tokens Dynamics shows (the metric of
    # its heatmap is `metric`)
    train: TrainSpec = field(default_factory=TrainSpec)
    train_preset: str = next(iter(TRAIN_PRESETS))
    dyn_runs: tuple[str, ...] = ()
    dyn_tokens: int = 20_000
    # -- the Lab page: the stored lab on show (None: the newest) and the statistic of its effects chart (None: the
    # lab's first)
    lab: str | None = None
    lab_stat: str | None = None

    def __post_init__(self):
        st = current_settings()
        self._check_models()
        self._check_named_fields(st)
        self._check_limits()
        self._check_runs()
        self._pick_single_runs(st)
        self._check_choices()
        self._check_papers()
        self._check_train(st)
        self._check_dynamics(st)
        self._check_lab()
        self._check_view()
        self.spec(self.models[0])  # validates the run options once, with RunSpec's messages

    def _check_models(self) -> None:
        """The models, each once and in order, at most MAX_MODELS; the corpora to compare, stripped."""
        models = tuple(dict.fromkeys(str(m).strip() for m in self.models if str(m).strip()))
        if not models:
            raise InputError("Select at least one model.")
        if len(models) > MAX_MODELS:
            raise InputError(f"At most {MAX_MODELS} models at once, got {len(models)}.")
        object.__setattr__(self, "models", models)
        object.__setattr__(self, "more_corpora", tuple(str(c).strip() for c in self.more_corpora if str(c).strip()))

    def _check_named_fields(self, st: Settings) -> None:
        """Every field that names a file, folder or model passes the access policy (core.inputs.access)."""
        for name, check in NAMED_FIELDS.items():
            v = getattr(self, name)
            checked = tuple(dict.fromkeys(check(x, st) for x in v)) if isinstance(v, tuple) else check(v, st)
            object.__setattr__(self, name, checked)

    def _check_limits(self) -> None:
        """The numeric fields within LIMITS; the search text at most MAX_SEARCH_CHARS."""
        for name, (lo, hi) in LIMITS.items():
            v = getattr(self, name)
            if v is not None and not lo <= int(v) <= hi:
                raise InputError(f"{name} must be in [{lo:,}, {hi:,}], got {v!r}.")
        if len(self.search) > MAX_SEARCH_CHARS:
            raise InputError(f"The search text is longer than {MAX_SEARCH_CHARS} characters.")

    def _check_runs(self) -> None:
        """At most MAX_CORPORA corpora and MAX_RUNS (model, corpus) runs; the main corpus is not compared with itself."""
        more = tuple(c for c in self.more_corpora if c != self.corpus)
        if 1 + len(more) > MAX_CORPORA:
            raise InputError(f"At most {MAX_CORPORA} corpora at once, got {1 + len(more)}.")
        if len(self.models) * (1 + len(more)) > MAX_RUNS:
            raise InputError(f"At most {MAX_RUNS} runs (models x corpora) at once, got {len(self.models)} x "
                             f"{1 + len(more)}: remove a model or a corpus.")
        object.__setattr__(self, "more_corpora", more)

    def _pick_single_runs(self, st: Settings) -> None:
        # The run of the single-run views and Compare's A and B: one of the selected models (the URL writes a data
        # folder as data:<path>, the models hold its path) on one of the corpora; else the default (a model removed
        # in the sidebar takes its choices with it; from_query_params says when a link's value was dropped).
        for name in ("focus", "compare_a", "compare_b"):
            m = getattr(self, name)
            if m is not None and m not in self.models:
                try:
                    m = check_model(m, st)
                except InputError:
                    m = None
                object.__setattr__(self, name, m if m in self.models else None)
            if getattr(self, f"{name}_corpus") is not None and getattr(self, f"{name}_corpus") not in self.more_corpora:
                object.__setattr__(self, f"{name}_corpus", None)

    def _check_choices(self) -> None:
        """Every field chosen from a list (metric, sections, statistics...) is one of that list."""
        if self.metric not in METRICS:
            raise InputError(f"Unknown metric {quote_ident(self.metric)}; one of {', '.join(METRICS)}.")
        if not 1 <= int(self.control_seeds) <= MAX_CONTROL_SEEDS:
            raise InputError(f"control_seeds must be in [1, {MAX_CONTROL_SEEDS}], got {quote_ident(self.control_seeds)}.")
        if self.layer_by not in LAYER_BY:
            raise InputError(f"layer_by must be one of {LAYER_BY}, got {quote_ident(self.layer_by)}.")
        if self.x_axis is not None and self.x_axis not in X_AXES:
            raise InputError(f"x_axis must be one of {X_AXES}, got {quote_ident(self.x_axis)}.")
        if self.proj_method not in PROJ_METHODS:
            raise InputError(f"proj_method must be one of {PROJ_METHODS}, got {quote_ident(self.proj_method)}.")
        if self.outlier_set not in OUTLIER_SETS:
            raise InputError(f"outlier_set must be one of {OUTLIER_SETS}, got {quote_ident(self.outlier_set)}.")
        for name, allowed in (("attn_stat", ATTN_STATS), ("attn_keys", ATTN_KEYS), ("attn_summary", ATTN_SUMMARIES),
                              ("compare_section", COMPARE_SECTIONS), ("compare_attn_stat", ATTN_CURVE_STATS),
                              ("layers_section", LAYERS_SECTIONS), ("paper", papers.NAMES),
                              ("train_preset", tuple(TRAIN_PRESETS))):
            if getattr(self, name) not in allowed:
                raise InputError(f"{name} must be one of {', '.join(allowed)}, got {quote_ident(getattr(self, name))}.")
        if self.outliers_section is not None and self.outliers_section not in OUTLIERS_SECTIONS:
            raise InputError(f"outliers_section must be one of {', '.join(OUTLIERS_SECTIONS)}, got "
                             f"{quote_ident(self.outliers_section)}.")
        if self.drift is not None and not isinstance(self.drift, DriftSpec):
            raise InputError("drift must be a DriftSpec (core.studies.drift).")

    def _check_view(self) -> None:
        """The projection's colour and the one-layer / one-dimension view's numbers."""
        if self.proj_color not in PROJ_COLORS:
            col = str(self.proj_color)[len(META_PREFIX):] if str(self.proj_color).startswith(META_PREFIX) else None
            if not col or len(col) > MAX_COLUMN_CHARS or not col.isprintable():
                raise InputError(f"proj_color must be one of {', '.join(PROJ_COLORS)} or {META_PREFIX}<column of "
                                 f"the corpus table>, got {quote_ident(self.proj_color)}.")
        object.__setattr__(self, "typed_dims", check_typed_dims(self.typed_dims))
        if not 0.0 <= float(self.depth) <= 1.0:
            raise InputError(f"depth must be in [0, 1], got {quote_ident(self.depth)}.")
        if self.dim is not None and int(self.dim) < 0:
            raise InputError(f"dim must be >= 0, got {quote_ident(self.dim)}.")
        if self.layer is not None and int(self.layer) < 0:
            raise InputError(f"layer must be >= 0, got {quote_ident(self.layer)}.")
        if not 2 <= int(self.n_neighbors) <= 200:
            raise InputError(f"n_neighbors must be in [2, 200], got {quote_ident(self.n_neighbors)}.")
        if not 0.0 <= float(self.min_dist) <= 1.0:
            raise InputError(f"min_dist must be in [0, 1], got {quote_ident(self.min_dist)}.")

    def _check_papers(self) -> None:
        if int(self.paper_tokens) not in PAPER_BUDGETS:
            raise InputError(f"paper_tokens must be one of {', '.join(f'{b:,}' for b in PAPER_BUDGETS)}, got "
                             f"{quote_ident(self.paper_tokens)}.")
        if self.paper_runs is None:
            return
        every = list(dict.fromkeys(p.model for p in papers.paper(self.paper).parts))  # a model may run on two corpora
        runs = tuple(dict.fromkeys(str(m).strip() for m in self.paper_runs if str(m).strip()))
        unknown = [m for m in runs if m not in every]
        if unknown:
            raise InputError(f"{quote_ident(unknown[0])} is not a run of the {self.paper} reproduction: its runs are "
                             f"{', '.join(every)}.")
        # in the paper's order; none or all of them: the whole reproduction
        object.__setattr__(self, "paper_runs", tuple(m for m in every if m in runs) if 0 < len(runs) < len(every)
                           else None)

    def _check_train(self, st: Settings) -> None:
        if not isinstance(self.train, TrainSpec):
            raise InputError("train must be a TrainSpec (core.studies.train_spec).")
        corpus = check_corpus(self.train.corpus, st)  # the sidebar's rule: no server file outside the data directory
        if corpus != self.train.corpus:
            object.__setattr__(self, "train", self.train.replace(corpus=corpus))
        col = self.train.text_column
        if col is not None and (not corpus.lower().endswith(TABLE_SUFFIXES) or len(col) > MAX_COLUMN_CHARS
                                or not col.isprintable()):
            raise InputError(f"The training corpus takes a text column only when it is a table "
                             f"({', '.join(TABLE_SUFFIXES)}), named in at most {MAX_COLUMN_CHARS} printable "
                             f"characters; got {quote_ident(col)}.")
        for name, (lo, hi) in TRAIN_LIMITS.items():
            if getattr(self.train, name) is None:  # d_inner: the family's default width
                continue
            if not lo <= getattr(self.train, name) <= hi:
                raise InputError(f"The training's {name} must be in [{lo:g}, {hi:g}], got "
                                 f"{quote_ident(getattr(self.train, name))}.")

    def _check_dynamics(self, st: Settings) -> None:
        runs = tuple(dict.fromkeys(str(r).strip() for r in self.dyn_runs if str(r).strip()))
        if len(runs) > MAX_DYNAMICS_RUNS:
            raise InputError(f"At most {MAX_DYNAMICS_RUNS} runs on Dynamics, got {len(runs)}.")
        for r in runs:
            check_series_run(r, st)
        object.__setattr__(self, "dyn_runs", runs)

    def _check_lab(self) -> None:
        if self.lab is not None:
            check_lab_id(self.lab)
        if self.lab_stat is not None and not (isinstance(self.lab_stat, str) and LAB_STAT.fullmatch(self.lab_stat)):
            raise InputError(f"The lab statistic must be a statistic's key (e.g. mid_mean_cosine), got "
                             f"{quote_ident(str(self.lab_stat))}.")

    # ------------------------------------------------------------------ runs
    def corpus_for(self, model: str) -> str | None:
        """The image or speech corpus of a model of that modality; None for a text model."""

        return {"image": self.image_corpus, "audio": self.audio_corpus}.get(model_modality(model))

    def corpora_of(self, model: str) -> tuple:
        """The corpora a model runs on: every text corpus for a text model, its modality's one otherwise."""
        return self.corpora if self.corpus_for(model) is None else (None,)

    def spec(self, model: str, corpus: str | None = None) -> RunSpec:
        """The run of `model` on `corpus` (default: the main corpus, with the selection's text column).
        An image or speech model always reads the corpus of its modality."""
        modal = self.corpus_for(model)
        if modal is not None:
            corpus, col = modal, None
        else:
            corpus, col = (self.corpus, self.text_column) if corpus in (None, self.corpus) else split_corpus(corpus)
        # An upload is named by its id (URL, widgets); the run reads its saved file.
        path = str(resolve(corpus)) if is_upload_id(corpus) else corpus
        return RunSpec(model=model, corpus=path, text_column=col or None,
                       max_tokens=int(self.max_tokens), max_seq_len=int(self.max_seq_len),
                       batch_size=int(self.batch_size), device=self.device, dtype=self.dtype,
                       special_tokens=self.special_tokens, sample=int(self.sample), seed=int(self.seed),
                       logit_lens=bool(self.logit_lens) and self.lens_applies(model))

    @staticmethod
    def lens_applies(model: str) -> bool:
        """Whether the logit lens can read `model` (a built-in causal LM, or a text model of a folder or the hub,
        which the run checks itself): the option leaves the runs of other models as they are."""
        e = BUILTIN_MODELS.get(model)
        return model_modality(model) == "text" and (e is None or bool(e.causal_lm))

    @property
    def corpora(self) -> tuple[str, ...]:
        return (self.corpus,) + self.more_corpora

    def specs(self) -> list[RunSpec]:
        """Every (model, corpus) run, model by model, then the extra seeds of the untrained controls."""
        main = [self.spec(m, c) for m in self.models for c in self.corpora_of(m)]
        return main + [s for m in self.models for c in self.corpora_of(m) for s in self.control_specs(m, c)]

    def control_specs(self, model: str, corpus: str | None = None) -> list[RunSpec]:
        """The runs of an untrained control with its other seeds (none for a trained model)."""

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
        different depths or published curves of the metric are overlaid (their depth is not ours), else layer
        index."""
        if self.x_axis is not None:
            return self.x_axis
        return "depth" if self.overlays_published or len(set(layer_counts)) > 1 else "layer"

    @property
    def overlays_published(self) -> bool:
        """The published curves are asked for and exist for the metric: only then do they set the x axis."""
        return bool(self.reference) and bool(reference_curves(self.metric))

    def dim_for(self, results: dict) -> int:
        """The dimension drilled into for a run: the chosen one (within the model's d), else its strongest
        persistent outlier (either definition; the largest max |x_d| among the massive activations, then the
        most layers flagged), else 0."""
        d = int(results["manifest"]["model"].get("hidden_size") or 1)
        if self.dim is not None and int(self.dim) < d:
            return int(self.dim)
        dims = strongest_dims(results["outliers"])
        return dims[0] if dims else 0

    def replace(self, **kw) -> "Selection":
        return dataclasses.replace(self, **kw)


# The fields of Selection that name a file, a folder or a model, each with its check (which sends every
# path through `_allowed_path`). Selection.__post_init__ applies them; a new such field must be listed here
# (tests/unit/test_selection.py tries an outside path on every URL key).
NAMED_FIELDS = {
    "models": check_model,
    "corpus": check_corpus,
    "image_corpus": lambda ident, st=None: check_modal_corpus(ident, "image", st),
    "audio_corpus": lambda ident, st=None: check_modal_corpus(ident, "audio", st),
    "more_corpora": check_more_corpus,
}
# Fields whose value is text, never opened as a file (a search string, a table's column name).
TEXT_FIELDS = ("search", "text_column")

DEFAULT = Selection()

# URL key -> Selection field, for the scalar fields (the post-processing keys are "pp_*").
_KEYS = {
    "models": "models", "corpus": "corpus", "icorpus": "image_corpus", "acorpus": "audio_corpus",
    "col": "text_column", "vs": "more_corpora", "tokens": "max_tokens",
    "seqlen": "max_seq_len", "batch": "batch_size", "device": "device", "dtype": "dtype",
    "special": "special_tokens", "sample": "sample", "seed": "seed", "lens": "logit_lens", "focus": "focus",
    "focus_corpus": "focus_corpus",
    "metric": "metric", "x": "x_axis", "layer_by": "layer_by", "layer": "layer", "depth": "depth",
    "ref": "reference",
    "proj": "proj_method", "color": "proj_color", "nn": "n_neighbors", "md": "min_dist", "q": "search",
    "pp_outliers": "drop_outliers", "dim": "dim", "seeds": "control_seeds", "ablate": "ablation",
    "oset": "outlier_set", "odims": "typed_dims",
    "astat": "attn_stat", "akeys": "attn_keys", "alink": "attn_summary", "win": "attn_window", "block": "attn_block",
    "head": "attn_head", "ctab": "compare_section", "cabl": "chain_ablation",
    "ca": "compare_a", "ca_corpus": "compare_a_corpus", "cb": "compare_b", "cb_corpus": "compare_b_corpus",
    "cattn": "compare_attn_stat", "ltab": "layers_section", "otab": "outliers_section",
    "paper": "paper", "pbudget": "paper_tokens", "pruns": "paper_runs", "tpreset": "train_preset",
    "druns": "dyn_runs", "dtokens": "dyn_tokens", "lab": "lab", "lstat": "lab_stat",
}
# Fields that depend on others (a model of the selection, a corpus compared): a value the selection drops is said.
_DEPENDENT = {"focus": "not one of the selected models", "compare_a": "not one of the selected models",
              "compare_b": "not one of the selected models", "focus_corpus": "not one of the corpora compared",
              "compare_a_corpus": "not one of the corpora compared",
              "compare_b_corpus": "not one of the corpora compared"}
_LISTS = ("paper_runs", "dyn_runs")  # tuple fields written comma-separated
_PP_KEYS = {"pp_center": "center", "pp_zscore": "zscore", "pp_abtt": "abtt", "pp_whiten": "whiten",
            "pp_k": "whiten_k", "pp_drop": "remove"}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def to_query_params(sel: Selection, page: str | None = None) -> dict[str, str | list[str]]:
    """The non-default fields of `sel` as URL query params (models as a repeated key). With `page` (its
    url_path), the keys that only another page reads (PAGE_KEYS) are left out."""
    out: dict[str, str | list[str]] = {}
    foreign = {k for p, keys in PAGE_KEYS.items() if p != page for k in keys} if page is not None else set()
    for key, name in _KEYS.items():
        if key in foreign:
            continue
        v, d = getattr(sel, name), getattr(DEFAULT, name)
        if v == d or v is None:
            continue
        if name == "models":
            out[key] = [url_ident(m) for m in v]
        elif name in ("corpus", "focus", "compare_a", "compare_b"):
            out[key] = url_ident(v)
        elif name in _LISTS:
            out[key] = ",".join(v)
        elif name == "more_corpora":
            out[key] = list(v)
        elif name == "typed_dims":
            out[key] = ",".join(map(str, v))
        else:
            out[key] = _fmt(v)
    if "layer" in out and "layer_by" not in out:  # a bare layer= reads as an index (older links)
        out["layer_by"] = sel.layer_by
    post, dpost = sel.post, PostProcess()
    for key, name in _PP_KEYS.items():
        v = getattr(post, name)
        if v == getattr(dpost, name) or v is None:
            continue
        out[key] = ",".join(str(i) for i in v) if name == "remove" else _fmt(v)
    if page in (None, "train"):
        out.update(_spec_params(sel.train, TrainSpec(), TRAIN_KEYS))
    if page in (None, "attention") and sel.drift is not None:
        out["drift"] = "1"
        out.update(_spec_params(sel.drift, DriftSpec(), DRIFT_KEYS))
    return out


def _spec_params(spec, default, keys: dict[str, str]) -> dict[str, str]:
    """The fields of a form's spec (TrainSpec, DriftSpec) that differ from its defaults, as URL params."""
    out = {}
    for key, name in keys.items():
        v = getattr(spec, name)
        if v == getattr(default, name) or v is None:
            continue
        out[key] = url_ident(v) if name == "corpus" else ",".join(_fmt(float(x)) for x in v) \
            if isinstance(v, tuple) else _fmt(v)
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
    if name == "typed_dims":
        return parse_dims(s)
    if name in _LISTS:
        if len(s) > 2000:
            raise ValueError("too long")
        return tuple(x.strip() for x in s.split(",") if x.strip())
    if name in LIMITS or name == "paper_tokens":
        if len(s.strip()) > 30:
            raise ValueError("not a number")
        return int(s)
    if name in ("depth", "min_dist"):
        return float(s)
    if name in ("reference", "drop_outliers", "ablation", "chain_ablation", "logit_lens"):
        return _parse_bool(s)
    if name in ("text_column", "focus", "focus_corpus", "outliers_section", "lab", "lab_stat") or name in _DEPENDENT:
        return s or None
    if name == "device" and s not in DEVICES or name == "dtype" and s not in DTYPES \
            or name == "special_tokens" and s not in SPECIAL_POLICIES:
        raise ValueError(f"{s!r} is not one of the allowed values")
    return s


def _raw_shown(raw) -> str:
    """A URL value as a message shows it (quoted, shortened, control characters visible)."""
    return quote_ident(raw[-1] if isinstance(raw, list) and len(raw) == 1 else ",".join(raw) if isinstance(raw, list) else raw)


def from_query_params(params: Mapping[str, str | list[str]]) -> tuple[Selection, list[str]]:
    """A Selection from URL query params, and the problems found (each bad value is ignored)."""
    problems: list[str] = []
    kw: dict = {}
    for key, name in _KEYS.items():
        if key in params:
            raw = params[key]
            shown = _raw_shown(raw)
            try:
                value = _parse(name, raw)
            except (ValueError, TypeError) as e:
                problems.append(f"URL parameter {key}={shown} ignored: {e}")
                continue
            if name == "models":  # a trained checkpoint that is not here: said and dropped, the others kept
                value = tuple(m for m in value if not _missing_checkpoint(m, key, problems))
            if name in LIMITS:
                lo, hi = LIMITS[name]
                if not lo <= value <= hi:
                    clamped = min(max(value, lo), hi)
                    problems.append(f"URL parameter {key}={shown} is out of range [{lo:,}, {hi:,}]; "
                                    f"using {clamped:,}.")
                    value = clamped
            kw[name] = value
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
                if len(s) > 2000:
                    raise ValueError("too many dimensions")
                pkw[name] = tuple(int(x) for x in s.replace(" ", "").split(",") if x)
                if any(not 0 <= d <= MAX_DIM for d in pkw[name]):
                    raise ValueError(f"dimensions must be in [0, {MAX_DIM:,}]")
            else:
                if len(s.strip()) > 30:
                    raise ValueError("not a number")
                v = int(s)
                if not 0 <= v <= MAX_DIM:
                    pkw[name] = min(max(v, 0), MAX_DIM)
                    problems.append(f"URL parameter {key}={quote_ident(s)} is out of range [0, {MAX_DIM:,}]; "
                                    f"using {pkw[name]:,}.")
                else:
                    pkw[name] = v
        except ValueError as e:
            problems.append(f"URL parameter {key}={quote_ident(s)} ignored: {e}")
    try:
        kw["post"] = PostProcess(**pkw)
    except ValueError as e:
        problems.append(f"post-processing from the URL ignored: {e}")
    train = _spec_from_params(params, TrainSpec(), TRAIN_KEYS, TRAIN_LIMITS, problems)
    if train.text_column is not None:  # a column only for a table corpus: said for its own key
        try:
            DEFAULT.replace(train=train)
        except InputError as e:
            problems.append(f"URL parameter tcol={quote_ident(train.text_column)} ignored: {e}")
            train = train.replace(text_column=None)
    if train != TrainSpec():
        kw["train"] = train
    if "drift" in params or any(k in params for k in DRIFT_KEYS):
        raw = params.get("drift", "1")
        try:
            shown = _parse_bool(raw[-1] if isinstance(raw, list) else raw)
        except ValueError as e:
            problems.append(f"URL parameter drift={quote_ident(raw)} ignored: {e}")
            shown = True
        if shown:
            kw["drift"] = _spec_from_params(params, DriftSpec(), DRIFT_KEYS, DRIFT_LIMITS, problems)
    # Validate field by field so one bad value does not discard the others.
    keys = {name: key for key, name in _KEYS.items()}
    sel = DEFAULT
    for name, value in kw.items():
        try:
            sel = sel.replace(**{name: value})
        except (InputError, ValueError, TypeError, OSError) as e:  # OSError: a check must never fail on a file
            key = keys.get(name)  # (the message quotes the value)
            problems.append(f"URL parameter {key} ignored: {e}" if key in params else f"URL value for {name} ignored: {e}")
            continue
        if name in _DEPENDENT and getattr(sel, name) is None and value is not None:
            problems.append(f"URL parameter {keys[name]}={quote_ident(value)} ignored: {_DEPENDENT[name]}.")
    if sel.text_column is not None and Path(sel.corpus).suffix.lower() not in TABLE_SUFFIXES:
        problems.append(f"URL parameter col={quote_ident(sel.text_column)} ignored: the corpus is not a table (a column "
                        "names the text of a .csv, .tsv, .jsonl or .parquet corpus).")
        sel = sel.replace(text_column=None)
    return sel, problems


def _missing_checkpoint(ident: str, key: str, problems: list[str]) -> bool:
    """True (and said) for a trained-checkpoint id from the URL that this server does not hold."""
    if not is_trained(ident):
        return False
    try:
        resolve_trained(ident)
    except InputError:
        problems.append(f"URL parameter {key}={quote_ident(ident)} ignored: no such trained checkpoint on this server "
                        "(the models box lists them; the Train page trains one).")
        return True
    return False


def _spec_value(name: str, s: str, limits: dict, default):
    """One URL value of a form's spec -> the field's type (ValueError on a bad value); bounds are checked apart."""
    if isinstance(default, bool):  # the drift block's biases
        return _parse_bool(s)
    if isinstance(default, tuple):  # alphas, taus: numbers separated by commas
        if len(s) > 2000:
            raise ValueError("too long")
        vals = tuple(float(x) for x in s.replace(";", ",").split(",") if x.strip())
        if len(vals) > MAX_GRID:
            raise ValueError(f"at most {MAX_GRID} values")
        return vals
    if name in limits:
        if len(s.strip()) > 30:
            raise ValueError("not a number")
        v = float(s) if isinstance(default, float) else int(s)
        if not math.isfinite(v):
            raise ValueError("not a finite number")
        return v
    if name == "text_column":
        return s or None
    return s


def _spec_from_params(params, default, keys: dict[str, str], limits: dict, problems: list[str]):
    """A form's spec (TrainSpec, DriftSpec) from its URL keys: each value parsed and bounded (clamped and said),
    the spec's own checks applied to all of them at once, then, when they fail together, one by one (each
    refused value is said and ignored)."""
    got: dict[str, tuple[str, object]] = {}
    for key, name in keys.items():
        if key not in params:
            continue
        raw = params[key]
        s = raw[-1] if isinstance(raw, list) else raw
        try:
            v = _spec_value(name, str(s), limits, getattr(default, name))
            if name == "corpus":
                v = check_corpus(v)
        except (InputError, ValueError) as e:
            problems.append(f"URL parameter {key}={quote_ident(s)} ignored: {e}")
            continue
        if name in limits:
            lo, hi = limits[name]
            if not lo <= v <= hi:
                clamped = type(v)(min(max(v, lo), hi))
                problems.append(f"URL parameter {key}={quote_ident(s)} is out of range [{lo:g}, {hi:g}]; using {clamped:g}.")
                v = clamped
        got[name] = (key, v)
    try:
        return dataclasses.replace(default, **{n: v for n, (_, v) in got.items()})
    except (InputError, ValueError, TypeError):
        pass
    spec = default
    for name, (key, v) in got.items():
        try:
            spec = dataclasses.replace(spec, **{name: v})
        except (InputError, ValueError, TypeError) as e:
            got = params[key][-1] if isinstance(params[key], list) else params[key]
            problems.append(f"URL parameter {key}={quote_ident(got)} ignored: {e}")
    return spec


def strongest_dims(outliers: dict) -> list[int]:
    """The persistent outlier dims (either definition), strongest first: by their largest max |x_d| in
    results' massive activations, then by the number of layers the activation rule flags them in."""
    outs = run_outlier_dims(outliers)
    peak = {d: 0.0 for d in outs}
    for m in outliers.get("massive_activations") or []:
        for d, v in zip(m.get("dims") or [], m.get("values") or []):
            if int(d) in peak and v is not None and v > peak[int(d)]:
                peak[int(d)] = float(v)
    flagged = {d: sum(d in ds for ds in outliers["activation"].get("per_layer") or []) for d in outs}
    return sorted(outs, key=lambda d: (-peak[d], -flagged[d], d))
