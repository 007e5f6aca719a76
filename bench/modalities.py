"""Section "modalities": extraction vs bare forward for DINOv2 ViT-S and the Whisper tiny.en encoder on the same
items, batches and input preparation (method: BENCHMARKS.md, section 9)."""

from __future__ import annotations

import time

from bench.common import ab_ratio, alternate, fi, log, seconds
from core.compute.extract import extract_stats
from core.inputs.convert.whisper import log_mel
from core.inputs.modalities.adapters import adapter_for, pixel_array
from core.inputs.modalities.run import build_items, load_payloads
from core.stats.batching import plan_batches

MODELS = (("dinov2-vits14", "images-crops"), ("whisper-tiny-en", "speech-human"))
BATCH = 8
SEED = 0


def _bare(model, adapter, items, batches) -> float:
    import numpy as np  # lazy: torch only in the sections that run a model
    import torch

    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in batches:
            if adapter.modality == "image":
                model(pixel_values=torch.as_tensor(pixel_array([items.payload[i] for i in b])))
            else:
                feats = [log_mel(c.load()[int(s * 16000):int((s + 30) * 16000)]) for c, s in (items.payload[i] for i in b)]
                model(input_features=torch.as_tensor(np.stack(feats)))
    return time.perf_counter() - t0


def _tool(model, adapter, items, sample: int) -> float:
    return seconds(lambda: extract_stats(model, items, batch_size=BATCH, sample_size=sample, seed=SEED, adapter=adapter))


def section_modalities(ctx) -> dict:
    """Bare forward vs the tool's extraction, alternating, for an image and a speech model."""
    sizes, rows, out = ctx.sizes, [], {"times": {}}
    for ident, corpus in MODELS:
        lm = ctx.model(ident)
        adapter = adapter_for(lm.base)
        modality = "image" if adapter.modality == "image" else "audio"
        tokens = sizes.modal_image_tokens if modality == "image" else sizes.modal_audio_tokens
        items = build_items(modality, load_payloads(modality, corpus, ctx.cache), adapter, lm.base, tokens, SEED)
        batches = plan_batches(items, BATCH)
        n = items.n_content_tokens
        log(f"modalities: {ident} on {corpus}, {n:,} analysed positions in {len(items.ids)} items, {sizes.modal_reps} reps")
        _bare(lm.base, adapter, items, batches[:1])  # warm-up, untimed
        _tool(lm.base, adapter, items, 500)
        runs = alternate(sizes.modal_reps, {"bare": lambda: _bare(lm.base, adapter, items, batches),
                                            "tool": lambda: _tool(lm.base, adapter, items, 5000)})
        out["times"][ident] = ab = ab_ratio(runs["bare"], runs["tool"], n)
        rows.append([lm.info.get("label", ident), corpus, f"{fi(int(n))} ({fi(int(items.n_tokens_total))} fed)",
                     len(items.ids), sizes.modal_reps, *ab.pop("cells")])
    out["md"] = [(["Model", "Corpus", "Positions analysed", "Items", "Reps", "Bare pos/s", "Tool pos/s", "Ratio (range)",
                   "Goal >= 0.90"], rows)]
    return out
