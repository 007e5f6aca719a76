"""`python -m bench --device cuda`: the tool vs the bare forward on a GPU, bf16, models of real sizes.

No weights ship for these sizes, so the models are random-init from configs (throughput does not
depend on the weights' values): BERT-base, GPT-2 (124M), and LLaMA-style 1B and 8B (Llama-3.2-1B
and Llama-3-8B shapes). Tokens are real Wikipedia text (BERT: MiniLM's WordPiece; the others:
GPT-2's BPE, whose ids are valid in every vocabulary here). For each model: tokens/s of the tool
(extract_stats with all streaming metrics and the sample, on the device) and of the bare forward
on the same windows and batches, and the bare forward's achieved TFLOP/s, estimated as
2 * n_params * tokens / time, against the card's dense bf16 peak.
"""

from __future__ import annotations

import time

from bench.common import bare_forward, log, median, subset_windows

# Dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from the vendors' data sheets.
BF16_PEAK_TFLOPS = [("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("GH200", 989.0), ("A100", 312.0),
                    ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0),
                    ("RTX 4090", 165.0), ("RTX A6000", 155.0), ("B200", 2250.0)]


def peak_tflops(device_name: str) -> float | None:
    for key, val in BF16_PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return val
    return None


def _configs():
    import transformers as tf

    llama = dict(num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                 rope_theta=500000.0, rms_norm_eps=1e-5, hidden_act="silu")
    return {
        "BERT-base": ("bert", tf.BertConfig()),
        "GPT-2 (124M)": ("gpt2", tf.GPT2Config()),
        "LLaMA-style 1B": ("gpt2", tf.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                                  tie_word_embeddings=True, **llama)),
        "LLaMA-style 8B": ("gpt2", tf.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                                  **llama)),
    }


def _tokenizer(kind: str):
    if kind == "bert":
        from transformers import AutoTokenizer

        from core.models import minilm_folder

        return AutoTokenizer.from_pretrained(str(minilm_folder()))
    from core.models import _gpt2_tokenizer

    return _gpt2_tokenizer()


def build_model(cfg, device: str, dtype):
    """A random-init base model (no LM head) directly on `device` in `dtype`."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    with torch.device(device):
        model = tf.AutoModel.from_config(cfg, dtype=dtype)
    return model.eval()


def section_gpu(device: str = "cuda", dtype: str = "bfloat16", tokens: int = 100_000, batch_size: int = 16,
                reps: int = 3, configs: dict | None = None, peak: float | None = None) -> dict:
    import torch

    from core.batching import plan_batches
    from core.corpora import load_documents, tokenize_budget
    from core.extract import extract_stats

    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    is_cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if is_cuda else None
    name = torch.cuda.get_device_name(0) if is_cuda else "cpu"
    peak = peak or (peak_tflops(name) if is_cuda else None)
    docs = load_documents("wiki-en")
    configs = configs or _configs()
    out = {"device": name, "dtype": dtype, "tokens_requested": tokens, "batch_size": batch_size, "reps": reps,
           "peak_tflops": peak, "models": []}
    toks = {}
    for label, (tok_kind, cfg) in configs.items():
        log(f"gpu: {label}")
        if tok_kind not in toks:
            toks[tok_kind] = _tokenizer(tok_kind)
        tok = toks[tok_kind]
        pad = int(tok.pad_token_id or 0)
        row = {"model": label}
        try:
            model = build_model(cfg, device, tdt)
            n_params = sum(p.numel() for p in model.parameters())
            emb = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
            max_len = min(512, int(getattr(cfg, "max_position_embeddings", 512) or 512))
            w = tokenize_budget(docs, tok, tokens, max_len, 0, "wiki-en")
            batches = plan_batches(w, batch_size)
            n_an = int(sum(int((~s).sum()) for s in w.special))
            warm = subset_windows(w, min(n_an, 4 * batch_size * 128))
            bare_forward(model, warm, plan_batches(warm, batch_size), pad, device, sync)

            def tool(win):
                t0 = time.perf_counter()
                extract_stats(model, win, batch_size=batch_size, device=device, dtype=dtype, pad_id=pad)
                if sync:
                    sync()
                return time.perf_counter() - t0

            tool(warm)
            if is_cuda:
                torch.cuda.reset_peak_memory_stats()
            bare_s, tool_s = [], []
            for r in range(reps):
                for which in (("bare", "tool") if r % 2 == 0 else ("tool", "bare")):
                    if which == "bare":
                        bare_s.append(bare_forward(model, w, batches, pad, device, sync))
                    else:
                        tool_s.append(tool(w))
            fed = int(w.n_tokens_total)
            tb = median(bare_s)
            row.update(n_params=int(n_params), n_params_non_embedding=int(n_params - emb),
                       n_layers=int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0)),
                       d=int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0)), tokens_analysed=n_an,
                       tokens_fed=fed, n_batches=len(batches), bare_s=bare_s, tool_s=tool_s,
                       bare_tokens_per_s=n_an / tb, tool_tokens_per_s=n_an / median(tool_s),
                       ratio=tb / median(tool_s), tflops=2 * n_params * fed / tb / 1e12,
                       tflops_non_embedding=2 * (n_params - emb) * fed / tb / 1e12, status="ok")
            if peak:
                row["mfu"] = row["tflops"] / peak
            if is_cuda:
                row["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        except torch.OutOfMemoryError as e:
            row.update(status="oom", error=str(e).splitlines()[0][:200])
        finally:
            model = None
            if is_cuda:
                torch.cuda.empty_cache()
        out["models"].append(row)
    return out


def cuda_refusal() -> str | None:
    """None when CUDA is usable; otherwise the reason, in one line."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        built = torch.version.cuda
        why = "this torch build has no CUDA support" if built is None else f"torch (CUDA {built}) finds no GPU"
        return f"--device cuda needs a CUDA GPU, and {why} (torch {torch.__version__})"
    return None
