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

torch is imported inside the functions of a rank (`Group`, `init_group`) and in `default_nproc`: this module is
imported by every `python -m core` (core/__main__ reads WORLD_SIZE here; core.entry.cli and core.entry.api), and by
what launches torchrun jobs (core.studies.attention.run, core.studies.series), on a cache hit and on the app's first
page.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..base.errors import Cancelled, InputError
from ..base.progress import Progress
from ..base.settings import TORCHRUN_VARS, cache_root, torchrun_env
from ..base.spec import RunSpec
from ..stats.sums import reduce_op

ENV_VARS = TORCHRUN_VARS
DEFAULT_TIMEOUT_S = 1800  # a collective that waits longer than this fails (a rank died silently)


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


def _describe(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return msg if isinstance(e, InputError) else f"{type(e).__name__}: {msg}"


@dataclass
class Group:
    """This process's place in a torchrun job, and the few collectives the pipeline needs."""

    rank: int
    world: int
    local_rank: int
    backend: str
    device: str  # where this rank runs the model: "cpu" or "cuda:<local_rank>"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ collectives
    def agree(self, error: str | None = None) -> None:
        """Every rank says whether it failed; if any did, every rank raises RankFailed with the
        first failing rank's message."""
        # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
        import torch.distributed as dist

        errors: list[Any] = [None] * self.world
        dist.all_gather_object(errors, error)
        bad = [(r, e) for r, e in enumerate(errors) if e is not None]
        if bad:
            r, e = bad[0]
            raise RankFailed(f"rank {r} of {self.world} failed: {e}")

    def run(self, fn: Callable[[], Any]) -> Any:
        """fn() on every rank, failing together. fn's own collectives must start with `agree()`
        (as `reduce` does): a rank that raises joins the next agreement with its message."""
        try:
            out = fn()
        except RankFailed:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of this rank fails the run, with its message
            self.agree(_describe(e))
            raise  # not reached: agree raised
        self.agree(None)
        return out

    def share(self, fn: Callable[[], Any]) -> Any:
        """fn() on rank 0 only, its value (or its failure) shared with every rank."""
        # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
        import torch.distributed as dist

        box: list[Any] = [None]
        if self.is_main:
            try:
                box[0] = ("ok", fn())
            except Exception as e:  # noqa: BLE001 - shared, then raised on every rank
                box[0] = ("error", e if isinstance(e, InputError) else InputError(_describe(e)))
        dist.broadcast_object_list(box, src=0)
        status, value = box[0]
        if status == "error":
            raise value
        return value

    def shard(self, batches: list[np.ndarray], lengths: np.ndarray) -> list[np.ndarray]:
        return shard_batches(batches, lengths, self.world, self.rank)

    def reduce(self, tensors: dict, max_keys: tuple[str, ...] | None = None) -> None:
        """All-reduce the accumulators in place: MAX for `max_keys` (default: the sums that core.stats.sums declares
        with a max reduction), SUM for every other key (sums, and the sample whose rows come from one rank each).
        Starts with `agree()`."""
        # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
        import torch.distributed as dist

        self.agree(None)
        for k in sorted(tensors):  # the same order on every rank
            is_max = reduce_op(k) == "max" if max_keys is None else k in max_keys
            op = dist.ReduceOp.MAX if is_max else dist.ReduceOp.SUM
            dist.all_reduce(tensors[k], op=op)

    def close(self) -> None:
        """Leave the job: every rank waits here for the others (rank 0 writes after the last
        reduction), then the process group is destroyed.

        The barrier keeps a rank from exiting while another still works. Without it, rank 1 (done
        right after the last reduction) once died with SIGABRT, "terminate called without an active
        exception", in a whole-suite run on a loaded machine, as rank 0 finished writing. The likely
        cause: gloo's worker threads release the tensors of a finished collective (Python-owned, so
        the GIL is needed) a moment after the caller has woken up; a thread that does so while the
        interpreter is finalizing is ended mid-unwind. After the barrier the last collective of
        every rank holds no Python tensor, and every rank leaves only once rank 0 is done.
        """
        # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def init_group(device: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Group:
    """Join the torchrun job this process belongs to (env:// rendezvous). `device` is the run's
    resolved device ("cpu" or "cuda"): NCCL with one GPU per local rank on CUDA, gloo on CPU."""
    # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
    import torch
    import torch.distributed as dist

    env = torchrun_env()
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in env]
    if missing:
        raise InputError(f"WORLD_SIZE is set but {', '.join(missing)} is not: launch with torchrun "
                         f"(torchrun --nproc-per-node K -m core analyze ...).")
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    local_rank = int(env.get("LOCAL_RANK", rank))
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError("CUDA was requested but no GPU is available here: use --device cpu (or auto).")
        n_gpu = torch.cuda.device_count()
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        if local_world > n_gpu:
            raise InputError(f"{local_world} processes on this node but {n_gpu} GPU(s): use "
                             f"--nproc-per-node {n_gpu} (one process per GPU).")
        dev, backend = f"cuda:{local_rank}", "nccl"
        torch.cuda.set_device(local_rank)
    else:
        dev, backend = "cpu", "gloo"
    if not dist.is_initialized():
        kw = {"device_id": torch.device(dev)} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=_dt.timedelta(seconds=timeout_s), **kw)
    return Group(rank=rank, world=world, local_rank=local_rank, backend=backend, device=dev)


def group_from_env(spec) -> Group | None:
    """The Group of a torchrun job with more than one process; None for a plain run."""
    if world_size_from_env() <= 1:
        return None
    local_world = int(torchrun_env().get("LOCAL_WORLD_SIZE", "1"))
    if spec.device_map and local_world > 1:
        raise InputError(f"--device-map auto spreads one model over all GPUs of a node, so it takes one process per "
                         f"node: use --nproc-per-node 1 (got {local_world}).")
    return init_group(spec.resolved_device())


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
