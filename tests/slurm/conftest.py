"""Fixtures for tests against real Slurm daemons (slurmctld, slurmd x N, munged) on loopback."""

from __future__ import annotations

import pytest
from slurmtest import Cluster, cluster_spec

from slurm_marl.testcluster import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    """A fresh 4-node cluster (2 sockets x 2 fake GPUs per node, two leaves) per module."""
    local = LocalCluster(spec=cluster_spec(nodes=4, sockets=2, cores_per_socket=4,
                                           gpus_per_socket=2, nodes_per_leaf=2)).up()
    try:
        yield Cluster(local)
    finally:
        local.down()


@pytest.fixture
def clean(cluster):
    """The module's cluster with no jobs and no reservations left by an earlier test."""
    cluster.cancel_all()
    for n in cluster.local.spec.node_names:
        cluster.run("scontrol", "update", f"nodename={n}", "state=resume", check=False)
    yield cluster
    cluster.cancel_all()
