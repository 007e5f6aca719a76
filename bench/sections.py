"""The sections of `python -m bench`: one function each, returning a dict of numbers (rendered by bench.report;
each section's method is stated in BENCHMARKS.md)."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from bench.common import (
    ROOT,
    ab_ratio,
    alternate,
    analyze_argv,
    bare_forward,
    child_env,
    core_cli,
    cprofile_table,
    fresh_process_times,
    log,
    median,
    profile_diff_table,
    run_task,
    seconds,
    subset_windows,
    timeit,
    torch_profile_ops,
)
from core.base.spec import DEFAULT_BATCH_SIZE as BATCH  # the tool's own defaults, not copies
from core.base.spec import DEFAULT_CORPUS as CORPUS
from core.base.spec import DEFAULT_MAX_SEQ_LEN as MAX_SEQ_LEN
from core.base.spec import DEFAULT_SAMPLE as SAMPLE
from core.base.spec import RunSpec
from core.compute.extract import extract_stats
from core.compute.pipeline import get_stats
from core.compute.projection import pca_2d, project
from core.inputs.corpora import load_documents, tokenize_budget
from core.inputs.models import load_model
from core.stats.batching import padding_fraction, plan_batches
from core.stats.outliers import activation_outliers, persistent_activation_outliers
from core.stats.postprocess import PostProcess
from core.studies.attention import eager_attention, extract_attention
from core.studies.selection import UI_MAX_TOKENS, Selection

SEED = 0


# ----------------------------------------------------------------------------- sizes
@dataclass
class Sizes:
    """Every size the bench uses: the defaults are what BENCHMARKS.md reports, `quick()` checks the code."""

    minilm_tokens: int = 40_000
    smollm_tokens: int = 40_000
    overhead_reps: dict = field(default_factory=lambda: {"minilm-l6": 5, "smollm2-135m": 2})
    profile_tokens: int = 4_000
    peer_tokens: tuple = (10_000, 40_000, 200_000)
    peer_pairs: int = 10_000
    peer_mem_cap: int = 8 * 2**30
    memory_tokens: tuple = (40_000, 400_000)
    cache_minilm_tokens: int = 40_000
    cache_smollm_tokens: int = 6_000
    cache_reps: int = 3
    umap_points: int = 5_000
    umap_cold: bool = True
    umap_reps: int = 2
    batching_tokens: int = 40_000
    batch_sizes: tuple = (1, 16, 64)
    batching_reps: int = 2
    post_reps: int = 5
    app_page_reps: int = 3
    attention_tokens: dict = field(default_factory=lambda: {"minilm-l6": 40_000, "smollm2-135m": 40_000})
    attention_reps: int = 2
    modal_image_tokens: int = 10_240  # 40 crops of 256 patches (ViT-S/14)
    modal_audio_tokens: int = 3_000  # ~50 clips of speech-human (mostly 1-3 s), one 30 s window each
    modal_reps: int = 4
    chain_tokens: dict = field(default_factory=lambda: {"minilm-l6": 20_000, "smollm2-135m": 8_000})
    chain_reps: int = 3
    geometry_tokens: int = UI_MAX_TOKENS  # the app's default first look (8,000 tokens)
    geometry_reps: dict = field(default_factory=lambda: {"minilm-l6": 3, "smollm2-135m": 1})

    @classmethod
    def quick(cls) -> "Sizes":
        # Peer and memory sizes coincide so the tool's end-to-end runs are shared (memoised).
        return cls(minilm_tokens=600, smollm_tokens=200, overhead_reps={"minilm-l6": 1, "smollm2-135m": 1},
                   profile_tokens=150, peer_tokens=(400, 2_500), peer_pairs=2_000, peer_mem_cap=48 * 2**20,
                   memory_tokens=(400, 2_500), cache_minilm_tokens=600, cache_smollm_tokens=200, cache_reps=2,
                   umap_points=600, umap_cold=False, umap_reps=1, batching_tokens=600, batch_sizes=(1, 16),
                   batching_reps=1, post_reps=2, app_page_reps=1,
                   attention_tokens={"minilm-l6": 300, "smollm2-135m": 150}, attention_reps=1,
                   modal_image_tokens=256, modal_audio_tokens=100, modal_reps=1,
                   chain_tokens={"minilm-l6": 300, "smollm2-135m": 150}, chain_reps=1, geometry_tokens=300,
                   geometry_reps={"minilm-l6": 1, "smollm2-135m": 0})


@dataclass
class Ctx:
    sizes: Sizes
    cache: Path  # this run's own cache directory (created empty)
    quick: bool = False
    memo: dict = field(default_factory=dict)
    stash: dict = field(default_factory=dict)
    _models: dict = field(default_factory=dict)
    _docs: list | None = None

    def docs(self) -> list[str]:
        if self._docs is None:
            self._docs = load_documents(CORPUS)
        return self._docs

    def model(self, ident: str):
        if ident not in self._models:
            self._models[ident] = load_model(ident, device="cpu", dtype="float32", cache_dir=self.cache)
        return self._models[ident]

    def windows(self, ident: str, tokens: int):
        return tokenize_budget(self.docs(), self.model(ident).tokenizer, tokens, MAX_SEQ_LEN, SEED, CORPUS)

    def fresh_dir(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=name + "-", dir=self.cache.parent))

    def task(self, task: str, args: dict, memo_key=None, **kw) -> dict:
        if memo_key is not None and memo_key in self.memo:
            return self.memo[memo_key]
        res = run_task(task, args, cache_dir=kw.pop("cache_dir", self.cache), **kw)
        if memo_key is not None and res.get("status") == "ok":
            self.memo[memo_key] = res
        return res


def _pad_id(lm) -> int:
    return int(lm.tokenizer.pad_token_id or 0)


def _tool(lm, windows, batch_size=BATCH, sample=SAMPLE):
    t0 = time.perf_counter()
    arrays, timing = extract_stats(lm.base, windows, special_policy="exclude", batch_size=batch_size,
                                   sample_size=sample, seed=SEED, device="cpu", dtype="float32", pad_id=_pad_id(lm))
    return time.perf_counter() - t0, arrays


def _tool_e2e(ctx: Ctx, tokens: int) -> dict:
    """The tool end to end (`analyze` on a fresh cache) in a fresh process; shared by sections 2 and 3."""
    return ctx.task("tool_e2e", {"model": "minilm-l6", "tokens": tokens, "batch_size": BATCH, "sample": SAMPLE,
                                 "cache_dir": str(ctx.fresh_dir("e2e"))},
                    memo_key=("tool_e2e", "minilm-l6", tokens), timeout=3600)


# ----------------------------------------------------------------------------- 1. overhead
def section_overhead(ctx: Ctx) -> dict:
    """The tool's extraction (all streaming metrics + sample) vs the bare forward, same windows/batches."""

    out = {"goal": 0.90, "order": "alternating A B B A: bare, tool, tool, bare, ...", "models": []}
    for ident, tokens in (("minilm-l6", ctx.sizes.minilm_tokens), ("smollm2-135m", ctx.sizes.smollm_tokens)):
        lm = ctx.model(ident)
        w = ctx.windows(ident, tokens)
        batches = plan_batches(w, BATCH)
        pad = _pad_id(lm)
        n = int(w.n_content_tokens)
        reps = int(ctx.sizes.overhead_reps.get(ident, 2))
        log(f"overhead: {ident}, {n:,} analysed tokens in {len(w.ids)} windows, {len(batches)} batches, {reps} reps")
        # Warm-up (allocator, oneDNN primitives) on the first batches, untimed, for both.
        warm = subset_windows(w, min(n, 1500))
        bare_forward(lm.base, warm, plan_batches(warm, BATCH), pad)
        _tool(lm, warm)
        last = {}

        def tool():
            s, last["arrays"] = _tool(lm, w)  # the last run's arrays only (SmolLM2's sample is 360 MB)
            return s

        runs = alternate(reps, {"bare": lambda: bare_forward(lm.base, w, batches, pad), "tool": tool})
        arrays = last.pop("arrays", None)
        row = {"model": ident, "label": lm.info.get("label", ident), "n_params": lm.info.get("n_params"),
               "n_layers": lm.info.get("n_layers"), "d": lm.info.get("hidden_size"), "tokens_requested": tokens,
               "tokens_analysed": n, "tokens_fed": int(w.n_tokens_total), "n_windows": len(w.ids),
               "n_batches": len(batches), "batch_size": BATCH, "padding_fraction": padding_fraction(w, batches),
               "sample": int(arrays["sample"].shape[1]) if arrays is not None else None, "reps": reps,
               **ab_ratio(runs["bare"], runs["tool"], n)}
        if ident == "smollm2-135m" and arrays is not None:
            _stash_smollm(ctx, arrays, arrays["sample"].shape[0] // 2,
                          f"SmolLM2-135M sample of section 1 ({int(arrays['n']):,} tokens)")
        del arrays
        if not row["met"]:
            sub = subset_windows(w, min(n, ctx.sizes.profile_tokens))
            sb = plan_batches(sub, BATCH)
            log(f"  ratio {row['ratio']:.3f} < 0.90: profiling bare and tool on {sub.n_content_tokens:,} tokens")
            pb = torch_profile_ops(lambda: bare_forward(lm.base, sub, sb, pad))
            pt = torch_profile_ops(lambda: _tool(lm, sub))
            row["profile"] = {"tokens": int(sub.n_content_tokens), **profile_diff_table(pb, pt)}
        out["models"].append(row)
    return out


