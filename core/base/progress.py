"""A job's progress as a small typed record: what every job kind reports and every bar shows.

    Progress(Stage.FORWARD, done=1_200, total=20_000, rate=3_100.0)

A counted stage (forward and attention passes in tokens, a hub model's download in bytes, ablation passes,
training steps, series checkpoints) fills a bar: `fraction` is done / total. The other stages (start, wait, load, tokenize,
metrics, done) are one line of text. The record travels through the job queue as JSON (`to_dict`,
`from_dict`), so the CLI, the app's job panel and a test read the same fields.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import Enum


class Stage(str, Enum):
    START = "start"  # nothing reported yet
    WAIT = "wait"  # another process is doing the same work
    READ = "read"  # the corpus's documents read (done = total = documents, once read)
    DOWNLOAD = "download"  # a hub model's files fetched (bytes; the message names the file, its bytes and the rate)
    LOAD = "load"
    TOKENIZE = "tokenize"
    FORWARD = "forward"  # the extraction's forward pass
    ATTENTION = "attention"  # the attention statistics' forward pass
    ABLATION = "ablation"  # the ablation's forward passes
    METRICS = "metrics"  # per-layer metrics after the forward pass
    TRAIN = "train"
    SERIES = "series"  # one checkpoint after another
    REPORT = "report"  # the report zip's views, one after another
    DONE = "done"

    def __str__(self) -> str:
        return self.value


# Counted stages: what the bar counts, (name, unit of done/total, unit of rate). Training counts
# steps and its rate is in tokens.
UNITS: dict[Stage, tuple[str, str, str]] = {
    Stage.READ: ("reading the corpus", "documents", "documents"),
    Stage.DOWNLOAD: ("downloading the model", "bytes", "bytes"),
    Stage.FORWARD: ("forward pass", "tokens", "tokens"),
    Stage.ATTENTION: ("attention pass", "tokens", "tokens"),
    Stage.ABLATION: ("ablation", "passes", "passes"),
    Stage.TRAIN: ("training", "steps", "tokens"),
    Stage.SERIES: ("checkpoint series", "checkpoints", "checkpoints"),
    Stage.REPORT: ("report", "views", "views"),
    Stage.METRICS: ("per-layer metrics", "layers", "layers"),  # counted when it gives its layers (a run's metrics)
}


# The steps of a run's first computation, each with its own line (and bar) in the job panel: the documents read, the
# model loaded, the windows tokenized, the pass over the tokens (an analysis' or the attention's), then the
# per-layer metrics (a deep model's take minutes: without a step of their own the bar stood full meanwhile).
RUN_STEPS: dict[Stage, int] = {Stage.READ: 1, Stage.DOWNLOAD: 2, Stage.LOAD: 2, Stage.TOKENIZE: 3, Stage.FORWARD: 4,
                               Stage.ATTENTION: 4, Stage.METRICS: 5}  # step 5: the per-layer metrics, layer by layer
N_RUN_STEPS = 5


def _finite(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Progress:
    """Where a job stands: stage, done of total (in the stage's unit), rate (per second), ETA.

    `eta_s` None: unknown (no rate yet); a NaN or inf given is read as unknown.
    """

    stage: Stage
    done: int = 0
    total: int = 0
    rate: float = 0.0
    eta_s: float | None = None
    message: str = ""
    overall: float | None = None  # a multi-run job's share of its whole work done (0..1), what the bar shows

    def __post_init__(self) -> None:
        # Validate once at the boundary; a caller may pass the stage's string ("forward").
        object.__setattr__(self, "stage", Stage(self.stage))
        object.__setattr__(self, "done", max(int(self.done or 0), 0))
        object.__setattr__(self, "total", max(int(self.total or 0), 0))
        object.__setattr__(self, "rate", max(_finite(self.rate) or 0.0, 0.0))
        object.__setattr__(self, "eta_s", _finite(self.eta_s))
        object.__setattr__(self, "message", str(self.message or ""))
        share = _finite(self.overall)
        object.__setattr__(self, "overall", None if share is None else min(max(share, 0.0), 1.0))

    @property
    def counted(self) -> bool:
        """A stage that fills a bar (and has a total to fill it to)."""
        return self.stage in UNITS and self.total > 0

    @property
    def step(self) -> str:
        """'step 2 of 5' for the stages of a run's computation (RUN_STEPS), else ''. The metrics stage is a run's
        when it counts the run's layers (a reproduction's 'the chain pass' line is not)."""
        k = RUN_STEPS.get(self.stage) if self.stage is not Stage.METRICS or self.total > 0 else None
        return f"step {k} of {N_RUN_STEPS}" if k else ""

    @property
    def title(self) -> str:
        return UNITS.get(self.stage, (self.stage.value, "", ""))[0]

    @property
    def unit(self) -> str:
        return UNITS.get(self.stage, ("", "", ""))[1]

    @property
    def rate_unit(self) -> str:
        return UNITS.get(self.stage, ("", "", ""))[2]

    @property
    def fraction(self) -> float:
        """How full the bar is: a multi-run job's share of its whole work (`overall`) when it gives one; else
        done / total in a counted stage (the per-layer metrics count layers, a bar of their own like every stage's);
        full in an uncounted metrics stage (after a pass) and at the end; empty before."""
        if self.overall is not None:
            return self.overall
        if self.counted:
            return min(1.0, self.done / self.total)
        return 1.0 if self.stage in (Stage.METRICS, Stage.DONE) else 0.0

    @property
    def finished(self) -> bool:
        return self.counted and self.done >= self.total

    def with_rate(self, elapsed_s: float) -> "Progress":
        """The same progress with rate and ETA measured from the stage's elapsed time, when the job kind
        gave none (ablation passes, series checkpoints)."""
        if not self.counted or self.rate or self.done <= 0 or elapsed_s <= 0:
            return self
        rate = self.done / elapsed_s
        eta = self.eta_s if self.eta_s is not None else (self.total - self.done) / rate
        return Progress(self.stage, self.done, self.total, rate, eta, self.message, self.overall)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stage"] = self.stage.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Progress":
        names = ("stage", "done", "total", "rate", "eta_s", "message", "overall")
        return cls(**{k: d[k] for k in names if k in d})



# How far one run's computation is at each stage, 0..1 (`run_fraction`): its preparation (read, load, tokenize)
# is a small share, the pass over the tokens most of it, the per-layer metrics the rest.
_RUN_SHARE = {Stage.START: 0.0, Stage.WAIT: 0.0, Stage.READ: 0.02, Stage.DOWNLOAD: 0.03, Stage.LOAD: 0.05,
              Stage.TOKENIZE: 0.08}
FORWARD_SHARE = (0.1, 0.9)  # the pass over the tokens fills this span of a run; the metrics the rest


def run_fraction(p: Progress) -> float:
    """How much of one run's work `p` says is done (0..1), for a multi-run job's bar (`overall`): the steps
    before the pass count for little, the pass (forward, attention, ablation passes) fills 0.1-0.9 by its
    done / total, the per-layer metrics 0.9-1 by layer."""
    if p.stage in _RUN_SHARE:
        return _RUN_SHARE[p.stage]
    inside = min(1.0, p.done / p.total) if p.total > 0 else 0.0
    if p.stage == Stage.METRICS:
        return FORWARD_SHARE[1] + (1 - FORWARD_SHARE[1]) * inside
    if p.stage == Stage.DONE:
        return 1.0
    a, b = FORWARD_SHARE
    return a + (b - a) * inside


def overall(done_weight: float, total_weight: float, current_weight: float, p: Progress) -> float:
    """The share of a multi-step job's whole work: the weights (tokens) of the steps finished, plus the current
    step's weight times how far it is (`run_fraction`), over the weights of all steps."""
    if total_weight <= 0:
        return 0.0
    return min(1.0, (done_weight + current_weight * run_fraction(p)) / total_weight)
