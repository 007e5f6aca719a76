"""The unit tier imports numpy only: no torch, transformers, streamlit or umap, directly or through
the core modules it imports (those tests live in tests/integration or tests/app).

Enforced twice:
- at import: `test_numpy_only.py` imports every tests/unit module in a fresh interpreter and lists
  the heavy modules that came with them (module-level imports, whatever else ran before);
- at run time: a unit test (its fixtures included) that brings one of them into this process fails.
  tests/conftest.py runs the unit tier first in every session, so this holds in the full suite too
  (once another tier has imported torch, the check has nothing left to see).
"""

from __future__ import annotations

import sys

import pytest

HEAVY = ("torch", "transformers", "streamlit", "umap")


def loaded_heavy() -> set[str]:
    return {m for m in HEAVY if m in sys.modules}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_BEFORE] = loaded_heavy()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "teardown" or _BEFORE not in item.stash:
        return
    new = loaded_heavy() - item.stash[_BEFORE]
    report = outcome.get_result()
    if new and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} imported {', '.join(sorted(new))}: the unit tier is numpy-only "
                           "(move the test to tests/integration, or keep the import out of the code it calls)")


_BEFORE = pytest.StashKey[set]()