def _stash_smollm(ctx: Ctx, arrays: dict, layer: int, source: str) -> dict:
    """SmolLM2's sample at `layer` and its persistent outlier dims, for the post-processing section."""
    flags = activation_outliers(arrays["sum_abs"] / arrays["n"])
    ctx.stash["smollm_sample"] = {"X": np.array(arrays["sample"][layer]), "layer": layer, "source": source,
                                  "outliers": persistent_activation_outliers(flags)}
    return ctx.stash["smollm_sample"]


# ----------------------------------------------------------------------------- 2. peers
def section_peers(ctx: Ctx) -> dict:
    """The tool end to end vs the naive per-document peer (sampled pairs and all pairs)."""
    s = ctx.sizes
    cap = int(min(s.peer_mem_cap, 0.6 * psutil.virtual_memory().available)) if not ctx.quick else s.peer_mem_cap
    out = {"model": "minilm-l6", "cap_bytes": cap, "pairs": s.peer_pairs, "rows": []}
    allpairs_oom_at, allpairs_failure = None, None
    for N in s.peer_tokens:
        log(f"peers: {N:,} tokens: tool")
        tool = _tool_e2e(ctx, N)
        log(f"peers: {N:,} tokens: per-document peer, sampled pairs")
        samp = ctx.task("peer", {"model": "minilm-l6", "tokens": N, "mode": "sampled", "pairs": s.peer_pairs,
                                 "cache_dir": str(ctx.cache)}, timeout=3600)
        if allpairs_oom_at is None:
            log(f"peers: {N:,} tokens: per-document peer, all pairs (address space capped at +{cap / 2**30:.2f} GiB)")
            allp = ctx.task("peer", {"model": "minilm-l6", "tokens": N, "mode": "allpairs", "mem_cap_bytes": cap,
                                     "cache_dir": str(ctx.cache)}, env_extra={"MALLOC_ARENA_MAX": "2"},
                            timeout=3600)
            if allp.get("status") != "ok":
                allpairs_oom_at = N
                allpairs_failure = allp.get("status")
        else:
            what = "out of memory" if allpairs_failure == "oom" else f"failed ({allpairs_failure})"
            allp = {"status": "skipped", "reason": f"already {what} at {allpairs_oom_at:,} tokens"}
        row = {"tokens": N, "tool": _slim(tool), "sampled": _slim(samp), "allpairs": _slim(allp)}
        exact = tool.get("mean_cosine") if tool.get("status") == "ok" else None
        for key, peer in (("sampled", samp), ("allpairs", allp)):
            if peer.get("status") == "ok" and tool.get("status") == "ok":
                row[key]["tokens_per_s"] = peer["n_tokens"] / peer["seconds"]
                row[f"tool_vs_{key}_speed"] = (tool["n_tokens"] / tool["seconds"]) / row[key]["tokens_per_s"]
                if exact is not None and peer.get("mean_cosine"):
                    err = np.abs(np.asarray(peer["mean_cosine"], float) - np.asarray(exact, float))
                    row[key]["max_abs_err_vs_exact"] = float(err.max())
                    row[key]["mean_abs_err_vs_exact"] = float(err.mean())
                    row[key]["same_tokens"] = peer["n_tokens"] == tool["n_tokens"]
        if tool.get("status") == "ok":
            row["tool"]["tokens_per_s"] = tool["n_tokens"] / tool["seconds"]
        out["rows"].append(row)
    ok = [r for r in out["rows"] if r["tool"].get("status") == "ok"]
    if len(ok) >= 2:
        out["tool_peak_growth"] = ok[-1]["tool"]["peak_rss_bytes"] / ok[0]["tool"]["peak_rss_bytes"]
    oks = [r for r in out["rows"] if r["sampled"].get("status") == "ok"]
    if len(oks) >= 2:
        out["peer_peak_growth"] = oks[-1]["sampled"]["peak_rss_bytes"] / oks[0]["sampled"]["peak_rss_bytes"]
    out["allpairs_failed_at"] = allpairs_oom_at
    out["allpairs_failure"] = allpairs_failure
    out["allpairs_oom_at"] = allpairs_oom_at if allpairs_failure == "oom" else None
    speeds = [r.get("tool_vs_sampled_speed") for r in out["rows"] if r.get("tool_vs_sampled_speed")]
    out["met_speed"] = bool(speeds) and min(speeds) >= 1.0
    if speeds and not out["met_speed"] and not ctx.quick:
        N = out["rows"][0]["tokens"]
        log("peers: tool slower than the peer: profiling the tool end to end (cProfile)")
        argv = analyze_argv(RunSpec(model="minilm-l6", corpus=CORPUS, max_tokens=N), ctx.fresh_dir("prof"),
                            ctx.cache.parent / "prof.json")
        prof = run_task("cprofile_cli", {"argv": argv}, cache_dir=ctx.cache)
        out["profile"] = {"tokens": N, "table": prof.get("table", prof.get("error"))}
    return out


