"""The app's first page load imports no torch, transformers or umap: they load only where a model runs
or a projection is computed (the in-function imports marked `# lazy:`, tests/unit/test_structure.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import sys
import app  # the entrypoint as `streamlit run` starts it: navigation, sidebar, the default page
import core.views, core.views.export, core.views.report, ui.data, ui.page, ui.run, ui.sidebar, ui.training
print(sorted(m for m in ("torch", "transformers", "umap") if m in sys.modules))
"""


def test_app_and_its_views_import_no_torch(tmp_path):
    env = {"ANISO_CACHE_DIR": str(tmp_path), "ANISO_WORKER_AUTOSTART": "0", "HF_HUB_OFFLINE": "1",
           "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
