"""The torch threads of a run's forward passes (issue 36): ANISO_TORCH_THREADS, "auto" in the worker.

On a contended CPU two threads that each get a share of a core wait for each other at every parallel step, so
"auto" takes the cores other processes leave free, at least 1 and at most torch's own count; a run records the
count it ran with (manifest.timing.torch_threads)."""

from __future__ import annotations

import pytest
import torch

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute import forward_run
from core.compute.pipeline import analyze

pytestmark = pytest.mark.fast


@pytest.fixture
def threads(monkeypatch):
    """torch's own count is 2 here (the suite runs with OMP_NUM_THREADS=1); torch's count is restored after."""
    before = torch.get_num_threads()
    monkeypatch.setattr(forward_run, "TORCH_OWN_THREADS", 2)
    free = {"cores": None}
    monkeypatch.setattr(forward_run.procfs, "free_cores", lambda window_s=0.3: free["cores"])
    monkeypatch.setattr(forward_run, "_free", {"at": None, "cores": None})  # no reading of another test
    yield free
    torch.set_num_threads(before)


@pytest.mark.parametrize(("setting", "free", "want"), [
    ("auto", 0.0, 1),  # two busy processes on 2 cores: one thread
    ("auto", 0.6, 1),
    ("auto", 1.6, 2),
    ("auto", 7.0, 2),  # never more than torch's own count
    ("auto", None, 2),  # no /proc/stat: torch's own
    ("torch", 0.0, 2),
    (None, 0.0, 2),  # unset: torch's own, the command line's default
    ("3", 0.0, 3),
])
def test_threads_follow_the_setting_and_the_free_cores(threads, monkeypatch, setting, free, want):
    if setting is None:
        monkeypatch.delenv("ANISO_TORCH_THREADS", raising=False)
    else:
        monkeypatch.setenv("ANISO_TORCH_THREADS", setting)
    threads["cores"] = free
    assert forward_run.fit_threads() == want == torch.get_num_threads()


def test_a_bad_setting_is_refused_with_its_name(threads, monkeypatch):
    monkeypatch.setenv("ANISO_TORCH_THREADS", "many")
    with pytest.raises(InputError, match="ANISO_TORCH_THREADS must be auto, torch or a positive integer"):
        forward_run.fit_threads()


def test_a_run_records_the_threads_it_ran_with(threads, monkeypatch, tmp_path, tiny_bert_dir):
    monkeypatch.setenv("ANISO_TORCH_THREADS", "auto")
    threads["cores"] = 0.3
    res = analyze(RunSpec(model=str(tiny_bert_dir), corpus="wiki-en", max_tokens=400, max_seq_len=32, sample=50),
                  cache_dir=tmp_path)
    assert res["manifest"]["timing"]["torch_threads"] == 1


def test_the_free_cores_are_read_once_for_the_runs_that_start_close_together(monkeypatch):
    """A series starts a run per checkpoint: one 0.3 s reading serves those within FREE_CORES_TTL_S."""
    reads, now = [], {"t": 100.0}
    monkeypatch.setattr(forward_run.procfs, "free_cores", lambda window_s=0.3: reads.append(now["t"]) or 1.5)
    monkeypatch.setattr(forward_run, "_free", {"at": None, "cores": None})
    clock = lambda: now["t"]  # noqa: E731
    assert forward_run.free_cores(clock) == 1.5 and reads == [100.0]
    now["t"] += forward_run.FREE_CORES_TTL_S - 1
    assert forward_run.free_cores(clock) == 1.5 and reads == [100.0]  # within the window: the same reading
    now["t"] += 2
    assert forward_run.free_cores(clock) == 1.5 and reads == [100.0, 100.0 + forward_run.FREE_CORES_TTL_S + 1]


def test_a_second_job_of_the_worker_counts_the_first_ones_cores_as_busy(threads, monkeypatch):
    """ANISO_WORKERS > 1: the jobs are threads of one process, so the first job's CPU is this process's own. A run
    that starts while another runs counts it as busy (else it would see those cores free), and reads afresh."""
    monkeypatch.setenv("ANISO_TORCH_THREADS", "auto")
    seen = []

    def free_cores(window_s=0.3, own=None):  # 2 cores; the first job uses 1.6 of them, nothing else runs
        seen.append(own is not None)
        return 2.0 - 1.6 if own is not None and own() == 0.0 else 2.0

    monkeypatch.setattr(forward_run.procfs, "free_cores", free_cores)
    with forward_run._one_run() as first:
        assert first and forward_run.fit_threads(first) == 2
        with forward_run._one_run() as second:
            assert not second and forward_run.fit_threads(second) == 1 == torch.get_num_threads()
    with forward_run._one_run() as again:  # both ended: alone again
        assert again
    assert seen == [False, True]
