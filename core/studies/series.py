"""A series: the checkpoints of one training, analysed alike and cached one by one.

    analyze_series(run, corpus=...) -> {"run", "record", "steps", "results": [results.json, ...],
                                        "attention": [attention section, ...] | None}

Every checkpoint is a model (`trained/<run>@step-<N>`, or `org/name@stepN` for a hub series
`hub:org/name`, see core/inputs/hub_series.py), so each one's results are the ordinary
cached results of `pipeline.analyze`, and its attention statistics (query/key drift, sinks...)
the ordinary cached section of `attention.run_attention`; the corpus is read and tokenized once
for the whole series (all checkpoints share the run's tokenizer), so only the forward passes repeat.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..base import integrity, settings
from ..base.errors import InputError
from ..base.progress import Progress
from ..base.spec import DEFAULT_BATCH_SIZE, DEFAULT_CORPUS, DEFAULT_MAX_SEQ_LEN, RunSpec
from ..compute import pipeline
from ..compute.distributed import run_torchrun
from ..inputs import checkpoints as trained
from ..inputs import hub_series
from ..stats.geometry import CKA_ESTIMATOR, cka_cross, cka_positions, same_tokens
from . import attention as A
from .train_spec import NO_ATTENTION

SERIES_MAX_TOKENS = 20_000
SERIES_SAMPLE = 2000


def series_specs(run: str, corpus: str | None = None, text_column: str | None = None,
                 max_tokens: int = SERIES_MAX_TOKENS, sample: int = SERIES_SAMPLE, seed: int = 0,
                 batch_size: int = DEFAULT_BATCH_SIZE, device: str = "auto", dtype: str = "auto",
                 cache_dir=None) -> list[tuple[int, RunSpec]]:
    """(step, RunSpec) of every checkpoint of `run`, analysed on `corpus` (default: the run's own;
    for a hub series `hub:org/name`, the default corpus, in windows of the default length).

    A checkpoint whose weights are the same as an earlier step's is left out (`duplicates` names it):
    it is not a distinct step."""
    rec = read_record(run, cache_dir)
    same = integrity.duplicate_steps(checkpoints(run, rec, cache_dir))
    models = {int(c["step"]): c.get("model") or trained.ident_of(run, int(c["step"]))
              for c in rec.get("checkpoints", [])}
    if not models:
        raise InputError(f"Trained run {run!r} has no checkpoint yet.")
    models = {s: m for s, m in models.items() if s not in same}  # analysed once, as the step they repeat
    tspec = rec.get("spec") or {"corpus": DEFAULT_CORPUS, "seq_len": DEFAULT_MAX_SEQ_LEN}
    corpus = corpus or tspec["corpus"]
    if corpus == tspec["corpus"] and text_column is None:
        text_column = tspec.get("text_column")
    return [(s, RunSpec(model=models[s], corpus=corpus, text_column=text_column,
                        max_tokens=max_tokens, max_seq_len=int(tspec["seq_len"]), batch_size=batch_size,
                        device=device, dtype=dtype, sample=sample, seed=seed)) for s in sorted(models)]


def checkpoints(run: str, rec: dict, cache_dir=None) -> list[dict]:
    """The record's checkpoints, each with its `weights_sha256` (core/base/integrity.py): as the series
    recorded it; for a checkpoint trained here, from the sha256 of its model.safetensors, or its folder;
    for a hub revision recorded without one, from the local hub cache (None when it is not there)."""
    out = []
    for c in rec.get("checkpoints", []):
        c = dict(c)
        if not c.get("weights_sha256"):
            if hub_series.is_hub_series(run):
                shas = hub_series.local_weight_shas(rec.get("hub", run[len(hub_series.PREFIX):]), c["revision"])
                c["weights_sha256"] = integrity.weights_digest(shas) if shas else None
            elif c.get("sha256"):
                c["weights_sha256"] = integrity.weights_digest({"model.safetensors": c["sha256"]})
            else:
                c["weights_sha256"] = integrity.folder_digest(trained.trained_dir(cache_dir) / run / f"step-{c['step']}")
        out.append(c)
    return out


def duplicates(run: str, cache_dir=None) -> list[dict]:
    """The checkpoints of `run` whose weights repeat an earlier step's (integrity.duplicate_notes)."""
    return integrity.duplicate_notes(checkpoints(run, read_record(run, cache_dir), cache_dir))


def read_record(run: str, cache_dir=None) -> dict:
    """A trained run's run.json, or a hub series' record (`hub:org/name`: its revisions, no losses)."""
    return hub_series.read(run, cache_dir) if hub_series.is_hub_series(run) else trained.read_run(run, cache_dir)


