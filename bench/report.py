"""The markdown of `python -m bench`: the run's machine and summary, and each section's measured figures, for their
markers in BENCHMARKS.md.

A section hands over its figures as markdown blocks (`md`: a sentence, or a table as (header, rows)) and the rows it
adds to the summary (`summary`: figure, goal, measured, status); `blocks` is the one renderer of both. The method of
each section is written once in BENCHMARKS.md, above its markers; here only what a run measured.
"""

from __future__ import annotations

from bench.common import BUSY, code, fb, fi, fr, fs, put_section, status, table

# section -> its title where a file has no such section yet, in the order of a new file
TITLES = {"overhead": "1. Extraction overhead: the tool vs the bare forward pass",
          "peers": "2. The tool end to end vs a naive per-document peer",
          "memory": "3. Memory: peak RSS does not grow with the corpus", "cache": "4. Cache hits",
          "projection": "5. Projections", "batching": "6. Batch size and padding", "postproc": "7. Post-processing what-ifs",
          "attention": "8. Attention statistics",
          "modalities": "9. Other modalities: extraction overhead for a vision and a speech Transformer",
          "chain": "The outlier chain's extra statistics (issue 24)",
          "geometry": "Geometry statistics (issue 25): their cost at the default size",
          "partial": "Live curves: what publishing partial results costs the extraction"}
GPU_TITLE = "GPU"


def blocks(md: list) -> str:
    """Markdown blocks, one paragraph each: a string as it is, a (header, rows) pair as a table."""
    return "\n\n".join(b if isinstance(b, str) else table(*b) for b in md)


def render_run(meta: dict, summary: list[list]) -> str:
    """The run's block: its command, the machine, the summary of every section's goals, the sizes."""
    m, v = meta["machine"], meta["machine"].get("versions", {})
    share = meta.get("cpu_share") or {}
    out = [f"Written by `{meta['command']}` (bench v{meta.get('bench_version')})."]
    if meta.get("quick"):
        out.append("> **QUICK MODE**: tiny sizes that only check that every section runs; `python -m bench` measures.")
    if meta.get("overrides"):
        out.append(f"> Sizes overridden on the command line: {meta['overrides']}: not the standard benchmark.")
    if meta.get("only"):
        out.append(f"Sections run: {', '.join(meta['only'])}.")
    out += ["## Machine", (["", ""], [
        ["CPU", m.get("cpu_model")],
        ["Cores", f"{m.get('logical_cores')} logical, {m.get('usable_cores')} usable; torch threads: {m.get('torch_threads')}"],
        ["RAM", fb(m.get("ram_bytes"))], ["OS", m.get("os")], *([k, x] for k, x in v.items()),  # Python and the libraries
        ["Date (UTC)", m.get("date_utc")],
        ["Load average at start / end", f"{m.get('loadavg_start')} / {meta.get('loadavg_end')}"],
        ["CPU steal / idle share during the run", f"{share['steal']:.1%} / {share['idle']:.1%}" if share else "n/a"],
        ["Duration of the run", fs(meta.get("duration_s"), 0)]])]
    cores = m.get("usable_cores") or m.get("logical_cores") or 1
    la, steal, noise = (m.get("loadavg_start") or [0])[0], share.get("steal", 0.0), []
    if la > BUSY * cores:
        noise.append(f"the 1-minute load average was {la} on {cores} cores when the run started")
    if steal > 0.02:
        noise.append(f"{steal:.1%} of CPU time was stolen by the hypervisor")
    if noise:
        out.append(f"> **Warning:** the machine was not quiet ({'; '.join(noise)}): ratios still compare like with like, "
                   "but the spread is wider.")
    return blocks(out + ["## Summary", (["Figure", "Goal", "Measured", "Status"], summary),
                         "Sizes: " + ", ".join(f"{k}={v}" for k, v in meta.get("sizes", {}).items()) + "."])


