"""Cached accessors of core results, keyed on small specs (never on arrays), all bounded.

The disk cache (core.base.cache) already keeps every computed result; these in-memory caches only
spare reruns the disk reads. `results` is called only for runs that are cached on disk, so no
widget change ever starts an extraction: that happens in a job (ui.run queues it on Run).
"""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import streamlit as st

from core import views
from core.base import settings
from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute import pipeline
from core.compute import projection as P
from core.inputs import checkpoints, corpora, uploads
from core.inputs.hub_fetch import plan_of, size_report
from core.inputs.models import BUILTIN_MODELS
from core.stats import assemble
from core.stats.postprocess import PostProcess
from core.studies import attention as A
from core.studies.chain import ablate_links as CA
from core.studies.chain.job import cached_chain_section
from core.studies.drift import DriftSpec, drift_experiment


def _viewer_key() -> str:
    """Whose names a view shows: on a shared server each browser names its uploads its own way (core.inputs.uploads)."""
    return (uploads.viewer() or "") if settings.current().shared else ""


def per_viewer(cached):
    """A cached view whose legends, titles or file names hold corpus names: cached per browser on a shared server
    (its first argument, `viewer`, keys the cache; the wrapper passes it)."""

    @functools.wraps(cached)
    def call(*a, **k):
        return cached(_viewer_key(), *a, **k)

    call.clear = cached.clear
    return call


@st.cache_resource(max_entries=1, show_spinner=False)
def warmup():
    """Start the UMAP process once per server; it compiles umap's kernels in the background (unless
    ANISO_UMAP_WARM=0: then its first fit compiles them)."""
    return P.start_warmup() if settings.umap_warm() else P.start_process()


@per_viewer
@st.cache_data(max_entries=16, show_spinner=False)
def preview(viewer: str, corpus: str, text_column: str | None) -> uploads.Preview:
    """What an uploaded corpus holds (documents, estimated tokens, first rows, warnings)."""
    return uploads.preview(corpus, text_column)


def forget_labels() -> None:
    """After a rename: drop the cached views, whose legends and titles hold the corpus name."""
    for f in (preview, pairwise_histogram, outlier_heatmap, outlier_bars, cosine_contribution_bars, frequency_views,
              dimension_views):
        f.clear()


@st.cache_data(ttl=10, max_entries=1, show_spinner=False)
def trained_checkpoints() -> list[str]:
    """Checkpoint identifiers of the runs trained here (trained/<run>@step-N)."""
    return checkpoints.list_checkpoints()


@st.cache_data(ttl=30, max_entries=64, show_spinner=False)
def resolved(spec: RunSpec) -> pipeline.ResolvedRun:
    """The run's identifiers resolved and its key (a hub call, a corpus hash): once per spec per 30 s,
    shared by the cache look-ups, the job submitted on Run and the results read afterwards."""
    return pipeline.resolve(spec)


# Not memoised (one look-up in the store's index): a run the worker has just stored must be seen by the very
# next page run of every session. A memoised "not computed" was seen on a shared server: a second visitor
# whose page ran as the job ended, after another session had memoised the answer, drew nothing and never
# reran, since its own job panel had not seen the job running.
def is_cached(spec: RunSpec) -> bool:
    return pipeline.is_cached(resolved(spec))


@st.cache_data(max_entries=16, show_spinner=False)
def results(spec: RunSpec) -> dict:
    return pipeline.analyze(resolved(spec))


@st.cache_resource(max_entries=3, show_spinner=False)
def stats(spec: RunSpec) -> pipeline.RunStats:
    """Statistics with the token sample (large arrays): shared, never copied, never mutated."""
    return pipeline.get_stats(resolved(spec))


