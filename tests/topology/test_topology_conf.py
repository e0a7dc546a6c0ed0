"""topology.conf: hostlists, multi-level trees, errors with file and line."""

import pytest

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.topology_conf import parse_topology_conf, parse_topology_conf_text


def test_test_cluster_tree(testcluster_dir):
    topo = parse_topology_conf(testcluster_dir / "topology.conf")
    assert [(s.name, s.nodes, s.switches) for s in topo.switches] == [
        ("leaf1", ("n1", "n2"), ()), ("leaf2", ("n3", "n4"), ()),
        ("spine", (), ("leaf1", "leaf2"))]
    assert topo.leaf_of_node() == {"n1": "leaf1", "n2": "leaf1", "n3": "leaf2", "n4": "leaf2"}
    domain = topo.to_domain()
    assert domain[0].is_leaf and not domain[2].is_leaf


def test_three_level_site_tree_with_zero_padding_and_lowercase_keys(site_dir):
    topo = parse_topology_conf(site_dir / "topology.conf")
    leaf = topo.switch("leaf-a01")
    assert leaf.nodes == ("gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04", "gpu-a05")
    assert leaf.link_speed == 200
    assert topo.switch("leaf-b01").nodes[-3:] == ("cpu001", "cpu002", "cpu003")
    assert topo.switch("core").switches == ("agg-a", "agg-b")
    assert topo.switch("core").source.line == 7


@pytest.mark.parametrize("text,needle,line", [
    ("SwitchName=s1 Nodes=n[1-2]\nSwitchName=s1 Nodes=n3\n", "defined twice", 2),
    ("SwitchName=s1 Switches=nope\n", "unknown child switch nope", 1),
    ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", "cycle", 1),
    ("SwitchName=s1\n", "needs Nodes= or Switches=", 1),
    ("SwitchName=s1 Nodes=n[1-\n", "bad hostlist", 1),
    ("SwitchName=s1 Nodes=n1 Switches=s2\nSwitchName=s2 Nodes=n2\n", "both", 1),
    ("# c\nSwitchName=s1 Nodes=n1 LinkSpeed=fast\n", "LinkSpeed", 2),
    ("SwitchName=s1 Nodes=n1 Colour=red\n", "unknown key", 1),
    ("NodeName=n1\n", "expected SwitchName", 1),
])
def test_errors_name_file_and_line(text, needle, line):
    with pytest.raises(TopologyConfigError) as info:
        parse_topology_conf_text(text, "/etc/slurm/topology.conf")
    assert needle in str(info.value)
    assert info.value.path == "/etc/slurm/topology.conf" and info.value.line == line


def test_block_topology_reads_blocks_as_leaves():
    topo = parse_topology_conf_text("BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\n"
                                    "BlockSizes=4,8\n")
    assert [s.name for s in topo.switches] == ["b1", "b2"]
    assert topo.block_sizes == (4, 8)
