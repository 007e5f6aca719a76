"""Peak memory of the attention statistics at several corpus sizes, each in its own fresh process (the worker's
task `attention_memory`); method: BENCHMARKS.md, section 8. Prints the section's markdown table.

    python -m bench.attention_memory --model minilm-l6 --tokens 20000,200000 --threads 2
"""

from __future__ import annotations

import argparse
import sys

from bench.common import command, fb, fi, fr, fs, log, run_task
from bench.report import blocks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.attention_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--tokens", default="20000,200000", help="comma-separated corpus sizes")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    rows, peaks = [], []
    for n in (int(x) for x in a.tokens.split(",")):
        log(f"attention memory: {a.model} at {n:,} tokens")
        r = run_task("attention_memory", {"model": a.model, "tokens": n, "threads": a.threads}, timeout=3600)
        if r["status"] != "ok":
            print(f"error: {a.model} at {n:,} tokens: {r['status']}: {r.get('error', '')}", file=sys.stderr)
            return 1
        peaks.append(r["peak_rss_bytes"])  # the worker's VmHWM at the end
        rows.append([f"{n:,} ({r['tokens_fed']:,})", fi(r["n_windows"]), r["longest_window"], fs(r["seconds"], 1),
                     fb(r["hwm_before_bytes"]), fb(peaks[-1])])
    print(blocks([f"`{command('python -m bench.attention_memory', argv)}`: {a.model}, each size in its own fresh process.",
                  (["Tokens (fed)", "Windows", "Longest window", "Time", "RSS after load + tokenize", "Peak RSS"], rows),
                  *([f"Ratio of peaks largest / smallest: {fr(peaks[-1] / peaks[0])}."] if len(peaks) > 1 else [])]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
