"""The job kinds of one run (core.entry.job_records.KINDS names them): "analyze" and "ablation", each with its key
function, and the worker's warm-up before its first job (core.entry.worker.WARM_UP).

    job_analyze(params, progress, cancel)   statistics and results.json of one RunSpec, into the cache
    job_ablation(params, progress, cancel)  the LM-loss ablation of a run's outlier dims
    warm_imports / warm_up                  what the worker pays before its first job instead of during it

A job carries its run as core.compute.pipeline.analyze_params writes it; these functions compute nothing of their
own (core.compute.pipeline does), so no cache key hashes this module.
"""

from __future__ import annotations

import threading

from ..base import settings
from ..base.spec import RunSpec, stable_hash
from ..inputs.models import load_model
from .distributed import job_torchrun
from .pipeline import ResolvedRun, ablation_defaults, analyze, is_cached, resolve, run_ablation, run_key, run_of


def job_analyze_key(params: dict) -> str:
    """One analysis job per cache key: same statistics, same job (whoever asks)."""
    return run_key(run_of(params))


_thread_memo = threading.local()  # a worker thread's documents and windows, kept from one job to the next
MEMO_MAX_CHARS = 64 * 2**20  # a corpus larger than this (characters) is not kept between jobs
MEMO_MAX_ENTRIES = 8  # documents + windows of up to 7 budgets, tokenizers or seeds of one corpus


def _job_memo() -> dict:
    """The memo (`get_stats`) of this worker thread's analyses: a corpus read and tokenized by one job is not
    read nor tokenized again by the next one on the same corpus (a second Run of another budget, the runs
    of a Compare). Per thread: `prepare` keeps one corpus per memo (a different one clears it), which two
    jobs at once on different corpora would mix up. Safe across changes: the documents are keyed on the
    corpus's sha256, computed from its file when the run is resolved, and the windows on the tokenizer's
    identity, the budget, the sequence length and the seed (`prepare.prepare`); anything else starts afresh."""
    memo = getattr(_thread_memo, "memo", None)
    if memo is None:
        memo = _thread_memo.memo = {}
    return memo


def _trim_memo(memo: dict) -> None:
    docs = [v for k, v in memo.items() if k[0] == "documents"]
    if len(memo) > MEMO_MAX_ENTRIES or sum(len(d) for v in docs for d in v) > MEMO_MAX_CHARS:
        memo.clear()


def warm_imports(cache_dir=None) -> None:
    """The warm-up's first step (`core.entry.worker.WARM_UP`): import what every analysis imports (pandas through
    core.stats.assemble, torch, transformers). A job that arrives meanwhile waits for this step only, and needs
    all of it anyway."""
    # lazy: core.stats.assemble imports pandas (core.stats.single_dim), which a cache hit never needs: here it is the point
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from ..stats.assemble import build_results  # noqa: F401


def warm_up(cache_dir=None) -> None:
    """The warm-up's last step, skipped when a job is already queued (`core.entry.worker.run_worker(warm=True)`):
    load the default model once (its classes, which the first `from_pretrained` imports: about 5 CPU-seconds,
    and its files then sit in the page cache). The model is not kept: a job loads its own."""
    warm_imports(cache_dir)
    spec = RunSpec()
    device = spec.resolved_device()
    load_model(spec.model, device=device, dtype=spec.resolved_dtype(device), cache_dir=cache_dir)


def job_analyze(params: dict, progress, cancel) -> dict:
    """The "analyze" job: statistics and results.json of one RunSpec, into the cache."""

    run = resolve(run_of(params))
    nproc = settings.current().torchrun_nproc  # ANISO_TORCHRUN_NPROC: extractions as torchrun jobs of K processes
    if nproc > 1 and not is_cached(run):
        job_torchrun({**params, "nproc": nproc}, progress, cancel)  # rank 0 stores the statistics and results
    progress(stage="read", message="reading the corpus")  # until the run's preparation reports its steps
    # The results so far, every few seconds while the forward pass runs: the pages draw them (core.entry.jobs.partial).
    memo = _job_memo()
    try:
        res = analyze(run, progress=progress, cancel=cancel, partial=getattr(progress, "partial", None), memo=memo)
    finally:
        _trim_memo(memo)
    m = res["manifest"]
    return {"cache_key": m["cache_key"], "tokens": m["tokens"]["analysed"], "layers": len(res["layers"]),
            "cache_hit": bool(m.get("cache_hit"))}


def _ablation_params(params: dict) -> tuple[RunSpec | ResolvedRun, list[int] | None, int, int]:
    dims = params.get("dims")
    n_random, held = ablation_defaults(params.get("n_random"), params.get("held_out_tokens"))
    return run_of(params), None if dims is None else sorted({int(d) for d in dims}), n_random, held  # one set, one job


def job_ablation_key(params: dict) -> str:
    spec, dims, n_random, held = _ablation_params(params)
    return stable_hash({"run": run_key(spec), "dims": dims, "n_random": n_random, "held_out": held})


def job_ablation(params: dict, progress, cancel) -> dict:
    """The "ablation" job: the LM-loss ablation of a run (computes the run first if needed)."""
    spec, dims, n_random, held = _ablation_params(params)
    got = run_ablation(spec, dims, n_random, held, progress=progress, cancel=cancel)
    return {"delta": got["delta"], "dims": got["dims"]}
