"""The chain pass and chain.json (issue 24): one run's super weights, massive activations,
high-norm tokens, sink rate and LLM.int8 outliers, measured together.

    section = chain_section(spec, cache_dir=...)   # cached apart from the run's results
    results["chain"] = section                        # `analyze --chain`; chain.json = manifest + section

The massive and high-norm sections come from the run's own statistics (`summary`); the rest from one
extra pass (`chain_pass`) over the run's windows with the hooks of `hooks.ChainHooks` (eager attention
for alpha_1), and over a fixed probe prompt (text) or the run's first item (images, audio). The section
is cached under the run's key, the rules and the code (`chain_key`). Ablations (`ablations`) are
computed by core.studies.chain.ablate_links and are not part of the cached section.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ...base.cache import get_store
from ...base.config import config_hash, key_code
from ...base.errors import Cancelled, InputError
from ...base.progress import Progress
from ...base.spec import stable_hash
from ...compute.pipeline import analyze, get_stats, resolve
from ...compute.prepare import loading_message, prepare
from ...inputs.modalities.adapters import adapter_for
from ...stats import chain_rules as C
from ...stats.chain_summary import high_norm_section, massive_section
from ...stats.outliers import run_outlier_dims
from ..attention.arch import attention_arch, eager_attention
from ..attention.run import is_cached as attention_cached
from ..attention.run import run_attention
from .ablate_links import default_targets, run_chain_ablation
from .confirm import confirm
from .hooks import ChainHooks, out_proj_weight, window_masks

# Yu et al. 2024 find super weights with any prompt; this one is fixed so that runs compare.
PROBE_PROMPT = "Apple Inc. is a worldwide tech company. Summer is warm, and winter is cold."
MAX_PASS_BATCH = 8  # windows per forward of the chain pass (eager attention holds B x H x T x T per layer)

DEFINITIONS = {
    "super_weight_candidates": "W[argmax output channel, argmax input channel] of the MLP output projection in blocks "
                               f"where the largest |input| and the largest |output| both exceed {C.SPIKE_FACTOR:g} x the "
                               "median block's (over the corpus's real positions, or over the probe's); W stored as out x "
                               "in. Each is zeroed alone on the probe and classified by what its dim's top-1 / median "
                               "ratio does at the hidden state its block writes (before the final norm for the last "
                               "block): confirmed (the block makes the dim massive and zeroing removes >= "
                               f"{C.CONFIRM_SHARE:.0%} of the rise), amplifier (removes {C.EFFECT_SHARE:.0%} to "
                               f"{C.CONFIRM_SHARE:.0%}), eraser (the ratio falls across the block and zeroing undoes >= "
                               f"{C.EFFECT_SHARE:.0%} of the fall), else unconfirmed",
    "super_weights": "the confirmed candidates only: zeroing one removes most of the massive value its block writes "
                     "(Yu et al. 2024's super weight)",
    "onset": "the first hidden state at which the probe's massive dim exceeds 100 x the median |x|, the block that "
             "writes it, and what writes it there",
    "massive": "per layer the largest |x_td| over all analysed tokens / the median |x| over the K x d values of the "
               "layer's token sample, the token holding it and its position class (Sun et al. 2024)",
    "high_norm": "per layer Otsu's split of the sample's log-norms, counted where it separates two groups "
                 "(effectiveness >= 0.8), and where the high-norm tokens sit (Darcet et al. 2024)",
    "sink_rate": f"alpha_1 per head = mean over every real query i >= 0 of A[i, 0] (per window, then mean over "
                 f"windows); Sink^eps = share of the heads of all layers with alpha_1 > {C.SINK_EPSILON:g} "
                 "(Gu et al. 2025)",
    "int8_outliers": f"dims with |x| >= {C.INT8_THRESHOLD:g} at >= {C.INT8_POSITION_SHARE:.0%} of the real positions "
                     f"in >= {C.INT8_LAYER_SHARE:.0%} of the blocks, on the input of the attention projection "
                     "(q) and of the MLP's first projection (Dettmers et al. 2022)",
}


def chain_key(run_key: str) -> str:
    return "chain:" + stable_hash({"run": run_key, "code": key_code("chain"), "config": config_hash(),
                                   "probe": PROBE_PROMPT})


class _Probe:
    """One token window (the probe prompt) laid out as the text adapter reads windows."""

    def __init__(self, ids):
        self.ids = [np.asarray(ids, dtype=np.int64)]


def chain_pass(model, windows, adapter, batches: list[list[int]], *, device: str, pad_id: int = 0,
               attention: bool = True, progress: Callable[[Progress], None] | None = None,
               cancel: Callable[[], bool] | None = None) -> dict:
    """The hooks of `ChainHooks` over `batches` of `windows`: numpy arrays (see ChainHooks) plus the
    module names, the output projections' weights' shapes and the timing."""
    # lazy: keeps torch out of a cache hit
    import torch

    arch = None
    if attention:
        try:
            arch = attention_arch(model)
        except ValueError:
            arch = None
    hk = ChainHooks(model, C.INT8_THRESHOLD, arch)
    dev = torch.device(device)
    n_tok = sum(len(windows.ids[i]) for b in batches for i in b)
    done, t0 = 0, time.perf_counter()
    ctx = eager_attention(model) if arch is not None else _null()
    with ctx, hk.hooks(), torch.inference_mode():
        for b in batches:
            if cancel is not None and cancel():
                raise Cancelled("Cancelled by the user; nothing was stored.")
            T = max(len(windows.ids[i]) for i in b)
            m = window_masks(windows, b, T)
            hk.mask = torch.as_tensor(m, device=dev)
            hk.n_real = torch.as_tensor([len(windows.ids[i]) for i in b], device=dev)
            adapter.forward(model, windows, b, dev, pad_id)
            done += int(sum(len(windows.ids[i]) for i in b))
            if progress is not None:
                el = time.perf_counter() - t0
                rate = done / el if el > 0 else 0.0
                progress(Progress("attention", done, n_tok, rate, (n_tok - done) / rate if rate else float("nan"),
                                  f"chain pass: {done:,} of {n_tok:,} positions"))
    out = hk.numpy()
    out["modules"] = [bm.out_name for bm in hk.blocks]
    out["relative"] = [bm.out_rel for bm in hk.blocks]
    out["seconds"] = time.perf_counter() - t0
    out["hooks"] = hk
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _scan_rows(sums: dict) -> list[dict]:
    mi, mo = sums["max_in"], sums["max_out"]
    return [{"block": b, "hidden_layer": b + 1, "max_in": float(mi[b].max()), "argmax_in": int(mi[b].argmax()),
             "max_out": float(mo[b].max()), "argmax_out": int(mo[b].argmax())} for b in range(len(mi))]


def super_weights(sums: dict, probe: dict | None) -> tuple[list[dict], dict]:
    """(candidates, scan): `super_weight_candidates` on the corpus's maxima and on the probe's, each with its
    weight's value and magnitude (`weight_magnitude`), ``found_on`` ("corpus", "probe" or "both") and
    ``on_probe``. Corpus candidates first (block order), then the probe's others."""
    hk = sums["hooks"]
    cands = C.super_weight_candidates(sums["max_in"], sums["max_out"])
    probe_c = C.super_weight_candidates(probe["max_in"], probe["max_out"]) if probe is not None else []
    probe_at = {(c["block"], c["row"], c["col"]) for c in probe_c}
    corpus_at = {(c["block"], c["row"], c["col"]) for c in cands}
    out = []
    for c, where in [*((c, "corpus") for c in cands), *((c, "probe") for c in probe_c
                                                        if (c["block"], c["row"], c["col"]) not in corpus_at)]:
        at = (c["block"], c["row"], c["col"])
        W = out_proj_weight(hk.blocks[c["block"]].out_proj).float().cpu().numpy()
        mag = C.weight_magnitude(W, c["row"], c["col"])
        out.append({"block": c["block"], "hidden_layer": c["block"] + 1, "module": sums["relative"][c["block"]],
                    "module_path": sums["modules"][c["block"]], "row": c["row"], "col": c["col"],
                    "value": mag["value"], "max_in": c["max_in"], "max_out": c["max_out"], "in_spike": c["in_spike"],
                    "out_spike": c["out_spike"], "ratio_to_median": mag["ratio_to_median"],
                    "ratio_to_max_other": mag["ratio_to_max_other"], "rank": mag["rank"],
                    "on_probe": at in probe_at, "found_on": "both" if where == "corpus" and at in probe_at else where})
    scan = {"spike_factor": C.SPIKE_FACTOR, "modules": sums["relative"], "corpus": _scan_rows(sums),
            "probe": _scan_rows(probe) if probe is not None else None,
            "probe_candidates": [{"block": c["block"], "row": c["row"], "col": c["col"]} for c in probe_c]}
    return out, scan


