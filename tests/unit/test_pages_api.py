"""Pages only render: they use the public functions of ui/ and core/ (no private name, no job queue
of their own) and catch the exceptions they can explain, never a bare Exception. Read from the
source (ast), so that a new page is held to it too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).resolve().parents[2] / "pages").glob("*.py"))
OURS = ("core", "ui")
BROAD = {"Exception", "BaseException"}
JOBS = ("core.entry.jobs", "core.entry.job_queue", "core.entry.job_run")  # the jobs' API, queue and run: ui.run's


def _ours(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in OURS


def problems(source: str) -> list[str]:
    """What a page does that only ui/ should: each as 'line: what'."""
    tree = ast.parse(source)
    modules: set[str] = set()  # names bound to a module of ours (`from ui import page`, `import core.views as V`)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in JOBS or a.name.startswith(tuple(j + "." for j in JOBS)):
                    out.append(f"{node.lineno}: imports {a.name} (the job queue is ui.run's)")
                if _ours(a.name):
                    modules.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and _ours(node.module):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in JOBS or node.module in JOBS:
                    out.append(f"{node.lineno}: imports {full if full in JOBS else node.module} (the job queue is ui.run's)")
                if a.name.startswith("_"):
                    out.append(f"{node.lineno}: imports the private name {full}")
                modules.add(a.asname or a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            out.append(f"{node.lineno}: uses the private name {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ExceptHandler):
            caught = [] if node.type is None else node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            names = {c.id if isinstance(c, ast.Name) else getattr(c, "attr", "") for c in caught}
            if node.type is None or names & BROAD:
                out.append(f"{node.lineno}: catches {'everything' if node.type is None else 'Exception'}: "
                           "catch the errors it can explain (core.base.errors.InputError, OSError...)")
    return sorted(out)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_a_page_uses_only_public_ui_and_core(path):
    assert problems(path.read_text()) == []


def test_the_check_finds_what_it_forbids():
    bad = '''
from core.entry import jobs
from core.entry import job_queue
import core.entry.jobs as J
from ui.page import _through_entrypoint
from ui import page
page._through_entrypoint()
try:
    pass
except Exception:
    pass
try:
    pass
except (ValueError, BaseException):
    pass
try:
    pass
except:
    pass
'''
    got = problems(bad)
    assert len(got) == 8, got
    assert problems("from ui import page\npage.header('x')\ntry:\n    pass\nexcept ValueError:\n    pass\n") == []
