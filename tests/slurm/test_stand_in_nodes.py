"""Stand-in nodes (``ClusterSpec.slurmd_nodes``), which the scale benchmark uses for a
10,000-node cluster with one slurmd: real to slurmctld (idle, allocatable, in the agent's
snapshot with their GPUs), and a job without a process runs on one."""

from __future__ import annotations

from slurmtest import Cluster, cluster_spec

from slurm_marl.testcluster import LocalCluster
from slurm_marl.testcluster.processes import alive


def test_stand_in_nodes_are_idle_allocatable_and_in_the_agents_snapshot():
    spec = cluster_spec(nodes=6, slurmd_nodes=2, sockets=2, cores_per_socket=4,
                        gpus_per_socket=2, nodes_per_leaf=3)
    local = LocalCluster(spec=spec).up()
    slurmds = []
    try:
        cluster = Cluster(local)
        slurmds = _slurmds(local)     # one per daemon node, none for the stand-ins
        assert len(slurmds) == 2 and all(alive(pid) for pid in slurmds)
        states = dict(line.split() for line in cluster.run(
            "sinfo", "-h", "-N", "-o", "%N %t").stdout.splitlines())
        assert states == {f"n{i}": "idle" for i in range(1, 7)}

        out = cluster.run("salloc", "--no-shell", "-w", "n5", "--gres=gpu:s1:2", "-t", "10")
        assert "Granted job allocation" in out.stderr
        snap = cluster.source.snapshot()
        assert sorted(n.name for n in snap.nodes) == [f"n{i}" for i in range(1, 7)]
        assert all(n.gpu_count == 4 for n in snap.nodes)
        (job,) = snap.running
        assert job.nodes == ("n5",) and job.num_gpus == 2
        busy = {n.name: n.used_gpu_indices for n in snap.nodes if n.used_gpu_indices}
        assert list(busy) == ["n5"] and len(busy["n5"]) == 2
    finally:
        local.down()
    assert not [pid for pid in slurmds if alive(pid)]


def _slurmds(local: LocalCluster) -> list[int]:
    return [pid for label, pid in local.pids().items() if label.startswith("slurmd")]
