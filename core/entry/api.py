"""The Python API: runs from a notebook or a script, over the same cache and run key as the dashboard and the CLI.

    import aniso as aw                        # `aniso` re-exports this module's public names (docs/python.md)
    run = aw.analyze("minilm-l6", "wiki-en", max_tokens=40_000)
    run.layers                                # pandas DataFrame, one row per layer: the Numbers table
    run.figure("mean_cosine")                 # the Layers page's figure (plotly go.Figure)
    X, tokens = run.sample(layer=3)           # (K, d) hidden states + the tokens (text, position, document, frequency)
    aw.compare([run, aw.analyze("untrained-minilm-l6", "wiki-en")]).figure()
    run.outliers(), run.ablation(), run.attention(), run.chain(), run.link()
    aw.load("results.json")

A run is the RunSpec the dashboard builds for the same choices (`core.studies.selection.Selection.spec`) and the CLI's,
resolved and keyed by `core.compute.pipeline.resolve`: what one of them computed, the others read from the cache. A
corpus given as a Python object (a list of strings, a pandas Series or DataFrame, a datasets.Dataset) is saved
once as an upload (`core.inputs.uploads`, content-addressed JSON Lines), so it is fingerprinted like a file and the
dashboard opens it by its upload id; a model given as a loaded transformers model is saved once as a model
folder in the cache, named by the hash of its config, weights and tokenizer.

Every public function validates its arguments once, here, with the checks the CLI's options go through
(`RunSpec`, `check_model_ident`, the corpus readers), and raises `core.base.errors.InputError` with their message.
The CLI's `analyze` is `run_analysis` below: one path from a spec to results.json.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import urlencode

import numpy as np

from ..base import settings
from ..base.cache import get_store
from ..base.errors import InputError
from ..base.progress import Progress, Stage
from ..base.spec import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CORPUS,
    DEFAULT_MAX_SEQ_LEN,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_SAMPLE,
    RunSpec,
)
from ..compute.distributed import world_size_from_env
from ..compute.pipeline import ResolvedRun, analyze_params, cached_ablation, get_stats, resolve, run_ablation
from ..compute.pipeline import analyze as pipeline_analyze
from ..inputs import uploads
from ..inputs.checkpoints import is_trained
from ..inputs.corpora import BUILTIN_CORPORA
from ..inputs.modalities import MODAL_CORPORA
from ..inputs.models import is_local_folder
from ..studies.attention import is_cached as attention_cached
from ..studies.attention import run_attention
from ..studies.chain.ablate_links import cached_chain_ablation, default_targets
from ..studies.chain.run import chain_section
from ..studies.selection import Selection, to_query_params
from . import jobs
from .worker import worker_pid

__all__ = ["analyze", "compare", "load", "Run", "Comparison", "Outliers", "Ablation", "InputError", "run_spec",
           "run_analysis", "DEFAULT_PORT"]

DEFAULT_PORT = 8501  # `aniso serve` / `streamlit run app.py`
_INT_OPTIONS = ("max_tokens", "max_seq_len", "batch_size", "sample", "seed")


# ----------------------------------------------------------------------------- inputs: corpora
def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _documents_jsonl(rows: Sequence[dict]) -> bytes:
    """JSON Lines, one object per document, keys in a fixed order: the same rows give the same bytes (and id)."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in rows).encode("utf-8")


