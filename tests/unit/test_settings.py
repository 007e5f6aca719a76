"""Deployment settings read from the environment (core/settings.py)."""

import pytest

from core import settings
from core.errors import InputError


@pytest.mark.parametrize("raw, want", [(None, 0), ("", 0), ("0", 0), ("1", 1), (" 4 ", 4)])
def test_torchrun_processes(monkeypatch, raw, want):
    if raw is None:
        monkeypatch.delenv("ANISO_TORCHRUN_NPROC", raising=False)
    else:
        monkeypatch.setenv("ANISO_TORCHRUN_NPROC", raw)
    assert settings.current().torchrun_nproc == want


@pytest.mark.parametrize("raw", ["two", "-1", "1.5"])
def test_torchrun_processes_refuses_what_is_not_a_count(monkeypatch, raw):
    monkeypatch.setenv("ANISO_TORCHRUN_NPROC", raw)
    with pytest.raises(InputError, match=r"ANISO_TORCHRUN_NPROC must be a whole number of processes .*got '"):
        settings.current()
