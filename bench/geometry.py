"""Bench section "geometry": what the statistics of issue 25 (intrinsic dimension, matrix entropy,
linear CKA between layers) add to a run at the app's default size (8,000 tokens, sample 5,000).

Run = `core.pipeline.analyze` of the default spec on an empty cache of its own, in this process
(corpus read, model load, tokenize, forward, every statistic, the isotropic baseline, cache write;
imports excluded). New = the same run's new statistics timed on its own statistics, as
`build_results` computes them: every layer's intrinsic dimension (duplicates, neighbours, TwoNN,
GRIDE and its scales) and matrix entropy, the layers x layers CKA section, and their isotropic
baselines (computed once per sample size and width). Ratio = new / (run - new): the share they add
to a run without them.
"""

from __future__ import annotations

import time

import numpy as np

from bench.common import log, median
from core import geometry as G
from core import statistics as S
from core.config import CONFIG
from core.pipeline import analyze, get_stats
from core.spec import DEFAULT_CORPUS as CORPUS
from core.spec import DEFAULT_SAMPLE as SAMPLE
from core.spec import RunSpec

NEW_KEYS = ("intrinsic_dim_twonn", "intrinsic_dim_gride", "matrix_entropy", "intrinsic_dim_duplicates",
            "intrinsic_dim_gride_scales")
GOAL = 0.10


def new_statistics(stats) -> dict:
    """Seconds of the new statistics of one run (as build_results computes them), by part."""
    t = {}
    t0 = time.perf_counter()
    for l in range(stats.n_layers):
        smp = S.Sample(S.Run(stats).sample(l))
        for k in NEW_KEYS:
            S.BY_KEY[k].kernel(smp)
    t["per_layer"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    G.cka_section(stats)
    t["cka"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    K, d = int(stats.arrays["sample"].shape[1]), stats.d_model
    smp = S.Sample(np.random.default_rng(CONFIG.isotropic_seed).standard_normal((K, d)))
    for k in NEW_KEYS:
        if S.BY_KEY[k].baseline:
            S.BY_KEY[k].kernel(smp)
    t["isotropic"] = time.perf_counter() - t0
    t["total"] = sum(t.values())
    return t


def section_geometry(ctx) -> dict:
    sizes = ctx.sizes
    out = {"goal": GOAL, "tokens": sizes.geometry_tokens, "sample": SAMPLE, "models": []}
    for ident in ("minilm-l6", "smollm2-135m"):
        reps = int(sizes.geometry_reps.get(ident, 1))
        if reps <= 0:
            continue
        spec = RunSpec(model=ident, corpus=CORPUS, max_tokens=sizes.geometry_tokens, sample=SAMPLE)
        runs, news, parts = [], [], []
        for r in range(reps):
            cache = ctx.fresh_dir(f"geometry-{ident}")
            t0 = time.perf_counter()
            res = analyze(spec, cache_dir=cache)
            runs.append(time.perf_counter() - t0)
            stats = get_stats(spec, cache_dir=cache)  # a cache hit: the run's own statistics
            p = new_statistics(stats)
            parts.append(p)
            news.append(p["total"])
            log(f"geometry: {ident} rep {r + 1}: run {runs[-1]:.2f} s, new statistics {news[-1]:.2f} s "
                f"({', '.join(f'{k} {v:.2f}' for k, v in p.items() if k != 'total')})")
            n_layers, K, n_tok = stats.n_layers, int(stats.arrays["sample"].shape[1]), int(res["layers"][0]["n_tokens"])
            del stats, res
        ratio = median(news) / (median(runs) - median(news))
        out["models"].append({"model": ident, "tokens_analysed": n_tok, "n_layers": n_layers, "sample": K,
                              "reps": reps, "run_s": runs, "new_s": news,
                              "parts_s": {k: median([p[k] for p in parts]) for k in parts[0]},
                              "ratio": ratio, "met": ratio <= GOAL})
    return out
