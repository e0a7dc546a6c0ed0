"""Graph builder on the project's test cluster: 4 nodes x 2 sockets x 4 GPUs, two leaves
under one spine (tests/data/topology/testcluster, as src/slurm_marl/testcluster writes it)."""

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Node, Partition, Switch
from slurm_marl.topology.gres_conf import parse_gres_conf, parse_gres_conf_text
from slurm_marl.topology.graph import (build_topology_graph, free_gpus_by_group, gpu_groups_of,
                                       gpu_id, group_id, hop_distance, node_id, nodes_under_switch,
                                       partitions_of, socket_id, switch_chain, switch_id)
from slurm_marl.topology.probe import probe_node
from slurm_marl.topology.slurm_conf import parse_slurm_conf, parse_slurm_conf_text
from slurm_marl.topology.topology_conf import parse_topology_conf, parse_topology_conf_text

sys.path.insert(0, str(Path(__file__).parent))
from fake_nvml import FakeNvml  # noqa: E402

S0 = GpuGroup(0, (0, 1), "s0", 0, (0, 1, 2, 3))
S1 = GpuGroup(1, (2, 3), "s1", 1, (4, 5, 6, 7))


@pytest.fixture
def files(testcluster_dir):
    return dict(slurm_conf=parse_slurm_conf(testcluster_dir / "slurm.conf"),
                gres_conf=parse_gres_conf(testcluster_dir / "gres.conf"),
                topology_conf=parse_topology_conf(testcluster_dir / "topology.conf"))


@pytest.fixture
def graph(files):
    return build_topology_graph(**files)


def test_typed_nodes_and_edges(graph):
    kinds = Counter(a["kind"] for _, a in graph.nodes(data=True))
    assert kinds == {"switch": 3, "node": 4, "socket": 8, "gpu_group": 8, "gpu": 16}
    edges = Counter(a["kind"] for *_, a in graph.edges(data=True))
    assert edges == {"leaf_spine": 2, "node_leaf": 4, "node_socket": 8,
                     "socket_interconnect": 4, "pcie": 24}
    assert all(a["bandwidth_gbps"] > 0 for *_, a in graph.edges(data=True))
    assert graph.nodes[switch_id("spine")]["level"] == 1
    assert graph.nodes[switch_id("leaf1")]["level"] == 0
    assert graph.has_edge(socket_id("n3", 1), group_id("n3", 1))
    assert graph.has_edge(group_id("n3", 1), gpu_id("n3", 3))
    assert graph.nodes[group_id("n2", 0)]["gres_type"] == "s0"
    assert graph.nodes[socket_id("n2", 1)]["core_ids"] == (4, 5, 6, 7)


def test_hop_distances(graph):
    assert hop_distance(graph, "n1", "n1") == 0
    assert hop_distance(graph, "n1", "n2") == 2
    assert hop_distance(graph, "n1", "n3") == 4
    assert hop_distance(graph, "n4", "n2") == 4
    assert switch_chain(graph, "n3") == ("leaf2", "spine")


def test_hop_distance_is_none_without_a_shared_switch():
    graph = build_topology_graph(
        slurm_conf=parse_slurm_conf_text("NodeName=a,b,c\n"),
        topology_conf=parse_topology_conf_text("SwitchName=l1 Nodes=a\nSwitchName=l2 Nodes=b\n"))
    assert hop_distance(graph, "a", "b") is None
    assert hop_distance(graph, "a", "c") is None


def test_gpu_groups_and_free_gpus(graph):
    assert gpu_groups_of(graph, "n1") == (S0, S1)
    snapshot = ClusterSnapshot(time_s=0.0, nodes=(
        Node("n1", used_gpu_indices=frozenset({1})),
        Node("n2", state="DRAIN", used_gpu_indices=frozenset()),
        Node("n3", gpu_groups=(S0, S1), used_gpu_indices=frozenset({2, 3}))))
    n1 = free_gpus_by_group(graph, snapshot, "n1")
    assert [(f.group.name, f.free_gpu_indices) for f in n1] == [("s0", (0,)), ("s1", (2, 3))]
    assert [f.free for f in free_gpus_by_group(graph, snapshot, "n2")] == [0, 0]
    assert [f.free_gpu_indices for f in free_gpus_by_group(graph, snapshot, "n3")] == [(0, 1), ()]
    assert [f.free for f in free_gpus_by_group(graph, snapshot, "n4")] == [0, 0]


