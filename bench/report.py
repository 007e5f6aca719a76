"""The markdown of `python -m bench`: each section's measured figures, for its markers in BENCHMARKS.md.

The method of each section is written once in BENCHMARKS.md, above its markers; here only what a run measured
(tables, the sentences that hold a figure or a parameter of the run, met or missed).
"""

from __future__ import annotations

from bench.common import code, fb, fi, finite, fr, fs, ftps, median, met, put_section, table


def _status(r: dict) -> str:
    st = r.get("status", "ok")
    if st == "ok":
        return "ok"
    if st == "oom":
        where = f" during {r['oom_stage']}" if r.get("oom_stage") else ""
        msg = f" (`{r['error'][:120]}`)" if r.get("error") else ""
        return f"out of memory{where}{msg}"
    if st == "skipped":
        return f"not run: {r.get('reason', '')}"
    return f"{st}: {(r.get('error') or '')[-160:]}"


# ----------------------------------------------------------------------------- the run: machine and summary
def render_run(meta: dict, sec: dict) -> str:
    m, v = meta["machine"], meta["machine"].get("versions", {})
    out = [f"Written by `{meta['command']}` (bench v{meta.get('bench_version')})."]
    if meta.get("quick"):
        out += ["", "> **QUICK MODE**: tiny sizes that only check that every section runs; `python -m bench` measures."]
    if meta.get("overrides"):
        out += ["", f"> Sizes overridden on the command line: {meta['overrides']}: not the standard benchmark."]
    if meta.get("only"):
        out += ["", f"Sections run: {', '.join(meta['only'])}."]
    share = meta.get("cpu_share") or {}
    rows = [
        ["CPU", m.get("cpu_model")],
        ["Cores", f"{m.get('logical_cores')} logical, {m.get('usable_cores')} usable; torch threads: {m.get('torch_threads')}"],
        ["RAM", fb(m.get("ram_bytes"))], ["OS", m.get("os")], ["Python", v.get("python")], ["torch", v.get("torch")],
        ["transformers", v.get("transformers")], ["numpy / scikit-learn", f"{v.get('numpy')} / {v.get('scikit-learn')}"],
        ["umap-learn / numba", f"{v.get('umap-learn')} / {v.get('numba')}"], ["Date (UTC)", m.get("date_utc")],
        ["Load average at start / end", f"{m.get('loadavg_start')} / {meta.get('loadavg_end')}"],
        ["CPU steal / idle share during the run",
         f"{share.get('steal', float('nan')):.1%} / {share.get('idle', float('nan')):.1%}" if share else "n/a"],
        ["Duration of the run", fs(meta.get("duration_s"), 0)]]
    out += ["", "## Machine", "", table(["", ""], rows)]
    warn = noise_warning(meta)
    if warn:
        out += ["", f"> **Warning:** {warn}"]
    out += ["", "## Summary", "", table(["Figure", "Goal", "Measured", "Status"], summary_rows(sec)), "",
            "Sizes: " + ", ".join(f"{k}={v}" for k, v in meta.get("sizes", {}).items()) + "."]
    return "\n".join(out)


def noise_warning(meta: dict) -> str | None:
    m = meta["machine"]
    cores = m.get("usable_cores") or m.get("logical_cores") or 1
    la = (m.get("loadavg_start") or [0])[0]
    steal = (meta.get("cpu_share") or {}).get("steal", 0.0)
    bits = []
    if la > 0.5 * cores:
        bits.append(f"the 1-minute load average was {la} on {cores} cores when the run started")
    if steal > 0.02:
        bits.append(f"{steal:.1%} of CPU time was stolen by the hypervisor")
    if not bits:
        return None
    return "the machine was not quiet (" + "; ".join(bits) + "): ratios still compare like with like, but the spread is wider."