def analyze_series(run: str, cache_dir=None, progress: Callable[[Progress], None] | None = None,
                   cancel: Callable[[], bool] | None = None, group=None, attention: bool = True,
                   **kw) -> dict | None:
    """Results of every checkpoint of `run` (each cached under its own spec), in step order; with
    `attention`, each checkpoint's attention statistics too (cached under their own key).

    With a `core.compute.ranks.Group` (torchrun), each checkpoint is analysed by all ranks together
    as `pipeline.analyze` does it (batches shared, sums reduced, rank 0 stores); rank 0 returns the
    series and the other ranks None.
    """

    specs = series_specs(run, cache_dir=cache_dir, **kw)
    attention, note = _attention_wanted(run, cache_dir, attention)
    memo: dict = {}  # the corpus and its token windows, shared by every checkpoint
    out, att = [], []
    for i, (step, spec) in enumerate(specs):
        if progress:
            progress(Progress("series", i, len(specs), message=f"checkpoint {i + 1}/{len(specs)} (step {step})"))
        out.append(pipeline.analyze(spec, cache_dir, progress, cancel, memo=memo, group=group))
        if attention:
            try:
                att.append(A.run_attention(spec, cache_dir, progress, cancel, memo=memo) if group is None
                           else A.run_attention(spec, cache_dir, progress, cancel, group=group))
            except InputError as e:  # a hub model whose architecture core.studies.attention does not know (Falcon, Bloom...)
                if not (hub_series.is_hub_series(run) and "not available" in str(e)):
                    raise
                hub_series.mark_no_attention(run, str(e), cache_dir)
                attention, att, note = False, [], str(e)
    if group is not None and not group.is_main:
        return None
    if progress:
        progress(Progress("series", len(specs), len(specs), message="series analysed"))
    return {"run": run, "record": read_record(run, cache_dir), "steps": [s for s, _ in specs],
            "specs": [sp.to_dict() for _, sp in specs], "results": out, "attention": att if attention else None,
            "attention_note": note, "duplicates": duplicates(run, cache_dir),
            "cka_to_final": cka_to_final([sp for _, sp in specs], cache_dir)}


def cka_to_final(specs: list[RunSpec], cache_dir=None) -> dict:
    """Per checkpoint and layer, the linear CKA (unbiased HSIC) of that layer with the same layer of the
    last checkpoint, on the same sampled token positions (checkpoints of one training read the same
    tokens; said where they do not). Cache hits only (every checkpoint is analysed first)."""
    stats = [pipeline.get_stats(sp, cache_dir) for sp in specs]
    final = stats[-1]
    ids = [int(x) for x in final.layer_ids]
    for st in stats:
        ok, why = same_tokens(st, final)
        if not ok or [int(x) for x in st.layer_ids] != ids:
            return {"not_applicable": why if not ok else "the checkpoints keep different layers"}
    idx = cka_positions(int(final.arrays["sample"].shape[1]))
    Y = [np.asarray(final.sample(l), dtype=np.float64)[idx] for l in range(final.n_layers)]
    M = [[float(cka_cross([np.asarray(st.sample(l), dtype=np.float64)[idx]], [Y[l]])[0, 0]) for l in range(len(ids))]
         for st in stats]
    return {"estimator": CKA_ESTIMATOR, "n_positions": int(len(idx)), "layers": ids, "matrix": M}


def _attention_wanted(run: str, cache_dir, attention: bool) -> tuple[bool, str | None]:
    """(compute attention statistics?, why not): a hub series whose architecture has none keeps that."""
    if not attention:
        return False, None
    rec = read_record(run, cache_dir)
    why = hub_series.no_attention(rec) if hub_series.is_hub_series(run) else trained_no_attention(rec)
    return (False, why) if why else (True, None)


def trained_no_attention(rec: dict) -> str | None:
    """Why a run trained here has no attention statistics (its family has no attention: Mamba-2, RWKV, the LSTM),
    None when it has them; the reason names the family (train_spec.NO_ATTENTION)."""
    arch = (rec.get("spec") or {}).get("arch")
    why = NO_ATTENTION.get(arch)
    return f"not applicable: {why}" if why else None


def cached_steps(run: str, cache_dir=None, attention: bool = True, **kw) -> list[int]:
    """Steps whose results (and, with `attention`, attention statistics) are already cached (no
    model loaded, no torch)."""

    got = []
    attention = _attention_wanted(run, cache_dir, attention)[0]
    for s, spec in series_specs(run, cache_dir=cache_dir, **kw):
        if pipeline.is_cached(spec, cache_dir) and (not attention or A.is_cached(spec, cache_dir)):
            got.append(s)
    return got


def job_series(params: dict, progress, cancel) -> dict:
    """The "series" job: analyse (and cache) every checkpoint of `params["run"]`.

    With the setting ANISO_TORCHRUN_NPROC = K > 1, the checkpoints not cached yet are analysed by a
    local torchrun job of K processes first (rank 0 stores them); the series is then read back."""

    kw = params.get("kw") or {}
    nproc = settings.current().torchrun_nproc
    if nproc > 1 and len(cached_steps(params["run"], **kw)) < len(series_specs(params["run"], **kw)):
        flags = [x for k, v in kw.items() if v is not None for x in ("--" + k.replace("_", "-"), str(v))]
        run_torchrun(["series", "--training", params["run"], *flags], nproc, progress, cancel)
    got = analyze_series(params["run"], progress=progress, cancel=cancel, **kw)
    return {"run": params["run"], "steps": got["steps"]}