def render_doc(results: dict, text: str | None = None) -> str:
    """`text` (a markdown file's, or a new one) with the run's block and each measured section's figures written in
    (bench.common.put_section). A run of some sections only (--only) says when and where at the top of each section,
    and leaves the run block of `text` alone: its machine and summary are a full run's."""
    meta, sec = results["meta"], results["sections"]
    m = meta["machine"]
    la = [f"{(x or [float('nan')])[0]:.2f}" for x in (m.get("loadavg_start"), meta.get("loadavg_end"))]
    apart = [f"Measured {m.get('date_utc')} by `{meta['command']}` on {m.get('cpu_model')}, {m.get('usable_cores')} usable "
             f"cores (1-minute load average {la[0]} at the start, {la[1]} at the end)."] if meta.get("only") else []
    done = [(name, sec[name]) for name in TITLES if name in sec]
    if not (meta.get("only") and text and "<!-- bench:run:start -->" in text):
        text = put_section(text, "run", render_run(meta, [row for _, r in done for row in r.get("summary", [])]))
    for name, r in done:
        failed = [f"This section failed: `{r['section_error']}`", code(r.get("traceback", ""))] if "section_error" in r else []
        text = put_section(text, name, blocks(apart + (failed or r["md"])), TITLES[name])
    return text


def render_gpu(g: dict) -> str:
    """The GPU section's figures (`python -m bench --device cuda`, bench/gpu.py)."""
    m, d = g.get("meta", {}), g.get("distributed")
    rows = [[r["model"], status(r), "", "", "", "", "", ""] if r.get("status") != "ok" else
            [r["model"], f"{r['n_params'] / 1e6:,.0f}M", fi(r["tokens_analysed"]), fi(r["bare_tokens_per_s"]),
             fi(r["tool_tokens_per_s"]), f"**{fr(r['ratio'])}**", f"{r['tflops']:.1f} ({r['tflops_non_embedding']:.1f} non-emb.)",
             f"{r['mfu']:.1%}" if r.get("mfu") else "n/a", fb(r.get("max_memory_allocated_bytes"))] for r in g["models"]]
    m = {k: m.get(k, "") for k in ("date_utc", "torch", "transformers", "command")}
    md = [f"Measured on {g['device']} ({m['date_utc']}; torch {m['torch']}, transformers {m['transformers']}), dtype "
          f"{g['dtype']}, batch {g['batch_size']}, {fi(g['tokens_requested'])} tokens requested per model, {g['reps']} "
          f"alternating repetitions; command `{m['command']}`. Peak bf16 (dense) assumed: {g['peak_tflops'] or 'unknown'} "
          "TFLOP/s.", (["Model", "Params", "Tokens", "Bare tok/s", "Tool tok/s", "Tool / bare", "Forward TFLOP/s", "of peak",
                        "Max GPU memory"], rows)]
    peers = [[r["model"], fi(r["peer"]["tokens"]), fs(r["peer"]["tool_s"]), fs(r["peer"]["peer_s"]),
              f"**{r['peer']['speedup']:.1f}x**"] for r in g["models"] if r.get("peer")]
    if peers:
        md += ["**The tool vs the per-document peer on the GPU:**", (["Model", "Tokens", "Tool", "Peer", "Tool speed / peer's"],
                                                                     peers)]
    if d:
        v = {k: d.get(k, "n/a") for k in ("max_rel_diff_exact", "sample_identical", "sample_metrics_identical", "same_cache_key")}
        md += [f"**torchrun** ({d['model']}, {fi(d.get('tokens_analysed') or d['tokens_requested'])} tokens, {d['nproc']} "
               f"NCCL rank(s)): max relative difference of the exact metrics vs one process {v['max_rel_diff_exact']}, same "
               f"sample bit for bit: {v['sample_identical']}, sample metrics identical: {v['sample_metrics_identical']}, same "
               f"cache key: {v['same_cache_key']}.",
               (["Run", "Wall time (process start included)", "Forward", "Status"],
                [[k, fs(x["wall_s"]), fs((d.get("forward_s") or {}).get(k)), "ok" if x["returncode"] == 0 else
                  f"failed: {x['stderr_tail']}"] for k, x in d.items() if isinstance(x, dict) and "wall_s" in x])]
    return blocks(md)