def summary_rows(sec: dict) -> list[list]:
    rows = []
    o = sec.get("overhead") or {}
    for m in o.get("models", []):
        rows.append([f"Extraction vs bare forward, {m['label']} ({fi(m['tokens_analysed'])} tokens)", ">= 0.90",
                     fr(m["ratio"]), met(m["met"])])
    p = sec.get("peers") or {}
    for r in p.get("rows", []):
        sp = r.get("tool_vs_sampled_speed")
        rows.append([f"Tool end to end vs per-document peer, speed ({fi(r['tokens'])} tokens)", ">= 1.0",
                     fr(sp, 2) if sp else _status(r["sampled"]) if r["sampled"].get("status") != "ok" else _status(r["tool"]),
                     met(sp >= 1.0) if sp else "n/a"])
    exact = [r for r in p.get("rows", []) if finite(r["allpairs"].get("max_abs_err_vs_exact"))]
    if exact:
        r = exact[-1]
        rows.append([f"Tool's streamed mean cosine vs the all-pairs N x N computation ({fi(r['tokens'])} tokens), "
                     "max abs difference over layers", "exact", f"{r['allpairs']['max_abs_err_vs_exact']:.1e}",
                     met(r["allpairs"]["max_abs_err_vs_exact"] < 1e-6)])
    samp = [r for r in p.get("rows", []) if finite(r["sampled"].get("max_abs_err_vs_exact"))]
    if samp:
        rows.append([f"Sampled-pairs peer's error vs the tool's exact value ({fi(p.get('pairs'))} pairs), max over "
                     "layers and sizes", "(the peer samples)", f"{max(r['sampled']['max_abs_err_vs_exact'] for r in samp):.1e}",
                     "info"])
    if p.get("tool_peak_growth"):
        toks = [r["tokens"] for r in p["rows"]]
        rows.append([f"Peak RSS growth {fi(toks[0])} -> {fi(toks[-1])} tokens: tool / peer", "flat (tool)",
                     f"{fr(p['tool_peak_growth'], 2)} / {fr(p.get('peer_peak_growth'), 2)}", "see section 2"])
    mem = sec.get("memory") or {}
    if mem.get("ratio"):
        a, b = (r["tokens"] for r in mem["rows"])
        rows.append([f"Peak RSS {fi(b)} / {fi(a)} tokens", "<= 1.10", fr(mem["ratio"]), met(mem["met"])])
    c = sec.get("cache") or {}
    for r in c.get("runs", []):
        if r.get("status") == "error":
            rows.append([f"Repeated `python -m core analyze`, {r['model']}", "< 2 s", _status(r), "n/a"])
            continue
        rows.append([f"Repeated `python -m core analyze` ({r['model']}, {fi(r['tokens_analysed'])} tokens, "
                     f"sample {fi(r['sample'])} x {r['n_layers']} layers)", "< 2 s, no torch",
                     f"{fs(r['repeat_median_s'])}, torch imported: {r['torch_imported']}", met(r["met"])])
    pg = c.get("page")
    if pg:
        ok = pg.get("status") == "ok"
        rows.append(["Layers page re-render from cache (AppTest)", "< 1 s",
                     fs(pg["rerender_median_s"]) if ok else _status(pg), met(pg.get("met")) if ok else "n/a"])
    pp = sec.get("postproc") or {}
    if pp.get("rows"):
        worst = max(pp["rows"], key=lambda r: r["median_s"])
        rows.append([f"All sample metrics of one layer after post-processing ({pp['shape'][0]} x {pp['shape'][1]}), "
                     f"slowest choice ({worst['post']})", "< 0.5 s", fs(worst["median_s"], 3), met(pp["met"])])
    for m in (sec.get("geometry") or {}).get("models", []):
        rows.append([f"Intrinsic dimension, matrix entropy and CKA on top of a default run ({m['model']}, "
                     f"{fi(m['tokens_analysed'])} tokens, sample {fi(m['sample'])})", "<= 0.10", fr(m["ratio"]),
                     met(m["met"])])
    for m in (sec.get("chain") or {}).get("models", []):
        rows.append([f"Extraction with the chain's extra statistics / without, {m['label']} ({fi(m['tokens_analysed'])} "
                     "tokens)", ">= 0.95", fr(m["ratio"]), met(m["met"])])
    return rows


