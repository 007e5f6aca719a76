"""The sections of `python -m bench`: one function each, returning what it measured as markdown blocks (`md`: sentences
and tables, rendered by bench.report), the rows it adds to the summary (`summary`), and its raw times (for --json).
Each section's method is stated in BENCHMARKS.md, above its markers."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil

from bench import common
from bench.common import code, fb, fi, fr, fs, log, median, met, run_task, status
from bench.report import TITLES
from core.base.spec import DEFAULT_BATCH_SIZE as BATCH  # the tool's own defaults, not copies
from core.base.spec import DEFAULT_CORPUS as CORPUS
from core.base.spec import DEFAULT_MAX_SEQ_LEN as MAX_SEQ_LEN
from core.base.spec import DEFAULT_SAMPLE as SAMPLE
from core.base.spec import RunSpec
from core.compute.extract import extract_stats
from core.compute.pipeline import PartialHook, analyze, get_stats, resolve
from core.compute.projection import pca_2d, project
from core.entry.job_records import Job
from core.entry.job_run import Running
from core.inputs.corpora import load_documents, tokenize_budget
from core.inputs.models import load_model
from core.stats.batching import padding_fraction, plan_batches
from core.stats.outliers import activation_outliers, persistent_activation_outliers
from core.stats.postprocess import PostProcess
from core.studies.attention import eager_attention, extract_attention
from core.studies.selection import UI_MAX_TOKENS, Selection

SEED = 0


# ----------------------------------------------------------------------------- sizes
# Every size the bench uses: (the full run's, which BENCHMARKS.md reports; --quick's, which check the code). Quick peer
# and memory sizes coincide so the tool's end-to-end runs are shared (memoised).
SIZES = {
    "minilm_tokens": (40_000, 600), "smollm_tokens": (40_000, 200),
    "overhead_reps": ({"minilm-l6": 5, "smollm2-135m": 2}, {"minilm-l6": 1, "smollm2-135m": 1}),
    "profile_tokens": (4_000, 150), "peer_tokens": ([10_000, 40_000, 200_000], [400, 2_500]),
    "peer_pairs": (10_000, 2_000), "peer_mem_cap": (8 * 2**30, 48 * 2**20), "memory_tokens": ([40_000, 400_000], [400, 2_500]),
    "cache_minilm_tokens": (40_000, 600), "cache_smollm_tokens": (6_000, 200), "cache_reps": (3, 2),
    "umap_points": (5_000, 600), "umap_cold": (True, False), "umap_reps": (2, 1),
    "batching_tokens": (40_000, 600), "batch_sizes": ([1, 16, 64], [1, 16]), "batching_reps": (2, 1),
    "post_reps": (5, 2), "app_page_reps": (3, 1),
    "attention_tokens": ({"minilm-l6": 40_000, "smollm2-135m": 40_000}, {"minilm-l6": 300, "smollm2-135m": 150}),
    "attention_reps": (2, 1), "attention_memory_tokens": ([20_000, 200_000], [300, 1_200]),
    "modal_image_tokens": (10_240, 256),  # 40 crops of 256 patches (ViT-S/14)
    "modal_audio_tokens": (3_000, 100),  # ~50 clips of speech-human (mostly 1-3 s), one 30 s window each
    "modal_reps": (4, 1),
    "chain_tokens": ({"minilm-l6": 20_000, "smollm2-135m": 8_000}, {"minilm-l6": 300, "smollm2-135m": 150}),
    "chain_reps": (3, 1),
    "geometry_tokens": (UI_MAX_TOKENS, 300),  # the app's default first look (8,000 tokens)
    "geometry_reps": ({"minilm-l6": 3, "smollm2-135m": 1}, {"minilm-l6": 1, "smollm2-135m": 0}),
    "partial_tokens": (40_000, 600), "partial_reps": (5, 1),
}


def make_sizes(quick: bool = False, items: list[str] = ()) -> tuple[SimpleNamespace, dict]:
    """The sizes of a run (--quick's with `quick`) with the overrides of --set NAME=VALUE (ints, comma-separated int
    lists, booleans, or a JSON dict); (sizes, the overrides)."""
    s, done = SimpleNamespace(**{k: v[quick] for k, v in SIZES.items()}), {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in SIZES:
            raise ValueError(f"--set {item!r}: expected SIZE=VALUE with SIZE one of {sorted(SIZES)}")
        cur = getattr(s, name)
        try:
            val = (raw.strip().lower() in ("1", "true", "yes", "on") if isinstance(cur, bool) else
                   [int(x) for x in raw.split(",") if x.strip()] if isinstance(cur, list) else
                   json.loads(raw) if isinstance(cur, dict) else int(float(raw)))
        except (ValueError, json.JSONDecodeError):
            raise ValueError(f"--set {item!r}: cannot read {raw!r} as a {type(cur).__name__}") from None
        setattr(s, name, val)
        done[name] = val
    return s, done


@dataclass
class Ctx:
    sizes: SimpleNamespace  # make_sizes()
    cache: Path  # this run's own cache directory (created empty)
    quick: bool = False
    memo: dict = field(default_factory=dict)  # tokens -> the tool's end-to-end run
    _models: dict = field(default_factory=dict)

    @cached_property
    def docs(self) -> list[str]:
        return load_documents(CORPUS)

    def model(self, ident: str):
        if ident not in self._models:
            self._models[ident] = load_model(ident, device="cpu", dtype="float32", cache_dir=self.cache)
        return self._models[ident]

    def fresh_dir(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=name + "-", dir=self.cache.parent))

    def setup(self, ident: str, tokens: int, section: str):
        """(model, windows, batches, pad id, analysed tokens) of `ident` on `tokens` corpus tokens, batch 16."""
        lm = self.model(ident)
        w = tokenize_budget(self.docs, lm.tokenizer, tokens, MAX_SEQ_LEN, SEED, CORPUS)
        batches = plan_batches(w, BATCH)
        log(f"{section}: {ident}, {w.n_content_tokens:,} analysed tokens in {len(w.ids)} windows, {len(batches)} batches")
        return lm, w, batches, int(lm.tokenizer.pad_token_id or 0), int(w.n_content_tokens)


def _tool(lm, windows, batch_size=BATCH):
    """(seconds, arrays) of the tool's extraction (every streaming statistic and the sample)."""
    t0 = time.perf_counter()
    arrays, _ = extract_stats(lm.base, windows, special_policy="exclude", batch_size=batch_size, sample_size=SAMPLE,
                              seed=SEED, device="cpu", dtype="float32", pad_id=int(lm.tokenizer.pad_token_id or 0))
    return time.perf_counter() - t0, arrays


