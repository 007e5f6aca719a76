"""The shape of the product code, read with `ast` (nothing is imported): one owner of machine state,
an import graph without circles that only points down, and in-function imports that say why.

Product code = app.py, core/, ui/, pages/, bench/. Imports inside functions count as edges: they hide
circles rather than removing them.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "ui", "pages", "bench", "aniso")
HEAVY = ("torch", "transformers", "umap")  # what a cache hit and the app's first page must not import

# core/'s floors, lowest first: each is one folder (core/<floor>/), and a module imports only from its own floor or
# from one below (docs/architecture.md, "The floors"). core/__init__.py is on the lowest floor, core/__main__.py
# (`python -m core`) on the highest; core/data/ holds data files only.
CORE_FLOORS = ("base", "stats", "inputs", "compute", "studies", "views", "entry")
CORE_ROOT_FILES = {"__init__.py", "__main__.py"}

# Floors of the import graph, lowest first: a module imports only from its own floor or below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (f"core/{f}", (f"core.{f}", f"core.{f}.*") + {"base": ("core",), "entry": ("core.__main__",)}.get(f, ()))
    for f in CORE_FLOORS
] + [
    # the installed package's import name and console command, over the Python API
    ("public API", ("aniso", "aniso.*")),
    ("ui state", ("ui", "ui.state", "ui.data")),
    ("ui jobs", ("ui.jobs_panel", "ui.run", "ui.training", "ui.papers", "ui.report", "ui.lab")),
    ("ui page", ("ui.page", "ui.sidebar")),
    ("pages", ("app", "pages.*")),
    ("bench", ("bench", "bench.*")),  # measures everything, imported by nothing
]

# Environment reads that cannot go through core/base/settings.py, each with its reason (none today).
ENV_ALLOWED: dict[str, str] = {}
# Files whose in-function imports are not checked yet, each with its reason (none today).
LAZY_PENDING: dict[str, str] = {}


def _files() -> dict[str, Path]:
    out = {"app": ROOT / "app.py"}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


FILES = _files()
TREES = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in FILES.items()}


def _targets(mod: str, node: ast.Import | ast.ImportFrom) -> tuple[list[str], list[str]]:
    """(project modules, all dotted names) that an import statement in `mod` names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".")
            if FILES[mod].name != "__init__.py":
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            pkg = ".".join(base + ([node.module] if node.module else []))
        else:
            pkg = node.module or ""
        names = [f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in FILES else pkg for a in node.names]
    project = []
    for n in names:
        parts = n.split(".")
        while parts and ".".join(parts) not in FILES:
            parts.pop()
        if parts and ".".join(parts) != mod:
            project.append(".".join(parts))
    return project, names


