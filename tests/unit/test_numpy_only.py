"""Every tests/unit module imports without torch, transformers, streamlit or umap (conftest.HEAVY).

Run in a fresh interpreter: in this process another tier may have imported them already.
"""

import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).resolve().parent
CODE = """
import sys
sys.path[:0] = [{unit!r}, {tests!r}, {root!r}]
import conftest  # tests/unit/conftest.py: first on the path
for m in {names!r}:
    __import__(m)
print(sorted(m for m in conftest.HEAVY if m in sys.modules))
"""


def test_unit_modules_import_numpy_only():
    names = sorted(p.stem for p in UNIT.glob("test_*.py"))
    code = CODE.format(unit=str(UNIT), tests=str(UNIT.parent), root=str(UNIT.parents[1]), names=names)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