def test_partitions(graph):
    assert partitions_of(graph, "n1") == ("gpu",)
    assert partitions_of(graph, "n4") == ("gpu", "short")
    live = ClusterSnapshot(time_s=0.0, nodes=(Node("n4", partitions=("gpu",)),),
                           partitions=(Partition("debug", nodes=("n1",)),))
    assert partitions_of(graph, "n4", live) == ("gpu",)
    assert partitions_of(graph, "n1", live) == ("debug",)
    assert graph.graph["partitions"] == ["gpu", "short"]


def test_nodes_under_switch(graph):
    assert nodes_under_switch(graph, "spine") == ("n1", "n2", "n3", "n4")
    assert nodes_under_switch(graph, "leaf2") == ("n3", "n4")
    assert nodes_under_switch(graph, "nope") == ()


def test_snapshot_wins_over_files(files):
    snapshot = ClusterSnapshot(
        time_s=0.0,
        nodes=(Node("n1", sockets=2, cores_per_socket=4, gpu_groups=(GpuGroup(0, (0, 1, 2, 3)),),
                    leaf_switch="leaf9"),),
        switches=(Switch("leaf9", nodes=("n1",)),))
    graph = build_topology_graph(snapshot=snapshot, **files)
    assert gpu_groups_of(graph, "n1") == (GpuGroup(0, (0, 1, 2, 3)),)
    assert graph.graph["groups_source"]["n1"] == "snapshot"
    assert graph.graph["groups_source"]["n2"] == "files"
    assert hop_distance(graph, "n1", "n2") is None  # n2 is under no switch of the snapshot
    assert graph.has_edge(node_id("n1"), group_id("n1", 0))  # socket unknown: hangs off node


def test_gres_links_become_nvlink_edges(site_dir):
    graph = build_topology_graph(slurm_conf=parse_slurm_conf(site_dir / "slurm.conf"),
                                 gres_conf=parse_gres_conf(site_dir / "gres.conf"))
    edge = graph.edges[gpu_id("gpu-a02", 0), gpu_id("gpu-a02", 5)]
    assert edge["kind"] == "nvlink" and edge["links"] == 12
    assert edge["bandwidth_gbps"] == 12 * 200.0


def test_probe_documents_add_nvlink_pcie_and_identities(data_dir):
    slurm = parse_slurm_conf_text("NodeName=dgx01 Sockets=2 CoresPerSocket=4 ThreadsPerCore=2 "
                                  "Gres=gpu:v100:8\n")
    gres = parse_gres_conf_text("NodeName=dgx01 Name=gpu Type=v100 File=/dev/nvidia[0-7]\n")
    document = probe_node(nvml=FakeNvml.from_file(data_dir / "nvml/dgx_like_2s8g.json"),
                          lstopo=lambda: (data_dir / "hwloc/dgx_like_2s8g.xml").read_text(),
                          sysfs_root=Path("/nonexistent"), gres_conf=gres, node_name="dgx01")
    document = json.loads(json.dumps(document))  # as read back from disk
    graph = build_topology_graph(slurm_conf=slurm, gres_conf=gres, probes={"dgx01": document})
    (group,) = gpu_groups_of(graph, "dgx01")  # gres.conf: one untyped-socket group of 8
    assert group.gpu_indices == tuple(range(8)) and group.socket is None
    nvlinks = {(u, v): a for u, v, a in graph.edges(data=True) if a["kind"] == "nvlink"}
    assert len(nvlinks) == 16  # DGX-1 hybrid cube-mesh: 8 x 6 links = 24 links on 16 pairs
    assert sum(a["links"] for a in nvlinks.values()) == 24
    assert graph.edges[gpu_id("dgx01", 0), gpu_id("dgx01", 3)]["links"] == 2
    assert not graph.has_edge(gpu_id("dgx01", 0), gpu_id("dgx01", 5))
    assert graph.nodes[gpu_id("dgx01", 4)]["pci_bus_id"] == "0000:85:00.0"
    assert graph.nodes[gpu_id("dgx01", 4)]["numa_node"] == 1


