"""Shared test setup: one torch thread (the machine's 2 cores are shared); property tests
draw the same examples on every run unless ``HYPOTHESIS_PROFILE=explore``; the paths to
the topology fixtures (topology's and the agent's features' tests read them)."""

import os
from pathlib import Path

import pytest
from hypothesis import settings

TOPOLOGY_DATA = Path(__file__).resolve().parent / "data" / "topology"

# A red run is reproduced by running it again: hypothesis derives each property test's
# examples from the test itself (derandomize), and keeps no example database between runs.
# HYPOTHESIS_PROFILE=explore draws new examples each run and keeps failing ones in
# .hypothesis/ (a search for new counter-examples, not what CI runs).
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

try:  # torch is heavy; only pin threads if something already needs it
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is a hard dependency
    pass


@pytest.fixture
def data_dir() -> Path:
    return TOPOLOGY_DATA


@pytest.fixture
def testcluster_dir() -> Path:
    return TOPOLOGY_DATA / "testcluster"


@pytest.fixture
def site_dir() -> Path:
    return TOPOLOGY_DATA / "site"
