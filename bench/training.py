"""`python -m bench.training`: `core.studies.training.train` against a bare PyTorch loop (with and without the
tool's malloc setting), each run a fresh interpreter, and a 12-checkpoint series against 12 separate analyses;
prints the "Training" section of BENCHMARKS.md (method there).

    python -m bench.training [--quick] [--steps N --reps N --no-series]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.common import alternate, command, fi, loadavg, measured, median, run_task, seconds
from bench.report import blocks
from core.base import settings

settings.export_env(HF_HUB_OFFLINE="1")
settings.env_default(TOKENIZERS_PARALLELISM="false")


def bare_loop(spec, data, steps: int) -> float:
    """Seconds of a plain PyTorch loop: same model, rows, fused AdamW, cosine schedule, clipping."""
    import torch  # lazy: torch and transformers only in the sections that run a model
    import transformers as tf

    from core.studies.training import Collator, build_model

    tf.set_seed(spec.seed)
    model = build_model(spec, data.vocab_size, data.eos_id, data.eos_id)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    other = [p for n, p in model.named_parameters() if p.ndim < 2]
    # the Trainer's optimizer: torch's fused AdamW kernel ("adamw_torch_fused", its default with torch >= 2.8)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": spec.weight_decay},
                             {"params": other, "weight_decay": 0.0}], lr=spec.lr, fused=True)
    sched = tf.get_cosine_schedule_with_warmup(opt, spec.warmup_steps, steps)
    col = Collator(spec.masked, data.mask_id, data.content_ids)
    g = torch.Generator().manual_seed(spec.seed)
    order = torch.randperm(len(data.train), generator=g)
    t0 = time.perf_counter()
    for s in range(steps):
        idx = order[(s * spec.batch_size) % len(order):][:spec.batch_size]
        batch = col([{"input_ids": data.train[int(i)]} for i in idx])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def one_run(spec, which: str) -> dict:
    """One timed run in this process, in tokens/s: "tool" (core.studies.training.train; also without its log-spaced
    checkpoints, and its steps alone), "bare" (the plain loop) or "bare-steady" (the plain loop after the tool's malloc
    setting, core.studies.training.steady_malloc)."""
    # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)
    from core.studies.training import build_data, make_tokenizer, steady_malloc, train

    tokens = spec.steps * spec.batch_size * spec.seq_len
    if which == "tool":
        with tempfile.TemporaryDirectory(prefix="aniso-bench-train-", ignore_cleanup_errors=True) as d:
            t = train(spec.replace(name="bench"), cache_dir=d)["timing"]
        return {"rate": tokens / t["train_s"], "without_checkpoints": tokens / (t["train_s"] - t["checkpoint_s"]),
                "loop": tokens / (t["train_s"] - t["checkpoint_s"] - t["resume_save_s"]),
                "timing": {k: t[k] for k in ("train_s", "checkpoint_s", "held_out_s", "resume_save_s")}}
    data = build_data(spec, make_tokenizer(spec))
    if which == "bare-steady":
        steady_malloc()
    return {"rate": tokens / bare_loop(spec, data, spec.steps)}


def throughput(spec, reps: int) -> list:
    """The tool against the bare loop, every run in a fresh interpreter (what one run of the tool or of a user's script
    sees: no allocator or thread state left by the previous run), alternating the order between reps: markdown blocks."""
    def one(which: str) -> tuple[float, dict]:
        got = run_task("train_one", {"which": which, "spec": spec.to_dict()}, timeout=7200)
        if got["status"] != "ok":
            raise RuntimeError(f"bench run {which} failed: {got.get('error')}")
        return got["wall_s"], got

    got = alternate(reps, {w: partial(one, w) for w in ("tool", "bare", "bare-steady")})  # drift falls on all sides
    runs = {k: [g for _, g in v] for k, v in got.items()}
    each = {k: [g["rate"] for g in v] for k, v in runs.items()} | {k: [g[k] for g in runs["tool"]]
                                                                    for k in ("without_checkpoints", "loop")}
    rate = {k: median(v) for k, v in each.items()}  # tokens/s

    def row(what: str, k: str) -> list:  # the median, each run, the ratio of the medians to the bare loop's
        return [what, fi(rate[k]), ", ".join(map(fi, each[k])), f"{rate[k] / rate['bare']:.2f}"]

    tool = row("`core.studies.training.train` (Trainer, checkpoints at 0,1,2,4,... + held-out loss)", "tool")
    tool[3] = f"**{tool[3]}** (goal >= 0.9); vs the bare loop with the malloc setting {rate['tool'] / rate['bare-steady']:.2f}"
    return [(["", "tokens/s", "each run", "ratio to the bare loop"], [
        row("bare PyTorch loop (same model, batches, fused AdamW, cosine schedule, clipping)", "bare"),
        row("the same bare loop after the tool's malloc setting (`core.studies.training.steady_malloc`)", "bare-steady"), tool,
        row("the same without the log-spaced checkpoints (saves + held-out loss)", "without_checkpoints"),
        row("the Trainer's steps alone (also without its resumable checkpoints)", "loop")]),
        "Every run is a fresh interpreter (`python -m bench.worker train_one`), in alternating order. The tool's runs outside "
        "the training steps (seconds):",
        (["tool run", "in all", "log-spaced checkpoints", "of which held-out loss", "Trainer's resumable checkpoints"],
         [[i + 1, *(f"{g['timing'][k]:.1f}" for k in ("train_s", "checkpoint_s", "held_out_s", "resume_save_s"))]
          for i, g in enumerate(runs["tool"])])]


def series_cost(spec, max_tokens: int) -> list:
    """A series of checkpoints analysed by `analyze_series` against as many separate analyses: markdown blocks."""
    # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)
    from core.compute import pipeline
    from core.studies.series import analyze_series, series_specs
    from core.studies.training import train

    with tempfile.TemporaryDirectory(prefix="aniso-bench-series-", ignore_cleanup_errors=True) as d:
        a, b = Path(d, "a"), Path(d, "b")
        settings.set_cache_dir(a)
        n = len(train(spec.replace(name="bench-series"), cache_dir=a)["checkpoints"])
        shutil.copytree(a / "trained", b / "trained")
        # attention=False: the separate analyses below compute no attention statistics either
        t_series = seconds(lambda: analyze_series("bench-series", cache_dir=a, max_tokens=max_tokens, attention=False))
        settings.set_cache_dir(b)
        specs = series_specs("bench-series", cache_dir=b, max_tokens=max_tokens)
        t0 = time.perf_counter()
        for _, sp in specs:  # what 12 separate analyses do: each reads and tokenizes the corpus again
            pipeline.analyze(sp, cache_dir=b)
        t_sep = time.perf_counter() - t0
    return [f"Series: {n} checkpoints analysed on {max_tokens:,} tokens of the training corpus each.",
            (["", "seconds"], [["`analyze_series` (corpus read and tokenized once)", f"{t_series:.1f}"],
                               [f"{n} separate `pipeline.analyze` calls (each reads and tokenizes)", f"{t_sep:.1f}"],
                               ["ratio", f"**{t_series / t_sep:.2f}** ({(t_sep - t_series) / max(n - 1, 1):.2f} s saved per "
                                "checkpoint after the first)"]])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.training", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--no-series", action="store_true", help="measure the training throughput only")
    a = p.parse_args(argv)
    # lazy: imported once --threads is applied (numpy reads the thread count when it is imported)
    from core.studies.train_spec import TrainSpec

    tiny = TrainSpec(n_layers=1, d_model=32, n_heads=2, seq_len=32, batch_size=4, steps=8, vocab_size=512,
                     eval_tokens=512, device="cpu")
    spec = tiny if a.quick else TrainSpec(steps=a.steps, device="cpu")
    series_spec, max_tokens, reps = (tiny.replace(steps=16), 1000, 1) if a.quick else (tiny.replace(steps=1024), 20_000, a.reps)
    load_start = loadavg()
    figures = throughput(spec, reps) + ([] if a.no_series else series_cost(series_spec, max_tokens))
    print(blocks([
        f"## Training (`{command('python -m bench.training', argv)}`)",
        f"{measured(load_start)} Torch threads: {settings.env_value('OMP_NUM_THREADS') or 'default'}.",
        f"Model: {spec.arch} {spec.n_layers} layers, d={spec.d_model}, {spec.n_heads} heads, {spec.tokenizer} vocabulary "
        f"{spec.vocab_size}, batch {spec.batch_size} x {spec.seq_len} tokens, {spec.steps} steps, median of {reps} "
        "alternating runs.", *figures]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
