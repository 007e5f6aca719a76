"""Run the docstring examples of core/ as tests (pytest's --doctest-modules, for core/ only), and mark the tiers.

Doctests are collected here rather than with the command-line flag because the flag would also import every
conftest.py and test module of tests/ a second time as a doctest module.

Tiers: see tests/conftest.py. Here (the one conftest every run loads), every test of tests/unit not marked
`slow` and every doctest of core/ gets the `fast` marker (`./dev.sh test --fast` runs `-m fast`), and the
unit tier runs first in every session, so that its numpy-only check (tests/unit/conftest.py) sees a process
that no other tier has loaded torch into.
"""

from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

ROOT = Path(__file__).resolve().parent
CORE = ROOT / "core"


def pytest_ignore_collect(collection_path: Path, config):
    """With `-m fast` alone (`./dev.sh test --fast`), a test file of the other tiers that never says
    `mark.fast` is not even imported: collecting them all would import torch and cost seconds."""
    if config.getoption("markexpr", "") != "fast" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_") or _tier_of(collection_path) in ("unit", "core", ""):
        return None
    return None if "mark.fast" in collection_path.read_text(errors="replace") else True


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix == ".py" and CORE in file_path.parents and file_path.name != "__main__.py":
        return DoctestModule.from_parent(parent, path=file_path)
    return None


TIER_ORDER = {"unit": 0}  # the unit tier first, then the others in pytest's order


def _tier_of(path) -> str:
    """"unit", "integration", "app", "browser" (tests/<tier>/...), "core" (doctests), or ""."""
    try:
        parts = Path(str(path)).resolve().relative_to(ROOT).parts
    except ValueError:
        return ""
    if parts and parts[0] == "tests":
        return parts[1] if len(parts) > 2 else ""
    return parts[0] if parts and parts[0] == "core" else ""


def _tier(item) -> str:
    return _tier_of(item.path)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = _tier(item)
        if (tier == "unit" and not item.get_closest_marker("slow")) or tier == "core":
            item.add_marker(pytest.mark.fast)
    items.sort(key=lambda item: TIER_ORDER.get(_tier(item), 1))  # stable: keeps the order within a tier
