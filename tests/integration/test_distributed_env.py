"""The GPU-side checks of joining a torchrun job, exercised on a CPU machine (no process group is made)."""

import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute.ranks import group_from_env, init_group


@pytest.fixture
def two_ranks(monkeypatch):
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(k, v)
    return monkeypatch


def test_a_world_without_a_rendezvous_says_to_use_torchrun(two_ranks):
    two_ranks.delenv("MASTER_PORT")
    two_ranks.delenv("RANK")
    with pytest.raises(InputError, match="RANK, MASTER_PORT is not: launch with torchrun"):
        init_group("cpu")


def test_cuda_without_a_gpu_is_a_clear_error(two_ranks):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(InputError, match="no GPU is available here"):
        init_group("cuda")


def test_more_processes_than_gpus_is_refused(two_ranks):
    import torch

    two_ranks.setattr(torch.cuda, "is_available", lambda: True)
    two_ranks.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(InputError, match="2 processes on this node but 1 GPU"):
        init_group("cuda")


def test_device_map_takes_one_process_per_node(two_ranks):
    with pytest.raises(InputError, match="one process per node: use --nproc-per-node 1"):
        group_from_env(RunSpec(device="cpu", device_map="auto"))


def test_one_process_is_a_plain_run(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert group_from_env(RunSpec(device="cpu")) is None
