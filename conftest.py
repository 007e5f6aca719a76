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
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the order in which the groups are handed out
        _heaviest_groups_first(items)


# ----------------------------------------------------------------------------- parallel runs (pytest-xdist)
# `./dev.sh test` runs `pytest -n 2 --dist loadfile` (docs/testing.md). Here `loadfile` hands out one group
# at a time to a worker that is nearly idle: a test file (its module fixtures are computed once, in one
# process), the whole browser tier (one app server and one Chromium at a time: two at once on 2 cores
# starve each other's page waits), or a single test where its file is in UNGROUPED (independent tests,
# none sharing a module fixture).
UNGROUPED: set[str] = set()
BROWSER = "tests/browser/"


def _group(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return BROWSER if path.startswith(BROWSER) else nodeid if path in UNGROUPED else path


def _weight(item) -> int:
    return 30 if item.get_closest_marker("browser") else 10 if item.get_closest_marker("slow") else 1


def _heaviest_groups_first(items) -> None:
    """The unit tier first (its numpy-only check, tests/unit/conftest.py), then the groups from the heaviest
    (browser tests, then `slow` ones) down, so that the last groups handed out are short and both workers
    finish together. Depends on the collection only: every worker computes the same order."""
    weight: dict[str, int] = {}
    for item in items:
        g = _group(item.nodeid)
        weight[g] = weight.get(g, 0) + _weight(item)
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(_group(item.nodeid), i)
    items.sort(key=lambda it: (TIER_ORDER.get(_tier(it), 1), -weight[_group(it.nodeid)], first[_group(it.nodeid)]))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, when it is installed
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    config.option.loadscopereorder = False  # hand the groups out in the workers' collection order (above)
    return ByGroup(config, log)
