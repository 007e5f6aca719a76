"""Every "module:function" that the jobs name as a string resolves: the kinds' run and key functions
(core/entry/job_records.py, `KINDS`) and the worker's warm-up steps (core/entry/worker.py, `WARM_UP`). Read with
ast from the source, nothing imported (a kind's module may import torch) and no kind a test registered at run
time counted: a target left behind when a function moves fails here, not in a worker's first job."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _strings_of(path: Path, name: str) -> list[str]:
    """The "module:function" strings in the value of module-level `name` of the file at `path`."""
    for node in ast.parse(path.read_text()).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    and ":" in c.value and " " not in c.value]
    raise AssertionError(f"{path.relative_to(ROOT)} has no {name}")


def _defined(module: str) -> set[str] | None:
    """The names that core module `module` defines at its top level (None: no such module)."""
    base = ROOT.joinpath(*module.split("."))
    path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    if path is None:
        return None
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def unresolved(targets: list[str]) -> list[str]:
    """The targets whose module does not exist or does not define the function."""
    bad = []
    for t in targets:
        module, _, fn = t.partition(":")
        names = _defined(module)
        if names is None or fn not in names:
            bad.append(t)
    return bad


def test_every_job_kind_and_warm_up_target_resolves():
    kinds = _strings_of(ROOT / "core" / "entry" / "job_records.py", "KINDS")
    warm = _strings_of(ROOT / "core" / "entry" / "worker.py", "WARM_UP")
    assert len(kinds) > 10 and len(warm) == 2, (kinds, warm)
    assert unresolved(kinds + warm) == []


def test_the_check_finds_a_target_left_behind():
    assert unresolved(["core.compute.analysis_jobs:job_analyze", "core.entry.job_records:KINDS"]) == []
    bad = ["core.compute.pipeline:no_such_kind", "core.compute.nowhere:job_analyze", "core.entry.jobs:no_such"]
    assert unresolved(bad) == bad