def _tool_e2e(ctx: Ctx, tokens: int) -> dict:
    """The tool end to end (`analyze` on a fresh cache) in a fresh process; shared by sections 2 and 3 (--quick's
    sizes coincide)."""
    if tokens not in ctx.memo:
        r = run_task("tool_e2e", {"model": "minilm-l6", "tokens": tokens, "cache_dir": str(ctx.fresh_dir("e2e"))},
                     cache_dir=ctx.cache, timeout=3600)
        if r.get("status") != "ok":
            return r
        ctx.memo[tokens] = r
    return ctx.memo[tokens]


# ----------------------------------------------------------------------------- 1. overhead
def section_overhead(ctx: Ctx) -> dict:
    """The tool's extraction (all streaming metrics + sample) vs the bare forward, same windows/batches."""
    out, rows, notes = {"md": [], "summary": [], "times": {}}, [], []
    for ident, tokens in (("minilm-l6", ctx.sizes.minilm_tokens), ("smollm2-135m", ctx.sizes.smollm_tokens)):
        lm, w, batches, pad, n = ctx.setup(ident, tokens, "overhead")
        label, reps = lm.info.get("label", ident), int(ctx.sizes.overhead_reps.get(ident, 2))
        # Warm-up (allocator, oneDNN primitives) on the first batches, untimed, for both.
        warm = common.subset_windows(w, min(n, 1500))
        common.bare_forward(lm.base, warm, plan_batches(warm, BATCH), pad)
        _tool(lm, warm)
        runs = common.alternate(reps, {"bare": lambda: common.bare_forward(lm.base, w, batches, pad),
                                       "tool": lambda: _tool(lm, w)[0]})
        out["times"][ident] = ab = common.ab_ratio(runs["bare"], runs["tool"], n)
        rows.append([label, f"{fi(n)} ({fi(w.n_tokens_total)} fed)", len(batches), f"{padding_fraction(w, batches):.1%}",
                     reps, *ab.pop("cells")])
        out["summary"].append([f"Extraction vs bare forward, {label} ({fi(n)} tokens)", ">= 0.90", fr(ab["ratio"]),
                               met(ab["met"])])
        if not ab["met"]:  # where the tool's time goes: the forward (the bare run's work) or what it adds
            sub = common.subset_windows(w, min(n, ctx.sizes.profile_tokens))
            log(f"  ratio {ab['ratio']:.3f} < 0.90: profiling the tool on {sub.n_content_tokens:,} tokens")
            notes += [f"**Why {label} misses the goal** - cProfile of the tool's extraction on the first "
                      f"{fi(int(sub.n_content_tokens))} tokens, by each function's own time (torch's ops are the bare "
                      "forward's work too):", code(common.cprofile_table(lambda: _tool(lm, sub), top=14, sort="tottime"))]
    out["md"] = [(["Model", "Tokens analysed", "Batches", "Padding", "Reps", "Bare tok/s", "Tool tok/s", "Ratio (range)",
                   "Goal >= 0.90"], rows), *notes]
    return out