def int8_section(sums: dict, res: dict) -> dict:
    """The LLM.int8 rule per input site, its dims (union of the sites) and their overlap with the
    run's persistent 3-sigma activation outliers and norm-parameter outliers."""
    sites = {}
    for site in ("attention", "mlp"):
        if f"int8_{site}" in sums:
            got = C.int8_outliers(sums[f"int8_{site}"], sums[f"n_{site}"])
            sites[site] = {"dims": got["dims"], "per_block": got["per_layer"],
                           "n_flagged_per_block": [len(x) for x in got["per_layer"]]}
    dims = sorted({d for s in sites.values() for d in s["dims"]})
    o = res["outliers"]
    act = o["activation"]["persistent"]
    norm = (o.get("norm_parameters") or {}).get("persistent")
    sets = {"int8": dims, "activation_3sigma": act}
    if norm is not None:
        sets["norm_parameters"] = norm
    return {"rule": DEFINITIONS["int8_outliers"], "threshold": C.INT8_THRESHOLD,
            "layer_share": C.INT8_LAYER_SHARE, "position_share": C.INT8_POSITION_SHARE,
            "sites": sites, "dims": dims, "overlap": C.set_overlap(sets),
            "norm_parameters": "not available for this model" if norm is None else "persistent norm-parameter outliers"}


