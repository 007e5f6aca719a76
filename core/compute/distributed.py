"""Sharded extraction under torchrun: ranks split the batches, torch.distributed adds up the sums.

    torchrun --nproc-per-node K -m core analyze --model M --corpus C --out results.json

Every rank reads and tokenizes the whole corpus (cheap and deterministic) and plans the same
batches a single process would (`core.stats.batching.plan_batches`); each rank runs its share of those
batches (`shard_batches`, balanced by padded positions); then the accumulators are all-reduced on
the device: SUM for the float64 sums, MAX for the maxima (each sum's reduction is declared in `core.stats.sums`), and SUM for the
sample, whose rows each come from exactly one rank (the others hold zeros). Each batch's forward is
the one a single process runs, so the statistics equal a single-process run's up to the order of
float64 additions, and the sample is the same sample, bit for bit.

Rank 0 alone reads and writes the cache and results.json. A rank that fails makes every rank fail
with its message (`RankFailed`) before any reduction, or at the latest before anything is stored.
Backends: NCCL when the run is on CUDA (one GPU per local rank), gloo on CPU.

A rank's side (`Group`, `init_group`, `group_from_env`: torch.distributed) is core.compute.ranks, which only a
process that torchrun started imports (core.entry.api.ranks, once WORLD_SIZE says so). This module is imported by
every `python -m core` (core/__main__ reads WORLD_SIZE here; core.entry.cli and core.entry.api), and by what
launches torchrun jobs (core.studies.attention.run, core.studies.series), on a cache hit and on the app's first
page: it imports no torch at its top.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable

import numpy as np

from ..base.errors import Cancelled, InputError
from ..base.progress import Progress
from ..base.settings import cache_root, torchrun_env
from ..base.spec import RunSpec


class RankFailed(InputError):
    """One rank of a distributed run failed; every rank raises this with that rank's message."""


def world_size_from_env() -> int:
    """WORLD_SIZE as torchrun sets it (1 when not launched by torchrun)."""
    try:
        return int(torchrun_env().get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def rank_from_env() -> int:
    """RANK as torchrun sets it (0 when not launched by torchrun)."""
    try:
        return int(torchrun_env().get("RANK", "0"))
    except ValueError:
        return 0


def shard_batches(batches: list[np.ndarray], lengths: np.ndarray, world: int, rank: int) -> list[np.ndarray]:
    """The batches of `rank` among `world`: greedy by padded positions (len(batch) x longest window).

    Deterministic (ties go to the lowest rank), so every rank computes the same assignment. A
    rank gets no batch at all when there are fewer batches than ranks.

    >>> b = [np.array([0, 1]), np.array([2, 3]), np.array([4])]
    >>> [len(shard_batches(b, np.array([9, 9, 5, 5, 2]), 2, r)) for r in (0, 1)]
    [1, 2]
    """
    load = np.zeros(world)
    mine = []
    for b in batches:
        r = int(np.argmin(load))  # argmin returns the first (lowest) rank on ties
        load[r] += len(b) * int(lengths[b].max())
        if r == rank:
            mine.append(b)
    return mine


# ---------------------------------------------------------------------- launching torchrun
def spec_args(spec) -> list[str]:
    """CLI options that reproduce `spec` (`python -m core analyze` parses them back into it)."""

    defaults = RunSpec()
    out: list[str] = []
    for f in dataclasses.fields(spec):
        v = getattr(spec, f.name)
        if f.name not in ("model", "corpus") and v == getattr(defaults, f.name):
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(v, bool):
            out += [flag] if v else []
        elif isinstance(v, (list, tuple)):
            out += [flag, ",".join(map(str, v))]
        elif v is not None:
            out += [flag, str(v)]
    return out


def torchrun_prefix(nproc: int) -> list[str]:
    """argv up to the command of a one-node torchrun job of `python -m core` with `nproc` processes."""
    if nproc < 1:
        raise InputError(f"the number of processes must be at least 1, got {nproc}")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "core"]