# ----------------------------------------------------------------------------- 2. peers
def section_peers(ctx: Ctx) -> dict:
    """The tool end to end vs the naive per-document peer (sampled pairs and all pairs)."""
    s = ctx.sizes
    cap = int(min(s.peer_mem_cap, 0.6 * psutil.virtual_memory().available)) if not ctx.quick else s.peer_mem_cap
    out = {"summary": [], "runs": {}}
    rows, stages, slower, errs, failed = [], [], [], {"sampled": [], "allpairs": []}, None

    def peer(N: int, mode: str, **args) -> dict:
        return run_task("peer", {"model": "minilm-l6", "tokens": N, "mode": mode, "cache_dir": str(ctx.cache), **args},
                        cache_dir=ctx.cache, env_extra={"MALLOC_ARENA_MAX": "2"} if mode == "allpairs" else None, timeout=3600)

    for N in s.peer_tokens:
        log(f"peers: {N:,} tokens: tool, then the per-document peer on sampled pairs")
        tool = _tool_e2e(ctx, N)
        runs = out["runs"][N] = {"tool": tool, "sampled": peer(N, "sampled", pairs=s.peer_pairs)}
        if failed:
            what = "out of memory" if failed[1] == "oom" else f"failed ({failed[1]})"
            runs["allpairs"] = {"status": "skipped", "reason": f"already {what} at {failed[0]:,} tokens"}
        else:
            log(f"peers: {N:,} tokens: per-document peer, all pairs (address space capped at +{cap / 2**30:.2f} GiB)")
            runs["allpairs"] = peer(N, "allpairs", mem_cap_bytes=cap)
            failed = None if runs["allpairs"].get("status") == "ok" else (N, runs["allpairs"].get("status"))
        speed = {}
        for key, name in (("tool", "tool (exact)"), ("sampled", "peer, sampled pairs"), ("allpairs", "peer, all pairs")):
            x, err = runs[key], None
            ok = x.get("status") == "ok"
            if x.get("rss_by_stage"):
                stages.append([fi(N), key, ", ".join(f"{k} {v:.2f}" for k, v in (x.get("seconds_by_stage") or {}).items()),
                               ", ".join(f"{k} {fb(v)}" for k, v in x["rss_by_stage"].items())])
            if ok and key != "tool" and tool.get("status") == "ok":
                speed[key] = (tool["n_tokens"] / tool["seconds"]) / (x["n_tokens"] / x["seconds"])
                err = float(np.abs(np.asarray(x["mean_cosine"], float) - np.asarray(tool["mean_cosine"], float)).max())
                errs[key].append((N, err))
            rows.append([fi(N), name, status(x), fs(x.get("seconds")), fi(x["n_tokens"] / x["seconds"]) if ok else "",
                         "" if x.get("status") == "skipped" else fb(x.get("peak_rss_bytes")),
                         ("0 (reference)" if key == "tool" else "n/a" if err is None else f"{err:.2e}") if ok else "",
                         fr(speed[key], 2) if key in speed else ""])
        sp = speed.get("sampled")
        out["summary"].append([f"Tool end to end vs per-document peer, speed ({fi(N)} tokens)", ">= 1.0",
                               fr(sp, 2) if sp else status(runs["sampled"] if runs["sampled"].get("status") != "ok" else tool),
                               met(sp >= 1.0) if sp else "n/a"])
        ts, ps = tool.get("seconds_by_stage") or {}, runs["sampled"].get("seconds_by_stage") or {}
        if (sp or 1.0) < 1.0 and "forward" in ts and "forward+gather" in ps:  # the tool slower: forward vs fixed costs
            fixed = ", ".join(f"{k} {v:.2f} s" for k, v in ts.items() if k in ("fingerprints", "metrics"))
            slower.append(f"**Where the time goes at {fi(N)} tokens**: the forward pass takes {ts['forward']:.2f} s in the "
                          f"tool (streaming statistics and sample included) vs {ps['forward+gather']:.2f} s in the peer's "
                          f"forward+gather. The rest is fixed work that does not grow with the corpus: {fixed} (every "
                          "layer's sample metrics, which the peer does not compute); past a few tens of thousands of tokens "
                          "the tool is faster (table above).")
    out["md"] = [f"Sampled pairs: {fi(s.peer_pairs)}; the all-pairs peer's address space is capped at {fb(cap)} above its "
                 "size after loading the model.", (["Tokens", "Run", "Status", "Time", "Tokens/s", "Peak RSS", "Max abs error "
                                                    "of mean cosine vs the tool's exact value (over layers)",
                                                    "Tool speed / this run's"], rows)]
    if failed and failed[1] == "oom":
        out["md"].append(f"The all-pairs peer ran out of memory at {fi(failed[0])} tokens: one float32 N x N matrix is "
                         f"{fb(4 * failed[0] ** 2)} there (twice that with the off-diagonal copy), {fb(4 * 200_000**2)} at "
                         "200,000 tokens; larger sizes were not attempted.")
    if errs["allpairs"]:
        N, e = errs["allpairs"][-1]
        out["summary"].append([f"Tool's streamed mean cosine vs the all-pairs N x N computation ({fi(N)} tokens), max abs "
                               "difference over layers", "exact", f"{e:.1e}", met(e < 1e-6)])
    if errs["sampled"]:
        out["summary"].append([f"Sampled-pairs peer's error vs the tool's exact value ({fi(s.peer_pairs)} pairs), max over "
                               "layers and sizes", "(the peer samples)", f"{max(e for _, e in errs['sampled']):.1e}", "info"])
    peaks = {k: [r[k]["peak_rss_bytes"] for r in out["runs"].values() if r[k].get("status") == "ok"] for k in ("tool", "sampled")}
    if len(peaks["tool"]) >= 2:
        growth = {k: fr(v[-1] / v[0], 2) if len(v) >= 2 else "n/a" for k, v in peaks.items()}
        out["md"].append(f"Peak RSS from the smallest to the largest size grew x{growth['tool']} for the tool and "
                         f"x{growth['sampled']} for the sampled-pairs peer (which keeps every hidden state).")
        out["summary"].append([f"Peak RSS growth {fi(s.peer_tokens[0])} -> {fi(s.peer_tokens[-1])} tokens: tool / peer",
                               "flat (tool)", f"{growth['tool']} / {growth['sampled']}", "see section 2"])
    if stages:
        out["md"] += ["<details><summary>Time and peak RSS by stage (RSS sampled every 20 ms)</summary>",
                      (["Tokens", "Run", "Seconds per stage", "Max RSS per stage"], stages), "</details>"]
    out["md"] += slower
    return out


