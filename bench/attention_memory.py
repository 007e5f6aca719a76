"""Peak memory of the attention statistics at several corpus sizes, each in its own fresh process.

    python -m bench.attention_memory --model minilm-l6 --tokens 20000,200000 --threads 2

For each size: load the model, tokenize that many wiki-en tokens (the tool's windows: seed 0,
max_seq_len 512), run `core.attention.extract_attention` (batch 16, the 10 first dims tracked) and
report the process's high-water RSS (VmHWM) after loading and tokenizing and at the end. No
attention matrix is kept beyond the current layer, so the peak should not grow with the corpus.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from core import settings
from core.spec import DEFAULT_BATCH_SIZE, DEFAULT_CORPUS, DEFAULT_MAX_SEQ_LEN

settings.export_env(HF_HUB_OFFLINE="1")


def _hwm_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one(model: str, tokens: int, threads: int) -> dict:
    # lazy: torch only in the sections that run a model
    import torch

    torch.set_num_threads(threads)
    # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)
    from core.attention import extract_attention
    from core.corpora import load_documents, tokenize_budget
    from core.models import load_model

    lm = load_model(model, device="cpu", dtype="float32")
    w = tokenize_budget(load_documents(DEFAULT_CORPUS), lm.tokenizer, tokens, DEFAULT_MAX_SEQ_LEN, 0, DEFAULT_CORPUS)
    before = _hwm_mib()
    t0 = time.perf_counter()
    pad = lm.tokenizer.pad_token_id
    extract_attention(lm.base, w, list(range(10)), batch_size=DEFAULT_BATCH_SIZE,
                      pad_id=int(pad if pad is not None else 0))
    return {"model": model, "tokens": tokens, "tokens_fed": int(sum(len(i) for i in w.ids)),
            "n_windows": len(w.ids), "seconds": time.perf_counter() - t0,
            "hwm_before_mib": before, "hwm_peak_mib": _hwm_mib()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.attention_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--tokens", default="20000,200000", help="comma-separated corpus sizes")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # internal: one size, this process
    a = p.parse_args(argv)
    if a.one is not None:
        print(json.dumps(one(a.model, a.one, a.threads)))
        return 0
    rows = []
    for n in (int(x) for x in a.tokens.split(",")):
        out = subprocess.run([sys.executable, "-m", "bench.attention_memory", "--model", a.model, "--threads",
                              str(a.threads), "--one", str(n)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{r['model']} {r['tokens']:,} tokens ({r['tokens_fed']:,} fed, {r['n_windows']} windows): "
              f"{r['seconds']:.1f} s, peak RSS {r['hwm_peak_mib']:.0f} MiB (after load+tokenize "
              f"{r['hwm_before_mib']:.0f} MiB)", flush=True)
    if len(rows) > 1:
        print(f"ratio of peaks largest/smallest: {rows[-1]['hwm_peak_mib'] / rows[0]['hwm_peak_mib']:.3f}")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
