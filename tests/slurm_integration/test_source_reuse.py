"""CliClusterSource hands out the same Node object for a node that did not change, so the
learned placement's featuriser can take its incremental path in the daemon too."""

import io
import json

from slurm_marl.slurm_integration.json_stream import stream_object
from slurm_marl.slurm_integration.source import CliClusterSource


def node(name, alloc_gpus=""):
    return {"name": name, "partitions": ["gpu"], "state": "IDLE", "cpus": 8,
            "alloc_cpus": 0, "real_memory": 16000, "alloc_memory": 0,
            "gres": "gpu:s0:2(S:0),gpu:s1:2(S:1)", "gres_used": alloc_gpus or
            "gpu:s0:0(IDX:N/A),gpu:s1:0(IDX:N/A)", "sockets": 2, "cores": 4, "threads": 1}


class Result:
    def __init__(self, stdout="", ok=True):
        self.stdout, self.ok = stdout, ok


class FakeRunner:
    def __init__(self):
        self.nodes = [node("n1"), node("n2")]

    def run_json(self, argv):
        if argv[0] == "sinfo":
            return {"nodes": self.nodes}
        return {"jobs": []}

    def run_json_streamed(self, argv, items):
        return stream_object(io.StringIO(json.dumps(self.run_json(argv))).read, items)

    def run_checked(self, argv):
        return "PartitionName=gpu Nodes=n[1-2] State=UP Default=YES\n"

    def run(self, argv):
        return Result(ok=False)


def test_unchanged_nodes_are_the_same_objects_changed_ones_are_new():
    runner = FakeRunner()
    source = CliClusterSource(runner, static_ttl_s=60)
    first = source.snapshot()
    assert len(first.nodes) == 2
    second = source.snapshot()
    assert all(a is b for a, b in zip(first.nodes, second.nodes))
    runner.nodes = [node("n1"), node("n2", "gpu:s0:1(IDX:0),gpu:s1:0(IDX:N/A)")]
    third = source.snapshot()
    assert third.nodes[0] is first.nodes[0]
    assert third.nodes[1] is not first.nodes[1] and third.nodes[1] != first.nodes[1]
    assert json.dumps(sorted(third.nodes[1].used_gpu_indices)) == "[0]"
