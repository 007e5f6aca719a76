"""The whole-report export: every standard view of the selected (cached) runs, zipped.

Runs outside Streamlit, as the "report" job (`job_report`; the sidebar's *Export report (zip)* queues it),
so it reads the pipeline's disk cache directly and never starts an extraction: uncached runs are skipped.
The job reports its progress in views done of the total, stops within seconds on Cancel, is stopped after
ANISO_REPORT_TIMEOUT_S (default 300 s) with a message saying so, and keeps the zip in the results cache
(`report_blob` reads it back for the download). Its parameters carry the names the queuing browser gives
the corpora (`names`), so that the zip names uploads as that browser does.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .. import views
from ..base import settings
from ..base.cache import get_store
from ..base.errors import Cancelled, InputError
from ..base.progress import Progress, Stage
from ..base.spec import stable_hash
from ..compute.pipeline import analyze, cached_ablation, get_stats, is_cached, postprocessed, resolve
from ..compute.projection import project, sample_table
from ..inputs.uploads import names_as
from ..stats.assemble import frequency_r
from ..stats.registry import report_keys
from ..studies.chain.ablate_links import cached_chain_ablation, default_targets
from ..studies.chain.job import cached_chain_section
from ..studies.selection import SAMPLE_METRICS, Selection, from_query_params, to_query_params
from . import chain as chain_views
from .export import report_zip

REPORT_METRICS = tuple(report_keys())  # one per-layer curve per statistic of the registry (core.stats.registry)


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def report_views(sel: Selection, runs: list[tuple], tick: Callable[[int, int, str], None] | None = None
                 ) -> list[views.View]:
    """runs: (spec, results, stats) of cached runs, in the selection's order. `tick(done, 0, what)` before
    each run's own views (the report job's Cancel and time bound)."""
    res = [r for _, r, _ in runs]
    layers = [sel.layer_for(views.n_layers(r)) for r in res]
    x_axis = sel.x_axis_for([views.n_layers(r) for r in res])
    out = [views.layer_curves(res, m, x_axis, sel.reference) for m in REPORT_METRICS]
    if not sel.post.is_identity or sel.drop_outliers:
        posts = [views.post_for(r, sel.post, sel.drop_outliers) for r in res]
        rows = [postprocessed(s, p) if not p.is_identity else None for (s, _, _), p in zip(runs, posts)]
        metric = sel.metric if sel.metric in SAMPLE_METRICS else "pc1_variance_ratio"
        v = views.layer_curves(res, metric, x_axis, sel.reference, post_rows=rows,
                               post_labels=[p.label() for p in posts])
        v.name += "_postprocessed"
        out.append(v)
    out.append(views.metric_table(res))
    out.append(views.pairwise_histogram([s for _, _, s in runs], res, layers))
    out.append(views.frequency_deciles(res, layers))
    if len(runs) > 1:
        out += [views.outlier_counts(res), views.compare_summary(res)]
    for i, ((spec, r, st), l) in enumerate(zip(runs, layers)):
        if tick is not None:
            tick(0, 0, f"the views of run {i + 1} of {len(runs)}")
        per = [views.outlier_bars(st, r, l), views.outlier_heatmap(st, r), views.cosine_contribution_bars(st, r, l),
               views.outlier_definitions(r), views.outlier_summary(r), views.massive_activations(r),
               views.frequency_correlation(r, frequency_r(st)), views.frequency_r_table(r, frequency_r(st))]
        proj = project(spec, l, "pca")
        per.append(views.projection([(r, proj, sample_table(st))], "log_frequency"))
        if r.get("ablation"):  # computed by an ablation job: it belongs to the run's report
            per.append(views.ablation_view(r["ablation"], r, r["ablation"].get("set") or "outlier dims"))
        if r.get("chain") or r.get("chain_ablations"):  # computed by a chain job: the chain and its ablations
            per.append(chain_views.chain_view(r, None, r.get("chain_ablations")))
        if r.get("chain_ablations"):
            per.append(chain_views.ablation_curves(r["chain_ablations"], r))
        for v in per:
            v.name = f"{_slug(spec.model)}_{v.name}"  # the corpus is added by export.file_name
        out += per
    return out


def _chosen_ablation(sel: Selection, spec, res: dict) -> dict | None:
    """The stored ablation of the selection's outlier set (Outliers page), else of the persistent dims; with
    the set's name under "set"."""
    layer = sel.layer_for(views.n_layers(res))
    try:
        dims, _ = views.outlier_set(res, sel.outlier_set, layer, sel.typed_dims)
    except ValueError:  # typed dims that do not fit this model
        dims = []
    if dims:
        ab = cached_ablation(spec, dims)
        if ab is not None:
            return {**ab, "set": views.set_label(sel.outlier_set, layer, len(dims))}
    ab = cached_ablation(spec)
    return None if ab is None else {**ab, "set": views.set_label("persistent", layer, len(ab["dims"]))}