def _slim(r: dict) -> dict:
    keep = ("status", "seconds", "wall_s", "peak_rss_bytes", "n_tokens", "rss_by_stage", "error", "oom_stage",
            "reason", "hidden_bytes", "forward_s", "mean_cosine", "seconds_by_stage", "peak_rss_source")
    return {k: r[k] for k in keep if k in r}


# ----------------------------------------------------------------------------- 3. memory
def section_memory(ctx: Ctx) -> dict:
    rows = []
    for N in ctx.sizes.memory_tokens:
        log(f"memory: tool end to end at {N:,} tokens")
        rows.append({"tokens": N, **_slim(_tool_e2e(ctx, N))})
    out = {"model": "minilm-l6", "batch_size": BATCH, "sample": SAMPLE, "rows": rows, "goal": 1.10}
    if all(r.get("status") == "ok" for r in rows):
        out["ratio"] = rows[1]["peak_rss_bytes"] / rows[0]["peak_rss_bytes"]
        out["met"] = out["ratio"] <= 1.10
    return out


# ----------------------------------------------------------------------------- 4. cache
def section_cache(ctx: Ctx) -> dict:
    s = ctx.sizes
    out = {"goal_cli_s": 2.0, "goal_page_s": 1.0, "runs": []}
    runs = [("minilm-l6", s.cache_minilm_tokens), ("smollm2-135m", s.cache_smollm_tokens)]
    if ctx.quick:  # SmolLM2's first compute is ~31 eigendecompositions of 576 x 576: same code path, skipped
        runs = runs[:1]
        out["note"] = "--quick: SmolLM2 not run in this section"
    for model, tokens in runs:
        out_json = ctx.cache.parent / f"results-{model}.json"
        argv = analyze_argv(RunSpec(model=model, corpus=CORPUS, max_tokens=tokens), ctx.cache, out_json)
        log(f"cache: first `python -m core analyze` ({model}, {tokens:,} tokens) computes")
        first, rc, msg = core_cli(argv, ctx.cache)
        if rc != 0:
            out["runs"].append({"model": model, "tokens": tokens, "status": "error", "error": msg})
            continue
        # the repeats: one per fresh process, timed from outside by pyperf (interpreter start included)
        times = fresh_process_times([sys.executable, "-m", "core", *argv], s.cache_reps, child_env(ctx.cache))
        mods = run_task("cli_modules", {"argv": argv}, cache_dir=ctx.cache)
        res = json.loads(out_json.read_text())
        tok = res["manifest"]["tokens"]
        row = {"model": model, "tokens": tokens, "tokens_analysed": tok["analysed"], "sample": tok["sample"],
               "n_layers": len(res["layers"]), "d": res["manifest"]["model"].get("hidden_size"),
               "first_s": first, "repeat_s": times, "repeat_median_s": median(times), "last_message": msg,
               "cache_hit": bool(res["manifest"].get("cache_hit")),
               "torch_imported": mods.get("torch_imported"), "transformers_imported": mods.get("transformers_imported"),
               "heavy_modules": mods.get("heavy_modules"), "in_process_s": mods.get("seconds"),
               "stats_sample_bytes": (int(tok["sample"]) * len(res["layers"])
                                      * int(res["manifest"]["model"].get("hidden_size") or 0) * 4)}
        row["met"] = row["repeat_median_s"] < 2.0 and row["torch_imported"] is False
        if not row["met"]:
            log(f"cache: {model} repeat {row['repeat_median_s']:.2f} s: profiling the cache-hit path")
            prof = run_task("cprofile_cli", {"argv": argv}, cache_dir=ctx.cache)
            row["profile"] = prof.get("table", prof.get("error"))
        out["runs"].append(row)
    out["page"] = _page_render(ctx)
    return out


