"""Featuriser: shapes, parents consistent with the graph, incremental == full rebuild."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node, Switch
from slurm_marl.agent.features import (Featuriser, HierarchyTensors, feature_dims,
                                          featurise)
from slurm_marl.topology.gres_conf import parse_gres_conf
from slurm_marl.topology.graph import (build_topology_graph, gpu_id, group_id, node_id,
                                       switch_chain)
from slurm_marl.topology.hierarchy_index import LEVELS, VIRTUAL_LEAF, VIRTUAL_SPINE
from slurm_marl.topology.layout import snapshot_layout_from_files
from slurm_marl.topology.slurm_conf import parse_slurm_conf
from slurm_marl.topology.synthetic import synthetic_snapshot
from slurm_marl.topology.topology_conf import parse_topology_conf

torch.set_num_threads(1)


@pytest.fixture
def cluster(testcluster_dir):
    slurm = parse_slurm_conf(testcluster_dir / "slurm.conf")
    gres = parse_gres_conf(testcluster_dir / "gres.conf")
    topo = parse_topology_conf(testcluster_dir / "topology.conf")
    layout = snapshot_layout_from_files(slurm, gres)
    nodes = tuple(Node(n.name, state="IDLE", partitions=slurm.partitions_of(n.name)[:1],
                       sockets=2, cores_per_socket=4, cpus=8, real_memory_mib=16000,
                       gpu_groups=layout[n.name], leaf_switch=topo.leaf_of_node()[n.name])
                  for n in slurm.nodes)
    snapshot = ClusterSnapshot(time_s=0.0, nodes=nodes, switches=topo.to_domain(),
                               partitions=tuple(p.to_domain() for p in slurm.partitions))
    graph = build_topology_graph(slurm_conf=slurm, gres_conf=gres, topology_conf=topo,
                                 snapshot=snapshot)
    return graph, snapshot


def _with_jobs(snapshot: ClusterSnapshot, jobs: list[Job], **node_changes) -> ClusterSnapshot:
    used: dict[str, set[int]] = {}
    for job in jobs:
        for name, gpus in job.gpu_alloc:
            used.setdefault(name, set()).update(gpus)
    nodes = []
    for node in snapshot.nodes:
        changes = dict(used_gpu_indices=frozenset(used.get(node.name, ())),
                       alloc_cpus=2 * len(used.get(node.name, ())),
                       alloc_memory_mib=4000 * len(used.get(node.name, ())))
        changes.update(node_changes.get(node.name, {}))
        nodes.append(replace(node, **changes))
    return replace(snapshot, nodes=tuple(nodes), jobs=tuple(jobs))


def _job(job_id, *alloc):
    return Job(job_id=job_id, state=JobState.RUNNING, nodes=tuple(n for n, _ in alloc),
               gpu_alloc=tuple(alloc), node_count=len(alloc))


def test_shapes_names_and_dims(cluster):
    graph, snapshot = cluster
    tensors = featurise(graph, snapshot)
    assert isinstance(tensors, HierarchyTensors)
    sizes = {level: t.shape[0] for level, t in tensors.x.items()}
    assert sizes == {"gpu": 16, "gpu_group": 8, "node": 4, "leaf": 2, "spine": 1}
    for level in LEVELS:
        assert tensors.x[level].dtype == torch.float32
        assert tensors.x[level].shape[1] == feature_dims()[level]
        assert tensors.feature_names[level] and len(tensors.feature_names[level]) == \
            feature_dims()[level]
        assert len(tensors.names[level]) == tensors.x[level].shape[0]
    assert set(tensors.parent) == {"gpu", "gpu_group", "node", "leaf"}
    assert all(p.dtype == torch.int64 for p in tensors.parent.values())
    assert tensors.names["gpu"][:3] == ["n1/g0/gpu0", "n1/g0/gpu1", "n1/g1/gpu2"]
    assert tensors.names["leaf"] == ["leaf1", "leaf2"] and tensors.names["spine"] == ["spine"]
    assert tensors.partition_names == ["gpu", "short"]
    assert tensors.node_partition.tolist() == [0, 0, 0, 0]


def test_parents_match_the_graph(cluster):
    graph, snapshot = cluster
    t = featurise(graph, snapshot)
    names, parent = t.names, t.parent
    for row, name in enumerate(names["gpu"]):
        node, group, gpu = name.split("/")
        gpu_node = gpu_id(node, int(gpu[3:]))
        parent_name = names["gpu_group"][parent["gpu"][row]]
        assert parent_name == f"{node}/{group}"
        assert graph.has_edge(gpu_node, group_id(node, int(group[1:])))
    for row, name in enumerate(names["gpu_group"]):
        node, group = name.split("/")
        assert names["node"][parent["gpu_group"][row]] == node
        assert graph.nodes[group_id(node, int(group[1:]))]["node"] == node
    for row, name in enumerate(names["node"]):
        leaf = names["leaf"][parent["node"][row]]
        assert graph.has_edge(node_id(name), f"switch:{leaf}")
        assert names["spine"][parent["leaf"][parent["node"][row]]] == switch_chain(graph, name)[-1]


def test_feature_values(cluster):
    graph, snapshot = cluster
    jobs = [_job(1, ("n1", (0,))),                      # one GPU of n1's s0
            _job(2, ("n2", (1, 2))),                    # spans both groups of n2
            _job(3, ("n3", (0, 1)), ("n4", (2, 3)))]    # multi-node inside leaf2
    live = _with_jobs(snapshot, jobs, n4={"state": "DRAIN"})
    t = featurise(graph, live)
    x, names = t.x, t.names
    gpu = {n: x["gpu"][i].tolist() for i, n in enumerate(names["gpu"])}
    assert gpu["n1/g0/gpu0"] == [0.0, 1.0, 1.0, 1.0]
    assert gpu["n1/g0/gpu1"] == [1.0, 0.0, 0.0, 1.0]
    assert gpu["n4/g0/gpu0"] == [0.0, 0.0, 0.0, 0.0]  # drained: not free, not available
    group = {n: x["gpu_group"][i].tolist() for i, n in enumerate(names["gpu_group"])}
    assert group["n1/g0"] == [2.0, 1.0, 0.5, 1.0, 0.0]
    assert group["n2/g0"] == [2.0, 1.0, 0.5, 1.0, 0.5]  # job 2 talks across groups
    assert group["n3/g0"] == [2.0, 0.0, 0.0, 1.0, 0.5]  # job 3 talks across nodes
    node = {n: x["node"][i].tolist() for i, n in enumerate(names["node"])}
    assert node["n1"] == pytest.approx([4, 3, 0.75, 6 / 8, 12000 / 16000, 1, 1, 0])
    assert node["n3"][6:] == [1.0, 1.0] and node["n4"][5] == 0.0
    leaf = {n: x["leaf"][i].tolist() for i, n in enumerate(names["leaf"])}
    assert leaf["leaf1"] == pytest.approx([8, 5, 5 / 8, 1.0, 0.0])
    assert leaf["leaf2"] == pytest.approx([8, 2, 2 / 8, 0.5, 0.0])  # job 3 stays in the leaf
    assert x["spine"][0].tolist() == pytest.approx([16, 7, 7 / 16, 0.75, 0.0])


def test_cross_leaf_job_loads_both_leaves_and_the_spine(cluster):
    graph, snapshot = cluster
    t = featurise(graph, _with_jobs(snapshot, [_job(7, ("n2", (0,)), ("n3", (0,)))]))
    assert t.x["leaf"][:, 4].tolist() == [0.5, 0.5]  # one job / two nodes under each leaf
    assert t.x["spine"][0, 4].item() == 0.5           # one job / two leaves


def _assert_same(a: HierarchyTensors, b: HierarchyTensors) -> None:
    for level in LEVELS:
        assert torch.equal(a.x[level], b.x[level]), level
    assert torch.equal(a.node_partition, b.node_partition)
    assert a.partition_names == b.partition_names


def test_incremental_update_equals_full_rebuild(cluster):
    graph, snapshot = cluster
    before = _with_jobs(snapshot, [_job(1, ("n1", (0,)))])
    featuriser = Featuriser(graph)
    featuriser.featurise(before)
    after = _with_jobs(snapshot, [_job(1, ("n1", (0,))), _job(2, ("n3", (2, 3)))],
                       n3={"partitions": ("short",)})
    updated = featuriser.update_node(after, "n3")
    _assert_same(updated, Featuriser(graph).featurise(after))
    # A multi-node job across leaves touches two nodes: update both.
    later = _with_jobs(snapshot, [_job(1, ("n1", (0,))), _job(2, ("n3", (2, 3))),
                                  _job(3, ("n2", (0, 1, 2, 3)), ("n4", (0, 1)))],
                       n3={"partitions": ("short",)}, n1={"state": "DOWN"})
    for name in ("n2", "n4", "n1"):
        updated = featuriser.update_node(later, name)
    _assert_same(updated, Featuriser(graph).featurise(later))
    with pytest.raises(KeyError):
        featuriser.update_node(later, "n99")


def test_incremental_equals_full_on_a_synthetic_cluster():
    snapshot = synthetic_snapshot(120, nodes_per_leaf=10, leaves_per_spine=4, seed=3)
    graph = build_topology_graph(snapshot=snapshot)
    featuriser = Featuriser(graph)
    featuriser.featurise(replace(snapshot, jobs=()))
    for node in snapshot.nodes:  # every node changed: a sequence of updates
        updated = featuriser.update_node(snapshot, node.name)
    _assert_same(updated, Featuriser(graph).featurise(snapshot))


def test_flat_cluster_gets_a_virtual_spine_and_lost_nodes_a_virtual_leaf():
    group = GpuGroup(0, (0, 1))
    snapshot = ClusterSnapshot(
        time_s=0.0,
        nodes=(Node("a", gpu_groups=(group,), leaf_switch="l1"), Node("b", gpu_groups=(group,)),
               Node("c", gpu_groups=(group,), leaf_switch="l2")),
        switches=(Switch("l1", nodes=("a",)), Switch("l2", nodes=("c",))))
    t = featurise(build_topology_graph(snapshot=snapshot), snapshot)
    assert t.names["spine"] == [VIRTUAL_SPINE]
    assert t.names["leaf"] == ["l1", "l2", VIRTUAL_LEAF]
    assert t.names["node"] == ["a", "c", "b"]
    assert t.parent["leaf"].tolist() == [0, 0, 0]
    assert t.partition_names[-1] == "(none)"


def test_deeper_trees_collapse_to_their_top_switch(site_dir):
    graph = build_topology_graph(slurm_conf=parse_slurm_conf(site_dir / "slurm.conf"),
                                 gres_conf=parse_gres_conf(site_dir / "gres.conf"),
                                 topology_conf=parse_topology_conf(site_dir / "topology.conf"))
    t = featurise(graph, ClusterSnapshot(time_s=0.0))
    assert t.names["spine"] == ["core", VIRTUAL_SPINE]  # login1 sits under no switch
    assert t.names["leaf"] == ["leaf-a01", "leaf-a02", "leaf-b01", VIRTUAL_LEAF]
    assert t.parent["leaf"].tolist() == [0, 0, 0, 1]
    assert float(t.x["node"][:, 5].sum()) == 0.0  # nobody in the snapshot: unavailable
    assert np.all(np.diff(t.parent["node"].numpy()) >= 0)  # children contiguous
