"""Live views: recorded `scontrol show topology` / `scontrol show node` output."""

import pytest

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.scontrol import (live_node_to_domain, parse_show_nodes,
                                          parse_show_topology)


def test_recorded_test_cluster_topology(data_dir):
    switches = parse_show_topology((data_dir / "scontrol/show_topology_testcluster.txt")
                                   .read_text())
    assert [(s.name, s.level, s.nodes, s.switches) for s in switches] == [
        ("leaf1", 0, ("n1", "n2"), ()), ("leaf2", 0, ("n3", "n4"), ()),
        ("spine", 1, ("n1", "n2", "n3", "n4"), ("leaf1", "leaf2"))]
    spine = switches[2].to_domain()
    assert not spine.is_leaf and spine.switches == ("leaf1", "leaf2")


def test_no_topology_and_bad_lines():
    assert parse_show_topology("No topology information available\n") == ()
    with pytest.raises(TopologyConfigError) as info:
        parse_show_topology("SwitchName=a Level=0 Nodes=n1\nSwitchName=b Level=x Nodes=n2\n")
    assert info.value.line == 2 and "Level" in str(info.value)


def test_recorded_test_cluster_nodes(data_dir):
    nodes = parse_show_nodes((data_dir / "scontrol/show_node_testcluster.txt").read_text())
    assert [n.name for n in nodes] == ["n1", "n2", "n3", "n4"]
    n2 = nodes[1]
    assert (n2.state, n2.cpus, n2.alloc_cpus, n2.alloc_memory_mib) == ("MIXED", 8, 1, 1000)
    assert (n2.sockets, n2.cores_per_socket, n2.threads_per_core) == (2, 4, 1)
    assert [(g.type, g.count, g.sockets) for g in n2.gres] == [("s0", 2, (0,)), ("s1", 2, (1,))]
    assert n2.partitions == ("gpu",) and n2.tres("mem") == "16000M"
    assert dict(n2.fields)["OS"].startswith("Linux 6.18.44-fc-v509 #1 SMP")


def test_detail_output_with_gres_used_and_reason(data_dir):
    n1, n2 = parse_show_nodes((data_dir / "scontrol/show_node_detail.txt").read_text())
    assert n1.used_gpu_indices() == frozenset({2, 3})
    assert n1.features == ("a100", "nvlink") and n1.partitions == ("gpu", "short")
    assert n1.tres("gres/gpu:s1") == "2"
    assert n2.gres[0].sockets == (0, 1) and n2.used_gpu_indices() == frozenset()
    assert n2.reason.startswith("gres/gpu count reported lower") and "key=value" in n2.reason
    node = live_node_to_domain(n1, leaf_switch="leaf1")
    assert node.free_gpu_indices == (0, 1) and node.gpu_groups[1].socket == 1
    assert node.leaf_switch == "leaf1" and not live_node_to_domain(n2).available


def test_multiline_form(data_dir):
    n3, n4 = parse_show_nodes((data_dir / "scontrol/show_node_multiline.txt").read_text())
    assert n3.state == "DOWN+NOT_RESPONDING" and n3.reason.startswith("Not responding")
    assert n3.real_memory_mib == 16000 and n4.gpu_count == 4


@pytest.mark.parametrize("text,needle", [
    ("Arch=x86_64\n", "NodeName= record first"),
    ("NodeName=n1 CPUTot=eight\n", "CPUTot"),
    ("NodeName=n1 Gres=gpu:a:b:c\n", "Gres"),
    ("NodeName=n1\nNodeName=n1\n", "listed twice"),
    ("NodeName=n1\n!!!\n", "Key=Value"),
])
def test_bad_node_output(text, needle):
    with pytest.raises(TopologyConfigError, match=needle):
        parse_show_nodes(text)