# ----------------------------------------------------------------------------- sections
def render_overhead(o: dict) -> str:
    rows = [[m["label"], f"{fi(m['tokens_analysed'])} ({fi(m['tokens_fed'])} fed)", m["n_batches"],
             f"{m['padding_fraction']:.1%}", m["reps"], ftps(m["bare_tokens_per_s"]), ftps(m["tool_tokens_per_s"]),
             _ratio_range(m), met(m["met"])] for m in o.get("models", [])]
    out = [table(["Model", "Tokens analysed", "Batches", "Padding", "Reps", "Bare tok/s", "Tool tok/s", "Ratio (range)",
                  "Goal >= 0.90"], rows)]
    for m in o.get("models", []):
        if m.get("tokens_requested") and m["tokens_requested"] < 40_000:
            out += ["", f"Note: {m['label']} was run at {fi(m['tokens_requested'])} requested tokens, not 40,000."]
        pr = m.get("profile")
        if pr:
            out += ["", f"**Why {m['label']} misses the goal** - torch.profiler, self CPU time by op on the first "
                    f"{fi(pr['tokens'])} tokens (bare {pr['total_bare_ms']:.0f} ms, tool {pr['total_tool_ms']:.0f} ms), "
                    "by the tool's extra time:", "",
                    table(["op", "bare ms", "tool ms", "extra ms", "calls bare", "calls tool"],
                          [[r["op"], f"{r['bare_ms']:.1f}", f"{r['tool_ms']:.1f}", f"{r['extra_ms']:+.1f}",
                            r["bare_calls"], r["tool_calls"]] for r in pr["rows"]])]
            tb, tt = pr["total_bare_ms"], pr["total_tool_ms"]
            if tt > 0:
                prof_share, gap = max(tt - tb, 0.0) / tt, 1 - m["ratio"]
                out += ["", f"In the profile the tool's extra ops take {prof_share:.1%} of its time, against a measured "
                        f"gap of {gap:.1%} (1 - ratio)." + (" Most of the gap is the machine's variation between "
                                                            "repetitions (see the per-pair range)."
                                                            if prof_share < 0.5 * gap else "")]
    return "\n".join(out)


def render_peers(p: dict) -> str:
    out = [f"Sampled pairs: {fi(p.get('pairs'))}; the all-pairs peer's address space is capped at "
           f"{fb(p.get('cap_bytes'))} above its size after loading the model.", ""]
    rows = []
    for r in p.get("rows", []):
        for key, name in (("tool", "tool (exact)"), ("sampled", "peer, sampled pairs"), ("allpairs", "peer, all pairs")):
            x = r[key]
            if x.get("status") == "ok":
                err = x.get("max_abs_err_vs_exact")
                err_s = "0 (reference)" if key == "tool" else (f"{err:.2e}" if finite(err) else "n/a")
                speed = r.get(f"tool_vs_{key}_speed")
                rows.append([fi(r["tokens"]), name, "ok", fs(x["seconds"]), ftps(x.get("tokens_per_s")),
                             fb(x["peak_rss_bytes"]), err_s, fr(speed, 2) if speed else ""])
            else:
                rows.append([fi(r["tokens"]), name, _status(x), fs(x.get("seconds")), "", fb(x.get("peak_rss_bytes"))
                             if x.get("status") != "skipped" else "", "", ""])
    out += [table(["Tokens", "Run", "Status", "Time", "Tokens/s", "Peak RSS", "Max abs error of mean cosine "
                   "vs the tool's exact value (over layers)", "Tool speed / this run's"], rows), ""]
    oom = p.get("allpairs_oom_at")
    if p.get("allpairs_failed_at") and not oom:
        out.append(f"The all-pairs peer failed at {fi(p['allpairs_failed_at'])} tokens ({p.get('allpairs_failure')}), "
                   "not with MemoryError: see the table.")
    elif oom:
        out.append(f"The all-pairs peer ran out of memory at {fi(oom)} tokens: one float32 N x N matrix is "
                   f"{fb(4 * oom * oom)} there (twice that with the off-diagonal copy), {fb(4 * 200_000**2)} at 200,000 "
                   "tokens; larger sizes were not attempted.")
    else:
        out.append("The all-pairs peer did not run out of memory at these sizes under this cap.")
    if p.get("tool_peak_growth"):
        out.append(f"Peak RSS from the smallest to the largest size grew x{fr(p['tool_peak_growth'], 2)} for the tool "
                   f"and x{fr(p.get('peer_peak_growth'), 2)} for the sampled-pairs peer (which keeps every hidden state).")
    stages = [[fi(r["tokens"]), key, ", ".join(f"{k} {v:.2f}" for k, v in (r[key].get("seconds_by_stage") or {}).items()),
               _by_stage(r[key])] for r in p.get("rows", []) for key in ("tool", "sampled", "allpairs")
              if r[key].get("rss_by_stage")]
    if stages:
        out += ["", "<details><summary>Time and peak RSS by stage (RSS sampled every 20 ms)</summary>", "",
                table(["Tokens", "Run", "Seconds per stage", "Max RSS per stage"], stages), "", "</details>"]
    for r in p.get("rows", []):  # where the tool is slower than the sampled peer: forward vs fixed costs
        ts, ps = r["tool"].get("seconds_by_stage") or {}, r["sampled"].get("seconds_by_stage") or {}
        if (r.get("tool_vs_sampled_speed") or 1.0) < 1.0 and "forward" in ts and "forward+gather" in ps:
            fixed = ", ".join(f"{k} {v:.2f} s" for k, v in ts.items() if k in ("fingerprints", "metrics"))
            out += ["", f"**Where the time goes at {fi(r['tokens'])} tokens**: the forward pass takes {ts['forward']:.2f} s "
                    f"in the tool (streaming statistics and sample included) vs {ps['forward+gather']:.2f} s in the "
                    f"peer's forward+gather. The rest is fixed work that does not grow with the corpus: {fixed} (every "
                    "layer's sample metrics, which the peer does not compute); past a few tens of thousands of tokens "
                    "the tool is faster (table above)."]
    if p.get("profile"):
        out += ["", f"**Why the tool is slower than the peer** - cProfile of `python -m core analyze` at "
                f"{fi(p['profile']['tokens'])} tokens (cumulative):", "", code(p["profile"]["table"])]
    return "\n".join(out)


