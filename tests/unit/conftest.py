"""The unit tier imports numpy only: no torch, transformers, streamlit or umap, directly or through
the core modules it calls (tests that need them live in tests/integration or tests/app).

Enforced twice:
- at import: `test_numpy_only.py` imports every tests/unit module in a fresh interpreter and lists
  the heavy modules that came with them;
- at run time: while a unit test runs (its fixtures included), an import statement of one of them, or
  one of them newly in sys.modules, fails the test. The import statement is caught even when another
  tier has loaded torch into this process already (the full suite collects them all first).
"""

from __future__ import annotations

import builtins
import sys

import pytest

HEAVY = ("torch", "transformers", "streamlit", "umap")
_SEEN = pytest.StashKey[set]()
_BEFORE = pytest.StashKey[set]()


def loaded_heavy() -> set[str]:
    return {m for m in HEAVY if m in sys.modules}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    seen: set[str] = set()
    original = builtins.__import__

    def watched(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.partition(".")[0] in HEAVY:
            seen.add(name.partition(".")[0])
        return original(name, globals, locals, fromlist, level)

    item.stash[_SEEN], item.stash[_BEFORE] = seen, loaded_heavy()
    builtins.__import__ = watched
    try:
        yield
    finally:
        builtins.__import__ = original


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "teardown" or _SEEN not in item.stash:
        return
    heavy = item.stash[_SEEN] | (loaded_heavy() - item.stash[_BEFORE])
    report = outcome.get_result()
    if heavy and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} imported {', '.join(sorted(heavy))}: the unit tier is numpy-only "
                           "(move the test to tests/integration, or keep the import out of the code it calls)")
