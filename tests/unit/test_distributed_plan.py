"""The rank plan of a torchrun job (numpy only): every batch runs exactly once, deterministically."""

import numpy as np
import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute.distributed import failure_summary, shard_batches, spec_args, torchrun_command
from core.entry.cli import _spec, build_parser


def _batches(n_windows, batch_size, seed=0):
    lengths = np.random.default_rng(seed).integers(1, 50, size=n_windows)
    order = np.argsort(-lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, n_windows, batch_size)], lengths


@pytest.mark.parametrize("n_windows, batch_size, world", [(37, 4, 2), (37, 4, 3), (5, 8, 2), (3, 1, 4), (100, 7, 5)])
def test_every_batch_runs_on_exactly_one_rank(n_windows, batch_size, world):
    batches, lengths = _batches(n_windows, batch_size)
    shares = [shard_batches(batches, lengths, world, r) for r in range(world)]
    got = sorted(int(i) for s in shares for b in s for i in b)
    assert got == list(range(n_windows))
    assert sum(len(s) for s in shares) == len(batches)
    # deterministic: a second call gives the same batches to the same rank
    again = [shard_batches(batches, lengths, world, r) for r in range(world)]
    assert all(len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b)) for a, b in zip(shares, again))
    # balanced: loads differ by at most the largest batch's padded positions
    cost = lambda bs: sum(len(b) * int(lengths[b].max()) for b in bs)  # noqa: E731
    loads = [cost(s) for s in shares]
    assert max(loads) - min(loads) <= max(cost([b]) for b in batches)
    if len(batches) < world:
        assert sum(1 for s in shares if not s) == world - len(batches)  # ranks without documents


@pytest.mark.parametrize("spec", [
    RunSpec(model="minilm-l6", corpus="wiki-en"),
    RunSpec(model="/models/m", corpus="docs.csv", text_column="body", max_tokens=123, max_seq_len=64, batch_size=3,
            device="cuda", dtype="bfloat16", special_tokens="include", sample=77, seed=5, trust_remote_code=True,
            device_map="auto", layers=(0, 4, 8)),
])
def test_spec_args_parse_back_into_the_same_spec(spec):
    args = build_parser().parse_args(["analyze", *spec_args(spec), "--out", "r.json"])
    assert _spec(args) == spec


def test_torchrun_command_is_a_standalone_torchrun_of_analyze():
    cmd = torchrun_command(RunSpec(model="minilm-l6", corpus="wiki-en", max_tokens=500), 3, "r.json", cache_dir="c")
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3"]
    assert cmd[5:8] == ["-m", "core", "analyze"]
    assert cmd[cmd.index("--max-tokens") + 1] == "500" and cmd[cmd.index("--cache-dir") + 1] == "c"
    with pytest.raises(InputError):
        torchrun_command(RunSpec(), 0, "r.json")


def test_a_failed_torchrun_says_which_rank_failed_and_how():
    """A rank killed by a signal leaves no "error:" line of ours: the job's message is the C++ runtime's last words
    and torchrun's account of the first failure, not the last three lines of its banner."""
    log = """checkpoint 2/3
terminate called without an active exception
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
core FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_23:00:00
  host      : lab
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 32386)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 32386
============================================================""".splitlines()
    assert failure_summary(log) == ("terminate called without an active exception · rank : 1 (local_rank: 1) · "
                                    "exitcode : -6 (pid: 32386) · traceback : Signal 6 (SIGABRT) received by PID 32386")
    assert failure_summary(["a", "b", "c", "d"]) == "b c d"  # nothing recognised: the log's last lines
    assert failure_summary(["ValueError: " + "x" * 1000]).startswith("…") and len(failure_summary(["x"] * 3)) < 600
