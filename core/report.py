"""The whole-report export: every standard view of the selected (cached) runs, zipped.

Runs outside Streamlit (the download button calls it on a worker thread), so it reads the
pipeline's disk cache directly and never starts an extraction: uncached runs are skipped.
"""

from __future__ import annotations

from . import views
from .analysis import frequency_r
from .chain.job import cached_chain_section
from .chain_ablation import cached_chain_ablation, default_targets
from .export import report_zip
from .pipeline import analyze, cached_ablation, get_stats, is_cached, postprocessed, resolve
from .projection import project, sample_table
from .selection import SAMPLE_METRICS, Selection, to_query_params
from .statistics import report_keys
from .views import chain as chain_views

REPORT_METRICS = tuple(report_keys())  # one per-layer curve per statistic of the registry (core.statistics)


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def report_views(sel: Selection, runs: list[tuple]) -> list[views.View]:
    """runs: (spec, results, stats) of cached runs, in the selection's order."""
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
    for (spec, r, st), l in zip(runs, layers):
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


def build_report(sel: Selection, image_formats=("png", "svg", "pdf")) -> bytes:
    """The zip of every view of the selection's cached runs, plus each results.json."""
    runs = []
    for spec in [sel.spec(m, c) for m in sel.models for c in sel.corpora]:  # the seed bands: on screen only
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
        raise ValueError("Nothing computed yet for this selection: press Run first.")
    vs = report_views(sel, runs)
    return report_zip(vs, [r for _, r, _ in runs], selection=to_query_params(sel), image_formats=image_formats)