def sink_section(sums: dict, attention: dict | None = None) -> dict:
    """Gu et al.'s sink rate from alpha_1 per layer and head; beside it, per block, the mean alpha_1
    over heads and (when the run's attention section is at hand) its first-position share."""
    if "alpha_sum" not in sums:
        return {"not_available": "no self-attention modules with attention probabilities were found"}
    alpha = sums["alpha_sum"] / np.maximum(sums["alpha_n"], 1)[:, None]
    got = C.sink_rate(alpha)
    got.update({"definition": DEFINITIONS["sink_rate"], "alpha_first": alpha.tolist(),
                "alpha_first_mean": alpha.mean(1).tolist(), "blocks": "block l = 1..L (reads hidden_states[l-1])"})
    if attention and attention.get("layers"):
        got["first_position_share"] = [float(np.nanmean(np.asarray(layer["sink_first"], dtype=float)))
                                       for layer in attention["layers"]]
    return got


def _batches(n: int, size: int) -> list[list[int]]:
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]


def chain_section(spec, cache_dir=None, progress: Callable[[Progress], None] | None = None,
                  cancel: Callable[[], bool] | None = None, force: bool = False, memo: dict | None = None) -> dict:
    """The `chain` section of a run (without ablations), cached; computes the run first if needed.
    `memo`: see `core.compute.prepare.prepare` (`core chain` shares one, made by `keeping_models`, between the
    analysis, this pass and the ablations: the corpus is read and the model loaded once)."""
    # lazy: core.stats.assemble imports pandas; only what builds a section pays for it
    from ...stats.assemble import json_safe

    run = resolve(spec, cache_dir)
    res = analyze(run, cache_dir, progress, cancel, memo=memo)
    stats = get_stats(run, cache_dir)
    got, hit = get_store(cache_dir).get_or_compute(
        chain_key(run.key), lambda: json_safe(_compute(run, res, stats, cache_dir, progress, cancel, memo)), force)
    return {**got, "cache_hit": hit}