def _cell(v):
    """A table cell as JSON: text and numbers as they are, missing values as null, anything else as text."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        v = v.item()
        return None if isinstance(v, float) and v != v else v
    if isinstance(v, (str, int, float, bool)):
        return v
    try:
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        import pandas as pd

        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return str(v)


def _frame_rows(df, text_column: str | None, what: str) -> tuple[list[dict], str]:
    """(rows, text column) of a DataFrame corpus; the text column given, or the one named like text."""
    cols = [str(c) for c in df.columns]
    if len(set(cols)) != len(cols):
        raise InputError(f"The {what} has repeated column names ({cols}): give each column its own name.")
    if text_column is None:
        found = [c for c in cols if c.lower() in uploads.TEXT_COLUMN_NAMES]
        if not found:
            raise InputError(f"The {what} is a table: choose its text column (text_column=...). Columns: {cols}")
        text_column = found[0]
    if text_column not in cols:
        raise InputError(f"The {what} has no column {text_column!r}. Columns: {cols}")
    values = df[df.columns[cols.index(text_column)]].tolist()
    if not any(isinstance(v, str) and v.strip() for v in values):
        raise InputError(f"Column {text_column!r} of the {what} holds no text.")
    rows = [{c: _cell(v) for c, v in zip(cols, vals)} for vals in df.itertuples(index=False, name=None)]
    return rows, text_column


def _python_corpus(corpus, text_column: str | None) -> tuple[list[dict], str, str] | None:
    """(rows, text column, what it was) of a corpus given as a Python object; None for a name or a path."""
    if isinstance(corpus, (str, os.PathLike)):
        return None
    mod = type(corpus).__module__ or ""
    if mod.startswith("datasets") and hasattr(corpus, "to_pandas"):  # a Hugging Face datasets.Dataset
        rows, col = _frame_rows(corpus.to_pandas(), text_column, "dataset")
        return rows, col, f"dataset of {len(rows):,} documents"
    if mod.startswith("pandas"):
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        import pandas as pd

        if isinstance(corpus, pd.Series):
            name = str(corpus.name) if corpus.name is not None else "text"
            corpus = corpus.to_frame(name)
            text_column = text_column or name
        if isinstance(corpus, pd.DataFrame):
            rows, col = _frame_rows(corpus, text_column, "DataFrame")
            return rows, col, f"DataFrame of {len(rows):,} documents"
    if isinstance(corpus, (list, tuple)):
        if not corpus:
            raise InputError("The corpus list is empty: give one string per document.")
        for i, d in enumerate(corpus):
            if not isinstance(d, str):
                raise InputError(f"corpus[{i}] is a {type(d).__name__}, not a string: a corpus given as a list holds "
                                 "one document (a string) per item.")
        if text_column not in (None, "text"):
            raise InputError(f"text_column={text_column!r} is for tables: a list of strings has no columns.")
        return [{"text": d} for d in corpus], "text", f"list of {len(corpus):,} documents"
    raise InputError(f"corpus must be a built-in corpus id, a file path, a list of strings, a pandas Series or "
                     f"DataFrame with a text column, or a datasets.Dataset; got a {type(corpus).__name__}.")


def _corpus(corpus, text_column: str | None, corpus_name: str | None) -> tuple[str, str | None]:
    """The corpus identifier of a RunSpec, as the dashboard writes it: a built-in id as is, an upload by its
    saved file, a file by its absolute path; a Python object saved as an upload first."""
    got = _python_corpus(corpus, text_column)
    if got is not None:
        rows, text_column, what = got
        name = corpus_name or f"Python {what}"
        path = uploads.save_upload(_documents_jsonl(rows), "corpus.jsonl", name=name)
        corpus = uploads.upload_id(path)
        uploads.rename(corpus, name, text_column)  # shown as named, without the "[text column]" of a file's name
    corpus = str(corpus).strip()
    if uploads.is_upload_id(corpus):
        return str(uploads.resolve(corpus)), text_column  # as Selection.spec: the run reads the saved file
    if corpus and corpus not in _builtin_corpora() and not corpus.startswith("upload:"):
        p = Path(corpus).expanduser()
        if p.exists():
            return str(p.resolve()), text_column  # the dashboard keys a file by its absolute path
    return corpus, text_column


def _builtin_corpora() -> set[str]:
    return set(BUILTIN_CORPORA) | set(MODAL_CORPORA)


# ----------------------------------------------------------------------------- inputs: models
def _is_loaded_model(m) -> bool:
    return all(hasattr(m, a) for a in ("state_dict", "config", "save_pretrained"))


_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


def _files_sha(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


_VOLATILE_CONFIG = ("architectures", "transformers_version", "_name_or_path", "name_or_path", "_commit_hash", "dtype",
                    "torch_dtype", "_attn_implementation_autoset")


def _weights_sha(model) -> str:
    """sha256 of the model's config and every tensor of its state dict (name, dtype, shape, bytes)."""
    # lazy: torch is already loaded when a loaded model is given; the import only names it
    import torch

    # The config without what saving or loading writes into it (the class name, versions, where it came from,
    # the dtype: the tensors' own dtypes are hashed below)
    config = {k: v for k, v in model.config.to_dict().items() if k not in _VOLATILE_CONFIG}
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_loaded_model(model, tokenizer) -> Path:
    """A loaded transformers model and its tokenizer as a model folder of the cache (`settings.saved_models_dir`),
    named by the hash of its config, weights and tokenizer files: saved once; the same weights give the same
    folder, hence the same run key (a changed weight, another one)."""
    import shutil
    import tempfile

    if tokenizer is None or not hasattr(tokenizer, "save_pretrained"):
        raise InputError("A loaded model needs its tokenizer: analyze(model, corpus, tokenizer=tokenizer) "
                         "(a transformers tokenizer).")
    root = settings.saved_models_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".tmp-") as tmp:
        tok_dir = Path(tmp) / "tokenizer"
        tokenizer.save_pretrained(tok_dir)
        fp = hashlib.sha256((_weights_sha(model) + _files_sha(tok_dir)).encode()).hexdigest()
        base = _NAME_RE.sub("-", Path(str(getattr(model.config, "_name_or_path", "") or "")).name
                            or type(model).__name__).strip("-.")[:40] or "model"
        out = root / (base if base.endswith(fp[:16]) else f"{base}-{fp[:16]}")  # a model loaded from such a folder
        if (out / "DONE").exists():
            return out
        stage = Path(tmp) / "model"
        model.save_pretrained(stage)
        for p in tok_dir.iterdir():
            shutil.move(str(p), stage / p.name)
        (stage / "DONE").write_text(f"saved by aniso.analyze from a loaded {type(model).__name__}\n")
        if out.exists():  # a half-written folder of an interrupted save
            shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(stage, out)
        except OSError:
            if not (out / "DONE").exists():  # not another process that saved the same model meanwhile
                raise
    return out


def _model(model, tokenizer) -> str:
    """The model identifier of a RunSpec: a built-in or hub id as is, a local folder by its absolute path (as
    the dashboard keys it), a loaded model saved as a folder first."""
    if isinstance(model, tuple) and len(model) == 2 and _is_loaded_model(model[0]):
        model, tokenizer = model
    if _is_loaded_model(model):
        return str(save_loaded_model(model, tokenizer))
    if tokenizer is not None:
        raise InputError("tokenizer= goes with a loaded model; a model named by an id or a folder brings its own.")
    if not isinstance(model, (str, os.PathLike)):
        raise InputError(f"model must be a model id (see `aniso models`), a local model folder, or a loaded "
                         f"transformers model with its tokenizer; got a {type(model).__name__}.")
    ident = str(model).strip()
    # An existing folder counts here (the caller's own machine), also when written "org/name": made absolute, it
    # stays a folder everywhere after (core.inputs.models.is_local_folder decides on the text alone).
    if ident and not is_trained(ident) and "@" not in ident and (is_local_folder(ident)
                                                                 or os.path.isdir(os.path.expanduser(ident))):
        return str(Path(ident).expanduser().resolve())
    return ident


