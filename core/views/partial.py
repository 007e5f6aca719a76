"""Partial results: the curves of a run still computing (or of one that failed), from the sums over the
batches processed so far (`core.stats.assemble.partial_results`). The same views as the final results,
titled and captioned as partial, with the count ("partial: 12,400 of 40,000 tokens"); the statistics
of the token sample are not drawn from a partial sample (the page says they wait for it to fill)."""

from __future__ import annotations

from typing import Sequence

from ..stats import registry as S
from ..studies.selection import METRICS
from .common import View, as_results
from .compare import outlier_counts
from .layers import layer_curves

PARTIAL_KINDS = ("layers", "outliers", "compare")


def partial_count(partial: dict) -> str:
    """'partial: 12,400 of 40,000 tokens (31%)' for one partial result."""
    p = partial.get("partial") or {}
    done, total = int(p.get("tokens") or 0), int(p.get("total_tokens") or 0)
    share = f" ({done / total:.0%})" if total else ""
    return f"partial: {done:,} of {total:,} tokens{share}"


def sample_wait_note(metric: str) -> str | None:
    """What the page says instead of a sample statistic's partial curve (None for a streaming one)."""
    stat = S.BY_KEY.get(metric)
    if stat is None or not stat.reads_sample:
        return None
    return (f"{METRICS.get(metric, (metric,))[0]} is computed on the token sample, which fills in corpus order as the "
            "run goes: a partial sample would be biased, so it is drawn when the run ends. Meanwhile: the mean "
            "cosine over every token read so far.")


def partial_view(partials: Sequence[dict], kind: str = "layers", metric: str = "mean_cosine",
                 x_axis: str = "layer", failed: bool = False) -> View:
    """The partial figure of `kind` ("layers": `metric` by layer, "compare": by relative depth, "outliers":
    the activation outlier dims per layer) for the runs still computing (or failed: `failed`)."""
    if kind not in PARTIAL_KINDS:
        raise ValueError(f"kind must be one of {PARTIAL_KINDS}, got {kind!r}")
    if sample_wait_note(metric):
        metric = "mean_cosine"
    if kind == "outliers":
        view = outlier_counts(partials)
    else:
        view = layer_curves(partials, metric, "depth" if kind == "compare" else x_axis, reference=False)
    counts = "; ".join(f"{as_results(p).run_name}: {partial_count(p)}" for p in partials)
    what = "last partial result of a failed run" if failed else "partial result, still computing"
    fig = view.figure
    fig.update_layout(title=dict(text=f"{fig.layout.title.text} ({what})"))
    sub = fig.layout.title.subtitle.text or ""
    fig.update_layout(title=dict(subtitle=dict(text=f"{counts} · {sub}" if sub else counts)))
    view.name = f"partial_{view.name}"
    view.title = f"{view.title} ({what})"
    view.manifest = {**view.manifest, "partial": [p.get("partial") for p in partials], "failed": failed}
    view.data = view.data.assign(partial=True)
    view.caption = f"{what.capitalize()}: {counts}. {view.caption}"
    view.notes = [f"Partial: {counts}. Sums over the batches processed so far; the final result replaces it."] + [
        n for n in view.notes if not n.startswith("Dotted")]
    return view