def _compute(run, res: dict, stats, cache_dir, progress, cancel, memo: dict | None = None) -> dict:
    # lazy: keeps torch out of a cache hit
    import torch

    spec, m = run.spec, res["manifest"]
    prep = prepare(spec, device=m["device"], dtype=m["dtype"], cache_dir=cache_dir, device_map=spec.device_map,
                   memo=memo, corpus_sha=(m.get("corpus") or {}).get("sha256"),
                   fingerprint=m["model"].get("fingerprint"), progress=progress,
                   load_message=loading_message(spec.model, "for the chain pass"), commit=m["model"].get("commit"))
    model = prep.lm.base
    adapter = prep.adapter or adapter_for(model)
    windows = prep.windows
    pad_id = prep.pad_id if prep.modality == "text" else 0  # images and audio have no tokenizer
    size = max(1, min(spec.batch_size, MAX_PASS_BATCH))
    try:
        sums = chain_pass(model, windows, adapter, _batches(len(windows.ids), size), device=m["device"],
                          pad_id=pad_id, progress=progress, cancel=cancel)
        if prep.modality == "text":
            ids = prep.lm.tokenizer(PROBE_PROMPT)["input_ids"]
            probe_w, probe_name = _Probe(ids), PROBE_PROMPT
        else:
            probe_w, probe_name = windows, f"the run's first item ({windows.names[0]})"
        probe = chain_pass(model, probe_w, adapter, [[0]], device=m["device"], pad_id=pad_id, attention=False)
    except ValueError as e:
        raise InputError(f"The chain pass is not available for {m['model']['label']}: {e}") from None
    except torch.OutOfMemoryError:
        raise InputError(f"Out of memory on {m['device']} in the chain pass (batch {size}): lower the batch size.") \
            from None
    cands, scan = super_weights(sums, probe)
    scan["probe_input"] = probe_name
    try:  # each candidate zeroed alone on the probe (Yu et al.'s test), and the onset search
        checked = confirm(model, probe_w, adapter, m["device"], cands, pad_id=pad_id)
    except ValueError as e:
        raise InputError(f"The chain's confirmation pass is not available for {m['model']['label']}: {e}") from None
    att = None
    if prep.modality == "text":
        try:
            att = run_attention(run, cache_dir) if attention_cached(run, cache_dir) else None
        except InputError:
            att = None
    return {
        "run_key": run.key, "modality": prep.modality, "definitions": DEFINITIONS,
        "blocks": "block b (from 0, the model's module list) reads hidden_states[b] and writes hidden_states[b + 1]; "
                  "layer 0 = embeddings",
        "pass": {"windows": len(windows.ids), "positions": int(sum(len(w) for w in windows.ids)),
                 "seconds": round(float(sums["seconds"]), 3), "batch": size,
                 "positions_counted": "real positions (text: not padding, special tokens included; audio: frames "
                                      "inside the clip)"},
        "super_weights": [c for c in checked["candidates"] if c["class"] == "confirmed"],
        "super_weight_candidates": checked["candidates"],
        "super_weight_scan": scan,
        "onset": checked["onset"],
        "probe_states": {"input": probe_name, **checked["probe"],
                         "states": "hidden state i = the output of block i - 1 taken on the block (the last one before "
                                   "the final norm); 0 = the embeddings"},
        "massive": massive_section(stats),
        "high_norm": high_norm_section(stats),
        "sink_rate": sink_section(sums, att),
        "int8_outliers": int8_section(sums, res),
        "outlier_dims": run_outlier_dims(res["outliers"]),
    }


def ablations(spec, section: dict, res: dict, cache_dir=None, progress=None, cancel=None, memo: dict | None = None) -> dict:
    """The `ablations` part of chain.json (issue 24; built by core.studies.chain.ablate_links): the run's super-weight
    candidates (from `section`), massive dims and outlier dims zeroed, with their controls, before/after.
    `memo`: see `chain_section`."""
    targets = default_targets({**res, "chain": section})
    return run_chain_ablation(spec, targets=targets, cache_dir=cache_dir, progress=progress, cancel=cancel, memo=memo)


__all__ = ["chain_section", "chain_pass", "chain_key", "ablations", "super_weights", "int8_section", "sink_section",
           "PROBE_PROMPT", "DEFINITIONS"]