def _page_render(ctx: Ctx) -> dict:
    app, page = ROOT / "app.py", ROOT / "pages" / "layers.py"
    # --quick: the app's default (its first-look budget) is too slow; a smaller selection through its session state
    override = {"max_tokens": ctx.sizes.cache_minilm_tokens} if ctx.quick else None
    specs = Selection(**(override or {})).specs()
    log(f"cache: computing the app's default selection ({len(specs)} run(s), untimed)")
    pre = run_task("analyze_specs", {"specs": [sp.to_dict() for sp in specs], "cache_dir": str(ctx.cache)},
                   cache_dir=ctx.cache, timeout=3600)
    if pre.get("status") != "ok":
        return {"status": "error", "error": "computing the default selection failed: " + str(pre.get("error"))}
    log(f"cache: AppTest render of {page.name} (the app's default selection), then re-renders")
    r = run_task("apptest", {"app": str(app), "page": str(page.relative_to(ROOT)), "reps": ctx.sizes.app_page_reps,
                             "timeout": 600, "selection": override, "warmup_wait": 0 if ctx.quick else 240},
                 cache_dir=ctx.cache, timeout=1800)
    r["runs"] = [f"{sp.model} on {sp.corpus}, {sp.max_tokens:,} tokens" for sp in specs]
    r["selection_override"] = override
    if r.get("status") == "ok":
        r["rerender_median_s"] = median(r["rerender_s"])
        r["met"] = r["rerender_median_s"] < 1.0 and not r.get("exceptions")
    return r