def _by_stage(r: dict) -> str:
    return ", ".join(f"{k} {fb(v)}" for k, v in (r.get("rss_by_stage") or {}).items())


def _ratio_range(m: dict) -> str:
    return f"**{fr(m['ratio'])}** ({fr(m['pair_ratio_min'])}-{fr(m['pair_ratio_max'])})"


def _runs(ts, nd: int = 2) -> str:
    return " / ".join(fs(t, nd) for t in ts)


def render_memory(m: dict) -> str:
    rows = [[fi(r["tokens"]), _status(r), fs(r.get("seconds")), fb(r.get("peak_rss_bytes")), _by_stage(r)]
            for r in m.get("rows", [])]
    out = [f"Batch {m.get('batch_size')}, sample {m.get('sample')}.", "",
           table(["Tokens", "Status", "Time", "Peak RSS", "Max RSS per stage"], rows)]
    if m.get("ratio"):
        out += ["", f"Ratio of peaks: **{fr(m['ratio'])}** (goal <= 1.10: {met(m['met'])})."]
    return "\n".join(out)


def render_cache(c: dict) -> str:
    rows = []
    for r in c.get("runs", []):
        if r.get("status") == "error":
            rows.append([r["model"], "", "", _status(r), "", "", ""])
            continue
        rows.append([r["model"], f"{fi(r['tokens_analysed'])}, sample {fi(r['sample'])} x {r['n_layers']} layers "
                     f"({fb(r['stats_sample_bytes'])})", fs(r["first_s"]),
                     _runs(r["repeat_s"]) + f" (median **{fs(r['repeat_median_s'])}**)",
                     str(r["torch_imported"]), ", ".join(r.get("heavy_modules") or []) or "none", met(r["met"])])
    out = [table(["Model", "Tokens, sample", "First (computes)", "Repeats", "torch imported", "Heavy modules imported",
                  "Goal < 2 s, no torch"], rows)]
    if c.get("note"):
        out += ["", c["note"] + "."]
    for r in c.get("runs", []):
        if r.get("profile"):
            out += ["", f"**Why the repeat for {r['model']} misses the goal** - cProfile of the cache-hit path "
                    "(cumulative):", "", code(r["profile"])]
    pg = c.get("page") or {}
    if pg.get("status") != "ok":
        return "\n".join(out + ["", f"**Page re-render from cache.** {_status(pg)}."])
    warm = ""
    if pg.get("selection_override"):
        warm = f" (--quick: the selection was overridden to {pg['selection_override']} through the app's session state.)"
    elif "umap_warmup_wait_s" in pg:
        warm = f" Waited {fs(pg['umap_warmup_wait_s'])} for the UMAP warm-up (finished: {pg.get('umap_warm')})."
    out += ["", f"**Page re-render from cache** ({'; '.join(pg.get('runs') or [])}): `app.py` "
            f"{fs(pg.get('app_first_render_s'))}, `{pg.get('page')}` {fs(pg.get('page_first_render_s'))}, re-renders "
            f"{_runs(pg['rerender_s'])}, median **{fs(pg['rerender_median_s'])}** (goal < 1 s: {met(pg.get('met'))})."
            f"{warm} Exceptions: {pg.get('exceptions') or 'none'}; errors shown: {pg.get('errors_shown') or 'none'}; "
            f"Plotly charts on the page: {pg.get('n_plotly_charts')}, tables: {pg.get('n_dataframes')}; torch imported "
            f"by the app process: {pg.get('torch_imported')}."]
    return "\n".join(out)


