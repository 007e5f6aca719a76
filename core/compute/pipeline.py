"""The cached path from a RunSpec to statistics and results: the one entry point for CLI and UI.

    get_stats(spec)  -> RunStats (streaming sums + sample), cached under the spec's key
    analyze(spec)    -> results dict (results.json), cached; derived from RunStats only
    run_ablation(spec, dims) -> the LM-loss ablation of chosen dims, cached

A cache hit never loads a model nor imports torch: what needs torch (a miss's forward passes, an ablation's
held-out batches) is core/compute/forward_run.py, imported inside the functions that run on a miss. The job
kinds that run these in a worker ("analyze", "ablation") are core/compute/analysis_jobs.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..base.cache import get_store
from ..base.config import CONFIG, cache_identity, key_code
from ..base.errors import Cancelled, InputError
from ..base.progress import Progress
from ..base.settings import default_cache_dir
from ..base.spec import RunSpec, stable_hash
from ..inputs.corpora import corpus_fingerprint
from ..inputs.hub import known_commit, split
from ..inputs.modalities import corpus_modality, modal_fingerprint
from ..inputs.models import (
    ModelRef,
    check_model_ident,
    describe_model,
    hub_fingerprint,
    is_hub_model,
    model_fingerprint,
    parse_model,
)
from ..stats.outliers import run_outlier_dims
from .prepare import check_cancel, loading_message, prepare

if TYPE_CHECKING:  # the torchrun ranks' Group (its reduction makes the statistics of a distributed run)
    from .ranks import Group


@dataclass
class RunStats:
    """Everything one extraction produced. Arrays are stacked over layers (layer 0 = embeddings)."""

    key: str
    manifest: dict
    meta: dict
    arrays: dict[str, np.ndarray]
    cached: bool = False
    events: list[str] = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        """Number of hidden-state layers, embeddings included (L + 1)."""
        return int(self.arrays["sum_abs"].shape[0])

    @property
    def d_model(self) -> int:
        return int(self.arrays["sum_abs"].shape[1])

    @property
    def layer_ids(self) -> np.ndarray:
        """The model layer of each stacked row (all layers 0..L unless the run kept a subset)."""
        return self.arrays.get("layer_index", np.arange(self.n_layers))

    @property
    def n_tokens(self) -> int:
        return int(self.arrays["n"])

    def sample(self, layer: int) -> np.ndarray:
        """(K, d) float32 hidden states of the sampled tokens at `layer`."""
        return self.arrays["sample"][layer]

    @property
    def label(self) -> str:
        return self.manifest["model"]["label"]


@dataclass(frozen=True)
class ResolvedRun:
    """A RunSpec with its identifiers resolved once: the model's and the corpus's fingerprints (a hub
    model's commit, a file's sha256) and the run key. Small and JSON-able: a job carries it in its
    parameters (`to_params`), so the worker neither hashes the corpus again nor asks the hub."""

    spec: RunSpec
    key: str
    parts: dict = field(hash=False, compare=False)
    model_commit: str | None = field(default=None, compare=False)  # a hub model's commit (its fingerprint's source)
    # the model reference, parsed once (core.inputs.models.parse_model): what every step of the run reads of spec.model
    model: ModelRef | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.model is None:
            object.__setattr__(self, "model", parse_model(self.spec.model))

    def to_params(self) -> dict:
        return {"key": self.key, "parts": self.parts, **({"model_commit": self.model_commit} if self.model_commit else {})}

    @classmethod
    def from_params(cls, spec: RunSpec, d) -> "ResolvedRun | None":
        """The resolution a job carries, or None when it does not hold together: its key is not the
        hash of its parts, its spec is not `spec` as resolved here (another device under "auto"), or
        its extraction code is not this process's (a worker older or newer than the submitter).
        Cheap (no hub call, no file hashed): the fingerprints are what is carried. A hub model's commit
        is kept only when it is the one its fingerprint was made from."""
        try:
            key, parts = str(d["key"]), dict(d["parts"])
            ok = (key == "stats:" + stable_hash(parts) and _same(parts.get("spec"), _keyed_spec(spec))
                  and _same(parts.get("stats_code"), cache_identity("stats")))
            commit = d.get("model_commit")
            ref = parse_model(spec.model)
            if commit is not None and (not isinstance(commit, str) or not is_hub_model(ref)
                                       or hub_fingerprint(ref.ident, commit) != parts.get("model_fingerprint")):
                commit = None
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return cls(spec, key, parts, commit, ref) if ok else None


def _same(a, b) -> bool:
    return stable_hash(a) == stable_hash(b)  # as JSON: a carried list equals the tuple it was


def _keyed_spec(spec: RunSpec) -> dict:
    """The spec as the key sees it: device and dtype resolved here."""
    device = spec.resolved_device()
    dtype = spec.resolved_dtype(device)
    # Placement (device_map, like the number of torchrun ranks) does not change the numbers: not in the
    # key. `layers` is, when set (all layers: the key of runs made before the option existed).
    keyed = {k: v for k, v in spec.to_dict().items() if k != "device_map" and not (k == "layers" and v is None)}
    return {**keyed, "device": device, "dtype": dtype}


def _spec_key(spec: RunSpec, cache_dir, ref: ModelRef | None = None) -> tuple[str, dict]:
    ref = ref or parse_model(spec.model)
    check_model_ident(ref)
    parts = {
        "spec": _keyed_spec(spec),
        "model_fingerprint": model_fingerprint(ref, Path(cache_dir) if cache_dir else default_cache_dir()),
        "corpus_sha256": (corpus_fingerprint(spec.corpus, spec.text_column) if corpus_modality(spec.corpus) == "text"
                          else modal_fingerprint(spec.corpus, cache_dir)),
        "stats_code": cache_identity("stats"),  # the rules and the code of the extraction: no version to bump
    }
    if spec.logit_lens:  # only then: the keys of runs without the lens stay what they were
        parts["lens_code"] = key_code("lens")
    return "stats:" + stable_hash(parts), parts


def resolve(spec: RunSpec | ResolvedRun, cache_dir=None) -> ResolvedRun:
    """The run's identifiers resolved and its key computed (the one place that does it). A
    ResolvedRun passes through: resolve once, then hand the result to every call of the run."""
    if isinstance(spec, ResolvedRun):
        return spec
    ref = parse_model(spec.model)
    key, parts = _spec_key(spec, cache_dir, ref)
    name, rev = split(ref.ident)
    commit = known_commit(name, rev or "main") if is_hub_model(ref) else None
    if commit is not None and hub_fingerprint(ref.ident, commit) != parts["model_fingerprint"]:
        commit = None  # the branch moved between the two look-ups: the worker resolves it again
    return ResolvedRun(spec, key, parts, commit, ref)


def run_key(spec: RunSpec | ResolvedRun, cache_dir=None) -> str:
    """The cache key of the run's statistics (derived entries are keyed on it). No torch."""
    return resolve(spec, cache_dir).key