# ----------------------------------------------------------------------------- 3. memory
def section_memory(ctx: Ctx) -> dict:
    """Peak RSS of the tool end to end at two corpus sizes, each in a fresh process."""
    log(f"memory: tool end to end at {ctx.sizes.memory_tokens} tokens")
    runs = [_tool_e2e(ctx, N) for N in ctx.sizes.memory_tokens]
    rows = [[fi(N), status(r), fs(r.get("seconds")), fb(r.get("peak_rss_bytes")),
             ", ".join(f"{k} {fb(v)}" for k, v in (r.get("rss_by_stage") or {}).items())]
            for N, r in zip(ctx.sizes.memory_tokens, runs)]
    out = {"runs": runs, "md": [f"Batch {BATCH}, sample {SAMPLE}.",
                                (["Tokens", "Status", "Time", "Peak RSS", "Max RSS per stage"], rows)], "summary": []}
    if all(r.get("status") == "ok" for r in runs):
        ratio = runs[1]["peak_rss_bytes"] / runs[0]["peak_rss_bytes"]
        a, b = ctx.sizes.memory_tokens
        out["md"].append(f"Ratio of peaks: **{fr(ratio)}** (goal <= 1.10: {met(ratio <= 1.10)}).")
        out["summary"].append([f"Peak RSS {fi(b)} / {fi(a)} tokens", "<= 1.10", fr(ratio), met(ratio <= 1.10)])
    return out