# ----------------------------------------------------------------------------- 5. projection
def section_projection(ctx: Ctx) -> dict:
    """UMAP cold / fresh / warm, PCA, and cached projections. umap is never imported in this process."""

    s = ctx.sizes
    spec = RunSpec(model="minilm-l6", corpus=CORPUS, max_tokens=s.cache_minilm_tokens)
    log("projection: statistics of the minilm run (a cache hit when section 4 ran)")
    stats = get_stats(spec, cache_dir=ctx.cache)
    layer = stats.n_layers - 1
    X = np.ascontiguousarray(stats.sample(layer)[: s.umap_points], dtype=np.float32)
    xp = ctx.cache.parent / "umap_x.npy"
    np.save(xp, X)
    out = {"n_points": int(len(X)), "d": int(X.shape[1]), "layer": layer,
           "source": f"MiniLM-L6 sample of a {stats.n_tokens:,}-token run, layer {layer}"}
    numba_env = {"NUMBA_CACHE_DIR": str(ctx.cache.parent / "numba-cache")} if s.umap_cold else None
    if s.umap_cold:
        log(f"projection: UMAP cold (fresh process, empty numba cache), {len(X)} points, then warm fits")
        out["cold"] = run_task("umap_fit", {"x_path": str(xp), "warm_reps": s.umap_reps}, env_extra=numba_env,
                               timeout=900)
        warm_from = out["cold"]
    else:
        out["cold"] = {"status": "skipped", "reason": "--quick (a cold numba compile takes 30-55 s)"}
        warm_from = None  # --quick: the warm fits run in the `project` process below
    if warm_from is not None and warm_from.get("status") == "ok":
        out["warm_s"], out["warm_median_s"] = warm_from["warm_s"], median(warm_from["warm_s"])
    Xd = X.astype(np.float64)
    out["pca_median_s"] = median(timeit(lambda: pca_2d(Xd), 5))
    log("projection: core.compute.projection.project in a fresh process: first call, then cache hits")
    pr = run_task("project", {"model": "minilm-l6", "tokens": s.cache_minilm_tokens, "layer": layer,
                              "cache_dir": str(ctx.cache), "hit_reps": 3,
                              "warm_x_path": str(xp) if warm_from is None else None, "warm_reps": s.umap_reps},
                  env_extra=numba_env, timeout=900)
    out["project_status"] = {k: pr[k] for k in ("status", "error") if k in pr}
    if warm_from is None and pr.get("warm_s"):
        out["warm_s"], out["warm_median_s"] = pr["warm_s"], median(pr["warm_s"])
    for method in set(pr) & {"umap", "pca"}:
        out[f"project_{method}"] = {**pr[method], "hit_median_s": median(pr[method]["hit_s"])}
    if (out.get("project_umap") or {}).get("hit_median_s", 0) > 0.5:
        out["project_profile"] = cprofile_table(lambda: project(spec, layer, "umap", cache_dir=ctx.cache), top=14)
    return out


