"""A hub identifier on a machine that cannot reach the hub fails at once, with HF_HUB_OFFLINE unset
(transformers alone retries for ~48 s): core.inputs.models.hub_reachable is bounded by ANISO_HUB_TIMEOUT_S."""

from __future__ import annotations

import os
import socket
import subprocess

from foundation_helpers import ROOT, cli_cmd, cli_env


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_hub_reachable_probe(monkeypatch):
    from core.inputs import models

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    models.HUB_PROBE.clear()
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{srv.getsockname()[1]}")
        assert models.hub_reachable(timeout=1.0) is True
    models.HUB_PROBE.clear()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    assert models.hub_reachable(timeout=1.0) is False
    models.HUB_PROBE.clear()


def test_a_hub_id_without_a_hub_is_one_error_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("Some text.\n")
    env = cli_env(HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", ANISO_HUB_TIMEOUT_S="2")
    env.pop("HF_HUB_OFFLINE")
    r = subprocess.run(cli_cmd("analyze", "--model", "someone/no-such-model", "--corpus", corpus,
                               "--cache-dir", tmp_path / "cache", "--out", tmp_path / "r.json"),
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("error:") and "cannot be reached" in r.stderr
    assert not os.path.exists(tmp_path / "r.json")
