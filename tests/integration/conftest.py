"""Fixtures of the integration tests (helpers live in foundation_helpers.py)."""

from pathlib import Path

import pytest
from foundation_helpers import make_documents, write_txt


@pytest.fixture(scope="session")
def varied_txt(tmp_path_factory) -> Path:
    """Eight documents of 3 to 90 words: several longer than a 24-token window."""
    d = tmp_path_factory.mktemp("corpus")
    return write_txt(d / "varied.txt", make_documents([12, 3, 90, 40, 25, 7, 60, 18], seed=1))


from tests.hub_fixtures import hub, hub_server, hub_work  # noqa: E402,F401 - the loopback hub's fixtures
