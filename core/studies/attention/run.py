"""The attention statistics of a run, cached apart from its results: the outlier dims they track,
their cache key, the (torchrun) pass through `prepare`, and the "attention" job."""

from __future__ import annotations

from typing import Callable

from ...base import settings
from ...base.cache import get_store
from ...base.config import CONFIG, cache_identity
from ...base.errors import InputError
from ...base.progress import Progress
from ...base.spec import stable_hash
from ...compute.distributed import run_torchrun, spec_args
from ...compute.pipeline import analyze, resolve, run_of
from ...compute.pipeline import is_cached as run_cached
from ...compute.prepare import prepare
from ...inputs.corpora import TokenWindows
from ...stats.outliers import run_outlier_dims
from .stats import MAX_KEYS, extract_attention, pick_dims
from .summary import finish


def link_dims(results: dict) -> list[int]:
    """The outlier dims whose link is measured: the run's persistent outliers of either definition
    (activation rule, norm-parameter rule), as for the ablation."""
    return run_outlier_dims(results["outliers"])


def attention_key(results: dict, n_random: int = CONFIG.attention_random_dims) -> str:
    """Cache key of the attention section: the run's results, the dims, the rules and the code."""

    return "attention:" + stable_hash({"run": results["manifest"]["cache_key"], **cache_identity("attention"),
                                       "dims": link_dims(results), "n_random": int(n_random),
                                       "seed": int(results["manifest"].get("seed", 0))})


def is_cached(spec, cache_dir=None, results: dict | None = None) -> bool:
    """Whether the attention section of `spec` is on disk (no torch, no model; the run's results
    must be cached too). `results`: the run's results when the caller holds them (the app memoises
    them), else they are read from the cache."""

    run = resolve(spec, cache_dir)
    if not run_cached(run, cache_dir):
        return False
    return attention_key(results if results is not None else analyze(run, cache_dir)) in get_store(cache_dir)


def run_attention(spec, cache_dir=None, progress: Callable[[Progress], None] | None = None,
                  cancel: Callable[[], bool] | None = None, force: bool = False,
                  n_random: int = CONFIG.attention_random_dims, group=None, memo: dict | None = None) -> dict | None:
    """The `attention` section of results.json for `spec`, cached apart from the run's results
    (which are computed first if needed: the outlier dims come from them). `memo`: a dict shared
    by the checkpoints of a series (core/studies/series.py): the corpus and its token windows are kept there.

    With a `core.compute.ranks.Group` (torchrun), every rank runs its share of the batches, the sums
    are added up across ranks, and rank 0 alone reads and writes the cache and returns the section
    (the other ranks return None).
    """

    run = resolve(spec, cache_dir)
    spec = run.spec
    if group is not None:
        return _run_attention_group(run, cache_dir, progress, cancel, force, n_random, group)
    res = analyze(run, cache_dir, progress, cancel)
    got, hit = get_store(cache_dir).get_or_compute(
        attention_key(res, n_random),
        lambda: _attention_section(spec, res["manifest"], link_dims(res), cache_dir, progress, cancel, n_random,
                                   memo=memo), force)
    return {**got, "cache_hit": hit}


def _run_attention_group(run, cache_dir, progress, cancel, force: bool, n_random: int, group) -> dict | None:
    import contextlib

    spec = run.spec
    res = analyze(run, cache_dir, progress, cancel, group=group)  # rank 0: the results; others None

    def look() -> dict:  # rank 0: what every rank needs to know (the run's manifest and dims, or a cache hit)
        key = attention_key(res, n_random)
        return {"key": key, "hit": not force and key in get_store(cache_dir), "manifest": res["manifest"],
                "dims": link_dims(res)}

    seen = group.share(look)
    if seen["hit"]:
        return run_attention(run, cache_dir, progress, cancel, n_random=n_random) if group.is_main else None
    import functools

    reduce = functools.partial(group.reduce, max_keys=MAX_KEYS)
    with contextlib.ExitStack() as stack:
        if group.is_main:
            store = get_store(cache_dir)
            stack.enter_context(store.lock(seen["key"]))
        got = group.run(lambda: _attention_section(spec, seen["manifest"], seen["dims"], cache_dir, progress, cancel,
                                                   n_random, device=group.device, shard=group.shard, reduce=reduce))
        if not group.is_main:
            return None
        got["distributed"] = {"world_size": group.world, "backend": group.backend}
        store.put(seen["key"], got)
    return {**got, "cache_hit": False}