def is_cached(spec: RunSpec | ResolvedRun, cache_dir=None) -> bool:
    return resolve(spec, cache_dir).key in get_store(cache_dir)


def get_stats(spec: RunSpec | ResolvedRun, cache_dir=None, progress: Callable[[Progress], None] | None = None,
              cancel: Callable[[], bool] | None = None, force: bool = False, group: Group | None = None,
              memo: dict | None = None, partial: Callable[[dict], None] | None = None) -> RunStats | None:
    """Statistics for `spec`, from the cache or computed (once, even across processes).

    With a `core.compute.ranks.Group` (torchrun), every rank computes its share and rank 0 alone
    looks up and stores the entry; the other ranks return None.
    `memo`: a dict shared by the runs of one series (checkpoints of one training): the corpus is
    read and tokenized once for all of them (same tokenizer, same windows), only forwards repeat.
    `partial(results)`: while the forward pass runs, the results so far (`analysis.partial_results`:
    the statistics of the streaming sums over the batches processed, none of the sample), every few
    seconds. What it is handed is never stored: only the whole run's statistics are.
    """
    if group is not None:
        return _get_stats_group(spec, cache_dir, progress, cancel, force, group, memo)
    store = get_store(cache_dir)
    run = resolve(spec, cache_dir)
    spec, key, parts = run.spec, run.key, run.parts
    n_events = len(store.events)
    if not force:
        hit = store.get(key)
        if hit is not None:
            return RunStats(key, hit[0]["manifest"], hit[0]["meta"], hit[1], cached=True,
                            events=store.events[n_events:])
    with store.lock(key):
        hit = None if force else store.get(key)  # another process may have finished meanwhile
        if hit is not None:
            return RunStats(key, hit[0]["manifest"], hit[0]["meta"], hit[1], cached=True,
                            events=store.events[n_events:])
        manifest, meta, arrays = _compute(spec, parts, cache_dir, progress, cancel, memo=memo,
                                          partial=_partial_hook(partial, key, spec, parts), commit=run.model_commit)
        store.put(key, {"manifest": manifest, "meta": meta}, arrays)
    return RunStats(key, manifest, meta, arrays, cached=False, events=store.events[n_events:])


