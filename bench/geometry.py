"""Section "geometry" (issue 25): what intrinsic dimension, matrix entropy and CKA add to a run at the app's
default size (method: BENCHMARKS.md). `registry_seconds` times every per-layer statistic of core/stats/registry.py,
so that a new statistic is timed without an edit."""

from __future__ import annotations

import time

import numpy as np

from bench.common import fi, fr, fs, log, median, met, seconds
from core.base.config import CONFIG
from core.base.spec import DEFAULT_CORPUS as CORPUS
from core.base.spec import DEFAULT_SAMPLE as SAMPLE
from core.base.spec import RunSpec
from core.compute.lens import logit_lens
from core.compute.pipeline import analyze, get_stats
from core.stats import geometry as G
from core.stats import registry as S
from core.stats.registry import LENS_POSITIONS

NEW_KEYS = ("intrinsic_dim_twonn", "intrinsic_dim_gride", "matrix_entropy", "intrinsic_dim_duplicates",
            "intrinsic_dim_gride_scales")
GOAL = 0.10


def new_statistics(stats) -> dict:
    """Seconds of the new statistics of one run (as build_results computes them), by part; `cpu` in CPU seconds.
    A layer's scatter matrix is made untimed: the spectral statistics make it anyway, the matrix entropy reuses it."""
    t = {"per_layer": 0.0, "cka": 0.0, "isotropic": 0.0, "cpu": 0.0}

    def timed(part, f):
        c0, t0 = time.process_time(), time.perf_counter()
        f()
        t[part] += time.perf_counter() - t0
        t["cpu"] += time.process_time() - c0

    def kernels(smp, part):
        smp.scatter  # noqa: B018 - untimed (see above)
        timed(part, lambda: [S.BY_KEY[k].kernel(smp) for k in NEW_KEYS if part != "isotropic" or S.BY_KEY[k].baseline])

    for l in range(stats.n_layers):
        kernels(S.Sample(S.Run(stats).sample(l)), "per_layer")
    timed("cka", lambda: G.cka_section(stats))
    K, d = int(stats.arrays["sample"].shape[1]), stats.d_model
    kernels(S.Sample(np.random.default_rng(CONFIG.isotropic_seed).standard_normal((K, d))), "isotropic")
    t["total"] = t["per_layer"] + t["cka"] + t["isotropic"]
    return t


def registry_seconds(stats) -> float:
    """Seconds of every per-layer statistic of the registry at every layer, as build_results computes a layer's row
    (fresh kernel inputs, no isotropic baseline)."""
    run = S.Run(stats)
    return seconds(lambda: [S.layer_row(run, l) for l in range(stats.n_layers)])


def section_geometry(ctx) -> dict:
    # numpy was imported before --threads could reach OpenBLAS: hold its pool to torch's thread count here, so
    # the run and the new statistics use as many threads as the forward (2 BLAS threads spinning against a busy
    # machine made the small float64 products of the new statistics 3x slower than on one)
    import torch  # lazy: torch and threadpoolctl only when this section runs
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=torch.get_num_threads()):
        sizes = ctx.sizes
        rows, out = [], {"summary": [], "times": {}}
        for ident in ("minilm-l6", "smollm2-135m"):
            reps = int(sizes.geometry_reps.get(ident, 1))
            if reps <= 0:
                continue
            spec = RunSpec(model=ident, corpus=CORPUS, max_tokens=sizes.geometry_tokens, sample=SAMPLE)
            runs, cpus, parts, lens, registry = [], [], [], [], []
            for r in range(reps):
                cache = ctx.fresh_dir(f"geometry-{ident}")
                c0, t0 = time.process_time(), time.perf_counter()
                res = analyze(spec, cache_dir=cache)
                runs.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
                stats = get_stats(spec, cache_dir=cache)  # a cache hit: the run's own statistics
                p = new_statistics(stats)
                parts.append(p)
                registry.append(registry_seconds(stats))
                msg = f", every registry statistic {registry[-1]:.2f} s"
                if res["manifest"]["model"].get("causal_lm"):
                    lm = ctx.model(ident)
                    t0 = time.perf_counter()
                    logit_lens(lm.model, lm.tokenizer, stats.arrays["sample"], stats.arrays["layer_index"],
                               int(lm.info["n_layers"]) + 1, seed=0)
                    lens.append(time.perf_counter() - t0)
                    msg += f", logit lens {lens[-1]:.2f} s"
                log(f"geometry: {ident} rep {r + 1}: run {runs[-1]:.2f} s ({cpus[-1]:.2f} s CPU), new statistics "
                    f"{p['total']:.2f} s ({p['cpu']:.2f} s CPU; "
                    f"{', '.join(f'{k} {v:.2f}' for k, v in p.items() if k not in ('total', 'cpu'))}){msg}")
                n_layers, K, n_tok = stats.n_layers, int(stats.arrays["sample"].shape[1]), int(res["layers"][0]["n_tokens"])
                del stats, res
            out["times"][ident] = {"run_s": runs, "run_cpu_s": cpus, "parts_s": parts, "lens_s": lens, "registry_s": registry}
            part = {k: median(p[k] for p in parts) for k in parts[0]}
            new, new_cpu = part["total"], part["cpu"]
            ratio = new / (median(runs) - new)
            rows.append([ident, fi(n_tok), n_layers, fi(K), reps, f"{fs(median(runs))} ({fs(median(cpus))} CPU)",
                         f"{fs(new)} ({fs(new_cpu)} CPU)",
                         f"per layer {fs(part['per_layer'])}, CKA {fs(part['cka'])}, baselines {fs(part['isotropic'])}",
                         f"**{fr(ratio)}** (CPU {fr(new_cpu / (median(cpus) - new_cpu))})", met(ratio <= GOAL),
                         f"{fs(median(lens))} on {LENS_POSITIONS} positions: **{fr(median(lens) / (median(runs) - new))}**"
                         if lens else "n/a (no LM head)"])
            out["summary"].append([f"Intrinsic dimension, matrix entropy and CKA on top of a default run ({ident}, {fi(n_tok)} "
                                   f"tokens, sample {fi(K)})", "<= 0.10", fr(ratio), met(ratio <= GOAL)])
        out["md"] = [f"The app's default run: wiki-en, {fi(sizes.geometry_tokens)} tokens, sample {fi(SAMPLE)}.",
                     (["Model", "Tokens", "Layers", "Sample", "Reps", "Run", "New statistics", "Parts",
                       f"Ratio (goal <= {GOAL})", "Status", "Logit lens (opt-in): time, ratio"], rows)]
        return out
