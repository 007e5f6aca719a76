"""Section "chain" (issue 24): what the outlier chain's extra statistics cost the extraction (base, chain and
chain + hooks, alternating; wall and process CPU time). Method: BENCHMARKS.md."""

from __future__ import annotations

import contextlib
import time

import numpy as np

from bench.common import alternate, fi, fr, median, met
from core.base.spec import DEFAULT_BATCH_SIZE as BATCH
from core.base.spec import DEFAULT_SAMPLE as SAMPLE
from core.compute import extract as E
from core.compute.pipeline import RunStats
from core.stats import chain_rules as C
from core.stats import registry as S
from core.stats.chain_summary import high_norm_section, massive_section
from core.studies.chain.hooks import ChainHooks

GOAL = 0.95


def _extract(lm, w, track: bool, hooks: bool) -> tuple[float, float, float]:
    """Wall and CPU seconds of the variant, and the seconds of the sections alone (0 for base)."""
    pad = int(lm.tokenizer.pad_token_id or 0)
    E.TRACK_MAX_POSITION = track
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        with ChainHooks(lm.base, C.INT8_THRESHOLD).hooks() if hooks else contextlib.nullcontext():
            arrays, _ = E.extract_stats(lm.base, w, batch_size=BATCH, sample_size=SAMPLE, seed=0, pad_id=pad)
        t_sec = time.perf_counter()
        if track:  # the chain's sections of the statistics (what results.json adds per layer)
            meta = {"sample_tokens": lm.tokenizer.convert_ids_to_tokens(arrays["sample_token_id"].tolist()),
                    "max_abs_tokens": {}, "special_ids": list(lm.tokenizer.all_special_ids or [])}
            st = RunStats("bench", {"model": {"label": "bench"}, "tokens": {}}, meta, arrays)
            # as results.json gets them: the registry's massive_ratio and 100x/1000x counts (one median of |x|
            # and the counts per layer's sample), then the massive and high-norm sections with those medians
            summaries = [S.Sample(st.sample(l)).abs_summary for l in range(st.n_layers)]
            med = np.asarray([m for m, _ in summaries])
            for l in range(st.n_layers):
                C.massive_layer(arrays["max_abs"][l], float(med[l]))
            massive_section(st, medians=med)
            high_norm_section(st)
    finally:
        E.TRACK_MAX_POSITION = True
    t1 = time.perf_counter()
    return t1 - t0, time.process_time() - c0, t1 - t_sec


def section_chain(ctx) -> dict:
    """Base, chain and chain + hooks extractions, alternating, per model: throughput and CPU time ratios."""
    rows, out = [], {"summary": [], "times": {}}
    for ident, n_tok in ctx.sizes.chain_tokens.items():
        if not n_tok:
            continue
        lm, w, _, _, n = ctx.setup(ident, n_tok, "chain")
        label, reps = lm.info.get("label", ident), ctx.sizes.chain_reps
        _extract(lm, w, True, True)  # untimed warm-up of every path
        runs = alternate(reps, {"base": lambda: _extract(lm, w, False, False), "chain": lambda: _extract(lm, w, True, False),
                                "hooks": lambda: _extract(lm, w, True, True)})
        out["times"][ident] = runs
        wall, cpu = ({k: median(x[i] for x in v) for k, v in runs.items()} for i in (0, 1))
        sections = median(x[2] for x in runs["chain"])
        # the chain's own account: its sections timed alone, and the extraction with the position tracking (the
        # chain's time less its sections) against base
        rows.append([label, fi(n), str(reps), *(fi(n / wall[k]) for k in ("base", "chain", "hooks")),
                     fr(wall["base"] / wall["chain"]), fr(wall["base"] / wall["hooks"]),
                     " ".join(f"{b[0] / c[0]:.3f}" for b, c in zip(runs["base"], runs["chain"])),
                     fr(cpu["base"] / cpu["chain"]), fr(cpu["base"] / cpu["hooks"]),
                     f"{sections / wall['base']:.1%}, {fr(wall['base'] / (wall['chain'] - sections))}",
                     met(wall["base"] / wall["chain"] >= GOAL)])
        out["summary"].append([f"Extraction with the chain's extra statistics / without, {label} ({fi(n)} tokens)",
                               ">= 0.95", fr(wall["base"] / wall["chain"]), met(wall["base"] / wall["chain"] >= GOAL)])
    out["md"] = [f"Goal: chain >= {GOAL} x base. Medians:",
                 (["Model", "Tokens", "Reps", "Base tok/s", "Chain tok/s", "Chain + hooks tok/s", "Chain / base",
                   "Chain + hooks / base", "Per-rep chain/base", "CPU time: chain / base", "CPU time: chain + hooks / base",
                   "Own account: sections / base, extraction alone base / (chain - sections)", "Goal"], rows)]
    return out
