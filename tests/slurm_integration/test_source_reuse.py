"""CliClusterSource hands out the same Node object for a node that did not change, so the
learned placement's featuriser can take its incremental path in the daemon too."""

import json

from fakes import ScriptedRunner
from slurm_marl.slurm_integration.source import CliClusterSource


def node(name, alloc_gpus=""):
    return {"name": name, "partitions": ["gpu"], "state": "IDLE", "cpus": 8,
            "alloc_cpus": 0, "real_memory": 16000, "alloc_memory": 0,
            "gres": "gpu:s0:2(S:0),gpu:s1:2(S:1)", "gres_used": alloc_gpus or
            "gpu:s0:0(IDX:N/A),gpu:s1:0(IDX:N/A)", "sockets": 2, "cores": 4, "threads": 1}


class Cluster:
    """Two nodes (``sinfo --json``), no jobs, one partition, no topology."""

    def __init__(self):
        self.nodes = [node("n1"), node("n2")]

    def answer(self, argv: list[str]) -> tuple[int, str, str]:
        if "--json" in argv:
            return 0, json.dumps({"nodes": self.nodes} if argv[0] == "sinfo"
                                 else {"jobs": []}), ""
        if argv[:3] == ["scontrol", "show", "partition"]:
            return 0, "PartitionName=gpu Nodes=n[1-2] State=UP Default=YES\n", ""
        return 1, "", ""


def test_unchanged_nodes_are_the_same_objects_changed_ones_are_new():
    cluster = Cluster()
    source = CliClusterSource(ScriptedRunner(cluster.answer), static_ttl_s=60)
    first = source.snapshot()
    assert len(first.nodes) == 2
    second = source.snapshot()
    assert all(a is b for a, b in zip(first.nodes, second.nodes))
    cluster.nodes = [node("n1"), node("n2", "gpu:s0:1(IDX:0),gpu:s1:0(IDX:N/A)")]
    third = source.snapshot()
    assert third.nodes[0] is first.nodes[0]
    assert third.nodes[1] is not first.nodes[1] and third.nodes[1] != first.nodes[1]
    assert json.dumps(sorted(third.nodes[1].used_gpu_indices)) == "[0]"
