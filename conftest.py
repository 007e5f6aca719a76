"""Run the docstring examples of core/ as tests (pytest's --doctest-modules, for core/ only).

Collected here rather than with the command-line flag because the flag would also import every
conftest.py and test module of tests/ a second time as a doctest module.
"""

from pathlib import Path

from _pytest.doctest import DoctestModule

CORE = Path(__file__).resolve().parent / "core"


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix == ".py" and CORE in file_path.parents and file_path.name != "__main__.py":
        return DoctestModule.from_parent(parent, path=file_path)
    return None