def build_report(sel: Selection, image_formats=("png", "svg", "pdf"),
                 tick: Callable[[int, int, str], None] | None = None) -> bytes:
    """The zip of every view of the selection's cached runs, plus each results.json. `tick(done, total, what)`
    is called between steps (runs read, views built, views written: total 0 until the views are known); it
    raises to stop the build (Cancelled, a time bound)."""
    runs = []
    specs = [sel.spec(m, c) for m in sel.models for c in sel.corpora]  # the seed bands: on screen only
    for i, spec in enumerate(specs):
        if tick is not None:
            tick(0, 0, f"reading run {i + 1} of {len(specs)}")
        try:
            if not is_cached(spec):
                continue
        except ValueError:  # InputError: a model that cannot load has no results to report
            continue
        res = analyze(spec)
        ab = _chosen_ablation(sel, spec, res)
        if ab is not None:  # results.json of the zip carries the run's ablation too
            res = {**res, "ablation": ab}
        sec = cached_chain_section(resolve(spec))
        if sec is not None:  # ... its chain section (the Chain page's job, core chain)
            res = {**res, "chain": sec}
        cab = cached_chain_ablation(spec, default_targets(res))
        if cab is not None:  # ... and its chain ablations
            res = {**res, "chain_ablations": cab}
        runs.append((spec, res, get_stats(spec)))
    if not runs:
        raise InputError("Nothing computed yet for this selection: press Run first.")
    vs = report_views(sel, runs, tick)
    return report_zip(vs, [r for _, r, _ in runs], selection=to_query_params(sel), image_formats=image_formats,
                      tick=tick)


# ---------------------------------------------------------------------------------------------- the job
IMAGE_FORMATS = ("png", "svg", "pdf")
FILE_NAME = "anisotropy-report.zip"


def report_params(sel: Selection, names: dict[tuple[str, str], str] | None = None,
                  image_formats=IMAGE_FORMATS, runs: list[str] | None = None) -> dict:
    """The "report" job's parameters (JSON): the selection as its URL says it, the corpora's names as the
    queuing browser sees them ({(corpus, text column or ""): name}), the image formats, and `runs`: what is
    computed of the selection (e.g. the cached runs' keys), so that a report asked again after more runs
    were computed is a new job, and the same one while nothing changed."""
    return {"selection": to_query_params(sel),
            "names": sorted([str(c), str(col or ""), str(n)] for (c, col), n in (names or {}).items()),
            "formats": [f for f in image_formats if f in IMAGE_FORMATS], "runs": list(runs or [])}


def report_key(params: dict) -> str:
    """The results-cache key of the zip these parameters build."""
    return "report:" + stable_hash({k: params.get(k) for k in ("selection", "names", "formats", "runs")})


def selection_of(params: dict) -> Selection:
    """The job's selection, checked as a URL's is (under the worker's settings): InputError when any part of
    it is refused (a queue record is not trusted more than a link)."""
    q = params.get("selection")
    if not isinstance(q, dict):
        raise InputError("The report job's selection is not an object.")
    sel, problems = from_query_params(q)
    if problems:
        raise InputError("The report's selection was refused: " + " ".join(problems))
    return sel


def job_report(params: dict, progress, cancel) -> dict:
    """The "report" job: build the zip (progress in views, Cancel, ANISO_REPORT_TIMEOUT_S) and keep it in the
    results cache under `report_key`; the result says where and what."""
    sel = selection_of(params)
    try:
        names = {(str(c), str(col)): str(n)[:200] for c, col, n in params.get("names") or []}
        formats = tuple(f for f in params.get("formats", IMAGE_FORMATS) if f in IMAGE_FORMATS)
    except (TypeError, ValueError):
        raise InputError("The report job's names or image formats are not the app's (lists of strings).") from None
    bound = settings.current().report_timeout_s
    t0 = time.monotonic()
    seen = {"done": 0, "total": 0}

    def tick(done: int, total: int, what: str) -> None:
        if cancel():
            raise Cancelled("report cancelled")
        if time.monotonic() - t0 > bound:
            where = f"{seen['done']} of {seen['total']} views written" if seen["total"] else "before its views"
            raise InputError(f"The report took longer than {bound:.0f} s and was stopped ({where}). "
                             "Export fewer runs, or raise ANISO_REPORT_TIMEOUT_S on the server.")
        seen.update(done=done, total=total)
        progress(Progress(Stage.REPORT, done=done, total=total, message=what))

    with names_as(names):
        blob = build_report(sel, image_formats=formats, tick=tick)
    key = report_key(params)
    get_store().put(key, {"kind": "report", "bytes": len(blob)}, {"zip": np.frombuffer(blob, dtype=np.uint8)})
    return {"key": key, "bytes": len(blob), "views": seen["total"], "file_name": FILE_NAME,
            "seconds": round(time.monotonic() - t0, 1)}


def report_blob(job_result: dict | None) -> bytes | None:
    """The zip a finished "report" job kept (its `result`), or None when it is no longer in the cache."""
    key = (job_result or {}).get("key")
    if not isinstance(key, str) or not key.startswith("report:"):
        return None
    got = get_store().get(key)
    return None if got is None else got[1]["zip"].tobytes()