def torchrun_command(spec, nproc: int, out: str, cache_dir: str | None = None, quiet: bool = True,
                     force: bool = False) -> list[str]:
    """argv of a one-node torchrun job of `analyze` for `spec` with `nproc` processes (the job
    queue and the tests launch this; a cluster uses its own torchrun line, see README)."""
    cmd = torchrun_prefix(nproc) + ["analyze", *spec_args(spec), "--out", str(out)]
    if cache_dir:
        cmd += ["--cache-dir", str(cache_dir)]
    if quiet:
        cmd.append("--quiet")
    if force:
        cmd.append("--force")
    return cmd


def default_nproc(spec) -> int:
    """Processes of a local torchrun job: one per GPU on CUDA, 2 on the CPU."""
    if spec.resolved_device() == "cuda":
        # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
        import torch

        return max(1, torch.cuda.device_count())
    return 2


def run_torchrun(args: list[str], nproc: int, progress: Callable[..., None], cancel: Callable[[], bool]) -> dict:
    """`torchrun --standalone --nproc-per-node nproc -m core ARGS --out <tmp> --quiet` on this
    machine, as (part of) a job of `core.entry.jobs`; returns the JSON that rank 0 wrote.

    Polls `cancel()` while it runs: a cancel ends every rank (nothing is stored: rank 0 writes the
    cache only once every rank has finished). A failure raises InputError with the ranks' message.
    The ranks get this process's cache directory as `--cache-dir` unless ARGS name one.
    """
    import json
    import signal
    import subprocess
    import tempfile
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="aniso-torchrun-") as tmp:
        out, log = Path(tmp) / "out.json", Path(tmp) / "stderr.txt"
        where = [] if "--cache-dir" in args else ["--cache-dir", str(cache_root())]
        cmd = torchrun_prefix(nproc) + [*args, *where, "--out", str(out), "--quiet"]
        progress(Progress("forward", 0, 1, message=f"torchrun: {nproc} processes"))
        with open(log, "w") as err:
            p = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
            try:
                while p.poll() is None:
                    if cancel():
                        raise Cancelled("Cancelled by the user; nothing was stored.")
                    time.sleep(0.5)
            finally:
                if p.poll() is None:  # cancelled (or this thread failed): end torchrun and its ranks
                    os.killpg(p.pid, signal.SIGTERM)
                    try:
                        p.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
        if p.returncode != 0:
            lines = log.read_text(errors="replace").splitlines()
            said = [ln for ln in lines if ln.startswith("error: ")]
            raise InputError(said[-1][len("error: "):] if said else
                             f"torchrun exited with status {p.returncode}: {failure_summary(lines)}")
        res = json.loads(out.read_text())
    progress(Progress("done", 1, 1, message=f"torchrun: {nproc} processes"))
    return res


# What a rank that died without a message of ours leaves in torchrun's log: the C++ runtime's last words, a
# Python exception's last line, and torchrun's own account of the first failure (which rank, which signal).
_FAILURE_MARKS = ("terminate called", "what():", "Error:", "Exception:", "rank :", "exitcode :", "traceback :")


def failure_summary(lines: list[str], limit: int = 600) -> str:
    """The lines of a failed torchrun's log that say which rank failed and how, in order, without repeats."""
    picked: list[str] = []
    for ln in lines:
        ln = " ".join(ln.split())
        if any(m in ln for m in _FAILURE_MARKS) and ln not in picked and "ChildFailedError" not in ln:
            picked.append(ln)
    text = " · ".join(picked) if picked else " ".join(" ".join(ln.split()) for ln in lines[-3:])
    return text if len(text) <= limit else "…" + text[-limit:]


def job_torchrun(params: dict, progress: Callable[..., None], cancel: Callable[[], bool]) -> dict:
    """Job kind "analyze-torchrun" of `core.entry.jobs`: `analyze` as a torchrun job on this machine.

    params: {"spec": RunSpec.to_dict(), "nproc": processes (default `default_nproc`), "cache_dir":
    optional}. A cancel ends every rank and stores nothing (`run_torchrun`). Returns the run's cache key.
    """

    spec = RunSpec.from_dict(params["spec"])
    nproc = int(params.get("nproc") or default_nproc(spec))
    args = ["analyze", *spec_args(spec)] + (["--cache-dir", str(params["cache_dir"])] if params.get("cache_dir") else [])
    res = run_torchrun(args, nproc, progress, cancel)
    return {"cache_key": res["manifest"]["cache_key"], "n_tokens": res["manifest"]["tokens"]["analysed"],
            "world_size": nproc}