def _attention_section(spec, m: dict, dims: list[int], cache_dir, progress, cancel, n_random: int,
                       device: str | None = None, shard=None, reduce=None, memo: dict | None = None) -> dict:
    """Compute the attention section of the run whose manifest is `m` (outlier dims `dims`)."""
    # lazy: keeps torch out of a cache hit
    import torch

    from ...stats.assemble import json_safe

    device, dtype = device or m["device"], m["dtype"]
    prep = prepare(spec, device=device, dtype=dtype, cache_dir=cache_dir, memo=memo,
                   corpus_sha=m["corpus"].get("sha256"), fingerprint=m["model"].get("fingerprint"), progress=progress,
                   load_message=f"loading {spec.model} for attention statistics")
    if prep.modality != "text":  # the pass reads token windows (queries, keys, special tokens of a text run)
        raise InputError(f"Attention statistics are computed on text runs; {m['model']['label']} reads "
                         f"{prep.modality} (the chain pass reads its attention to the first position: its sink rate).")
    lm, docs, windows = prep.lm, prep.documents, prep.windows
    d = int(m["model"].get("hidden_size") or 0) or int(lm.info["hidden_size"])
    outl, rand = pick_dims(dims, d, n_random, spec.seed)
    try:
        sums, timing, arch = extract_attention(
            lm.base, windows, outl + rand, special_policy=spec.special_tokens, batch_size=spec.batch_size,
            device=device, dtype=dtype, pad_id=prep.pad_id, progress=progress,
            cancel=cancel, shard=shard, reduce=reduce)
    except ValueError as e:
        raise InputError(f"Attention statistics are not available for {m['model']['label']}: {e}") from None
    except torch.OutOfMemoryError:
        raise InputError(f"Out of memory on {device} computing attention with batch size {spec.batch_size}: "
                         f"lower it (attention probabilities take B x heads x T x T per layer).") from None
    info = {"n_blocks": len(arch.layers), "n_heads": arch.n_heads, "n_kv_heads": arch.n_kv_heads,
            "head_dim": int(sums["sum_q"].shape[-1]), "causal": bool(arch.layers[0].causal),
            "projections": "query/key projection outputs before any rotary position embedding",
            "blocks": "block l reads hidden_states[l-1] (layer 0 = embeddings) and writes hidden_states[l]",
            "link_hidden_state": "hidden_states[l-1], the residual stream block l reads",
            "run_key": m["cache_key"], **cache_identity("attention"), "timing": timing,
            "special_tokens": spec.special_tokens, "n_windows": len(windows.ids), **document_index(windows, docs)}
    return json_safe(finish(sums, info, outl, rand))


DOC_START_CHARS = 60  # how much of a document's text names it in the viewer's document list


def doc_start(text: str, n: int = DOC_START_CHARS) -> str:
    """The first `n` characters of a document, whitespace runs collapsed (a name for it in lists)."""
    s = " ".join(str(text)[:4 * n].split())
    return s if len(s) <= n else s[:n - 1].rstrip() + "…"


def document_index(windows: TokenWindows, docs: list[str]) -> dict:
    """Which document each window comes from (`window_docs`, the corpus index of each window's
    document, in window order) and, per document in corpus order, its first words (`documents`:
    {"doc", "start", "n_windows"}): the attention viewer picks a window by document with it."""
    wd = [int(d) for d in windows.doc]
    counts: dict[int, int] = {}
    for d in wd:
        counts[d] = counts.get(d, 0) + 1
    return {"window_docs": wd,
            "documents": [{"doc": d, "start": doc_start(docs[d]) if 0 <= d < len(docs) else "", "n_windows": c}
                          for d, c in sorted(counts.items())]}



def job_attention(params: dict, progress, cancel) -> dict:
    """The "attention" job: the attention section of one run, into the cache (the run first if needed)."""

    run = resolve(run_of(params))  # carried in the job's parameters by the submitter
    nproc = settings.current().torchrun_nproc  # ANISO_TORCHRUN_NPROC: a torchrun job of K processes computes it
    if nproc > 1 and not is_cached(run):
        run_torchrun(["attention", *spec_args(run.spec)], nproc, progress, cancel)  # rank 0 stores run and section
    sec = run_attention(run, progress=progress, cancel=cancel)
    return {"blocks": len(sec.get("layers", [])) if isinstance(sec, dict) else 0}