def _get_stats_group(spec, cache_dir, progress, cancel, force: bool, group,
                     memo: dict | None = None) -> RunStats | None:
    run = resolve(spec, cache_dir)  # on every rank: a bad spec fails everywhere alike
    spec, key, parts = run.spec, run.key, run.parts
    if group.share(lambda: not force and key in get_store(cache_dir)):
        return get_stats(run, cache_dir, progress, cancel) if group.is_main else None
    with contextlib.ExitStack() as stack:
        if group.is_main:
            store = get_store(cache_dir)
            n_events = len(store.events)
            stack.enter_context(store.lock(key))
        manifest, meta, arrays = group.run(lambda: _compute(spec, parts, cache_dir, progress, cancel, group, memo))
        if not group.is_main:
            return None
        store.put(key, {"manifest": manifest, "meta": meta}, arrays)
    return RunStats(key, manifest, meta, arrays, cached=False, events=store.events[n_events:])


class PartialHook:
    """The extraction's `partial(arrays, n_total)` -> `publish(partial results)` (`analysis.partial_results`).
    `start` gives it the model and the corpus once `prepare` has them."""

    def __init__(self, publish: Callable[[dict], None], key: str, spec: RunSpec, parts: dict):
        # Before the forward pass, not in the first partial result (the run's results need it anyway).
        # lazy: core.stats.assemble imports pandas (core.stats.single_dim); only what builds results pays for it
        from ..stats.assemble import partial_results

        self.partial_results = partial_results
        self.publish, self.key, self.spec, self.parts = publish, key, spec, parts
        self.manifest: dict = {}
        self.extra: dict = {}

    def start(self, lm, corpus: dict, modality: str = "text", extra: dict | None = None) -> None:
        spec, parts = self.spec, self.parts
        self.extra = extra or {}
        self.manifest = {"spec": parts["spec"], "corpus": corpus, "modality": modality,
                         "model": {**describe_model(spec.model), **lm.info, "fingerprint": parts["model_fingerprint"]},
                         "tokens": {"special_tokens": spec.special_tokens}, "seed": spec.seed,
                         "device": parts["spec"]["device"], "dtype": parts["spec"]["dtype"]}

    def __call__(self, arrays: dict, n_total: int) -> None:
        # lazy: threadpoolctl only where a run publishes partial results
        from threadpoolctl import threadpool_limits

        stats = RunStats(self.key, self.manifest, {}, {**arrays, **self.extra})
        # One BLAS thread: the forward pass's threads own the cores meanwhile. With numpy's default BLAS threads, which
        # spin after each call, publishing cost the extraction 4.6% on 2 cores; with one, 1.5% (BENCHMARKS.md, "what
        # publishing partial results costs")
        with threadpool_limits(limits=1, user_api="blas"):
            self.publish(self.partial_results(stats, n_total))