def render_projection(p: dict) -> str:
    rows = []
    cold = p.get("cold") or {}
    if cold.get("status") == "ok":
        rows.append(["UMAP cold: fresh process, empty numba cache (import + JIT compile + fit)", fs(cold["total_s"]),
                     f"import {fs(cold['import_s'])}, first fit {fs(cold['fit_s'])}"])
    else:
        rows.append(["UMAP cold: fresh process, empty numba cache", _status(cold), ""])
    if p.get("warm_s"):
        rows.append(["UMAP warm (same process, kernels compiled)", fs(p.get("warm_median_s")), "runs: " + _runs(p["warm_s"])])
    rows.append(["PCA (`core.compute.projection.pca_2d`)", fs(p.get("pca_median_s"), 3), "median of 5"])
    for method in ("umap", "pca"):
        pr = p.get(f"project_{method}") or {}
        if pr:
            rows.append([f"`core.compute.projection.project(..., '{method}')`, first call in a fresh process",
                         fs(pr["first_s"]), f"computes and stores (cached={pr['first_cached']}); "
                         f"the {method} itself {fs(pr.get('fit_s'))}; {fi(pr['n_points'])} points"
                         + ("; numba's disk cache filled by the cold run"
                            if method == "umap" and cold.get("status") == "ok" else "")])
            rows.append([f"`core.compute.projection.project(..., '{method}')`, cache hit", fs(pr["hit_median_s"], 3),
                         "runs: " + _runs(pr["hit_s"], 3) + f" (cached={pr['hit_cached']})"])
    if (p.get("project_status") or {}).get("status") not in (None, "ok"):
        rows.append(["`core.compute.projection.project`", _status(p["project_status"]), ""])
    out = [f"{fi(p.get('n_points'))} points at d={p.get('d')} ({p.get('source')}).", "",
           table(["What", "Time", "Detail"], rows)]
    if p.get("project_profile"):
        out += ["", "cProfile of a cached `project()` call (cumulative):", "", code(p["project_profile"])]
    return "\n".join(out)


def render_batching(b: dict) -> str:
    rows = [[f"{r['batch_size']}" + (" (default)" if r["default"] else ""), r["n_batches"], ftps(r["tokens_per_s"]),
             fr(r["speedup_vs_1"], 2) if r.get("speedup_vs_1") else "n/a", f"{r['padding_fraction']:.1%}",
             f"{r['padding_fraction_unsorted']:.1%}"] for r in b.get("rows", [])]
    return "\n".join([f"{fi(b.get('tokens_analysed'))} analysed tokens in {fi(b.get('n_windows'))} windows, "
                      f"{b.get('reps')} alternating repetition(s).", "",
                      table(["Batch size", "Batches", "Tokens/s", "Speed vs batch 1", "Padding (sorted)",
                             "Padding (unsorted)"], rows)])


def render_postproc(p: dict) -> str:
    out = [f"X = {p['shape'][0]} x {p['shape'][1]} float32, {p.get('source')}, layer {p.get('layer')}; median of "
           f"{p.get('reps')} runs.", "",
           table(["Post-processing", "Time", "Goal < 0.5 s"], [[r["post"], fs(r["median_s"], 3), met(r["met"])]
                                                               for r in p.get("rows", [])])]
    if p.get("profile"):
        out += ["", f"cProfile of the slowest choice ({p['profile']['post']}, cumulative):", "", code(p["profile"]["table"])]
    return "\n".join(out)


def render_attention(a: dict) -> str:
    rows = [[r["label"], fi(r["tokens_analysed"]), *(ftps(r["tokens_per_s"][k]) for k in ("sdpa", "eager", "tool")),
             fr(r["ratio_vs_eager"]), fr(r["ratio_vs_sdpa"]),
             f"{r['attn_implementation_before']} -> {r['attn_implementation_after']}", met(r["met"])]
            for r in a.get("models", [])]
    return "\n".join([f"Goal: at least {a.get('goal')} of the eager forward's throughput.", "",
                      table(["Model", "Tokens", "Bare SDPA tok/s", "Bare eager + output_attentions tok/s",
                             "Attention statistics tok/s", "vs eager", "vs SDPA", "attention impl.", "Goal"], rows)])