# ----------------------------------------------------------------------------- 4. cache
def section_cache(ctx: Ctx) -> dict:
    """A repeated `python -m core analyze` on a filled cache (fresh processes), then the Layers page's re-render."""
    s = ctx.sizes
    out, rows, notes = {"summary": [], "runs": []}, [], []
    runs = [("minilm-l6", s.cache_minilm_tokens), ("smollm2-135m", s.cache_smollm_tokens)]
    if ctx.quick:  # SmolLM2's first compute is ~31 eigendecompositions of 576 x 576: same code path, skipped
        runs = runs[:1]
        notes.append("--quick: SmolLM2 not run in this section.")
    for model, tokens in runs:
        out_json = ctx.cache.parent / f"results-{model}.json"
        argv = common.analyze_argv(RunSpec(model=model, corpus=CORPUS, max_tokens=tokens), ctx.cache, out_json)
        log(f"cache: first `python -m core analyze` ({model}, {tokens:,} tokens) computes")
        first, rc, msg = common.core_cli(argv, ctx.cache)
        if rc != 0:
            failed = status({"status": "error", "error": msg})
            rows.append([model, "", "", failed, "", "", ""])
            out["summary"].append([f"Repeated `python -m core analyze`, {model}", "< 2 s", failed, "n/a"])
            continue
        # the repeats: one per fresh process, timed from outside by pyperf (interpreter start included)
        times = common.fresh_process_times([sys.executable, "-m", "core", *argv], s.cache_reps, ctx.cache)
        mods = run_task("cli", {"argv": argv}, cache_dir=ctx.cache)
        res = json.loads(out_json.read_text())
        tok, layers, d = res["manifest"]["tokens"], len(res["layers"]), res["manifest"]["model"].get("hidden_size") or 0
        ok = median(times) < 2.0 and mods.get("torch_imported") is False
        out["runs"].append({"model": model, "first_s": first, "repeat_s": times, "modules": mods})
        rows.append([model, f"{fi(tok['analysed'])}, sample {fi(tok['sample'])} x {layers} layers "
                     f"({fb(int(tok['sample']) * layers * int(d) * 4)})", fs(first),
                     " / ".join(map(fs, times)) + f" (median **{fs(median(times))}**)", str(mods.get("torch_imported")),
                     ", ".join(mods.get("heavy_modules") or []) or "none", met(ok)])
        out["summary"].append([f"Repeated `python -m core analyze` ({model}, {fi(tok['analysed'])} tokens, sample "
                               f"{fi(tok['sample'])} x {layers} layers)", "< 2 s, no torch",
                               f"{fs(median(times))}, torch imported: {mods.get('torch_imported')}", met(ok)])
        if not ok:
            log(f"cache: {model} repeat {median(times):.2f} s: profiling the cache-hit path")
            prof = run_task("cli", {"argv": argv, "profile": True}, cache_dir=ctx.cache)
            notes += [f"**Why the repeat for {model} misses the goal** - cProfile of the cache-hit path (cumulative):",
                      code(prof.get("table", prof.get("error")))]
    out["page"], page_md, page_row = _page_render(ctx)
    out["md"] = [(["Model", "Tokens, sample", "First (computes)", "Repeats", "torch imported", "Heavy modules imported",
                   "Goal < 2 s, no torch"], rows), *notes, page_md]
    out["summary"].append(page_row)
    return out