def _partial_hook(publish: Callable[[dict], None] | None, key: str, spec: RunSpec, parts: dict) -> PartialHook | None:
    return None if publish is None else PartialHook(publish, key, spec, parts)


def _compute(spec: RunSpec, parts: dict, cache_dir, progress, cancel, group=None, memo: dict | None = None,
             partial=None, commit: str | None = None):
    """(manifest, meta, arrays) of a cache miss: core.compute.forward_run.compute_stats."""
    # lazy: keeps torch out of a cache hit
    from .forward_run import compute_stats

    return compute_stats(spec, parts, cache_dir, progress, cancel, group, memo, partial, commit)


def _results_code() -> str:
    """The rules and the code that turn statistics into results, as one short hash."""
    return stable_hash(cache_identity("results"))[:16]


def results_key(spec: RunSpec | ResolvedRun, cache_dir=None) -> str:
    """The cache key of results.json for `spec`: the statistics' key + the results code. No torch."""
    return f"results:{_results_code()}:{run_key(spec, cache_dir)}"


def isotropic_baseline(stats: RunStats, cache_dir=None) -> dict:
    """The sample metrics of an isotropic Gaussian of this run's K and d (cached: one per width)."""
    # lazy: core.stats.assemble imports pandas (core.stats.single_dim); only what builds results pays for it
    from ..stats.assemble import isotropic_baseline as compute

    K, d = int(stats.arrays["sample"].shape[1]), stats.d_model
    store = get_store(cache_dir)
    key = f"isotropic:{_results_code()}:{K}:{d}:{CONFIG.isotropic_seed}"
    got = store.get_json(key)
    if got is None:
        got = compute(stats)
        store.put(key, got)
    return got


def analyze(spec: RunSpec | ResolvedRun, cache_dir=None, progress: Callable[[Progress], None] | None = None,
            cancel: Callable[[], bool] | None = None, force: bool = False, group: Group | None = None,
            memo: dict | None = None, partial: Callable[[dict], None] | None = None) -> dict | None:
    """results.json for `spec` (cached; computes the statistics first if needed).

    With a `core.compute.ranks.Group`, the ranks compute the statistics together; rank 0 returns
    the results and the other ranks None. `memo`: see `get_stats` (a series shares its corpus).
    """
    # lazy: core.stats.assemble imports pandas (core.stats.single_dim); only what builds results pays for it
    from ..stats.assemble import build_results

    run = resolve(spec, cache_dir)
    key = results_key(run, cache_dir)
    if group is not None:
        stale = group.share(lambda: force or key not in get_store(cache_dir))
        if stale:
            stats = get_stats(run, cache_dir, progress, cancel, force, group=group, memo=memo)
        if not group.is_main:
            return None
        if not stale:
            return analyze(run, cache_dir, progress, cancel)
        got = build_results(stats)
        get_store(cache_dir).put(key, got)
        got["manifest"]["cache_hit"] = stats.cached
        return got
    store = get_store(cache_dir)
    n_events = len(store.events)
    # Results are small: a hit never reads the statistics (hundreds of MB for a deep model).
    got = None if force else store.get_json(key)
    cache_hit = got is not None
    if got is None:
        stats = get_stats(run, cache_dir, progress, cancel, force, memo=memo, partial=partial)
        step = metrics_step(progress, cancel, stats.n_layers)
        step(0, stats.n_layers + 3)
        got = build_results(stats, isotropic=isotropic_baseline(stats, cache_dir), step=step)
        check_cancel(cancel)
        store.put(key, got)
        cache_hit = stats.cached
    got["manifest"]["cache_hit"] = cache_hit
    events = store.events[n_events:]  # corrupted entries met on the way (results or statistics)
    if events:
        got["manifest"]["cache_events"] = events
    return got