def render_chain(a: dict) -> str:
    rows = [[r["label"], fi(r["tokens_analysed"]), str(r["reps"]), *(ftps(r["tokens_per_s"][k]) for k in
                                                                      ("base", "chain", "hooks")),
             fr(r["ratio"]), fr(r["ratio_hooks"]), " ".join(f"{v:.3f}" for v in r["pair_ratio"]), fr(r.get("cpu_ratio")),
             fr(r.get("cpu_ratio_hooks")),
             f"{r['sections_share']:.1%}, {fr(r['extraction_ratio'])}" if "sections_share" in r else "n/a", met(r["met"])]
            for r in a.get("models", [])]
    return "\n".join([f"Goal: chain >= {a.get('goal')} x base. Medians:", "",
                      table(["Model", "Tokens", "Reps", "Base tok/s", "Chain tok/s", "Chain + hooks tok/s", "Chain / base",
                             "Chain + hooks / base", "Per-rep chain/base", "CPU time: chain / base", "CPU time: chain + "
                             "hooks / base", "Own account: sections / base, extraction alone base / (chain - sections)",
                             "Goal"], rows)])


def render_gpu(g: dict) -> str:
    """The GPU section's figures (`python -m bench --device cuda`)."""
    m = g.get("meta", {})
    out = [f"Measured on {g.get('device')} ({m.get('date_utc', '')}; torch {m.get('torch', '')}, transformers "
           f"{m.get('transformers', '')}), dtype {g.get('dtype')}, batch {g.get('batch_size')}, "
           f"{fi(g.get('tokens_requested'))} tokens requested per model, {g.get('reps')} alternating repetitions; "
           f"command `{m.get('command', '')}`. Peak bf16 (dense) assumed: {g.get('peak_tflops') or 'unknown'} TFLOP/s.", ""]
    rows = []
    for r in g.get("models", []):
        if r.get("status") != "ok":
            rows.append([r["model"], _status(r), "", "", "", "", "", ""])
            continue
        mfu = f"{r['mfu']:.1%}" if finite(r.get("mfu")) else "n/a"
        rows.append([r["model"], f"{r['n_params'] / 1e6:,.0f}M", fi(r["tokens_analysed"]), ftps(r["bare_tokens_per_s"]),
                     ftps(r["tool_tokens_per_s"]), f"**{fr(r['ratio'])}**",
                     f"{r['tflops']:.1f} ({r['tflops_non_embedding']:.1f} non-emb.)", mfu,
                     fb(r.get("max_memory_allocated_bytes"))])
    out.append(table(["Model", "Params", "Tokens", "Bare tok/s", "Tool tok/s", "Tool / bare", "Forward TFLOP/s",
                      "of peak", "Max GPU memory"], rows))
    peers = [(r["model"], r["peer"]) for r in g.get("models", []) if r.get("peer")]
    if peers:
        out += ["", "**The tool vs the per-document peer on the GPU:**", "",
                table(["Model", "Tokens", "Tool", "Peer", "Tool speed / peer's"],
                      [[m, fi(p["tokens"]), fs(p["tool_s"]), fs(p["peer_s"]), f"**{p['speedup']:.1f}x**"] for m, p in peers])]
    d = g.get("distributed")
    if d:
        runs = [k for k in d if isinstance(d[k], dict) and "wall_s" in d[k]]
        out += ["", f"**torchrun** ({d['model']}, {fi(d.get('tokens_analysed') or d['tokens_requested'])} tokens, "
                f"{d['nproc']} NCCL rank(s)): max relative difference of the exact metrics vs one process "
                f"{d.get('max_rel_diff_exact', 'n/a')}, same sample bit for bit: {d.get('sample_identical', 'n/a')}, "
                f"sample metrics identical: {d.get('sample_metrics_identical', 'n/a')}, same cache key: "
                f"{d.get('same_cache_key', 'n/a')}.", "",
                table(["Run", "Wall time (process start included)", "Forward", "Status"],
                      [[k, fs(d[k]["wall_s"]), fs((d.get("forward_s") or {}).get(k)),
                        "ok" if d[k]["returncode"] == 0 else f"failed: {d[k]['stderr_tail']}"] for k in runs])]
    return "\n".join(out)