def test_probe_fills_unknown_socket_and_groups_for_nodes_without_files(data_dir):
    document = probe_node(nvml=FakeNvml.from_file(data_dir / "nvml/dgx_like_2s8g.json"),
                          lstopo=lambda: (data_dir / "hwloc/dgx_like_2s8g.xml").read_text(),
                          sysfs_root=Path("/nonexistent"), node_name="dgx01")
    graph = build_topology_graph(probes={"dgx01": document})
    groups = gpu_groups_of(graph, "dgx01")
    assert [(g.gpu_indices, g.socket) for g in groups] == [((0, 1, 2, 3), 0), ((4, 5, 6, 7), 1)]
    assert graph.graph["groups_source"]["dgx01"] == "probe"
    pcie = graph.edges[gpu_id("dgx01", 4), gpu_id("dgx01", 5)]
    assert pcie["kind"] == "nvlink"  # NVLink wins over the shared PCIe switch
    graph2 = build_topology_graph(
        slurm_conf=parse_slurm_conf_text("NodeName=dgx01 Gres=gpu:4,gpu:4\n"),
        gres_conf=parse_gres_conf_text("NodeName=dgx01 Name=gpu File=/dev/nvidia[0-3]\n"
                                       "NodeName=dgx01 Name=gpu File=/dev/nvidia[4-7] Cores=9\n"),
        probes={"dgx01": document})
    assert [g.socket for g in gpu_groups_of(graph2, "dgx01")] == [0, 1]


def test_gpus_sharing_a_pcie_switch_without_nvlink(data_dir):
    recorded = json.loads((data_dir / "nvml/dgx_like_2s8g.json").read_text())
    for device in recorded["devices"]:
        device["nvlink_remote_pci_bus_ids"] = []  # a PCIe-only 8-GPU server
    document = probe_node(nvml=FakeNvml(recorded),
                          lstopo=lambda: (data_dir / "hwloc/dgx_like_2s8g.xml").read_text(),
                          sysfs_root=Path("/nonexistent"), node_name="pcie8")
    graph = build_topology_graph(probes={"pcie8": document})
    pairs = sorted((graph.nodes[u]["index"], graph.nodes[v]["index"])
                   for u, v, a in graph.edges(data=True) if a["kind"] == "pcie_switch")
    assert [tuple(sorted(p)) for p in pairs] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert not any(a["kind"] == "nvlink" for *_, a in graph.edges(data=True))


def _same_index(a, b) -> None:
    import dataclasses

    import numpy as np
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, dict) and x and isinstance(next(iter(x.values())), np.ndarray):
            assert x.keys() == y.keys(), f.name
            for k in x:
                assert np.array_equal(x[k], y[k]) and x[k].dtype == y[k].dtype, (f.name, k)
        elif isinstance(x, np.ndarray):
            assert np.array_equal(x, y) and x.dtype == y.dtype, f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("spec", ["4x2x4:leaf=2", "6x2x2:leaf=3", "3x1x8", "8x2x4:leaf=4",
                                  "4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b",
                                  "4x2x2:name=gpu"])
def test_the_index_without_the_graph_is_the_graphs(spec):
    """``hierarchy_index`` (no networkx graph) gives the index ``HierarchyIndex.from_graph``
    reads from the graph of the same sources: simulated clusters with and without leaf
    switches, several partitions, and snapshots with a deeper switch tree, nodes under no
    switch and a leaf named only by its nodes."""
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.topology.sources import hierarchy_index
    from slurm_marl.topology.hierarchy_index import HierarchyIndex

    c = parse_cluster(spec)
    snap = ClusterSnapshot(time_s=0.0, nodes=c.nodes, partitions=c.partitions,
                           switches=c.switches)
    _same_index(hierarchy_index(snapshot=snap),
                HierarchyIndex.from_graph(build_topology_graph(snapshot=snap)))


def test_the_index_without_the_graph_on_files_probes_and_odd_trees(files, data_dir):
    from slurm_marl.topology.sources import hierarchy_index
    from slurm_marl.topology.hierarchy_index import HierarchyIndex

    _same_index(hierarchy_index(**files), HierarchyIndex.from_graph(build_topology_graph(**files)))
    nodes = tuple(Node(name=f"x{i}", partitions=("p",) if i % 2 else ("p", "q"),
                       gpu_groups=(S0, S1), leaf_switch="edge9" if i == 5 else None)
                  for i in range(1, 8))
    switches = (Switch("top", switches=("mid", "other")), Switch("mid", switches=("l1", "l2")),
                Switch("l1", nodes=("x1", "x2")), Switch("l2", nodes=("x3",)),
                Switch("other", nodes=("x4",)))
    snap = ClusterSnapshot(time_s=0.0, nodes=nodes, switches=switches,
                           partitions=(Partition("q"), Partition("p")))
    got = hierarchy_index(snapshot=snap)
    _same_index(got, HierarchyIndex.from_graph(build_topology_graph(snapshot=snap)))
    # (the tree as the index reads it: l1 and l2 under the spine "top"; x5 under its own
    # leaf edge9, which hangs under the virtual spine with the virtual leaf of x6, x7)
    assert set(got.names["spine"]) >= {"top", "(virtual-spine)"}
    assert "(virtual-leaf)" in got.names["leaf"] and "edge9" in got.names["leaf"]
