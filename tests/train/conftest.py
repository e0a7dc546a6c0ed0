"""Fixtures for the training tests: a tiny cluster, samples and interference model."""

import pytest
import torch

from slurm_marl.models.interference import InterferenceModel
from slurm_marl.sim.cluster import parse_cluster
from train_helpers import TINY_CLUSTER, samples_for, tiny_workload

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_cluster():
    return parse_cluster(TINY_CLUSTER)


@pytest.fixture(scope="session")
def tiny_samples(tiny_cluster):
    out = []
    for seed in range(3):
        out += samples_for(tiny_cluster, tiny_workload(120, seed, mean_gap_s=120.0),
                           seed=seed)
    return out


@pytest.fixture(scope="session")
def tiny_interference(tiny_samples) -> InterferenceModel:
    from slurm_marl.train.interference import train_interference
    return train_interference(tiny_samples, epochs=25, seed=0, min_steps=0).model
