"""Peak memory of the attention statistics at several corpus sizes, each in its own fresh process (the worker's
task `attention_memory`); method: BENCHMARKS.md, section 8.

    python -m bench.attention_memory --model minilm-l6 --tokens 20000,200000 --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.common import run_task
from core.base import settings

settings.export_env(HF_HUB_OFFLINE="1")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.attention_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--tokens", default="20000,200000", help="comma-separated corpus sizes")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    rows = []
    for n in (int(x) for x in a.tokens.split(",")):
        r = run_task("attention_memory", {"model": a.model, "tokens": n, "threads": a.threads}, timeout=3600)
        if r["status"] != "ok":
            print(f"error: {a.model} at {n:,} tokens: {r['status']}: {r.get('error', '')}", file=sys.stderr)
            return 1
        r["hwm_peak_mib"] = r.pop("peak_rss_bytes") / 2**20  # the worker's VmHWM at the end
        rows.append({k: r[k] for k in ("model", "tokens", "tokens_fed", "n_windows", "seconds", "hwm_before_mib",
                                       "hwm_peak_mib")})
        print(f"{r['model']} {r['tokens']:,} tokens ({r['tokens_fed']:,} fed, {r['n_windows']} windows): "
              f"{r['seconds']:.1f} s, peak RSS {r['hwm_peak_mib']:.0f} MiB (after load+tokenize "
              f"{r['hwm_before_mib']:.0f} MiB)", flush=True)
    if len(rows) > 1:
        print(f"ratio of peaks largest/smallest: {rows[-1]['hwm_peak_mib'] / rows[0]['hwm_peak_mib']:.3f}")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