# ----------------------------------------------------------------------------- the spec
def run_spec(model=DEFAULT_MODEL, corpus=DEFAULT_CORPUS, *, tokenizer=None, text_column: str | None = None,
             corpus_name: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
             max_seq_len: int = DEFAULT_MAX_SEQ_LEN, batch_size: int = DEFAULT_BATCH_SIZE, device: str = "auto",
             dtype: str = "auto", special_tokens: str = "exclude", sample: int = DEFAULT_SAMPLE, seed: int = 0,
             layers: Sequence[int] | None = None, encoding: str | None = None, logit_lens: bool = False,
             trust_remote_code: bool = False, device_map: str | None = None) -> RunSpec:
    """The RunSpec of these choices, validated (InputError), with its identifiers written as the dashboard
    writes them. The CLI builds its specs here too."""
    values = {"max_tokens": max_tokens, "max_seq_len": max_seq_len, "batch_size": batch_size, "sample": sample,
              "seed": seed}
    for name in _INT_OPTIONS:
        if not _is_int(values[name]):
            raise InputError(f"{name} must be a whole number, got {values[name]!r}.")
    for name, v in (("logit_lens", logit_lens), ("trust_remote_code", trust_remote_code)):
        if not isinstance(v, (bool, np.bool_)):
            raise InputError(f"{name} must be True or False, got {v!r}.")
    for name, v in (("text_column", text_column), ("encoding", encoding), ("corpus_name", corpus_name)):
        if v is not None and not isinstance(v, str):
            raise InputError(f"{name} must be a string, got {v!r}.")
    if isinstance(layers, (str, bytes)):
        raise InputError(f"layers must be layer indices (0 = embeddings), got {layers!r}.")
    options = dict(max_tokens=int(max_tokens), max_seq_len=int(max_seq_len), batch_size=int(batch_size), device=device,
                   dtype=dtype, special_tokens=special_tokens, sample=int(sample), seed=int(seed),
                   trust_remote_code=bool(trust_remote_code), device_map=device_map,
                   layers=tuple(layers) if hasattr(layers, "__iter__") else layers, encoding=encoding,
                   logit_lens=bool(logit_lens))
    RunSpec(model=DEFAULT_MODEL, corpus=DEFAULT_CORPUS, **options)  # the options checked before a model is saved
    ident = _model(model, tokenizer)
    corpus, text_column = _corpus(corpus, text_column, corpus_name)
    return RunSpec(model=ident, corpus=corpus, text_column=text_column, **options)


# ----------------------------------------------------------------------------- the one path (CLI and API)
def wait_for_job(kind: str, params: dict, cache_dir=None, progress: Callable[[Progress], None] | None = None,
                 say: Callable[[str], None] | None = None) -> None:
    """When the worker is computing (or about to compute) this very thing, wait for its job instead of starting
    a second computation (one spec, one job, whoever asks); the result is then read from the cache."""
    say = say or (lambda _msg: None)
    try:
        jid = jobs.job_id(kind, params)
        job = jobs.status(jid, cache_dir)
        worker = worker_pid(cache_dir)
    except InputError:
        raise
    except Exception:  # noqa: BLE001 - an unreadable queue must not stop a headless run
        return
    if job is None or not job.active or (job.status == jobs.QUEUED and worker is None):
        return
    say(f"waiting for job {jid} ({job.status} in the worker, pid {worker}): the same computation")
    seen = [None]

    def show(j):
        if progress and j.status == jobs.RUNNING and j.progress.stage != Stage.START and j.progress != seen[0]:
            seen[0] = j.progress
            progress(j.progress)

    job = jobs.wait(jid, cache_dir, on_update=show)
    if job.status != jobs.DONE:
        say(f"job {jid} ended {job.status}{': ' + job.error if job.error else ''}; computing here")


@contextlib.contextmanager
def ranks(spec):
    """The torchrun job this process is a rank of, for the duration (None for a plain run; core/compute/ranks.py)."""
    group = None
    if world_size_from_env() > 1:
        # lazy: torch.distributed only in a torchrun rank (a plain run, a cache hit and the app import this module)
        from ..compute.ranks import group_from_env

        group = group_from_env(spec)
    try:
        yield group
    finally:
        if group is not None:
            group.close()


def run_analysis(spec: RunSpec | ResolvedRun, cache_dir=None, progress: Callable[[Progress], None] | None = None,
                 force: bool = False, attention: bool = False, chain: bool = False,
                 say: Callable[[str], None] | None = None) -> dict | None:
    """results.json of a run: its statistics and results (cached), with the sections stored for it (an ablation,
    chain ablations) and the ones asked for (attention, chain). Waits for the worker's job when it is computing
    the same run. Under torchrun every rank calls this; rank 0 returns the results, the others None.
    `python -m core analyze` and `analyze()` below are this function."""
    run = resolve(spec, cache_dir)  # identifiers resolved and the key computed once for the whole call
    if world_size_from_env() <= 1 and not force:
        wait_for_job("analyze", analyze_params(run), cache_dir, progress, say)
    with ranks(run.spec) as group:
        bar = progress if group is None or group.is_main else None  # rank 0 alone shows progress
        res = pipeline_analyze(run, cache_dir=cache_dir, progress=bar, force=force, group=group)
        if attention:  # under torchrun the ranks share the attention statistics' batches too
            att = run_attention(run, cache_dir=cache_dir, progress=bar, force=force, group=group)
    if res is None:  # a rank other than 0 of a torchrun job
        return None
    ab = cached_ablation(run, cache_dir=cache_dir)
    if ab is not None:  # an ablation computed for this run (app or `outliers --ablate`) is part of its results
        res["ablation"] = ab
    if attention:
        res["attention"] = att
    if chain:
        res["chain"] = chain_section(run, cache_dir=cache_dir, progress=progress, force=force)
    cab = cached_chain_ablation(run, default_targets(res), cache_dir=cache_dir)
    if cab is not None:  # so are its chain ablations (the Chain page's job, `chain --ablate`)
        res["chain_ablations"] = cab
    return res


