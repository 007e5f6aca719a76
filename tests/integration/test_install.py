"""`pip install .` and `pip install -e .` into fresh virtual environments, offline: the `aniso` package and its
command, then `aniso analyze` and the API's analyze on a built-in model, run from outside the checkout.

A fresh venv sees this environment's site-packages through a .pth file (what --system-site-packages does for a
system Python), so pip finds every dependency installed (their ranges in pyproject.toml must accept the pins of
requirements.txt) and nothing is downloaded; the wheel is built by this environment's hatchling
(--no-build-isolation). The weight and text packages come the same way.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

from core.compute.pipeline import resolve
from core.entry import api

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
RUN = ["--model", "minilm-l6", "--corpus", "wiki-en", "--max-tokens", "120", "--sample", "40"]


def _venv(path: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a new venv without pip of its own, layered over this environment's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    py = path / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "_shared_environment.pth").write_text("\n".join(ours) + "\n")
    return py, site


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANISO_CACHE_DIR", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(tmp / "user-cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _pip_install(py: Path, *args: str, env: dict) -> None:
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-build-isolation", "-q", *args],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pip_install_gives_the_package_and_the_command(tmp_path):
    py, site = _venv(tmp_path / "venv")
    env = _env(tmp_path)
    _pip_install(py, str(ROOT), env=env)
    # one top-level package: the dashboard's tree is inside it, not as site-packages' core, ui, pages
    assert (site / "aniso" / "_workbench" / "core" / "__init__.py").is_file()
    assert (site / "aniso" / "_workbench" / "app.py").is_file()
    assert not any((site / name).exists() for name in ("core", "ui", "pages", "app.py"))
    aniso_cmd, cache = py.parent / "aniso", tmp_path / "cache"
    listed = subprocess.run([str(aniso_cmd), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "serve" in listed.stdout and "analyze" in listed.stdout

    out = tmp_path / "results.json"
    r = subprocess.run([str(aniso_cmd), "analyze", *RUN, "--out", str(out), "--cache-dir", str(cache), "--quiet"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert len(res["layers"]) == 7 and not res["manifest"]["cache_hit"]
    # the installed code keys the run as the checkout does: one cache for both
    spec = api.run_spec("minilm-l6", "wiki-en", max_tokens=120, sample=40)
    assert res["manifest"]["cache_key"] == resolve(spec, cache).key

    script = ("import json, aniso, core\n"
              f"run = aniso.analyze('minilm-l6', 'wiki-en', max_tokens=120, sample=40, cache_dir={str(cache)!r}, "
              "progress=False)\n"
              "print(json.dumps({'aniso': aniso.__file__, 'core': core.__file__, 'hit': run.cache_hit, "
              "'key': run.key, 'mean_cosine': run.layers['mean_cosine'].tolist()}))")
    r = subprocess.run([str(py), "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(got["aniso"]).is_relative_to(site) and Path(got["core"]).is_relative_to(site / "aniso" / "_workbench")
    assert got["hit"] and got["key"] == res["manifest"]["cache_key"]
    assert got["mean_cosine"] == pytest.approx([row["mean_cosine"] for row in res["layers"]])

    # `aniso serve`: the dashboard's server answers its health check
    port = _free_port()
    server = subprocess.Popen([str(aniso_cmd), "serve", "--port", str(port), "--cache-dir", str(cache)], cwd=tmp_path,
                              env={**env, "ANISO_WORKER_AUTOSTART": "0"}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline, health = time.monotonic() + 120, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                health = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        assert health == b"ok", server.stderr.read() if server.poll() is not None else "no answer"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_pip_install_editable_runs_the_checkout(tmp_path):
    py, site = _venv(tmp_path / "venv-e")
    env = _env(tmp_path)
    _pip_install(py, "-e", str(ROOT), env=env)
    assert not (site / "aniso").exists()  # the checkout itself is on sys.path
    r = subprocess.run([str(py), "-c", "import aniso, core; print(aniso.__file__); print(core.__file__)"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(ROOT / "aniso" / "__init__.py"), str(ROOT / "core" / "__init__.py")]
    listed = subprocess.run([str(py.parent / "aniso"), "models"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "minilm-l6" in listed.stdout
