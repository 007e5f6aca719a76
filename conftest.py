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


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix == ".py" and CORE in file_path.parents and file_path.name != "__main__.py":
        return DoctestModule.from_parent(parent, path=file_path)
    return None


TIER_ORDER = {"unit": 0}  # the unit tier first, then the others in pytest's order


def _tier(item) -> str:
    """"unit", "integration", "app", "browser" (tests/<tier>/...), "core" (doctests), or ""."""
    try:
        parts = Path(str(item.path)).resolve().relative_to(ROOT).parts
    except ValueError:
        return ""
    return parts[1] if parts[0] == "tests" and len(parts) > 2 else parts[0]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = _tier(item)
        if (tier == "unit" and not item.get_closest_marker("slow")) or tier == "core":
            item.add_marker(pytest.mark.fast)
    items.sort(key=lambda item: TIER_ORDER.get(_tier(item), 1))  # stable: keeps the order within a tier
