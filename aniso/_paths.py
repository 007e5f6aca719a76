"""Where the workbench's code is, and `core` imported from there (never from a folder of the same name elsewhere).

Installed (`pip install .`), the dashboard's tree (app.py, pages/, ui/, core/) lives inside this package, in
aniso/_workbench/, not as top-level packages of site-packages: a package named `core` (or `ui`, `pages`) of another
distribution would overwrite them, and they it. In a checkout (and `pip install -e .`) the tree is the repository.
That folder is added at the end of sys.path, so it shadows nothing; `core` found elsewhere first is refused with
a message that says where it is.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def tree() -> Path:
    """The folder holding app.py and core/: aniso/_workbench in an installed package, else the repository."""
    bundled = HERE / "_workbench"
    return bundled if (bundled / "core" / "__init__.py").is_file() else HERE.parent


def ensure_core():
    """Import the workbench's `core` (adding its folder at the end of sys.path), or raise ImportError."""
    root = tree()
    if str(root) not in sys.path:
        sys.path.append(str(root))
    core = importlib.import_module("core")
    where = Path(getattr(core, "__file__", "") or "").resolve().parent
    if where != root / "core":
        raise ImportError(f"aniso needs the workbench's module `core` ({root / 'core'}), but `import core` finds "
                          f"another one first ({where}): a folder or package named core earlier on sys.path (the "
                          "working folder, often) hides it. Run from another folder, or rename that one.")
    return core