@st.cache_data(max_entries=16, show_spinner=False)
def sample_table(spec: RunSpec):
    """The sampled tokens, with their documents' metadata where the corpus is a table (e.g. its topic)."""
    try:
        meta = corpora.document_metadata(spec.corpus, spec.text_column, spec.encoding)
    except InputError:  # the file went away since the run: the sample is still there, without its columns
        meta = None
    return P.sample_table(stats(spec), meta)


@st.cache_data(max_entries=32, show_spinner=False)
def post_rows(spec: RunSpec, post: PostProcess) -> list[dict]:
    return pipeline.postprocessed(resolved(spec), post)


@st.cache_data(max_entries=32, show_spinner=False)
def projection(spec: RunSpec, layer: int, method: str, post: PostProcess, n_neighbors: int, min_dist: float,
               seed: int) -> dict:
    return P.project(resolved(spec), layer, method, post=post, n_neighbors=n_neighbors, min_dist=min_dist, seed=seed)


def cached_chain_ablation(spec: RunSpec) -> dict | None:
    """The run's stored chain ablations (computed by a chain-ablation job), or None. Never computes."""
    return CA.cached_chain_ablation(resolved(spec), chain_targets(spec))


def chain_section(spec: RunSpec) -> dict | None:
    """The run's stored chain section (super weights, sink rate, ...: a "chain" job), or None. Never computes."""
    return cached_chain_section(resolved(spec))


def chain_results(spec: RunSpec) -> dict:
    """The run's results with its chain section when it is computed (what the Chain view reads)."""
    sec = chain_section(spec)
    res = results(spec)
    return {**res, "chain": sec} if sec else res


def chain_targets(spec: RunSpec) -> dict:
    """What the chain ablations of a computed run zero (its super weights, massive and outlier dims): the targets
    `core chain --ablate` uses too, so that both find the same stored ablations."""
    return CA.default_targets(chain_results(spec))


def cached_ablation(spec: RunSpec, dims: tuple[int, ...] | None = None) -> dict | None:
    """The run's stored ablation of `dims` (None: the persistent outliers), computed by an ablation job, or
    None. Never computes."""
    return pipeline.cached_ablation(resolved(spec), None if dims is None else list(dims))


# Views that compute on the sample (seconds): cached on (specs, parameters).
@per_viewer
@st.cache_data(max_entries=32, show_spinner=False)
def pairwise_histogram(viewer: str, specs: tuple[RunSpec, ...], layers: tuple[int, ...]) -> views.View:
    return views.pairwise_histogram([stats(s) for s in specs], [results(s) for s in specs], layers)


@per_viewer
@st.cache_data(max_entries=16, show_spinner=False)
def outlier_heatmap(viewer: str, spec: RunSpec) -> views.View:
    return views.outlier_heatmap(stats(spec), results(spec))


@per_viewer
@st.cache_data(max_entries=32, show_spinner=False)
def outlier_bars(viewer: str, spec: RunSpec, layer: int) -> views.View:
    return views.outlier_bars(stats(spec), results(spec), layer)


@per_viewer
@st.cache_data(max_entries=32, show_spinner=False)
def cosine_contribution_bars(viewer: str, spec: RunSpec, layer: int) -> views.View:
    return views.cosine_contribution_bars(stats(spec), results(spec), layer)


@st.cache_data(max_entries=8, show_spinner=False)
def frequency_r(spec: RunSpec) -> np.ndarray:
    """(L+1, d) Pearson r of log frequency vs |x_d| for every dim (from the stored sums)."""
    return assemble.frequency_r(stats(spec))


@per_viewer
@st.cache_data(max_entries=16, show_spinner=False)
def frequency_views(viewer: str, spec: RunSpec, which: str = "persistent", layer: int | None = None,
                    typed: tuple[int, ...] = ()) -> tuple[views.View, views.View]:
    """The frequency link of an outlier set (views.outlier_set): the chart and the per-dim table."""
    res, R = results(spec), frequency_r(spec)
    dims, name = views.outlier_set(res, which, layer, typed)
    pos = views.position_for(stats(spec), res, dims)
    return (views.frequency_correlation(res, R, dims, name, pos), views.frequency_r_table(res, R, dims, pos))