def _imports(mod: str):
    """(node, in_function, enclosing body) of every import statement of `mod`."""
    out = []

    def walk(node, in_fn):
        for field in ("body", "orelse", "finalbody", "handlers"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for ch in body:
                if isinstance(ch, (ast.Import, ast.ImportFrom)):
                    out.append((ch, in_fn, body))
                walk(ch, in_fn or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(TREES[mod], False)
    return out


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in FILES}
    for m in FILES:
        for node, _, _ in _imports(m):
            g[m].update(_targets(m, node)[0])
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def _one_circle(g: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest circle through the first module of a component, to print."""
    start, members = comp[0], set(comp)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v] & members):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return comp


def _floor(mod: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(mod, p) for p in patterns):
            return i
    raise AssertionError(f"{mod} is on no floor: add it to LAYERS in tests/unit/test_structure.py")


def test_no_environment_reads_outside_settings():
    """core/base/settings.py is the one reader of environment variables (and owner of the cache layout)."""
    found = []
    for m, tree in TREES.items():
        if m == "core.base.settings" or m in ENV_ALLOWED:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append(f"{FILES[m].relative_to(ROOT)}:{node.lineno}: os.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                    {a.name for a in node.names} & {"environ", "getenv", "putenv", "unsetenv"}:
                found.append(f"{FILES[m].relative_to(ROOT)}:{node.lineno}: from os import ...")
    assert not found, ("environment read outside core/base/settings.py (add a function there and call it):\n"
                       + "\n".join(found))


def test_every_module_is_on_a_floor():
    for m in FILES:
        _floor(m)


def test_each_folder_of_core_is_one_floor():
    """core/ holds its floor folders, its __init__ and __main__, and data/: no module outside a floor, no folder
    that is not one (a new module goes into the folder of the floor it belongs to)."""
    stray = []
    for p in sorted((ROOT / "core").iterdir()):
        if p.name == "__pycache__" or p.name in CORE_ROOT_FILES or (p.is_dir() and p.name in CORE_FLOORS):
            continue
        if p.is_dir() and p.name == "data" and not list(p.rglob("*.py")):
            continue
        stray.append(p.name)
    assert not stray, (f"in core/ but on no floor: {stray}; move each into one of core/{{{','.join(CORE_FLOORS)}}}/ "
                       "(docs/architecture.md, 'The floors')")
    missing = [f for f in CORE_FLOORS if not (ROOT / "core" / f / "__init__.py").is_file()]
    assert not missing, f"floor folders without an __init__.py: {missing}"


def test_the_floor_picture_matches_the_floors():
    """docs/architecture.md draws the floors top down: the same folders, in the same order."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    picture = text.split("## The floors", 1)[1].split("```")[1]
    drawn = [ln.split()[0] for ln in picture.splitlines() if ln.strip().startswith("core/")]
    assert drawn == [f"core/{f}/" for f in reversed(CORE_FLOORS)], drawn


def test_import_graph_has_no_circle():
    g = _graph()
    circles = [" -> ".join(_one_circle(g, c)) for c in _cycles(g)]
    assert not circles, "import circles (in-function imports included):\n" + "\n".join(circles)


def test_imports_only_point_down():
    up = []
    for m, targets in _graph().items():
        for t in sorted(targets):
            if _floor(t) > _floor(m):
                up.append(f"{m} ({LAYERS[_floor(m)][0]}) imports {t} ({LAYERS[_floor(t)][0]})")
    assert not up, "imports that run back up:\n" + "\n".join(up)


def _group_lines(node: ast.stmt, body: list[ast.stmt]) -> range:
    """Lines of the run of adjacent import statements that `node` belongs to, plus the line above it."""
    i = next(k for k, s in enumerate(body) if s is node)
    lo = hi = i
    while lo > 0 and isinstance(body[lo - 1], (ast.Import, ast.ImportFrom)):
        lo -= 1
    while hi + 1 < len(body) and isinstance(body[hi + 1], (ast.Import, ast.ImportFrom)):
        hi += 1
    return range(body[lo].lineno - 1, (body[hi].end_lineno or body[hi].lineno) + 1)


def lazy_imports() -> list[tuple[str, int, bool]]:
    """(file, line, justified) of every in-function import of a project module or of torch,
    transformers or umap. Justified: a `# lazy: <why>` comment on the import, on another import
    right next to it, or on the line above them."""
    out = []
    for m, p in FILES.items():
        lines = p.read_text().splitlines()
        for node, in_fn, body in _imports(m):
            if not in_fn:
                continue
            project, names = _targets(m, node)
            if not project and not any(n.split(".")[0] in HEAVY for n in names):
                continue
            ok = any("# lazy" in lines[k - 1] for k in _group_lines(node, body) if 0 < k <= len(lines))
            out.append((str(p.relative_to(ROOT)), node.lineno, ok))
    return out


def test_in_function_imports_say_why():
    """An import inside a function stays only where it keeps torch, transformers, umap (or another
    heavy module) out of a cache hit or of the app's first page, and says so (`# lazy: ...`)."""
    bare = [f"{f}:{line}" for f, line, ok in lazy_imports() if not ok and f not in LAZY_PENDING]
    assert not bare, ("imports inside functions without a `# lazy: <why>` comment (move them to the top of the "
                      "module, or say what they keep out):\n" + "\n".join(bare))


def test_names_used_across_modules_are_public():
    """A name another module uses is public (issue 38): `from .x import _name` of a product module, or `x._name` on a
    product module it imported, is refused. A public module or name under a private alias (`from ..base import cache
    as _cache`) is not this."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    found = []
    for m in FILES:
        modules = {}  # local name -> the product module it is
        for node, _, _ in _imports(m):
            project, names = _targets(m, node)
            if isinstance(node, ast.ImportFrom) and project:
                found += [f"{m}: {a.name}" for a in node.names if private(a.name)]
            for a, full in zip(node.names, names):
                if full in FILES:
                    modules[a.asname or a.name.split(".")[0]] = full
        found += [f"{m}: {n.value.id}.{n.attr}" for n in ast.walk(TREES[m]) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name) and n.value.id in modules and private(n.attr)]
    assert not found, f"private names used from another module (give them a public name): {sorted(set(found))}"