# ----------------------------------------------------------------------------- 6. batching
def section_batching(ctx: Ctx) -> dict:
    s = ctx.sizes
    lm = ctx.model("minilm-l6")
    w = ctx.windows("minilm-l6", s.batching_tokens)
    n = int(w.n_content_tokens)
    sizes = list(s.batch_sizes)
    _tool(lm, subset_windows(w, min(n, 1000)))  # warm-up
    times = alternate(s.batching_reps, {b: lambda b=b: _tool(lm, w, batch_size=b)[0] for b in sizes}, "batch size, ")
    rows = []
    base = median(times[1]) if 1 in times else None
    for b in sizes:
        batches = plan_batches(w, b)
        unsorted = [np.arange(i, min(i + b, len(w.ids))) for i in range(0, len(w.ids), b)]
        t = median(times[b])
        rows.append({"batch_size": b, "default": b == BATCH, "n_batches": len(batches), "seconds": times[b],
                     "tokens_per_s": n / t, "speedup_vs_1": (base / t) if base else None,
                     "padding_fraction": padding_fraction(w, batches),
                     "padding_fraction_unsorted": padding_fraction(w, unsorted)})
    return {"model": "minilm-l6", "tokens_analysed": n, "n_windows": len(w.ids), "reps": s.batching_reps,
            "rows": rows}


