"""The repository passes the pinned linter (ruff, configured in pyproject.toml), so CI enforces it."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_passes_on_the_repository():
    pytest.importorskip("ruff", reason="ruff is pinned in requirements.txt; ./dev.sh installs it")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"ruff found problems (fix them, or `ruff check --fix .`):\n{proc.stdout}{proc.stderr}"


def test_ruff_is_the_pinned_version():
    pytest.importorskip("ruff")
    pin = next(line.split("==")[1].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
               if line.startswith("ruff=="))
    out = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.split()[-1] == pin