def _page_render(ctx: Ctx) -> tuple[dict, str, list]:
    """The Layers page re-rendered from the cache in AppTest: (the run, its sentence, its summary row)."""
    app, page = common.ROOT / "app.py", common.ROOT / "pages" / "layers.py"
    # --quick: the app's default (its first-look budget) is too slow; a smaller selection through its session state
    override = {"max_tokens": ctx.sizes.cache_minilm_tokens} if ctx.quick else None
    specs = Selection(**(override or {})).specs()
    log(f"cache: computing the app's default selection ({len(specs)} run(s), untimed)")
    try:
        for sp in specs:
            analyze(sp, cache_dir=ctx.cache)
    except Exception as e:  # noqa: BLE001 - said in the section, the run goes on
        specs, r = [], {"status": "error", "error": f"computing the default selection failed: {type(e).__name__}: {e}"}
    if specs:
        log(f"cache: AppTest render of {page.name} (the app's default selection), then re-renders")
        r = run_task("apptest", {"app": str(app), "page": str(page.relative_to(common.ROOT)), "reps": ctx.sizes.app_page_reps,
                                 "timeout": 600, "selection": override, "warmup_wait": 0 if ctx.quick else 240},
                     cache_dir=ctx.cache, timeout=1800)
    what = "Layers page re-render from cache (AppTest)"
    if r.get("status") != "ok":
        return r, f"**Page re-render from cache.** {status(r)}.", [what, "< 1 s", status(r), "n/a"]
    ok = median(r["rerender_s"]) < 1.0 and not r.get("exceptions")
    warm = (f" (--quick: the selection was overridden to {override} through the app's session state.)" if override else
            f" Waited {fs(r['umap_warmup_wait_s'])} for the UMAP warm-up (finished: {r.get('umap_warm')}).")
    runs = "; ".join(f"{sp.model} on {sp.corpus}, {sp.max_tokens:,} tokens" for sp in specs)
    md = (f"**Page re-render from cache** ({runs}): `app.py` {fs(r['app_first_render_s'])}, `{r['page']}` "
          f"{fs(r['page_first_render_s'])}, re-renders {' / '.join(map(fs, r['rerender_s']))}, median "
          f"**{fs(median(r['rerender_s']))}** (goal < 1 s: {met(ok)}).{warm} Exceptions: {r['exceptions'] or 'none'}; "
          f"errors shown: {r['errors_shown'] or 'none'}; Plotly charts on the page: {r['n_plotly_charts']}, tables: "
          f"{r['n_dataframes']}; torch imported by the app process: {r['torch_imported']}.")
    return r, md, [what, "< 1 s", fs(median(r["rerender_s"])), met(ok)]


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
    numba_env = {"NUMBA_CACHE_DIR": str(ctx.cache.parent / "numba-cache")} if s.umap_cold else None
    cold = {"status": "skipped", "reason": "--quick (a cold numba compile takes 30-55 s)"}  # then: warm fits in `project`
    if s.umap_cold:
        log(f"projection: UMAP cold (fresh process, empty numba cache), {len(X)} points, then warm fits")
        cold = run_task("umap", {"x_path": str(xp), "warm_reps": s.umap_reps, "cold": True}, env_extra=numba_env, timeout=900)
    rows = [["UMAP cold: fresh process, empty numba cache (import + JIT compile + fit)", fs(cold["total_s"]),
             f"import {fs(cold['import_s'])}, first fit {fs(cold['fit_s'])}"] if cold.get("status") == "ok" else
            ["UMAP cold: fresh process, empty numba cache", status(cold), ""]]
    Xd = X.astype(np.float64)
    pca_s = median(common.timeit(lambda: pca_2d(Xd), 5))
    log("projection: core.compute.projection.project in a fresh process: first call, then cache hits")
    pr = run_task("umap", {"x_path": str(xp), "warm_reps": 0 if s.umap_cold else s.umap_reps, "project_layer": layer,
                           "model": "minilm-l6", "tokens": s.cache_minilm_tokens, "cache_dir": str(ctx.cache)},
                  env_extra=numba_env, timeout=900)
    warm = cold.get("warm_s") or pr.get("warm_s")
    if warm:
        rows.append(["UMAP warm (same process, kernels compiled)", fs(median(warm)), "runs: " + " / ".join(map(fs, warm))])
    rows.append(["PCA (`core.compute.projection.pca_2d`)", fs(pca_s, 3), "median of 5"])
    for method in ("umap", "pca"):
        if method in pr:
            m, call = pr[method], f"`core.compute.projection.project(..., '{method}')`"
            rows += [[f"{call}, first call in a fresh process", fs(m["first_s"]), f"computes and stores (cached="
                      f"{m['first_cached']}); the {method} itself {fs(m.get('fit_s'))}; {fi(m['n_points'])} points"
                      + ("; numba's disk cache filled by the cold run" if method == "umap" and cold.get("status") == "ok"
                         else "")],
                     [f"{call}, cache hit", fs(median(m["hit_s"]), 3), "runs: " + " / ".join(fs(t, 3) for t in m["hit_s"])
                      + f" (cached={m['hit_cached']})"]]
    if pr.get("status") != "ok":
        rows.append(["`core.compute.projection.project`", status(pr), ""])
    md = [f"{fi(len(X))} points at d={X.shape[1]} (MiniLM-L6 sample of a {stats.n_tokens:,}-token run, layer {layer}).",
          (["What", "Time", "Detail"], rows)]
    if median((pr.get("umap") or {}).get("hit_s") or [0]) > 0.5:
        md += ["cProfile of a cached `project()` call (cumulative):",
               code(common.cprofile_table(lambda: project(spec, layer, "umap", cache_dir=ctx.cache), top=14))]
    return {"cold": cold, "pca_s": pca_s, "project": pr, "md": md}


# ----------------------------------------------------------------------------- 6. batching
def section_batching(ctx: Ctx) -> dict:
    """The tool's extraction at several batch sizes (alternating), and the padding of sorted and unsorted batches."""
    s = ctx.sizes
    lm, w, _, _, n = ctx.setup("minilm-l6", s.batching_tokens, "batching")
    _tool(lm, common.subset_windows(w, min(n, 1000)))  # warm-up
    times = common.alternate(s.batching_reps, {b: lambda b=b: _tool(lm, w, batch_size=b)[0] for b in s.batch_sizes})
    rows = []
    for b in s.batch_sizes:
        unsorted = [np.arange(i, min(i + b, len(w.ids))) for i in range(0, len(w.ids), b)]
        rows.append([f"{b}" + (" (default)" if b == BATCH else ""), len(plan_batches(w, b)), fi(n / median(times[b])),
                     fr(median(times[1]) / median(times[b]), 2) if 1 in times else "n/a",
                     f"{padding_fraction(w, plan_batches(w, b)):.1%}", f"{padding_fraction(w, unsorted):.1%}"])
    return {"times": times, "md": [f"{fi(n)} analysed tokens in {fi(len(w.ids))} windows, {s.batching_reps} alternating "
                                   "repetition(s).", (["Batch size", "Batches", "Tokens/s", "Speed vs batch 1",
                                                      "Padding (sorted)", "Padding (unsorted)"], rows)]}