def metrics_step(progress: Callable[[Progress], None] | None, cancel: Callable[[], bool] | None,
                 n_layers: int) -> Callable[[int, int], None]:
    """`build_results`' `step(i, n)`: the "metrics" stage's progress (layer i of the run's, then the sections
    after them) and its Cancel, checked before each layer (a deep model's metrics take minutes)."""

    def step(i: int, n: int) -> None:
        check_cancel(cancel)
        if progress:
            what = f"layer {i + 1} of {n_layers}" if i < n_layers else "outliers, frequency and CKA"
            progress(Progress("metrics", min(i, n_layers), n_layers, message=f"per-layer metrics: {what}"))

    return step


def postprocessed(spec: RunSpec | ResolvedRun, post, cache_dir=None) -> list[dict]:
    """Sample metrics of every layer after a post-processing what-if (cached)."""
    # lazy: core.stats.assemble imports pandas (core.stats.single_dim); only what builds results pays for it
    from ..stats.assemble import postprocessed_rows

    store = get_store(cache_dir)
    run = resolve(spec, cache_dir)
    key = f"post:{_results_code()}:{run.key}:{stable_hash(post.to_dict())}"
    got = store.get_json(key)
    if got is None:
        got = {"rows": postprocessed_rows(get_stats(run, cache_dir), post)}
        store.put(key, got)
    return got["rows"]


def _ablation_request(res: dict, dims, n_random: int, held_out_tokens: int) -> tuple[list[int], str]:
    """The dims to ablate (default: the persistent outliers of either definition) and the cache key."""

    info = res["manifest"]["model"]
    if not info.get("causal_lm"):
        raise InputError(f"Ablation needs a causal language model with an LM head; {info['label']} "
                         f"({info.get('model_class')}) has none. Try smollm2-135m or untrained-gpt2.")
    if dims is None:
        dims = run_outlier_dims(res["outliers"])
    if not dims:
        raise InputError("No outlier dimensions to ablate: pass dims explicitly.")
    dims = sorted({int(d) for d in dims})
    key = "ablation:" + stable_hash({"run": res["manifest"]["cache_key"], "dims": dims, "n_random": n_random,
                                     "held_out": held_out_tokens, "code": cache_identity("results")})
    return dims, key


def ablation_defaults(n_random, held_out_tokens) -> tuple[int, int]:
    """(n_random, held_out_tokens) of an ablation: CONFIG's where None (a job's parameters, the API's defaults)."""
    n_random = CONFIG.ablation_random_draws if n_random is None else int(n_random)
    held_out_tokens = CONFIG.ablation_held_out_tokens if held_out_tokens is None else int(held_out_tokens)
    return n_random, held_out_tokens


def cached_ablation(spec: RunSpec | ResolvedRun, dims: list[int] | None = None, n_random: int | None = None,
                    held_out_tokens: int | None = None, cache_dir=None) -> dict | None:
    """The stored ablation of a computed run, or None (never computes, never loads a model)."""
    run = resolve(spec, cache_dir)
    if not is_cached(run, cache_dir):
        return None
    n_random, held_out_tokens = ablation_defaults(n_random, held_out_tokens)
    res = analyze(run, cache_dir)
    try:
        _, key = _ablation_request(res, dims, n_random, held_out_tokens)
    except InputError:
        return None
    return get_store(cache_dir).get_json(key)


