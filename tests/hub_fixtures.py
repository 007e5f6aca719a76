"""Fixtures of the loopback hub (tests/hub_server.py), imported by the integration and browser conftest files.

    hub_server   one server per test session (per pytest-xdist worker), MiniLM's repositories and the special
                 ones (pickled weights, own code, no weights); tests add more (`hub_server.add(repo)`)
    hub          this process talks to it: HF_ENDPOINT, HF_HOME (a fresh local hub cache per test),
                 HF_HUB_OFFLINE unset (also huggingface_hub's constant, read at its import), the
                 resolutions and reachability remembered by core.inputs.hub forgotten; `hub.env` for a child process
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import hub_repos
from tests.hub_server import HubServer


@pytest.fixture(scope="session")
def hub_work(tmp_path_factory) -> Path:
    """Where the repositories' own files are built (weights served from here, never copied)."""
    return tmp_path_factory.mktemp("hub-repos")


@pytest.fixture(scope="session")
def hub_server(hub_work):
    repos = [hub_repos.minilm_repo(hub_work), hub_repos.minilm_repo(hub_work, "testorg/gated-minilm", gated=True),
             *hub_repos.special_repos(hub_work)]
    with HubServer(repos) as server:
        yield server


@dataclass
class Hub:
    server: HubServer
    home: Path  # HF_HOME of the test
    env: dict  # the variables a child process (CLI, worker, app) needs to talk to the server

    @property
    def url(self) -> str:
        return self.server.url


def forget() -> None:
    """What core.inputs.hub remembers of resolutions and reachability, forgotten (another endpoint, another cache)."""
    from core.inputs import hub

    hub._RESOLVED.clear()
    hub.HUB_PROBE.clear()


@pytest.fixture
def hub(hub_server, tmp_path, monkeypatch) -> Hub:
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    env = {"HF_ENDPOINT": hub_server.url, "HF_HOME": str(home), "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    forget()
    hub_server.clear()
    hub_server.throttle(None)
    yield Hub(hub_server, home, env)
    forget()
