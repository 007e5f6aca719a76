"""`python -m bench --device cuda`: the tool vs the bare forward on a GPU, bf16, random-init models of real sizes
(BERT-base, GPT-2, LLaMA-style 1B and 8B; no weights ship for them, and throughput does not depend on the weights).
Tokens are real Wikipedia text (BERT: MiniLM's WordPiece; the others: GPT-2's BPE, whose ids are valid in every
vocabulary here). Method: BENCHMARKS.md, "GPU"."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import ROOT, alternate, bare_forward, child_env, command, log, machine_info, median, publish, subset_windows
from bench.peers import run_peer
from bench.report import GPU_TITLE, render_gpu
from core.base.cache import CacheStore
from core.base.spec import RunSpec
from core.compute.distributed import spec_args, torchrun_command
from core.compute.extract import analysed_masks, extract_stats
from core.inputs.models import gpt2_tokenizer, minilm_folder, untrained_config
from core.stats.batching import plan_batches
from core.stats.registry import report_keys

# Dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from the vendors' data sheets.
BF16_PEAK_TFLOPS = [("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("GH200", 989.0), ("A100", 312.0),
                    ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0),
                    ("RTX 4090", 165.0), ("RTX A6000", 155.0), ("B200", 2250.0)]


def peak_tflops(device_name: str) -> float | None:
    return next((val for key, val in BF16_PEAK_TFLOPS if key.lower() in device_name.lower()), None)


# The registered random-init models of real sizes (`python -m core models`) and their tokenizers, one definition each.
GPU_MODELS = {"BERT-base": ("bert", "untrained-bert-base"), "GPT-2 (124M)": ("gpt2", "untrained-gpt2"),
              "LLaMA-style 1B": ("gpt2", "untrained-llama-1b"), "LLaMA-style 8B": ("gpt2", "untrained-llama-8b")}
PEER_MODELS = ("BERT-base", "GPT-2 (124M)")  # the per-document peer keeps every hidden state on the host


def section_gpu(device: str = "cuda", dtype: str = "bfloat16", tokens: int = 100_000, batch_size: int = 16,
                reps: int = 3, configs: dict | None = None, peak: float | None = None,
                peer_tokens: int = 20_000) -> dict:
    """Each random-init model of GPU_MODELS (or `configs`: label -> (tokenizer kind, config)), built on `device` in
    `dtype`: the bare forward vs the tool (alternating), forward TFLOP/s, peak memory; the per-document peer on two."""
    import torch  # lazy: torch and transformers only in the sections that run a model
    import transformers as tf

    from core.inputs.corpora import load_documents, tokenize_budget

    is_cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if is_cuda else None
    name = torch.cuda.get_device_name(0) if is_cuda else "cpu"

    def timed(fn) -> float:  # seconds of fn(), the device's queued work included
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        return time.perf_counter() - t0

    docs = load_documents("wiki-en")
    configs = configs or {label: (tok, untrained_config(ident)) for label, (tok, ident) in GPU_MODELS.items()}
    tokenizers = {"bert": lambda: tf.AutoTokenizer.from_pretrained(str(minilm_folder())), "gpt2": gpt2_tokenizer}
    out = {"device": name, "dtype": dtype, "tokens_requested": tokens, "batch_size": batch_size, "reps": reps,
           "peak_tflops": peak or (peak_tflops(name) if is_cuda else None), "models": []}
    for label, (tok_kind, cfg) in configs.items():
        log(f"gpu: {label}")
        tok = tokenizers[tok_kind]()  # loaded per model (not timed)
        pad, row = int(tok.pad_token_id or 0), {"model": label}
        try:
            torch.manual_seed(0)
            with torch.device(device):  # a random-init base model (no LM head) directly on the device, in its dtype
                model = tf.AutoModel.from_config(cfg, dtype=getattr(torch, dtype)).eval()
            n_params = sum(p.numel() for p in model.parameters())
            emb = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
            w = tokenize_budget(docs, tok, tokens, min(512, int(getattr(cfg, "max_position_embeddings", 512) or 512)),
                                0, "wiki-en")
            batches = plan_batches(w, batch_size)
            n_an, fed = int(w.n_content_tokens), int(w.n_tokens_total)

            def tool(win):
                return timed(lambda: extract_stats(model, win, batch_size=batch_size, device=device, dtype=dtype, pad_id=pad))

            warm = subset_windows(w, min(n_an, 4 * batch_size * 128))
            bare_forward(model, warm, plan_batches(warm, batch_size), pad, device, sync)
            tool(warm)
            if is_cuda:
                torch.cuda.reset_peak_memory_stats()
            runs = alternate(reps, {"bare": lambda: bare_forward(model, w, batches, pad, device, sync), "tool": lambda: tool(w)})
            tb, tt = median(runs["bare"]), median(runs["tool"])
            row.update(n_params=int(n_params), tokens_analysed=n_an, tokens_fed=fed, bare_s=runs["bare"], tool_s=runs["tool"],
                       bare_tokens_per_s=n_an / tb, tool_tokens_per_s=n_an / tt, ratio=tb / tt,
                       tflops=2 * n_params * fed / tb / 1e12, tflops_non_embedding=2 * (n_params - emb) * fed / tb / 1e12,
                       status="ok")
            if out["peak_tflops"]:
                row["mfu"] = row["tflops"] / out["peak_tflops"]
            if is_cuda:
                row["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
            if label in PEER_MODELS and peer_tokens:
                # the per-document peer (one forward per document, hidden states to the host, sampled pairs) against the
                # tool on the same windows: the speed-up of batching and on-device statistics
                pw = subset_windows(w, peer_tokens)
                analysed = analysed_masks(pw, "exclude")
                tool_s, peer_s = tool(pw), timed(lambda: run_peer(model, pw, analysed, "sampled", device=device))
                row["peer"] = {"tokens": int(sum(int(m.sum()) for m in analysed)), "tool_s": tool_s, "peer_s": peer_s,
                               "speedup": peer_s / tool_s}
        except torch.OutOfMemoryError as e:
            row.update(status="oom", error=str(e).splitlines()[0][:200])
        finally:
            model = None
            if is_cuda:
                torch.cuda.empty_cache()
        out["models"].append(row)
    return out


def section_distributed(device: str, nproc: int, model: str = "untrained-gpt2", tokens: int = 200_000,
                        batch_size: int = 16, timeout_s: int = 3600) -> dict:
    """One `analyze` run in one process vs the same spec under torchrun with `nproc` ranks (NCCL on
    CUDA, gloo on CPU), each in fresh processes and caches: wall time and the agreement of results."""
    spec = RunSpec(model=model, corpus="wiki-en", max_tokens=tokens, batch_size=batch_size, device=device)
    out = {"model": model, "device": device, "nproc": nproc, "tokens_requested": tokens}
    with tempfile.TemporaryDirectory(prefix="aniso-dist-") as tmp:
        runs = {"1 process": [sys.executable, "-m", "core", "analyze", *spec_args(spec), "--quiet",
                              "--cache-dir", f"{tmp}/one", "--out", f"{tmp}/one.json"],
                f"torchrun, {nproc} ranks": torchrun_command(spec, nproc, f"{tmp}/many.json", cache_dir=f"{tmp}/many")}
        res = {}
        for name, cmd in runs.items():
            log(f"distributed: {name}")
            t0 = time.perf_counter()
            # The same BLAS threads in both runs: the sample metrics (numpy on the host) are then comparable bit for bit.
            p = subprocess.run(cmd, cwd=ROOT, env=child_env(extra={"OMP_NUM_THREADS": "4"}), capture_output=True,
                               text=True, timeout=timeout_s)
            out[name] = {"wall_s": time.perf_counter() - t0, "returncode": p.returncode,
                         "stderr_tail": p.stderr[-400:] if p.returncode else ""}
            if p.returncode == 0:
                res[name] = json.loads(Path(cmd[cmd.index("--out") + 1]).read_text())
        if len(res) == 2:
            a, b = res.values()
            exact, samp = report_keys("exact"), report_keys("sample")
            rel = [abs(x[k] - y[k]) / max(abs(x[k]), 1e-300) for x, y in zip(a["layers"], b["layers"]) for k in exact
                   if x[k] is not None and y[k] is not None]
            got = [CacheStore(d).get(a["manifest"]["cache_key"]) for d in (f"{tmp}/one", f"{tmp}/many")]  # the samples
            out.update(tokens_analysed=a["manifest"]["tokens"]["analysed"], max_rel_diff_exact=max(rel),
                       sample_metrics_identical=all(x[k] == y[k] for x, y in zip(a["layers"], b["layers"]) for k in samp),
                       same_cache_key=a["manifest"]["cache_key"] == b["manifest"]["cache_key"],
                       sample_identical=None not in got and bool(np.array_equal(got[0][1]["sample"], got[1][1]["sample"])),
                       forward_s={n: r["manifest"]["timing"]["forward_s"] for n, r in res.items()})
    return out


def main(a, argv: list[str]) -> int:
    """`python -m bench --device cuda` (`a`: its parsed arguments): refused without CUDA, else the section measured and
    written into its markers."""
    why = cuda_refusal()
    if why:
        print(f"error: {why}. Nothing was measured and {a.out or 'BENCHMARKS.md'} was not changed; "
              "the CPU benchmark is `python -m bench`.", file=sys.stderr)
        return 2
    import torch  # lazy: torch only in the sections that run a model

    log(f"GPU section on {torch.cuda.get_device_name(0)}")
    g = section_gpu("cuda", "bfloat16", peak=a.gpu_peak_tflops)
    # NCCL takes one GPU per rank (two ranks on one GPU are refused), so: one rank per GPU here.
    g["distributed"] = section_distributed("cuda", torch.cuda.device_count())
    m = machine_info()  # its versions hold torch's and transformers'
    g["meta"] = {**m["versions"], "date_utc": m["date_utc"], "command": command("python -m bench", argv)}
    publish(render_gpu(g), "gpu", GPU_TITLE, Path(a.out) if a.out else ROOT / "BENCHMARKS.md")
    if a.json:
        Path(a.json).write_text(json.dumps(g, indent=1))
    return 0


def cuda_refusal() -> str | None:
    """None when CUDA is usable; otherwise the reason, in one line."""
    import torch  # lazy: torch only in the sections that run a model

    if not torch.cuda.is_available():
        built = torch.version.cuda
        why = "this torch build has no CUDA support" if built is None else f"torch (CUDA {built}) finds no GPU"
        return f"--device cuda needs a CUDA GPU, and {why} (torch {torch.__version__})"
    return None