@per_viewer
@st.cache_data(max_entries=16, show_spinner=False)
def dimension_views(viewer: str, spec: RunSpec, dim: int, layer: int) -> tuple[views.View, views.View, views.View]:
    """The drill-down of one dim: top tokens and the frequency scatter at `layer`, r per layer."""
    res, R = results(spec), frequency_r(spec)
    x = stats(spec).sample(layer)[:, dim]
    table = sample_table(spec)
    return (views.dimension_tokens(res, x, table, dim, layer), views.dimension_scatter(res, x, table, dim, layer),
            views.dimension_r(res, R, dim, views.ablation_dims(res)))


@per_viewer
@st.cache_data(max_entries=16, show_spinner=False)
def difference(viewer: str, spec_a: RunSpec, spec_b: RunSpec, x_axis: str | None = None) -> views.View:
    """Mean cosine of run A minus run B per layer, with the bootstrap interval (seconds)."""
    return views.mean_cosine_difference(stats(spec_a), results(spec_a), stats(spec_b), results(spec_b),
                                        x_axis=x_axis)


@per_viewer
@st.cache_data(max_entries=8, show_spinner=False)
def cka_across(viewer: str, spec_a: RunSpec, spec_b: RunSpec) -> views.View:
    """Linear CKA between the layers of two runs that read the same tokens (seconds)."""
    return views.cka_across(stats(spec_a), results(spec_a), stats(spec_b), results(spec_b))


# Attention statistics: computed only behind the page's button (they load the model). Not memoised, as
# is_cached: the run's results (memoised) give the section's key, then one look-up in the store's index.
def attention_cached(spec: RunSpec) -> bool:
    return is_cached(spec) and A.is_cached(resolved(spec), results=results(spec))


@st.cache_data(max_entries=8, show_spinner=False)
def attention(spec: RunSpec) -> dict:
    return A.run_attention(resolved(spec))


class _NotStored(Exception):
    """Raised inside a cached accessor on a miss: Streamlit caches values, never exceptions."""


def attention_maps(spec: RunSpec, window: int) -> dict | None:
    """One window's stored attention maps, or None (computed by an "attention-maps" job: ui.run)."""
    try:
        return _stored_maps(spec, window)
    except _NotStored:
        return None


@st.cache_data(max_entries=4, show_spinner=False)
def _stored_maps(spec: RunSpec, window: int) -> dict:
    got = A.cached_maps(resolved(spec), window)
    if got is None:
        raise _NotStored
    return got


@st.cache_data(max_entries=8, show_spinner=False)
def drift(dspec: DriftSpec) -> dict:
    return drift_experiment(dspec)


_HUB_LOOKUPS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hub-size")  # a page never waits on the hub


@st.cache_resource(max_entries=64, ttl=120, show_spinner=False)
def hub_size(ident: str, dtype: str, device: str) -> Future:
    """A hub model's size line, looked up in the background (core.inputs.hub_fetch: its listing, config and weight
    headers; nothing else is fetched): (text, fits). Kept two minutes per model, dtype and device."""
    return _HUB_LOOKUPS.submit(_hub_size_line, ident, dtype, device)


def _hub_size_line(ident: str, dtype: str, device: str) -> tuple[str, bool]:
    try:
        rep = size_report(plan_of(ident, suggest=BUILTIN_MODELS), dtype, device)
    except InputError as e:
        return str(e), False
    except Exception as e:  # noqa: BLE001 - a look-up in the background: whatever broke is said on the line
        return f"could not be looked up ({type(e).__name__}: {(str(e).splitlines() or [''])[0]})", False
    return (rep["summary"] if rep["fits"] else f"{rep['summary']}; not fetched here: {rep['reason']}"), rep["fits"]
