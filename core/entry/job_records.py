"""What a job is, without its queue: the job kinds (`KINDS`, "module:function" targets the worker imports, and
`resolve_target` that imports one) and `Job`, the record any process can poll (JSON in the queue's store;
core/entry/job_queue.py reads and writes it).

Statuses: queued -> running -> done | failed | cancelled. A kind is a function
`fn(params: dict, progress, cancel) -> dict | None`, optionally with a `key` function that derives the job id.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib
import json
import math
from dataclasses import dataclass, field
from typing import Callable

from ..base import settings
from ..base.errors import InputError
from ..base.progress import Progress, Stage

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
ACTIVE = (QUEUED, RUNNING)


@dataclass(frozen=True)
class JobKind:
    """What the worker runs for a kind: "module:function", and optionally the key function."""

    run: str
    key: str | None = None  # "module:function" params -> str; default: hash of the params
    title: str = ""


# Job kinds. Add yours here (the worker imports the target only when it runs such a job).
KINDS: dict[str, JobKind] = {
    "analyze": JobKind("core.compute.analysis_jobs:job_analyze", "core.compute.analysis_jobs:job_analyze_key", "extraction"),
    "ablation": JobKind("core.compute.analysis_jobs:job_ablation", "core.compute.analysis_jobs:job_ablation_key", "ablation"),
    "analyze-torchrun": JobKind(
        "core.compute.distributed:job_torchrun", "core.compute.analysis_jobs:job_analyze_key", "torchrun extraction"
    ),
    "attention": JobKind(
        "core.studies.attention.run:job_attention", "core.compute.analysis_jobs:job_analyze_key", "attention statistics"
    ),
    "attention-maps": JobKind(
        "core.studies.attention.viewer:job_attention_maps",
        "core.studies.attention.viewer:job_attention_maps_key",
        "attention map of one window",
    ),
    "chain": JobKind("core.studies.chain.job:job_chain", "core.studies.chain.job:job_chain_key", "chain statistics"),
    "chain-ablation": JobKind(
        "core.studies.chain.ablate_links:job_chain_ablation",
        "core.studies.chain.ablate_links:job_chain_ablation_key",
        "chain ablations",
    ),
    "train": JobKind("core.studies.training:job_train", None, "training"),
    "series": JobKind("core.studies.series:job_series", None, "checkpoint series"),
    "lab": JobKind("core.studies.lab:job_lab", None, "lab"),
    "reproduce": JobKind(
        "core.studies.papers.run:job_reproduce", "core.studies.papers.run:job_reproduce_key", "paper reproduction"
    ),
    "report": JobKind("core.views.report:job_report", None, "report zip"),
}


def register(kind: str, run: str, key: str | None = None, title: str = "") -> None:
    """Add a job kind at run time (tests; a plugin). The worker must import the same registration."""
    KINDS[kind] = JobKind(run, key, title or kind)


def resolve_target(target: str) -> Callable:
    mod, _, name = target.partition(":")
    return getattr(importlib.import_module(mod), name)


def load_job_modules() -> None:
    for mod in settings.job_modules():
        importlib.import_module(mod)


def lookup(kind: str) -> JobKind:
    if kind not in KINDS:
        load_job_modules()
    if kind not in KINDS:
        raise InputError(f"Unknown job kind {kind!r}; known: {', '.join(sorted(KINDS))}.")
    return KINDS[kind]


@dataclass
class Job:
    """One job's record (JSON in the queue's store). Times are UNIX seconds."""

    id: str
    kind: str
    params: dict
    label: str = ""
    status: str = QUEUED
    attempt: int = 1
    progress: Progress = field(default_factory=lambda: Progress(Stage.START))  # the last one the job reported
    message: str = ""  # the record's own note: waiting for a worker, starting, done, cancelled...
    error: str = ""
    result: dict | None = None
    created: float = 0.0
    started: float | None = None
    finished: float | None = None
    heartbeat: float | None = None
    worker: dict = field(default_factory=dict)  # {"host", "pid"} of the process running it
    owner: str = ""  # the token of the browser session that queued it (ANISO_SHARED=1: only it may cancel)
    cancel_requested: bool = False  # read from its own key, not stored in the record

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def to_json(self) -> bytes:
        d = dataclasses.asdict(self)
        d.pop("cancel_requested")
        d["progress"] = self.progress.to_dict()
        return json.dumps(d, allow_nan=False, default=_nan_none).encode()

    @classmethod
    def from_json(cls, blob: bytes) -> "Job":
        d = json.loads(blob)
        names = {f.name for f in dataclasses.fields(cls)}
        job = cls(**{k: v for k, v in d.items() if k in names and k != "progress"})
        job.progress = Progress.from_dict(d.get("progress") or {"stage": Stage.START})
        return job

    def describe(self) -> str:
        """One line for a terminal or a caption."""
        what = f"{self.kind} {self.label}".strip()
        p = self.progress
        if self.status == RUNNING:
            if p.counted:
                eta = f", ETA {fmt_seconds(p.eta_s)}" if p.eta_s is not None else ""
                return f"{what}: {p.done:,}/{p.total:,} {p.unit}, {p.rate:,.0f} {p.rate_unit}/s{eta}"
            return f"{what}: {p.message or self.message or p.stage}"
        if self.status == FAILED:
            return f"{what}: failed: {self.error}"
        return f"{what}: {self.status}"


def _nan_none(o):
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "…"
    return f"{s:.0f} s" if s < 90 else (f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h")


def utc(ts: float | None) -> str:
    return "" if ts is None else _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