# ----------------------------------------------------------------------------- progress in a notebook
class _TqdmProgress:
    """Progress records as tqdm bars: one bar per counted stage (tokens of the forward pass, ablation passes),
    the other stages as the bar's description. tqdm.notebook's widget where ipywidgets is installed, else the
    text bar (which a notebook shows too)."""

    def __init__(self):
        try:
            import ipywidgets  # noqa: F401  # lazy: only to choose the notebook widget
            from tqdm.notebook import tqdm
        except ImportError:
            # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
            from tqdm.std import tqdm
        self.tqdm = tqdm
        self.bar = None
        self.stage = None
        self.finished = None
        self.shown = 0.0

    def __call__(self, p: Progress) -> None:
        if p.counted:
            if (p.stage, p.total) == self.finished:
                return  # the same stage reported done again (the metrics follow)
            if self.bar is None or self.stage != p.stage or self.bar.total != p.total:
                self.close()
                self.bar = self.tqdm(total=p.total, desc=p.title, leave=True,
                                     bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{postfix}")
                self.stage = p.stage
                self.shown = 0.0
            now = time.monotonic()
            if p.done < p.total and now - self.shown < 0.5:
                return  # a bar redrawn twice a second at most (a notebook keeps every redraw of a text bar)
            self.shown = now
            self.bar.n = min(p.done, p.total)
            eta = f", ETA {p.eta_s:.0f} s" if p.eta_s is not None and p.done < p.total else ""
            self.bar.set_postfix_str(f"{p.unit}, {p.rate:,.0f} {p.rate_unit}/s{eta}" if p.rate else p.unit,
                                     refresh=True)
            if p.done >= p.total:
                self.finished = (p.stage, p.total)
                self.close()
        elif p.message and self.bar is not None:
            self.bar.set_postfix_str(p.message[:60], refresh=True)

    def close(self, complete: bool = False) -> None:
        """Close the open bar; `complete`: the call it showed has finished (an ablation reports the pass it starts,
        so its last report is one short of the total)."""
        if self.bar is not None:
            if complete:
                self.bar.n = self.bar.total
                self.bar.refresh()
            self.bar.close()
        self.bar = None
        self.stage = None

    def finish(self, ok: bool) -> None:
        self.close(complete=ok)


@contextlib.contextmanager
def _progress(progress):
    """The progress callback of `progress` (True: a tqdm bar, False/None: none, a function: itself) for a block;
    a bar is completed when the block ends well, left where it stopped when it raises."""
    bar = _TqdmProgress() if progress is True else None
    if bar is None and progress not in (False, None) and not callable(progress):
        raise InputError(f"progress must be True (a bar), False or a function of a core.base.progress.Progress, "
                         f"got {progress!r}.")
    try:
        yield bar if bar is not None else (progress or None)
    except BaseException:
        if bar is not None:
            bar.finish(False)
        raise
    if bar is not None:
        bar.finish(True)


# ----------------------------------------------------------------------------- runs
@dataclass
class Sample:
    """The shared token sample of a run at one layer: `vectors` (K, d) float32 hidden states and `tokens`, one
    row per sampled token (text, context, token_id, position, document, frequency, log_frequency...). Unpacks as
    `X, tokens = run.sample(layer)`."""

    layer: int
    vectors: np.ndarray
    tokens: object  # pandas DataFrame

    def __iter__(self):
        return iter((self.vectors, self.tokens))


@dataclass
class Outliers:
    """A run's outlier dimensions (Puccetti et al. 2022): `persistent` (either definition: what the ablation
    zeroes), `activation` (the 3-sigma rule on mean |x_d|, per layer), `norm_parameters` (on LayerNorm weights
    and biases), `frequency` (each persistent dim's r with log token frequency: a DataFrame)."""

    persistent: list[int]
    activation: dict
    norm_parameters: dict
    frequency: object  # pandas DataFrame (the Outliers page's Frequency table)
    _run: "Run" = field(repr=False)

    def figure(self):
        """The Outliers page's heatmap of mean |x_d| per layer and dimension, the outliers marked."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import outlier_heatmap

        with self._run._cache():
            return outlier_heatmap(self._run._stats(), self._run.results).figure


@dataclass
class Ablation:
    """The LM-loss change when dims are zeroed in every norm, against as many random dims (`result`: the
    ablation section of results.json)."""

    result: dict
    _results: dict = field(repr=False)

    @property
    def dims(self) -> list[int]:
        return list(self.result["dims"])

    @property
    def delta(self) -> float:
        return float(self.result["delta"])

    @property
    def sentence(self) -> str:
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import ablation_view

        return ablation_view(self.result, self._results).notes[0]

    @property
    def table(self):
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import ablation_view

        return ablation_view(self.result, self._results).data

    def figure(self):
        """The Outliers page's ablation figure."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import ablation_view

        return ablation_view(self.result, self._results).figure


class Run:
    """One analysed run: its results.json (`results`, `manifest`), read through the dashboard's views.

    Made by `analyze(...)` or `load(path)`. Methods that read the token sample or compute another analysis
    (sample, projection, outliers' figure, ablation, attention, chain) use the run's cache; a sample read never
    loads a model.
    """

    def __init__(self, results: dict, run: ResolvedRun | None, cache_dir=None, source: str | None = None):
        self.results = results
        self._run = run
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.source = source
        self._stats_memo = None

    # ------------------------------------------------------------------ identity
    def __repr__(self) -> str:
        m = self.manifest
        return (f"<Run {m['model']['label']} · {self.corpus} · {m['tokens']['analysed']:,} tokens, "
                f"{len(self.results['layers'])} layers{' (cache hit)' if m.get('cache_hit') else ''}>")

    @property
    def manifest(self) -> dict:
        """Every input that determines the numbers (model fingerprint, corpus sha256, spec, versions...)."""
        return self.results["manifest"]

    @property
    def spec(self) -> RunSpec:
        try:
            return self._resolved().spec
        except InputError:  # a loaded file whose model or corpus is not here: the spec as its manifest says
            return RunSpec.from_dict(self.manifest["spec"])

    @property
    def key(self) -> str:
        """The cache key of the run's statistics (the dashboard and the CLI use the same)."""
        return str(self.manifest["cache_key"])

    @property
    def corpus(self) -> str:
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import corpus_label

        with self._cache():
            return corpus_label(self.results)

    @property
    def cache_hit(self) -> bool:
        return bool(self.manifest.get("cache_hit"))

    def _cache(self):
        return settings.use_cache_dir(self.cache_dir)

    def _resolved(self) -> ResolvedRun:
        """The run's resolution: carried from `analyze`, or rebuilt from a loaded file's manifest (no hashing when
        its key still holds with this code), else resolved again (the model and corpus must be here)."""
        if self._run is None:
            spec = RunSpec.from_dict(self.manifest["spec"])
            m = self.manifest
            parts = {"spec": m["spec"], "model_fingerprint": m["model"].get("fingerprint"),
                     "corpus_sha256": m["corpus"].get("sha256"), "stats_code": m.get("stats_code")}
            carried = {"key": m.get("cache_key"), "parts": parts}
            # device and dtype as they were asked ("auto") when that is what they resolve to here
            self._run = (ResolvedRun.from_params(spec.replace(device="auto", dtype="auto"), carried)
                         or ResolvedRun.from_params(spec, carried))
            if self._run is None:
                with self._cache():
                    self._run = resolve(spec, self.cache_dir)
        return self._run

    def _stats(self):
        if self._stats_memo is None:
            run = self._resolved()
            with self._cache():
                if run.key not in _store(self.cache_dir):
                    raise InputError(f"The statistics of this run (key {run.key[:22]}...) are not in the cache "
                                     f"{settings.cache_root(self.cache_dir)}: the token sample, projections and the "
                                     "other analyses need them. Run analyze(...) with the same options here, or "
                                     "pass cache_dir= the cache it was computed in.")
                self._stats_memo = get_stats(run, self.cache_dir)
        return self._stats_memo

    # ------------------------------------------------------------------ the per-layer numbers and their figures
    @property
    def layers(self):
        """pandas DataFrame, one row per layer (layer 0 = the embeddings): model, corpus, layer, depth and every
        per-layer column of the statistic registry (`core.stats.registry.table_columns`; an interval as ci_low and
        ci_high): the Layers page's Numbers table."""
        return self._table().data

    def _table(self):
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import metric_table

        with self._cache():
            return metric_table([self.results])

    def figure(self, metric: str = "mean_cosine", x_axis: str | None = None, reference: bool = True):
        """The Layers page's curve of `metric` (a key of the registry, e.g. "mean_cosine", "isoscore") as a
        plotly go.Figure: the 95% bootstrap band, the isotropic baseline of sample metrics and, with
        `reference`, Ethayarajh's published curves. x_axis: "layer", "depth", or None for the page's choice."""
        return self.view(metric, x_axis, reference).figure

    def view(self, metric: str = "mean_cosine", x_axis: str | None = None, reference: bool = True):
        """The figure of `figure` with its data and manifest (a core.views.View, what the dashboard exports)."""
        return _curves([self], metric, x_axis, reference, depth_default=False)

    # ------------------------------------------------------------------ the token sample
    def _layer(self, layer: int) -> int:
        n = len(self.results["layers"])
        if not _is_int(layer) or not 0 <= int(layer) < n:
            raise InputError(f"layer must be a layer index in 0..{n - 1} (0 = embeddings), got {layer!r}.")
        return int(layer)

    def sample(self, layer: int) -> Sample:
        """The sampled tokens' hidden states at `layer` ((K, d) float32; the same K tokens at every layer) and a
        DataFrame of those tokens: text, context, token_id, position, document, frequency, log_frequency (and a
        table corpus's other columns as meta:<column>). Read from the cache; never loads a model."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..compute.projection import sample_table
        from ..inputs.corpora import document_metadata

        layer = self._layer(layer)
        stats = self._stats()
        with self._cache():
            try:
                meta = document_metadata(stats.manifest["spec"]["corpus"], self.spec.text_column, self.spec.encoding)
            except InputError:  # the file went away since the run: the sample is still there
                meta = None
        X = stats.sample(layer)
        if "layer_dims" in stats.arrays:  # a CNN stage: its channels, not the zero padding
            X = X[:, :int(stats.arrays["layer_dims"][layer])]
        return Sample(layer, np.asarray(X), sample_table(stats, meta).rename(columns={"token": "text"}))

    def projection(self, layer: int | None = None, method: str = "pca", color_by: str = "log_frequency",
                   n_neighbors: int = 15, min_dist: float = 0.1):
        """The Projection page's figure: PCA (or UMAP) of the token sample at `layer` (default: the middle
        layer), coloured by log_frequency, position, document or meta:<column>; cached like the page's."""
        return self.projection_view(layer, method, color_by, n_neighbors, min_dist).figure

    def projection_view(self, layer: int | None = None, method: str = "pca", color_by: str = "log_frequency",
                        n_neighbors: int = 15, min_dist: float = 0.1):
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..compute.projection import METHODS, project, sample_table
        from ..inputs.corpora import document_metadata
        from ..views import layer_at_depth
        from ..views import projection as projection_view

        if method not in METHODS:
            raise InputError(f"method must be one of {', '.join(METHODS)}, got {method!r}.")
        layer = layer_at_depth(self.results, 0.5) if layer is None else self._layer(layer)
        stats = self._stats()
        with self._cache():
            try:
                meta = document_metadata(stats.manifest["spec"]["corpus"], self.spec.text_column, self.spec.encoding)
            except InputError:
                meta = None
            table = sample_table(stats, meta)
            proj = project(self._resolved(), layer, method, n_neighbors=n_neighbors, min_dist=min_dist,
                           seed=self.spec.seed, cache_dir=self.cache_dir)
            # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
            from ..views import check_color

            color, _ = check_color(color_by, [table])
            return projection_view([(self.results, proj, table)], color)

    # ------------------------------------------------------------------ the other analyses
    def outliers(self) -> Outliers:
        """The run's outlier dimensions (both definitions) and their link with token frequency."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..stats.assemble import frequency_r
        from ..views import frequency_r_table, outlier_set, position_for

        res = self.results
        out = res["outliers"]
        with self._cache():
            dims, _ = outlier_set(res, "persistent")
            try:
                stats = self._stats()
                table = frequency_r_table(res, frequency_r(stats), dims, position_for(stats, res, dims)).data
            except InputError:  # a loaded results.json without its statistics here: the stored frequency report
                # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
                import pandas as pd

                table = pd.DataFrame(res.get("frequency", {}).get("per_dim", []))
        return Outliers(list(dims), out.get("activation", {}), out.get("norm_parameters", {}), table, self)

    def ablation(self, dims: Sequence[int] | None = None, n_random: int | None = None,
                 held_out_tokens: int | None = None, progress=True) -> Ablation:
        """The LM loss with `dims` (default: the persistent outliers) zeroed in every norm, against `n_random`
        draws of as many random dims, on `held_out_tokens` of held-out text (a causal LM only). Cached like the
        Outliers page's ablation (the same key): a stored one is read, else the model is loaded once."""
        if dims is not None:
            if isinstance(dims, (str, bytes)) or not all(_is_int(d) and d >= 0 for d in dims):
                raise InputError(f"dims must be dimension indices (integers from 0), got {dims!r}.")
            dims = sorted({int(d) for d in dims})
        for name, v in (("n_random", n_random), ("held_out_tokens", held_out_tokens)):
            if v is not None and (not _is_int(v) or v < 1):
                raise InputError(f"{name} must be a positive whole number, got {v!r}.")
        with _progress(progress) as bar, self._cache():
            got = run_ablation(self._resolved(), dims=dims, n_random=n_random, held_out_tokens=held_out_tokens,
                               cache_dir=self.cache_dir, progress=bar)
        return Ablation(got, self.results)

    def attention(self, progress=True) -> dict:
        """The attention section (entropy, sinks, query/key drift, the outlier link per block and head): stored
        under the key the Attention page reads, computed here when it is not (the model is loaded once)."""
        with _progress(progress) as bar, self._cache():
            return run_attention(self._resolved(), cache_dir=self.cache_dir, progress=bar)

    def attention_cached(self) -> bool:
        with self._cache():
            return attention_cached(self._resolved(), self.cache_dir, results=self.results)

    def chain(self, progress=True) -> dict:
        """The outlier chain (super weights, massive activations, high-norm tokens, sink rate, LLM.int8
        outliers): stored under the key the Chain page reads, computed here when it is not."""
        with _progress(progress) as bar, self._cache():
            return chain_section(self._resolved(), cache_dir=self.cache_dir, progress=bar)

    # ------------------------------------------------------------------ links and files
    def link(self, port: int = DEFAULT_PORT, page: str | None = None, host: str = "127.0.0.1") -> str:
        """The dashboard URL that opens this run (on a server of this cache: `aniso serve`)."""
        return _link([self], port, page, host)

    def save(self, path: str | os.PathLike) -> Path:
        """results.json, written whole or not at all (what `aniso analyze --out` writes; `load` reads it)."""
        out = Path(path).expanduser()
        write_json(out, self.results)
        return out

    def export(self, path: str | os.PathLike, what: str = "layers", layer: int | None = None) -> list[Path]:
        """Write the per-layer table (what="layers") or the token sample at `layer` (what="sample": the tokens
        and their d hidden-state columns) as .parquet (the manifest in the file's metadata) or .csv (the
        manifest beside it, <file>.manifest.json). Returns the files written."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views.export import write_table

        if what == "layers":
            view = self._table()
        elif what == "sample":
            view = self._sample_view(self._layer(0 if layer is None else layer))
        else:
            raise InputError(f"what must be 'layers' or 'sample', got {what!r}.")
        return write_table(view, Path(path).expanduser())

    def _sample_view(self, layer: int):
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        import pandas as pd

        from ..views import View
        from ..views.common import view_manifest

        X, tokens = self.sample(layer)
        dims = pd.DataFrame(X, columns=[f"h{d}" for d in range(X.shape[1])])
        data = pd.concat([tokens.reset_index(drop=True).assign(layer=layer), dims], axis=1)
        with self._cache():
            return View(f"sample_layer{layer}", f"Token sample at layer {layer}", None, data,
                        view_manifest("sample", {"layer": layer}, [self.results]),
                        caption=f"The {len(X):,} sampled tokens and their hidden states (h0..h{X.shape[1] - 1}) at "
                                f"layer {layer} (0 = embeddings).")


def _store(cache_dir):
    return get_store(cache_dir)


def write_json(out: Path, obj) -> None:
    """`obj` as JSON at `out`, whole or not at all (a temporary file beside it, then renamed); InputError: a folder,
    a missing folder or a failed write, in one line."""
    if out.is_dir():
        raise InputError(f"{str(out)!r} is a folder; give a file name such as {str(out / 'results.json')!r}.")
    if not out.parent.is_dir():
        raise InputError(f"{str(out)!r}: the folder {str(out.parent)!r} does not exist; create it first.")
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps(obj, indent=1, allow_nan=False))
        tmp.replace(out)
    except OSError as e:
        raise InputError(f"Could not write {str(out)!r}: {e.strerror or e}.") from None
    finally:
        tmp.unlink(missing_ok=True)


def _curves(runs: Sequence[Run], metric: str, x_axis: str | None, reference: bool, depth_default: bool):
    """The layer curves of the Layers page (one run) or Compare (several: relative depth)."""
    # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
    from ..studies.selection import METRICS
    from ..views import layer_curves

    if metric not in METRICS:
        raise InputError(f"Unknown metric {metric!r}; one of {', '.join(METRICS)}.")
    if x_axis not in (None, "layer", "depth"):
        raise InputError(f"x_axis must be 'layer', 'depth' or None, got {x_axis!r}.")
    results = [r.results for r in runs]
    if x_axis is None:  # the page's choice: Selection.x_axis_for
        x_axis = "depth" if depth_default or reference or len({len(r["layers"]) for r in results}) > 1 else "layer"
    with runs[0]._cache():
        return layer_curves(results, metric, x_axis, reference)


def _link(runs: Sequence[Run], port: int, page: str | None, host: str) -> str:
    """The dashboard URL of one run (Layers) or several (their models on one corpus, Compare)."""
    if not _is_int(port) or not 0 < port < 65536:
        raise InputError(f"port must be a TCP port number, got {port!r}.")
    specs = [r.spec for r in runs]
    first = specs[0]
    if any(s.layers is not None or s.trust_remote_code or s.encoding or s.device_map for s in specs):
        raise InputError("Runs with --layers, --encoding, --device-map or --trust-remote-code (layers=, encoding=, "
                         "device_map=, trust_remote_code= in Python) are not shown in the dashboard: read their "
                         "results themselves.")
    same = ("corpus", "text_column", "max_tokens", "max_seq_len", "batch_size", "device", "dtype", "special_tokens",
            "sample", "seed", "encoding", "logit_lens")
    differ = [k for k in same if len({getattr(s, k) for s in specs}) > 1]
    if differ:
        raise InputError(f"The dashboard shows runs side by side on one corpus with one set of options; these runs "
                         f"differ in {', '.join(differ)}.")
    with runs[0]._cache():
        corpus = first.corpus
        saved = Path(corpus)
        if saved.parent == settings.uploads_dir() and saved.is_file():
            corpus = uploads.upload_id(saved)  # the dashboard names an upload by its id
        try:
            sel = Selection(models=tuple(s.model for s in specs), corpus=corpus, text_column=first.text_column,
                            max_tokens=first.max_tokens, max_seq_len=first.max_seq_len, batch_size=first.batch_size,
                            device=first.device, dtype=first.dtype, special_tokens=first.special_tokens,
                            sample=first.sample, seed=first.seed, logit_lens=first.logit_lens)
        except InputError as e:
            raise InputError(f"{e} (The dashboard names model folders and files only in its data directory, "
                             "ANISO_DATA_DIR, unless ANISO_ALLOW_SERVER_PATHS=1.)") from None
        query = to_query_params(sel, page)
    path = f"/{page}" if page else "/"
    return f"http://{host}:{port}{path}?" + urlencode(query, doseq=True)


# ----------------------------------------------------------------------------- the public functions
def analyze(model=DEFAULT_MODEL, corpus=DEFAULT_CORPUS, *, tokenizer=None, text_column: str | None = None,
            corpus_name: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
            max_seq_len: int = DEFAULT_MAX_SEQ_LEN, batch_size: int = DEFAULT_BATCH_SIZE, device: str = "auto",
            dtype: str = "auto", special_tokens: str = "exclude", sample: int = DEFAULT_SAMPLE, seed: int = 0,
            layers: Sequence[int] | None = None, encoding: str | None = None, logit_lens: bool = False,
            trust_remote_code: bool = False, device_map: str | None = None, attention: bool = False,
            chain: bool = False, cache_dir: str | os.PathLike | None = None, force: bool = False,
            progress=True) -> Run:
    """Analyse `model` on `corpus` (what `aniso analyze` does), or read the run from the cache.

    model: a built-in id (`aniso models`), a local model folder, a hub id[@revision], or a loaded transformers
    model (then `tokenizer=` its tokenizer). corpus: a built-in id (`aniso corpora`), a file (.txt/.md; .csv,
    .tsv, .jsonl, .parquet with `text_column`), a list of strings, a pandas Series or DataFrame (its text
    column: `text_column`, or a column named text, content, sentence...), or a datasets.Dataset. The options
    are the CLI's (`aniso analyze --help`). progress: True for a bar (tqdm), False, or a function of a
    core.base.progress.Progress. Raises InputError with a message a person can act on.
    """
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise InputError(f"cache_dir must be a folder path, got {cache_dir!r}.")
    if not isinstance(force, bool):
        raise InputError(f"force must be True or False, got {force!r}.")
    cache_dir = None if cache_dir is None else str(Path(cache_dir).expanduser().resolve())
    with _progress(progress) as bar, settings.use_cache_dir(cache_dir):
        spec = run_spec(model, corpus, tokenizer=tokenizer, text_column=text_column, corpus_name=corpus_name,
                        max_tokens=max_tokens, max_seq_len=max_seq_len, batch_size=batch_size, device=device,
                        dtype=dtype, special_tokens=special_tokens, sample=sample, seed=seed, layers=layers,
                        encoding=encoding, logit_lens=logit_lens, trust_remote_code=trust_remote_code,
                        device_map=device_map)
        run = resolve(spec, cache_dir)
        res = run_analysis(run, cache_dir=cache_dir, progress=bar, force=force, attention=attention,
                           chain=chain)
    return Run(res, run, cache_dir)


class Comparison:
    """Two or more runs read side by side (the Compare page): by relative depth, their difference with a
    bootstrap interval, a one-sentence reading."""

    def __init__(self, runs: Sequence[Run]):
        self.runs = list(runs)

    def __repr__(self) -> str:
        return f"<Comparison of {len(self.runs)} runs: {'; '.join(repr(r)[5:-1] for r in self.runs)}>"

    @property
    def layers(self):
        """Every run's per-layer table, one row per (run, layer)."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import metric_table

        with self.runs[0]._cache():
            return metric_table([r.results for r in self.runs]).data

    def figure(self, metric: str = "mean_cosine", reference: bool = True):
        """Compare's curves of `metric` by relative depth (layer / L), every run in one figure."""
        return _curves(self.runs, metric, "depth", reference, depth_default=True).figure

    def sentence(self, metric: str = "mean_cosine") -> str:
        """Compare's one-sentence reading of the curves (which run is more anisotropic, where)."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import comparison_sentence

        with self.runs[0]._cache():
            return comparison_sentence([r.results for r in self.runs], metric)

    def difference(self, a: int = 0, b: int = 1):
        """Compare's mean cosine of run `a` minus run `b` per layer with its 95% bootstrap interval (a View:
        .figure, .data)."""
        # lazy: pandas and plotly only where a table or a figure is made (not on the path of `aniso analyze`)
        from ..views import mean_cosine_difference

        n = len(self.runs)
        for name, i in (("a", a), ("b", b)):
            if not _is_int(i) or not 0 <= i < n:
                raise InputError(f"{name} must be a run index in 0..{n - 1}, got {i!r}.")
        if a == b:
            raise InputError("a and b must be two different runs.")
        ra, rb = self.runs[a], self.runs[b]
        with ra._cache():
            return mean_cosine_difference(ra._stats(), ra.results, rb._stats(), rb.results, x_axis="depth")

    def link(self, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> str:
        """The dashboard's Compare page with these runs' models (one corpus, one set of options)."""
        return _link(self.runs, port, "compare", host)


def compare(runs: Sequence[Run]) -> Comparison:
    """The Compare page's view of `runs` (two or more Run objects, from `analyze` or `load`)."""
    if isinstance(runs, Run) or not isinstance(runs, (list, tuple)):
        raise InputError("compare takes a list of runs, e.g. compare([run_a, run_b]).")
    bad = [i for i, r in enumerate(runs) if not isinstance(r, Run)]
    if bad:
        raise InputError(f"compare takes Run objects (from analyze or load); item {bad[0]} is a "
                         f"{type(runs[bad[0]]).__name__}.")
    if len(runs) < 2:
        raise InputError(f"compare needs at least two runs, got {len(runs)}.")
    return Comparison(runs)


def load(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Run:
    """A Run from a results.json (written by `aniso analyze --out`, `Run.save`, or a cluster run). Its table and
    figures come from the file; the sample and the other analyses from `cache_dir` (default: this machine's
    cache) when the run's statistics are there."""
    p = Path(path).expanduser()
    try:
        results = json.loads(p.read_text("utf-8"))
    except OSError as e:
        raise InputError(f"Cannot read {str(path)!r}: {e.strerror or e}.") from None
    except ValueError as e:
        raise InputError(f"{str(path)!r} is not JSON ({e}).") from None
    if not isinstance(results, dict) or not isinstance(results.get("manifest"), dict) \
            or not isinstance(results.get("layers"), list) or "spec" not in results["manifest"]:
        raise InputError(f"{str(path)!r} is not a results.json of `aniso analyze` (it needs a manifest with the "
                         "run's spec and a list of layers).")
    try:
        RunSpec.from_dict(results["manifest"]["spec"])
    except (TypeError, InputError) as e:
        raise InputError(f"{str(path)!r}: the manifest's spec does not describe a run ({e}).") from None
    cache_dir = None if cache_dir is None else str(Path(cache_dir).expanduser().resolve())
    return Run(results, None, cache_dir, source=str(p))