# ----------------------------------------------------------------------------- 7. post-processing
def section_postproc(ctx: Ctx) -> dict:
    """Every sample metric of one layer after each post-processing choice."""
    from core.stats.assemble import sample_metrics  # lazy: plotly and pandas only for the commands that report a series

    log("post-processing: SmolLM2 statistics (a cache hit when section 4 ran)")
    st = get_stats(RunSpec(model="smollm2-135m", corpus=CORPUS, max_tokens=ctx.sizes.cache_smollm_tokens), cache_dir=ctx.cache)
    layer, reps = st.arrays["sample"].shape[0] // 2, ctx.sizes.post_reps  # the middle layer
    X = np.array(st.arrays["sample"][layer])
    dims = tuple(int(d) for d in persistent_activation_outliers(activation_outliers(st.arrays["sum_abs"] / st.arrays["n"])))
    dims = dims or (0,)
    choices = {"raw": PostProcess(), "center": PostProcess(center=True), "z-score": PostProcess(zscore=True),
               "all-but-the-top (D=3)": PostProcess(abtt=3), "whitening": PostProcess(whiten=True),
               f"remove outlier dims {list(dims)}": PostProcess(remove=dims),
               "remove outliers + center + ABTT-3": PostProcess(remove=dims, center=True, abtt=3)}
    sample_metrics(X)  # warm-up (BLAS threads, page faults)
    times = {name: median(common.timeit(lambda: sample_metrics(X, post), reps)) for name, post in choices.items()}
    log("post-processing: " + ", ".join(f"{k} {v:.3f} s" for k, v in times.items()))
    worst = max(times, key=times.get)
    md = [f"X = {X.shape[0]} x {X.shape[1]} float32, SmolLM2-135M sample of a {st.n_tokens:,}-token run, layer {layer}; "
          f"median of {reps} runs.",
          (["Post-processing", "Time", "Goal < 0.5 s"], [[k, fs(v, 3), met(v < 0.5)] for k, v in times.items()])]
    if times[worst] >= 0.5:
        md += [f"cProfile of the slowest choice ({worst}, cumulative):",
               code(common.cprofile_table(lambda: sample_metrics(X, choices[worst]), top=14))]
    return {"times": times, "md": md, "summary": [
        [f"All sample metrics of one layer after post-processing ({X.shape[0]} x {X.shape[1]}), slowest choice ({worst})",
         "< 0.5 s", fs(times[worst], 3), met(times[worst] < 0.5)]]}


# ----------------------------------------------------------------------------- 8. attention
def section_attention(ctx: Ctx) -> dict:
    """Attention statistics (core.studies.attention.extract_attention) vs the bare SDPA forward and vs the bare
    forward with output_attentions=True, same windows and batches; the model's attention afterwards."""
    rows, out = [], {"times": {}}
    for ident in ("minilm-l6", "smollm2-135m"):
        tokens = int(ctx.sizes.attention_tokens.get(ident, 40_000))
        if tokens <= 0:  # --set 'attention_tokens={"smollm2-135m": 0, ...}': this model is skipped
            log(f"attention: {ident} skipped (0 tokens)")
            continue
        lm, w, batches, pad, n = ctx.setup(ident, tokens, "attention")
        impl_before = getattr(lm.base.config, "_attn_implementation", None)
        dims = list(range(10))  # the link's cost depends on how many dims, not which

        def arms(ws, bs) -> dict:
            """Seconds of the bare SDPA forward, of the bare forward with eager attention and output_attentions=True
            (every layer's probabilities returned, nothing computed from them), and of the attention statistics."""
            def eager():
                with eager_attention(lm.base):
                    return common.bare_forward(lm.base, ws, bs, pad, output_attentions=True)

            return {"sdpa": lambda: common.bare_forward(lm.base, ws, bs, pad), "eager": eager,
                    "tool": lambda: common.seconds(lambda: extract_attention(lm.base, ws, dims, batch_size=BATCH, pad_id=pad))}

        warm = common.subset_windows(w, min(n, 600))
        for run in arms(warm, plan_batches(warm, BATCH)).values():  # warm-up, untimed
            run()
        out["times"][ident] = times = common.alternate(int(ctx.sizes.attention_reps), arms(w, batches))
        med = {k: median(v) for k, v in times.items()}
        impl_after = getattr(lm.base.config, "_attn_implementation", None)
        rows.append([lm.info.get("label", ident), fi(n), *(fi(n / med[k]) for k in ("sdpa", "eager", "tool")),
                     fr(med["eager"] / med["tool"]), fr(med["sdpa"] / med["tool"]), f"{impl_before} -> {impl_after}",
                     met(med["eager"] / med["tool"] >= 0.80 and impl_after == impl_before)])
    out["md"] = ["Goal: at least 0.8 of the eager forward's throughput.",
                 (["Model", "Tokens", "Bare SDPA tok/s", "Bare eager + output_attentions tok/s", "Attention statistics tok/s",
                   "vs eager", "vs SDPA", "attention impl.", "Goal"], rows)]
    mem, peaks = [], []
    for n in ctx.sizes.attention_memory_tokens:  # the peak does not grow with the corpus: one fresh process per size
        log(f"attention: memory of minilm-l6 at {n:,} tokens, in a fresh process")
        r = run_task("attention_memory", {"model": "minilm-l6", "tokens": n}, cache_dir=ctx.cache, timeout=3600)
        peaks.append(r.get("peak_rss_bytes"))  # the worker's VmHWM at its end
        mem.append([f"{n:,} ({fi(r.get('tokens_fed'))})", status(r), fi(r.get("n_windows")), r.get("longest_window", ""),
                    fs(r.get("seconds"), 1), fb(r.get("hwm_before_bytes")), fb(peaks[-1])])
    if mem:
        out["runs_memory"] = peaks
        out["md"] += ["**Memory**: MiniLM-L6's `extract_attention` alone (batch 16, 10 dims), each size in its own fresh "
                      "process; peak = the process's high-water RSS (`VmHWM`).",
                      (["Tokens (fed)", "Status", "Windows", "Longest window", "Time", "RSS after load + tokenize",
                        "Peak RSS"], mem)] + ([f"Ratio of peaks largest / smallest: **{fr(peaks[-1] / peaks[0])}**."]
                                              if len(peaks) > 1 and all(peaks) else [])
    return out


