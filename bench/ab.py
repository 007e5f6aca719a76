"""What a change costs in extraction throughput: the tool's tool/bare ratio at two git revisions, in one run
(method: BENCHMARKS.md, "Fidelity statistics"). Prints a markdown table (and --json).

    python -m bench.ab --base 0853774                 # that revision vs the working tree
    python -m bench.ab --base 0853774 --head main --model smollm2-135m --tokens 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.common import ROOT, alternate, child_env, loadavg, measured, median
from bench.report import blocks

# Runs inside the exported tree (cwd and sys.path[0]), with the revision's own core package.
CHILD = r'''
import json, sys, time
import numpy as np
import torch
from core.inputs.models import load_model
from core.inputs.corpora import load_documents, tokenize_budget
from core.compute.extract import extract_stats
try:
    from core.stats.batching import plan_batches
except ImportError:  # older revisions
    from core.compute.extract import plan_batches
a = json.loads(sys.argv[1])
torch.set_num_threads(a["threads"])
lm = load_model(a["model"], device="cpu", dtype="float32", cache_dir=a["cache"])
w = tokenize_budget(load_documents("wiki-en"), lm.tokenizer, a["tokens"], 512, 0, "wiki-en")
batches = plan_batches(w, 16)
pad = int(lm.tokenizer.pad_token_id or 0)
n = int(sum(int((~s).sum()) for s in w.special))

def bare():  # pads by hand, not with core.stats.batching.pad_batch: identical in both revisions (older ones lack it)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in batches:
            seqs = [w.ids[i] for i in b]
            T = max(len(s) for s in seqs)
            ids = np.full((len(seqs), T), pad, dtype=np.int64)
            att = np.zeros((len(seqs), T), dtype=np.int64)
            for r, s in enumerate(seqs):
                ids[r, :len(s)] = s
                att[r, :len(s)] = 1
            lm.base(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(att))
    return time.perf_counter() - t0

def tool():
    t0 = time.perf_counter()
    extract_stats(lm.base, w, special_policy="exclude", batch_size=16, sample_size=5000, seed=0, device="cpu",
                  dtype="float32", pad_id=pad)
    return time.perf_counter() - t0

bare(); tool()  # warm-up: allocator, oneDNN primitives
res = {"n": n, "windows": len(w.ids), "bare_s": [], "tool_s": []}
for r in range(a["reps"]):  # alternating: bare, tool, tool, bare, ...
    for f in (bare, tool) if r % 2 == 0 else (tool, bare):
        res[f.__name__ + "_s"].append(f())
print("RESULT " + json.dumps(res))
'''


def export(rev: str, dest: Path) -> Path:
    """The tree of `rev` ("WORKTREE": the working tree as it is, tracked and untracked files) in dest."""
    dest.mkdir(parents=True)
    run = partial(subprocess.run, cwd=ROOT, check=True, capture_output=True)
    if rev == "WORKTREE":  # tracked files deleted meanwhile are skipped (--ignore-failed-read)
        names = run(["git", "ls-files", "-co", "--exclude-standard", "-z"]).stdout
        tar = run(["tar", "-c", "--null", "--no-recursion", "--ignore-failed-read", "-T", "-"], input=names).stdout
    else:
        tar = run(["git", "archive", rev]).stdout
    run(["tar", "-x", "-C", str(dest)], input=tar)
    return dest


def measure(tree: Path, args: dict) -> tuple[float, dict]:
    """One fresh process of CHILD in `tree`: its wall seconds, and its times and tool/bare ratio."""
    t0 = time.perf_counter()
    env = child_env(args["cache"], {"PYTHONPATH": tree, "OMP_NUM_THREADS": args["threads"]})  # the revision's core only
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=1800)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode != 0 or not line:
        raise RuntimeError(f"measuring {tree.name} failed (exit {p.returncode}): {p.stderr[-2000:]}")
    res = json.loads(line[-1][7:])
    res["ratio"] = median(res["bare_s"]) / median(res["tool_s"])
    return time.perf_counter() - t0, res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="git revision measured as the reference")
    p.add_argument("--head", default="WORKTREE", help="git revision measured against it (default: the working tree)")
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--tokens", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=2, help="base/head process pairs, alternating order (default 2)")
    p.add_argument("--reps", type=int, default=2, help="bare/tool repetitions inside each process (default 2)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if not (1 <= a.rounds <= 10 and 1 <= a.reps <= 10 and 1_000 <= a.tokens <= 400_000):
        p.error("--rounds and --reps in 1-10, --tokens in 1,000-400,000")
    with tempfile.TemporaryDirectory(prefix="aniso-ab-") as d:  # the exported trees and the cache, deleted after
        root = Path(d)
        try:
            trees = {"base": export(a.base, root / "base"), "head": export(a.head, root / "head")}
        except subprocess.CalledProcessError as e:
            p.error(f"cannot export a revision: {e.stderr.decode(errors='replace').strip()}")
        (root / "cache").mkdir()
        args = {"model": a.model, "tokens": a.tokens, "reps": a.reps, "threads": a.threads, "cache": str(root / "cache")}
        load0 = loadavg()
        got = alternate(a.rounds, {k: partial(measure, tree, args) for k, tree in trees.items()})
        runs = {k: [res for _, res in v] for k, v in got.items()}
        ratio = {k: median(x["ratio"] for x in v) for k, v in runs.items()}
        best = {k: min(b for x in v for b in x["bare_s"]) / min(t for x in v for t in x["tool_s"]) for k, v in runs.items()}
        cost, cost_best, load1 = 1 - ratio["head"] / ratio["base"], 1 - best["head"] / best["base"], loadavg()
        print(blocks([
            f"`python -m bench.ab --base {a.base} --head {a.head} --model {a.model} --tokens {a.tokens} --rounds {a.rounds} "
            f"--reps {a.reps} --threads {a.threads}`. {measured(load0)}",
            (["revision", "tokens analysed", "tool/bare per process", "median", "best-of"],
             [[f"{k} ({getattr(a, k)})", f"{runs[k][0]['n']:,}", ", ".join(f"{y['ratio']:.3f}" for y in runs[k]),
               f"**{ratio[k]:.3f}**", f"**{best[k]:.3f}**"] for k in runs]),
            f"Cost of the change: 1 - {ratio['head']:.3f} / {ratio['base']:.3f} = **{cost:.1%}** of throughput (medians); "
            f"best-of: 1 - {best['head']:.3f} / {best['base']:.3f} = **{cost_best:.1%}**."]))
        if a.json:
            Path(a.json).write_text(json.dumps({**vars(a), "loadavg_start": load0, "loadavg_end": load1, "runs": runs,
                                                "ratio": ratio, "best": best, "cost": cost, "cost_best": cost_best}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
