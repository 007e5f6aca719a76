"""The statistics of one run on a cache miss: the model loaded (`prepare`), the forward passes
(`extract_stats`), the norm parameters, the opt-in logit lens and the manifest; and the held-out
batches of an ablation. Everything here needs torch.

core/compute/pipeline.py decides what is computed and stores it; it imports this module only on a
cache miss, so a cache hit never imports torch.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import platform
import threading
import time
from pathlib import Path

import numpy as np
import torch

from .. import __version__
from ..base import procfs, settings
from ..base.config import CONFIG
from ..base.errors import InputError
from ..base.spec import RunSpec
from ..inputs.corpora import BUILTIN_CORPORA, numeric_share
from ..inputs.modalities import corpus_modality
from ..inputs.modalities import run as modal
from ..inputs.modalities.adapters import adapter_for
from ..inputs.modalities.items import FRAME_SECONDS
from ..inputs.models import describe_model, model_modality, package_versions
from ..stats.batching import pad_batch
from ..stats.reference import ENGLISH_DETECTION, english_share
from .ablation import norm_parameters
from .extract import extract_stats
from .lens import logit_lens
from .lens import not_applicable as lens_not_applicable
from .prepare import prepare

CONTEXT_TOKENS = 8  # tokens of context on each side of a sampled token (hover text)
TORCH_OWN_THREADS = torch.get_num_threads()  # torch's own count (OMP_NUM_THREADS, else one per core), read once
FREE_CORES_TTL_S = 10.0  # a reading of the free cores serves the runs that start within this many seconds
_free = {"at": None, "cores": None}  # the last reading (procfs.free_cores takes 0.3 s)
_runs = {"n": 0, "lock": threading.Lock()}  # the runs under way in this process (a worker's jobs: ANISO_WORKERS)


@contextlib.contextmanager
def _one_run():
    """Counts this run among the runs under way in this process; yields whether it is the only one."""
    with _runs["lock"]:
        alone, _runs["n"] = _runs["n"] == 0, _runs["n"] + 1
    try:
        yield alone
    finally:
        with _runs["lock"]:
            _runs["n"] -= 1


def fit_threads(alone: bool = True) -> int:
    """Set the torch threads of this run's forward passes (`settings.torch_threads`) and return them. "auto" takes
    the cores that other processes leave free (`procfs.free_cores`, measured now, before the model runs), at least
    1 and at most torch's own count: on a contended CPU, two threads that each get a share of a core mostly wait
    for each other at every parallel step (beside two busy processes on 2 cores, MiniLM ran at 800-1,000 tokens/s
    on 2 threads and 1,550-1,800 on 1; docs/jobs.md). On a quiet machine it is torch's own count. Not `alone`
    (another job of this worker under way, ANISO_WORKERS > 1): the cores that job uses are busy too (torch keeps
    its count for the process, so the new count may apply to that job as well)."""
    want = settings.torch_threads()
    if want == "auto":
        free = free_cores() if alone else procfs.free_cores(own=lambda: 0.0)  # this process's CPU counted as busy
        n = TORCH_OWN_THREADS if free is None else max(1, min(TORCH_OWN_THREADS, round(free)))
    else:
        n = TORCH_OWN_THREADS if want == "torch" else want
    if n != torch.get_num_threads():
        torch.set_num_threads(n)
    return n


def free_cores(clock=time.monotonic) -> float | None:
    """procfs.free_cores, read at most once every FREE_CORES_TTL_S seconds: a series or a lab starts a run per
    checkpoint, and each would otherwise wait 0.3 s for its own reading of the same machine."""
    now = clock()
    if _free["at"] is None or now - _free["at"] > FREE_CORES_TTL_S:
        _free.update(at=now, cores=procfs.free_cores())
    return _free["cores"]


def compute_stats(spec: RunSpec, parts: dict, cache_dir, progress, cancel, group=None, memo: dict | None = None,
                  partial=None, commit: str | None = None):
    """(manifest, meta, arrays) of `spec`: its model loaded, its corpus read and the forward passes run.
    `parts`: the run key's parts (device, dtype, fingerprints; core.compute.pipeline.resolve); `group`: the
    torchrun ranks' Group (text runs only); `partial`: a core.compute.pipeline.PartialHook. Stores nothing:
    core.compute.pipeline.get_stats does."""
    with _one_run() as alone:
        threads = fit_threads(alone)
        manifest, meta, arrays = _compute_stats(spec, parts, cache_dir, progress, cancel, group, memo, partial, commit)
    # the count this run set (read back at the end, it could be the one a later job of the same worker set)
    manifest["timing"]["torch_threads"] = threads
    return manifest, meta, arrays


def _compute_stats(spec, parts, cache_dir, progress, cancel, group, memo, partial, commit):
    if corpus_modality(spec.corpus) != "text" or model_modality(spec.model) != "text":
        if group is not None:
            raise InputError("Distributed runs take text corpora only (image and speech runs are single-process).")
        return _compute_items(spec, parts, cache_dir, progress, cancel, partial, commit)
    device, dtype = parts["spec"]["device"], parts["spec"]["dtype"]
    if group is not None:
        device = group.device  # this rank's GPU ("cuda:<local rank>") or the CPU
    prep = prepare(spec, device=device, dtype=dtype, cache_dir=cache_dir, device_map=spec.device_map, memo=memo,
                   corpus_sha=parts["corpus_sha256"], fingerprint=parts["model_fingerprint"], progress=progress,
                   cancel=cancel, commit=commit)
    lm, windows, documents, seq_len = prep.lm, prep.windows, prep.documents, prep.seq_len
    n_hidden = int(lm.info["n_layers"]) + 1
    corpus_id = spec.corpus if spec.corpus in BUILTIN_CORPORA else Path(spec.corpus).name
    if partial is not None:
        partial.start(lm, {"id": corpus_id, "sha256": parts["corpus_sha256"], "text_column": spec.text_column,
                           "n_documents": windows.n_documents, "n_windows": len(windows.ids)})
    try:
        arrays, timing = extract_stats(
            lm.base, windows, special_policy=spec.special_tokens, batch_size=spec.batch_size,
            sample_size=spec.sample, seed=spec.seed, device=device, dtype=dtype,
            pad_id=prep.pad_id, progress=progress, cancel=cancel, layers=spec.layers,
            shard=group.shard if group is not None else None, reduce=group.reduce if group is not None else None,
            adapter=adapter_for(lm.base), partial=partial)
    except torch.OutOfMemoryError:
        raise InputError(f"Out of memory on {device} (a batch that does not fit is halved, down to one window): "
                         f"lower the batch size ({spec.batch_size}) or the max sequence length ({spec.max_seq_len}), "
                         "or use a smaller model.") from None
    meta = {"sample_tokens": lm.tokenizer.convert_ids_to_tokens(arrays["sample_token_id"].tolist()),
            "sample_context": _contexts(lm.tokenizer, windows, arrays["sample_window"], arrays["sample_position"]),
            "sample_special": np.isin(arrays["sample_token_id"], list(lm.tokenizer.all_special_ids or [])).tolist()}
    if "max_abs_token_id" in arrays:  # the tokens holding each layer's max |x_d| (massive activations), by id
        top_ids = sorted({int(i) for i in np.unique(arrays["max_abs_token_id"]) if i >= 0})
        meta["max_abs_tokens"] = dict(zip(map(str, top_ids), lm.tokenizer.convert_ids_to_tokens(top_ids)))
        meta["special_ids"] = sorted(int(i) for i in (lm.tokenizer.all_special_ids or []))
    try:
        norms = norm_parameters(lm.model)
        arrays["norm_weight"] = norms["weights"]
        if norms.get("biases") is not None:
            arrays["norm_bias"] = norms["biases"]
        meta["norm_modules"] = norms["modules"]
        meta["norm_kind"] = norms.get("kind")
        meta["norm_placement"] = norms.get("placement")
        meta["norm_layer_offset"] = norms.get("layer_offset", 1)
    except ValueError as e:
        meta["norm_modules"] = []
        meta["norm_error"] = str(e)
    if spec.logit_lens:
        why = lens_not_applicable(lm.model)
        if why is None:
            got, meta["logit_lens"] = logit_lens(lm.model, lm.tokenizer, arrays["sample"], arrays["layer_index"], n_hidden,
                                                 seed=spec.seed)
            arrays.update(got)
        else:
            meta["logit_lens"] = {"not_applicable": why}
    info = describe_model(spec.model) | lm.info
    manifest = {
        "spec": parts["spec"],
        "model": {**info, "fingerprint": parts["model_fingerprint"]},
        "corpus": {"id": corpus_id,
                   "sha256": parts["corpus_sha256"], "text_column": spec.text_column,
                   "n_documents": windows.n_documents, "n_windows": len(windows.ids),
                   "english_share": english_share(documents), "english_detection": ENGLISH_DETECTION},
        "tokens": {"analysed": int(arrays["n"]), "fed_to_model": windows.n_tokens_total,
                   "content": windows.n_content_tokens, "sample": int(arrays["sample"].shape[1]),
                   "max_seq_len": seq_len,
                   "special_tokens": spec.special_tokens},
        "layers": {"n": int(arrays["sum_abs"].shape[0]), "layer_0": "embedding output (hidden_states[0])",
                   "kept": arrays["layer_index"].tolist(), "model_layers": n_hidden},
        "device": parts["spec"]["device"], "dtype": dtype, "seed": spec.seed, "device_map": spec.device_map,
        "versions": _versions(), "timing": timing,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "stats_code": parts["stats_code"],
        "warnings": _corpus_warnings(documents),
    }
    if group is not None:
        manifest["distributed"] = {"world_size": group.world, "backend": group.backend}
    return manifest, meta, arrays


def _corpus_warnings(documents: list[str]) -> list[str]:
    share = numeric_share(documents)
    if share >= 0.5:
        return [f"{share:.0%} of the documents are numbers only: is this the text column?"]
    return []


def _compute_items(spec: RunSpec, parts: dict, cache_dir, progress, cancel, partial=None, commit: str | None = None):
    """An image or audio run: the same extraction on items laid out by a modality adapter."""

    device, dtype = parts["spec"]["device"], parts["spec"]["dtype"]
    prep = prepare(spec, device=device, dtype=dtype, cache_dir=cache_dir, fingerprint=parts["model_fingerprint"],
                   progress=progress, cancel=cancel, commit=commit)
    lm, adapter, items, modality = prep.lm, prep.adapter, prep.windows, prep.modality
    info = describe_model(spec.model)
    if partial is not None:
        kept = np.arange(int(adapter.dims(lm.base)[0])) if spec.layers is None else np.asarray(sorted(set(spec.layers)))
        widths = ({"layer_dims": np.asarray(adapter.channels, dtype=np.int64)[kept]}
                  if hasattr(adapter, "channels") else {})
        partial.start(lm, modal.corpus_manifest(spec.corpus, parts["corpus_sha256"], items, modality), modality,
                      widths)
    try:
        arrays, timing = extract_stats(
            lm.base, items, special_policy=spec.special_tokens, batch_size=spec.batch_size,
            sample_size=spec.sample, seed=spec.seed, device=device, dtype=dtype, progress=progress,
            cancel=cancel, layers=spec.layers, adapter=adapter, partial=partial)
    except torch.OutOfMemoryError:
        raise InputError(f"Out of memory on {device} with batch size {spec.batch_size}: lower it and run "
                         f"again.") from None
    extra, meta = modal.sample_metadata(items, arrays)
    arrays.update(extra)
    if hasattr(adapter, "channels"):  # CNN: each stage's true width (the rest is zero padding)
        arrays["layer_dims"] = np.asarray(adapter.channels, dtype=np.int64)[arrays["layer_index"]]
    meta["norm_modules"] = []
    meta["norm_error"] = "LayerNorm-parameter outliers are computed for text models only."
    meta["modality"] = modality
    # How a position of an item reads (where high-norm tokens and massive activations sit): the patch grid
    # after `n_prefix` positions (CLS) for images, 20 ms frames for audio.
    meta["position_layout"] = {"modality": modality, "grid": list(items.grid) if items.grid else None,
                               "n_prefix": int(getattr(items, "n_prefix", 0) or 0),
                               "frame_seconds": float(FRAME_SECONDS) if modality == "audio" else None}
    info = info | lm.info
    manifest = {
        "spec": parts["spec"],
        "model": {**info, "fingerprint": parts["model_fingerprint"]},
        "corpus": modal.corpus_manifest(spec.corpus, parts["corpus_sha256"], items, modality),
        "modality": modality,
        "tokens": {"analysed": int(arrays["n"]), "fed_to_model": items.n_tokens_total,
                   "content": items.n_content_tokens, "sample": int(arrays["sample"].shape[1]),
                   "max_seq_len": int(max(len(i) for i in items.ids)), "special_tokens": spec.special_tokens,
                   "unit": "patch" if modality == "image" and info.get("architecture") != "cnn"
                   else ("grid position" if modality == "image" else "audio frame (20 ms)")},
        "layers": {"n": int(arrays["sum_abs"].shape[0]),
                   "layer_0": ("stem output" if info.get("architecture") == "cnn" else "embedding output (hidden_states[0])"),
                   "kept": arrays["layer_index"].tolist(), "model_layers": int(adapter.dims(lm.base)[0])},
        "device": device, "dtype": dtype, "seed": spec.seed, "device_map": None,
        "versions": _versions(), "timing": timing,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "stats_code": parts["stats_code"],
    }
    return manifest, meta, arrays


def _contexts(tokenizer, windows, win_of: np.ndarray, pos: np.ndarray) -> list[str]:
    out = []
    for w, p in zip(win_of.tolist(), pos.tolist()):
        ids = windows.ids[w]
        left = tokenizer.decode(ids[max(0, p - CONTEXT_TOKENS):p], skip_special_tokens=True)
        tok = tokenizer.decode(ids[p:p + 1])
        right = tokenizer.decode(ids[p + 1:p + 1 + CONTEXT_TOKENS], skip_special_tokens=True)
        out.append(f"{left} [{tok.strip()}] {right}".strip())
    return out


def _versions() -> dict:
    return {"python": platform.python_version(), "core": __version__, **package_versions(), "numpy": np.__version__}


def held_out_batches(prep, held_out_tokens: int, device=None) -> tuple[list[dict], object]:
    """(batches, windows): the held-out text of an ablation (the documents after the analysed ones in
    the run's seeded order, `held_out_tokens` of them, windows of at most CONFIG.ablation_max_seq_len)
    as batches of CONFIG.ablation_batch_size windows ({input_ids, attention_mask} tensors on `device`)."""
    held = prep.windows_after(held_out_tokens, min(prep.seq_len, CONFIG.ablation_max_seq_len))
    batches = []
    for i in range(0, len(held.ids), CONFIG.ablation_batch_size):
        ids, att = pad_batch(held.ids[i:i + CONFIG.ablation_batch_size], prep.pad_id)
        batches.append({"input_ids": torch.as_tensor(ids, device=device),
                        "attention_mask": torch.as_tensor(att, device=device)})
    return batches, held
