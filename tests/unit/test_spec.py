"""RunSpec: validation, device/dtype resolution, stable keys (no torch needed)."""

import os
import sys

import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec, stable_hash

HAS_NVIDIA = os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def test_auto_dtype_is_float32_on_cpu_and_bfloat16_on_cuda():
    spec = RunSpec()
    assert spec.resolved_dtype("cpu") == "float32"
    assert spec.resolved_dtype("cuda") == "bfloat16"
    assert RunSpec(dtype="float16").resolved_dtype("cuda") == "float16"
    assert RunSpec(device="cpu").resolved_device() == "cpu"


@pytest.mark.skipif(HAS_NVIDIA, reason="a GPU machine: auto may pick cuda")
def test_auto_device_is_cpu_without_a_gpu_and_does_not_import_torch():
    had_torch = "torch" in sys.modules
    assert RunSpec().resolved_device() == "cpu"
    assert RunSpec().resolved_dtype() == "float32"
    assert ("torch" in sys.modules) == had_torch


@pytest.mark.parametrize("bad", [dict(model=""), dict(corpus="  "), dict(max_tokens=0), dict(sample=-1),
                                 dict(batch_size=0), dict(max_seq_len=4), dict(device="gpu"),
                                 dict(dtype="float64"), dict(special_tokens="some")])
def test_invalid_specs_are_input_errors(bad):
    with pytest.raises(InputError):
        RunSpec(**bad)


def test_dict_round_trip_and_stable_hash():
    spec = RunSpec(model="untrained-gpt2", corpus="wiki-fr", max_tokens=123, seed=4)
    assert RunSpec.from_dict(spec.to_dict()) == spec
    assert RunSpec.from_dict({**spec.to_dict(), "unknown_future_field": 1}) == spec
    d = spec.to_dict()
    assert stable_hash(d) == stable_hash(dict(reversed(list(d.items()))))
    assert stable_hash(d) != stable_hash(spec.replace(seed=5).to_dict())
