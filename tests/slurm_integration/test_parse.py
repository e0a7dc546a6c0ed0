"""Parsing recorded Slurm 22.05.8 output (tests/data/slurm, taken from the local cluster)."""

import json
from pathlib import Path


from slurm_marl.domain import JobState
from slurm_marl.slurm_integration import parse as P

DATA = Path(__file__).parent.parent / "data" / "slurm"


def load(name):
    return json.loads((DATA / name).read_text())


def test_jobs_from_recorded_squeue():
    jobs, problems = P.jobs_from_squeue(load("squeue_22.05.json"))
    assert problems == []
    by_id = {j.job_id: j for j in jobs}
    a = by_id[1]
    assert a.state is JobState.RUNNING and a.gpus_per_node == 2 and a.gpu_alloc == (
        ("n1", (0, 1)),)
    b = by_id[2]
    assert b.gpu_type == "s1" and b.node_count == 2 and b.nodes == ("n1", "n2")
    assert b.gpu_alloc == (("n1", (2, 3)), ("n2", (2, 3)))
    c = by_id[3]
    assert c.gpus_per_job == 3 and c.gpus_per_node == 0 and c.num_gpus == 3
    assert c.gpu_alloc == (("n3", (0, 1, 2)),)
    d = by_id[4]
    assert d.is_pending and d.pending_reason == "BeginTime" and d.num_gpus == 16
    assert d.start_time_s is None and d.mem_mib == 4000


def test_nodes_from_recorded_sinfo():
    nodes, problems = P.nodes_from_sinfo(load("sinfo_22.05.json"), {"n1": "leaf1"})
    assert problems == []
    n1 = nodes[0]
    assert n1.name == "n1" and n1.leaf_switch == "leaf1" and n1.cpus == 8
    assert [g.gpu_indices for g in n1.gpu_groups] == [(0, 1), (2, 3)]
    assert [g.core_ids for g in n1.gpu_groups] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert n1.used_gpu_indices == frozenset({0, 1, 2, 3}) and n1.free_gpus == 0


def test_partitions_and_switches_from_recorded_text():
    parts, problems = P.partitions_from_scontrol(
        (DATA / "scontrol_show_partition.txt").read_text())
    assert problems == [] and parts[0].name == "gpu" and parts[0].default
    assert parts[0].nodes == ("n1", "n2", "n3", "n4") and parts[0].max_time_s is None
    switches, leaf_of, problems = P.switches_from_scontrol(
        (DATA / "scontrol_show_topology.txt").read_text())
    assert problems == []
    assert leaf_of == {"n1": "leaf1", "n2": "leaf1", "n3": "leaf2", "n4": "leaf2"}
    spine = [s for s in switches if s.name == "spine"][0]
    assert spine.switches == ("leaf1", "leaf2") and spine.nodes == ()


def test_strange_jobs_do_not_spoil_the_snapshot():
    data = load("squeue_22.05.json")
    data["jobs"].append({"name": "no id"})
    data["jobs"].append({"job_id": 77, "tres_per_node": "gres:gpu:k80:lots", "nodes": "n[1-",
                         "job_state": "WEIRD_STATE", "gres_detail": ["gpu:1(IDX:0)"]})
    data["jobs"].append("not a dict")
    jobs, problems = P.jobs_from_squeue(data)
    assert {j.job_id for j in jobs} == {1, 2, 3, 4, 77}
    odd = [j for j in jobs if j.job_id == 77][0]
    assert odd.state is JobState.OTHER and odd.num_gpus == 0 and odd.nodes == ()
    assert any("77" in p and "lots" in p for p in problems)
    assert any("hostlist" in p for p in problems)
    assert len(problems) >= 3


def test_openapi_number_wrappers():
    assert P.num({"set": True, "infinite": False, "number": 5}) == 5.0
    assert P.num({"set": False, "number": 0}) is None
    assert P.num({"infinite": True}, default=None) is None
    assert P.num("x") is None and P.num(None, 3) == 3


def test_partition_time_limits_use_slurms_formats():
    line = "PartitionName=p Nodes=n1 MaxTime={} State=UP"
    for text, secs in (("UNLIMITED", None), ("N/A", None), ("60", 3600.0),
                       ("1:00:00", 3600.0), ("2-00:00:00", 172800.0), ("1-12", 129600.0)):
        parts, problems = P.partitions_from_scontrol(line.format(text))
        assert problems == [] and parts[0].max_time_s == secs, text
    parts, problems = P.partitions_from_scontrol(line.format("soon"))
    assert parts == [] and "soon" in problems[0]


def test_an_unreadable_switch_line_is_a_problem_and_keeps_the_others():
    text = ("SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
            "SwitchName=leaf2 Level=zero LinkSpeed=1 Nodes=n[3-4]\n"
            "SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]\n")
    switches, leaf_of, problems = P.switches_from_scontrol(text)
    assert [s.name for s in switches] == ["leaf1", "spine"]
    assert leaf_of == {"n1": "leaf1", "n2": "leaf1"}
    assert len(problems) == 1 and "Level='zero'" in problems[0] and "leaf2" in problems[0]
    spine = switches[1]
    assert spine.switches == ("leaf1", "leaf2") and spine.nodes == ()


def test_a_jobs_field_that_is_not_a_list_is_a_parse_error_not_a_type_error():
    import pytest

    from slurm_marl.slurm_integration.runner import SlurmOutputError
    with pytest.raises(SlurmOutputError, match="'jobs' is a dict"):
        P.jobs_from_squeue({"jobs": {"job_id": 1}})


def test_used_gpus_without_indices_count_in_their_types_group():
    """Slurm gives a used count without (IDX:..) for GRES without device files and for a
    node that never registered (the scale benchmark's stand-in nodes): those GPUs are in use
    in their type's group, so placement must not see them free."""
    from slurm_marl.slurm_integration.text import parse_gres_used
    from slurm_marl.slurm_integration.parse_nodes import node_from_json, used_gpu_indices

    assert parse_gres_used("gpu:s0:0(IDX:N/A),gpu:s1:2(IDX:2-3)") == ((2, 3), ())
    assert parse_gres_used("gpu:s0:0,gpu:s1:2") == ((), (("s1", 2),))
    assert parse_gres_used("gpu:3,shard:4,gpu:s1:bad(x") == ((), ((None, 3),))
    raw = {"name": "n5", "state": "MIXED", "cores": 4, "sockets": 2,
           "gres": "gpu:s0:2,gpu:s1:2", "gres_used": "gpu:s0:0,gpu:s1:2"}
    node, problems = node_from_json(raw)
    assert problems == [] and node.used_gpu_indices == {2, 3}    # both of s1, none of s0
    groups = node.gpu_groups
    assert used_gpu_indices("gpu:s0:1,gpu:s1:1", groups) == {0, 2}
    assert used_gpu_indices("gpu:s0:1(IDX:1),gpu:s0:1", groups) == {0, 1}
    assert used_gpu_indices("gpu:3", groups) == {0, 1, 2}          # untyped: any group
    assert used_gpu_indices("gpu:s1:5", groups) == {2, 3}          # never beyond the group
