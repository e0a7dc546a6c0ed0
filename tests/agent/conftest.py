"""Paths to the topology fixtures the agent's features are built on."""

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"


@pytest.fixture
def testcluster_dir() -> Path:
    return DATA / "testcluster"


@pytest.fixture
def site_dir() -> Path:
    return DATA / "site"