# ----------------------------------------------------------------------------- partial results (issue 26)
def section_partial(ctx: Ctx) -> dict:
    """The extraction without and with partial results published to the job queue's store (A B B A ...): what the
    live curves cost; the loop's own account times the publishing against the forward pass."""
    tokens, reps = ctx.sizes.partial_tokens, ctx.sizes.partial_reps
    lm, w, batches, pad, n = ctx.setup("minilm-l6", tokens, "partial")
    spec = RunSpec(model="minilm-l6", corpus=CORPUS, max_tokens=tokens)
    run, job, published = resolve(spec, ctx.cache), Running(Job("bench-partial", "analyze", {}), ctx.cache), []

    def publish(res: dict) -> None:  # a job's own publishing: the partial results into the queue's store
        job.publish_partial(res)
        published.append(res["partial"]["tokens"])

    def once(live: bool) -> tuple[float, dict, int]:
        published.clear()
        hook = PartialHook(publish, run.key, spec, run.parts) if live else None
        if hook:
            hook.start(lm, {"id": CORPUS})
        t0 = time.perf_counter()
        _, timing = extract_stats(lm.base, w, batch_size=BATCH, sample_size=SAMPLE, seed=SEED, pad_id=pad, partial=hook)
        return time.perf_counter() - t0, timing, len(published)

    once(False)  # warm-up (allocator, kernels)
    runs = common.alternate(reps, {"plain": lambda: once(False), "live": lambda: once(True)})
    ab = common.ab_ratio([x[0] for x in runs["plain"]], [x[0] for x in runs["live"]], n, 0.98)
    shares = [t["partial_s"] / t["forward_s"] for _, t, _ in runs["live"]]
    label = lm.info.get("label", "minilm-l6")
    return {"times": {k: [x[0] for x in v] for k, v in runs.items()}, "summary": [
        [f"Extraction publishing partial results / without, {label} ({fi(n)} tokens)", ">= 0.98", fr(ab["ratio"]),
         met(ab["met"])]], "md": [(["Model", "Tokens", "Batches", "Reps", "Without tok/s", "With tok/s", "Ratio (range)",
                                    "Goal: cost <= 2%", "Loop's own account: time publishing / forward (median, max)",
                                    "Partial results per run"],
                                   [[label, fi(n), len(batches), reps, *ab["cells"],
                                     f"{median(shares):.2%}, {max(shares):.2%}", ", ".join(str(k) for *_, k in runs["live"])]])]}


from bench.chain import section_chain  # noqa: E402, F401 - sections of their own modules
from bench.geometry import section_geometry  # noqa: E402, F401
from bench.modalities import section_modalities  # noqa: E402, F401

SECTIONS = {name: globals()[f"section_{name}"] for name in TITLES}  # bench.report's sections, one function each

