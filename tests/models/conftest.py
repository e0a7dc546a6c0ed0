"""Fixtures for the model tests."""

import pytest
import torch

from slurm_marl.sim.cluster import parse_cluster

torch.set_num_threads(1)


@pytest.fixture
def two_partitions():
    """a: 2 nodes x 2 groups x 2 GPUs under leaf1; b: the same under leaf2."""
    return parse_cluster("2x2x2:name=a+2x2x2:name=b")