# ----------------------------------------------------------------------------- post-processing
def _smollm_sample(ctx: Ctx) -> dict:
    if "smollm_sample" in ctx.stash:
        return ctx.stash["smollm_sample"]
    spec = RunSpec(model="smollm2-135m", corpus=CORPUS, max_tokens=ctx.sizes.cache_smollm_tokens)
    log("post-processing: SmolLM2 statistics (a cache hit when section 4 ran)")
    st = get_stats(spec, cache_dir=ctx.cache)
    return _stash_smollm(ctx, st.arrays, st.n_layers // 2, f"SmolLM2-135M sample of a {st.n_tokens:,}-token run")


def section_postproc(ctx: Ctx) -> dict:
    from core.stats.assemble import sample_metrics  # lazy: plotly and pandas only for the commands that report a series

    smp = _smollm_sample(ctx)
    X = smp["X"]
    dims = tuple(int(d) for d in smp["outliers"]) or (0,)
    choices = [("raw", PostProcess()), ("center", PostProcess(center=True)), ("z-score", PostProcess(zscore=True)),
               ("all-but-the-top (D=3)", PostProcess(abtt=3)), ("whitening", PostProcess(whiten=True)),
               (f"remove outlier dims {list(dims)}", PostProcess(remove=dims)),
               ("remove outliers + center + ABTT-3", PostProcess(remove=dims, center=True, abtt=3))]
    rows = []
    sample_metrics(X)  # warm-up (BLAS threads, page faults)
    for name, post in choices:
        ts = timeit(lambda: sample_metrics(X, post), ctx.sizes.post_reps)
        rows.append({"post": name, "seconds": ts, "median_s": median(ts), "met": median(ts) < 0.5})
        log(f"post-processing: {name}: {median(ts):.3f} s")
    out = {"shape": list(X.shape), "layer": smp["layer"], "source": smp["source"], "reps": ctx.sizes.post_reps,
           "goal_s": 0.5, "rows": rows, "met": all(r["met"] for r in rows)}
    if not out["met"]:
        worst = max(rows, key=lambda r: r["median_s"])
        post = dict(choices)[worst["post"]]
        out["profile"] = {"post": worst["post"], "table": cprofile_table(lambda: sample_metrics(X, post), top=14)}
    return out


# ----------------------------------------------------------------------------- 8. attention
def _eager_forward(model, windows, batches, pad_id: int) -> float:
    """Seconds for the bare forward with eager attention and output_attentions=True (every layer's
    probabilities returned, nothing computed from them)."""
    with eager_attention(model):
        return bare_forward(model, windows, batches, pad_id, output_attentions=True)


def section_attention(ctx: Ctx) -> dict:
    """Attention statistics (core.studies.attention.extract_attention) vs the bare SDPA forward and vs the bare
    forward with output_attentions=True, same windows and batches; the model's attention afterwards."""
    out = {"goal": 0.80, "order": "alternating: sdpa, eager+output_attentions, tool, then reversed", "models": []}
    for ident in ("minilm-l6", "smollm2-135m"):
        tokens = int(ctx.sizes.attention_tokens.get(ident, 40_000))
        if tokens <= 0:  # --set 'attention_tokens={"smollm2-135m": 0, ...}': this model is skipped
            log(f"attention: {ident} skipped (0 tokens)")
            continue
        lm = ctx.model(ident)
        w = ctx.windows(ident, tokens)
        batches = plan_batches(w, BATCH)
        pad = _pad_id(lm)
        n = int(w.n_content_tokens)
        impl_before = getattr(lm.base.config, "_attn_implementation", None)
        dims = list(range(10))  # the link's cost depends on how many dims, not which
        log(f"attention: {ident}, {n:,} analysed tokens, {len(batches)} batches, {ctx.sizes.attention_reps} reps")

        warm = subset_windows(w, min(n, 600))
        wb = plan_batches(warm, BATCH)
        bare_forward(lm.base, warm, wb, pad)
        _eager_forward(lm.base, warm, wb, pad)
        extract_attention(lm.base, warm, dims, batch_size=BATCH, pad_id=pad)
        times = alternate(int(ctx.sizes.attention_reps), {"sdpa": lambda: bare_forward(lm.base, w, batches, pad),
                                                         "eager": lambda: _eager_forward(lm.base, w, batches, pad),
                                                         "tool": lambda: seconds(lambda: extract_attention(
                                                             lm.base, w, dims, batch_size=BATCH, pad_id=pad))})
        med = {k: median(v) for k, v in times.items()}
        row = {"model": ident, "label": lm.info.get("label", ident), "tokens_analysed": n, "n_windows": len(w.ids),
               "n_batches": len(batches), "batch_size": BATCH, "times": times,
               "tokens_per_s": {k: n / v for k, v in med.items()},
               "ratio_vs_eager": med["eager"] / med["tool"], "ratio_vs_sdpa": med["sdpa"] / med["tool"],
               "attn_implementation_before": impl_before,
               "attn_implementation_after": getattr(lm.base.config, "_attn_implementation", None)}
        row["met"] = row["ratio_vs_eager"] >= 0.80 and row["attn_implementation_after"] == impl_before
        out["models"].append(row)
    return out

from bench.chain import section_chain  # noqa: E402 - sections of their own modules
from bench.geometry import section_geometry  # noqa: E402
from bench.modalities import section_modalities  # noqa: E402

SECTIONS = {"overhead": section_overhead, "modalities": section_modalities, "peers": section_peers,
            "memory": section_memory, "cache": section_cache, "projection": section_projection,
            "batching": section_batching, "postproc": section_postproc, "attention": section_attention,
            "chain": section_chain, "geometry": section_geometry}