def render_modalities(o: dict) -> str:
    rows = [[m["label"], m["corpus"], f"{fi(m['positions_analysed'])} ({fi(m['positions_fed'])} fed)", m["items"],
             m["reps"], ftps(m["bare_per_s"]), ftps(m["tool_per_s"]), _ratio_range(m), met(m["met"])]
            for m in o.get("models", [])]
    return table(["Model", "Corpus", "Positions analysed", "Items", "Reps", "Bare pos/s", "Tool pos/s", "Ratio (range)",
                  "Goal >= 0.90"], rows)


def render_geometry(o: dict) -> str:
    rows = []
    for m in o.get("models", []):
        p = m.get("parts_s", {})
        lens = (f"{fs(median(m['lens_s']))} on {m['lens_positions']} positions: **{fr(m['lens_ratio'])}**"
                if m.get("lens_s") else "n/a (no LM head)")
        rows.append([m["model"], fi(m["tokens_analysed"]), m["n_layers"], fi(m["sample"]), m["reps"],
                     f"{fs(median(m['run_s']))} ({fs(median(m.get('run_cpu_s', [])))} CPU)",
                     f"{fs(median(m['new_s']))} ({fs(median(m.get('new_cpu_s', [])))} CPU)",
                     f"per layer {fs(p.get('per_layer'))}, CKA {fs(p.get('cka'))}, baselines {fs(p.get('isotropic'))}",
                     f"**{fr(m['ratio'])}** (CPU {fr(m.get('ratio_cpu'))})", met(m["met"]), lens])
    return "\n".join([f"The app's default run: wiki-en, {fi(o.get('tokens'))} tokens, sample {fi(o.get('sample'))}.", "",
                      table(["Model", "Tokens", "Layers", "Sample", "Reps", "Run", "New statistics", "Parts",
                             f"Ratio (goal <= {o.get('goal')})", "Status", "Logit lens (opt-in): time, ratio"], rows)])


# section -> (its title where a file has no such section yet, its renderer), in the order of a new file
RENDERERS = {"overhead": ("1. Extraction overhead: the tool vs the bare forward pass", render_overhead),
             "peers": ("2. The tool end to end vs a naive per-document peer", render_peers),
             "memory": ("3. Memory: peak RSS does not grow with the corpus", render_memory),
             "cache": ("4. Cache hits", render_cache), "projection": ("5. Projections", render_projection),
             "batching": ("6. Batch size and padding", render_batching),
             "postproc": ("7. Post-processing what-ifs", render_postproc),
             "attention": ("8. Attention statistics", render_attention),
             "modalities": ("9. Other modalities: extraction overhead for a vision and a speech Transformer",
                            render_modalities),
             "chain": ("The outlier chain's extra statistics (issue 24)", render_chain),
             "geometry": ("Geometry statistics (issue 25): their cost at the default size", render_geometry)}
GPU_TITLE = "GPU"


def render_blocks(results: dict) -> list[tuple[str, str | None, str]]:
    """(marker name, title, figures) of the run and of each section measured. A run of some sections only
    (--only) says when and where at the top of each section."""
    meta, sec = results["meta"], results["sections"]
    m = meta["machine"]
    la = [f"{(x or [float('nan')])[0]:.2f}" for x in (m.get("loadavg_start"), meta.get("loadavg_end"))]
    apart = (f"Measured {m.get('date_utc')} by `{meta['command']}` on {m.get('cpu_model')}, {m.get('usable_cores')} "
             f"usable cores (1-minute load average {la[0]} at the start, {la[1]} at the end).\n\n" if meta.get("only") else "")
    blocks = [("run", None, render_run(meta, sec))]
    for name, (title, fn) in RENDERERS.items():
        r = sec.get(name)
        if r is None:
            continue
        if isinstance(r, dict) and r.get("section_error"):
            blocks.append((name, title, apart + f"This section failed: `{r['section_error']}`\n\n"
                           + code(r.get("traceback", ""))))
        else:
            blocks.append((name, title, apart + fn(r)))
    return blocks


def render_doc(results: dict, text: str | None = None) -> str:
    """`text` (a markdown file's, or a new one) with the run's blocks written in (bench.common.put_section). A run
    of some sections only leaves the run block of `text` alone: its machine and summary are a full run's."""
    for name, title, body in render_blocks(results):
        if not (name == "run" and results["meta"].get("only") and text and "<!-- bench:run:start -->" in text):
            text = put_section(text, name, body, title)
    return text
