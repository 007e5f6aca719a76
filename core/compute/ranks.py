"""One rank of a torchrun job: its place in the job and the few collectives the pipeline needs (torch.distributed).

`init_group` joins the job (env:// rendezvous: NCCL with one GPU per local rank on CUDA, gloo on CPU); a `Group`
agrees on failures, shares rank 0's values, shards the batches and all-reduces the accumulators. Only a process
that torchrun started imports this module (core.entry.api.ranks, once WORLD_SIZE says so); launching a job,
planning its shards and reading its environment are in core.compute.distributed, without torch.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from ..base.errors import InputError
from ..base.settings import torchrun_env
from ..stats.sums import reduce_op
from .distributed import RankFailed, shard_batches, world_size_from_env

DEFAULT_TIMEOUT_S = 1800  # a collective that waits longer than this fails (a rank died silently)


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
        if not dist.is_initialized():
            return
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def init_group(device: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Group:
    """Join the torchrun job this process belongs to (env:// rendezvous). `device` is the run's
    resolved device ("cpu" or "cuda"): NCCL with one GPU per local rank on CUDA, gloo on CPU."""
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
