"""`aniso serve` (= `python -m core serve`): the dashboard on this machine, `streamlit run app.py` from the
folder that holds app.py (a checkout, or the installed package's copy), so that its .streamlit/config.toml
applies. Nothing here imports streamlit: the dashboard runs in its own process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..base import settings
from ..base.errors import InputError

ROOT = Path(__file__).resolve().parents[2]  # the folder of app.py, pages/, ui/ and core/


def serve_command(port: int = 8501, address: str = "127.0.0.1", headless: bool = True) -> list[str]:
    """argv of the dashboard's server (run it with cwd=ROOT)."""
    if not 0 < int(port) < 65536:
        raise InputError(f"--port must be a TCP port number, got {port}.")
    if not (ROOT / "app.py").is_file():
        raise InputError(f"The dashboard's app.py is not in {ROOT}: reinstall the package (pip install .).")
    return [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.address", address,
            "--server.port", str(int(port)), "--server.headless", "true" if headless else "false",
            "--browser.gatherUsageStats", "false"]


def serve(port: int = 8501, address: str = "127.0.0.1", cache_dir: str | None = None, headless: bool = True) -> int:
    """Replace this process by the dashboard's server (on the cache `cache_dir`, default the usual one)."""
    argv = serve_command(port, address, headless)
    env = settings.child_env(str(settings.cache_root(cache_dir)))  # resolved here: the server runs in ROOT
    data = env.get("ANISO_DATA_DIR", "").strip()
    if data:
        env["ANISO_DATA_DIR"] = str(Path(data).expanduser().resolve())
    print(f"dashboard at http://{address}:{int(port)} (cache {env[settings.CACHE_ENV]}); Ctrl+C stops it",
          file=sys.stderr)
    sys.stderr.flush()
    os.chdir(ROOT)
    os.execve(sys.executable, argv, env)
    return 0  # not reached