def run_ablation(spec: RunSpec | ResolvedRun, dims: list[int] | None = None, n_random: int | None = None,
                 held_out_tokens: int | None = None, cache_dir=None,
                 progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None) -> dict:
    """LM-loss change when `dims` (default: the persistent outliers) are zeroed in every norm.

    The loss is measured on held-out text: the documents that follow the analysed ones in the
    run's seeded order. Cached; the model is loaded for this call only and restored after each
    ablation (a job never shares a model it mutates). `cancel` is polled between forward passes.
    """
    # lazy: core.stats.assemble imports pandas (core.stats.single_dim); only what builds results pays for it
    from ..stats.assemble import json_safe

    n_random, held_out_tokens = ablation_defaults(n_random, held_out_tokens)
    run = resolve(spec, cache_dir)
    spec = run.spec
    res = analyze(run, cache_dir, progress, cancel)
    info = res["manifest"]["model"]
    dims, key = _ablation_request(res, dims, n_random, held_out_tokens)

    def compute() -> dict:
        # lazy: keeps torch out of a cache hit
        from .ablation import ablation
        from .forward_run import held_out_batches

        prep = prepare_for_ablation(spec, res, cache_dir, progress, "for the ablation")
        batches, held = held_out_batches(prep, held_out_tokens)
        on_pass = pass_reporter(progress, cancel, "The ablation was cancelled; nothing partial was stored.")
        try:
            got = ablation(prep.lm.model, batches, dims, n_random=n_random, seed=spec.seed, on_pass=on_pass)
        except ValueError as e:
            raise InputError(str(e)) from None
        return json_safe({**got, "held_out_tokens": held.n_content_tokens, "held_out_documents": held.n_documents,
                          "model": info["label"], "corpus": res["manifest"]["corpus"]["id"]})

    return get_store(cache_dir).get_or_compute(key, compute)[0]


def prepare_for_ablation(spec: RunSpec, res: dict, cache_dir, progress, purpose: str, memo: dict | None = None):
    """`prepare` the model and corpus of the run whose results are `res`, on its device and dtype, for
    an ablation (`purpose` ends the loading message: "for the ablation"). `memo`: see `prepare` (one
    command's stages share its documents and, made by `prepare.keeping_models`, its model)."""
    m = res["manifest"]
    sha = (m.get("corpus") or {}).get("sha256")
    return prepare(spec, device=m["device"], dtype=m["dtype"], cache_dir=cache_dir, device_map=spec.device_map,
                   memo=memo, corpus_sha=sha,
                   fingerprint=m["model"].get("fingerprint"), progress=progress,
                   load_message=loading_message(spec.model, purpose), commit=m["model"].get("commit"))



def pass_reporter(progress: Callable[[Progress], None] | None, cancel: Callable[[], bool] | None,
                  cancelled: str) -> Callable[[int, int, str], None]:
    """An ablation's `on_pass(i, n, what)`: raises Cancelled(`cancelled`) when `cancel()` says so, else
    reports forward pass i + 1 of n."""

    def on_pass(i: int, n: int, what: str) -> None:
        if cancel is not None and cancel():
            raise Cancelled(cancelled)
        if progress:
            progress(Progress("ablation", i, n, message=f"forward pass {i + 1} of {n}: {what}"))
    return on_pass


# ---------------------------------------------------------------------- a run in a job's parameters
def analyze_params(spec: RunSpec | ResolvedRun, cache_dir=None) -> dict:
    """The parameters of an "analyze" (or "attention") job: the spec and its resolution, carried
    so that neither the queue's job id nor the worker computes the run key again."""
    run = resolve(spec, cache_dir)
    return {"spec": run.spec.to_dict(), "resolved": run.to_params()}


def run_of(params: dict) -> RunSpec | ResolvedRun:
    """The run of a job's parameters: resolved already when the submitter carried a resolution that
    holds together (`ResolvedRun.from_params`), else the spec, to resolve once here."""
    spec = RunSpec.from_dict(params["spec"])
    got = params.get("resolved")
    return (ResolvedRun.from_params(spec, got) if got else None) or spec
