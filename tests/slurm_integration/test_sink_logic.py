"""Which GPU request a placement turns into (pure part of the write-back protocol)."""

from slurm_marl.domain import ClusterSnapshot, GpuGroup, GroupAlloc, Job, Node, Place
from slurm_marl.slurm_integration.sink_plan import desired_gpu_request

TYPED = (GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1))
SNAP = ClusterSnapshot(time_s=0, nodes=(Node("n1", gpu_groups=TYPED),
                                        Node("n2", gpu_groups=TYPED),
                                        Node("u1", gpu_groups=(GpuGroup(0, (0, 1, 2, 3)),))))


def req(job, *allocs):
    return desired_gpu_request(Place(job.job_id, nodes=tuple({a.node: 0 for a in allocs}),
                                     allocs=allocs), SNAP, job)


def test_one_group_per_node_becomes_a_typed_request():
    """...written into the field the request does not live in now (one-update re-pin)."""
    job = Job(1, gpus_per_node=2)
    assert req(job, GroupAlloc("n1", 1, 2)) == ("gres:gpu:s1:2", "TresPerJob", "")
    two = Job(2, gpus_per_node=2, node_count=2)
    assert "multi-node" in req(two, GroupAlloc("n1", 0, 2), GroupAlloc("n2", 0, 2))[2]


def test_cases_left_to_slurm():
    job = Job(1, gpus_per_node=4)
    assert req(job, GroupAlloc("n1", 0, 2), GroupAlloc("n1", 1, 2))[0] is None  # spans
    two = Job(2, gpus_per_node=2, node_count=2)
    why = req(two, GroupAlloc("n1", 0, 2), GroupAlloc("n2", 1, 2))
    assert why[0] is None and "multi-node" in why[2]
    assert "no GRES type" in req(Job(3, gpus_per_node=1), GroupAlloc("u1", 0, 1))[2]
    assert "unknown" in req(Job(4, gpus_per_node=1), GroupAlloc("n1", 5, 1))[2]


def test_gpus_option_moves_to_tres_per_node_on_one_node_only():
    job = Job(1, gpus_per_job=2)
    assert req(job, GroupAlloc("n2", 1, 2)) == ("gres:gpu:s1:2", "TresPerNode", "")
    multi = Job(2, gpus_per_job=2, node_count=2)
    assert req(multi, GroupAlloc("n1", 0, 1), GroupAlloc("n2", 0, 1))[0] is None
