"""The cluster's wiring as one networkx graph: the model of record for placement and models.

Graph nodes carry ``kind``: ``switch`` (with ``level``: 0 for a leaf, parent = 1 + the
highest child level, as ``scontrol show topology`` counts), ``node``, ``socket``,
``gpu_group`` and ``gpu``. Edges carry ``kind`` and ``bandwidth_gbps`` (Gbit/s, one
direction):

============================  ====================================  ==========================
kind                          between                               default bandwidth_gbps
============================  ====================================  ==========================
``nvlink``                    GPU - GPU (``links`` = link count)    200 per link (NVLink 2/3)
``pcie_switch``               GPU - GPU under one PCIe switch        256 (PCIe 4.0 x16)
``pcie``                      GPU - group, group - socket (root)    256 (PCIe 4.0 x16)
``socket_interconnect``       socket - socket (UPI / xGMI)          400 (~50 GB/s)
``node_socket``               node - socket (socket's path to NIC)  256 (PCIe 4.0 x16)
``node_leaf``                 node - leaf switch (the NIC)          200 (HDR InfiniBand)
``leaf_spine``                leaf - its parent switch              800 (4 x 200 uplinks)
``switch_switch``             upper switch - upper switch           1600
============================  ====================================  ==========================

Nothing in Slurm's files gives real bandwidths (topology.conf's LinkSpeed has arbitrary
units; it is kept as ``link_speed``), so these documented defaults stand in, and callers may
pass their own table. Sources, in priority order: the snapshot (what the Slurm layer saw
live), then slurm.conf / gres.conf / topology.conf, then node probe documents (NVML and
hwloc), which add GPU identities, NVLink / PCIe-switch pairs and fill unknown sockets
(``topology/sources.py`` merges them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Switch
from slurm_marl.topology.confparse import natural_key
from slurm_marl.topology.gres_conf import GresConf
from slurm_marl.topology.layout import gpu_devices_for_node
from slurm_marl.topology.slurm_conf import SlurmConf
from slurm_marl.topology.sources import NodeFacts, topology_parts
from slurm_marl.topology.topology_conf import TopologyConf

DEFAULT_BANDWIDTH_GBPS: Mapping[str, float] = {
    "nvlink": 200.0, "pcie_switch": 256.0, "pcie": 256.0, "socket_interconnect": 400.0,
    "node_socket": 256.0, "node_leaf": 200.0, "leaf_spine": 800.0, "switch_switch": 1600.0,
}
NETWORK_EDGE_KINDS = frozenset({"node_leaf", "leaf_spine", "switch_switch"})


def switch_id(name: str) -> str:
    return f"switch:{name}"


def node_id(name: str) -> str:
    return f"node:{name}"


def socket_id(node: str, socket: int) -> str:
    return f"node:{node}/socket{socket}"


def group_id(node: str, group: int) -> str:
    return f"node:{node}/group{group}"


def gpu_id(node: str, gpu: int) -> str:
    return f"node:{node}/gpu{gpu}"


def build_topology_graph(*, slurm_conf: SlurmConf | None = None,
                         gres_conf: GresConf | None = None,
                         topology_conf: TopologyConf | None = None,
                         snapshot: ClusterSnapshot | None = None,
                         probes: Mapping[str, Mapping] | None = None,
                         layout: Mapping[str, tuple[GpuGroup, ...]] | None = None,
                         bandwidth_gbps: Mapping[str, float] | None = None) -> nx.Graph:
    """Merge files, snapshot and probes into one graph (see the module docstring)."""
    bandwidth = {**DEFAULT_BANDWIDTH_GBPS, **(bandwidth_gbps or {})}
    probes = probes or {}
    parts = topology_parts(slurm_conf=slurm_conf, gres_conf=gres_conf,
                           topology_conf=topology_conf, snapshot=snapshot, probes=probes,
                           layout=layout)
    facts = parts.facts
    graph = nx.Graph()
    _add_switches(graph, parts.switches, parts.levels, bandwidth)
    node_rows, edge_rows = [], []
    for f in facts:
        _node_rows(f, bandwidth, node_rows, edge_rows)
    graph.add_nodes_from(node_rows)
    graph.add_edges_from(edge_rows)
    for f in facts:
        _add_gpu_links(graph, f, probes.get(f.name), gres_conf, bandwidth)

    graph.graph.update({
        "switch_parent": parts.parent_of,
        "leaf_of": {f.name: f.leaf for f in facts if f.leaf is not None},
        "node_names": [f.name for f in facts],
        "partitions": parts.partitions,
        "bandwidth_gbps": dict(bandwidth),
        "groups_source": {f.name: f.groups_source for f in facts},
    })
    return graph


def _add_switches(graph: nx.Graph, switches: Mapping[str, Switch], levels: Mapping[str, int],
                  bandwidth: Mapping[str, float]) -> None:
    graph.add_nodes_from((switch_id(name), {"kind": "switch", "name": name,
                                            "level": levels[name],
                                            "link_speed": s.link_speed})
                         for name, s in switches.items())
    for name, s in switches.items():
        for child in s.switches:
            if child not in switches:
                continue
            kind = "leaf_spine" if levels[child] == 0 else "switch_switch"
            graph.add_edge(switch_id(name), switch_id(child), kind=kind,
                           bandwidth_gbps=bandwidth[kind])


def _node_rows(f: NodeFacts, bandwidth: Mapping[str, float], nodes: list, edges: list) -> None:
    nid = node_id(f.name)
    gpu_count = sum(g.gpu_count for g in f.groups)
    nodes.append((nid, {"kind": "node", "name": f.name, "sockets": f.sockets,
                        "cores_per_socket": f.cores_per_socket,
                        "threads_per_core": f.threads_per_core, "cpus": f.cpus,
                        "real_memory_mib": f.real_memory_mib, "partitions": f.partitions,
                        "features": f.features, "leaf": f.leaf, "gpu_count": gpu_count,
                        "gpu_groups": f.groups, "groups_source": f.groups_source}))
    if f.leaf is not None:
        edges.append((nid, switch_id(f.leaf), {"kind": "node_leaf",
                                               "bandwidth_gbps": bandwidth["node_leaf"]}))
    for s in range(f.sockets):
        sid = socket_id(f.name, s)
        cores = tuple(range(s * f.cores_per_socket, (s + 1) * f.cores_per_socket))
        nodes.append((sid, {"kind": "socket", "node": f.name, "index": s, "core_ids": cores}))
        edges.append((nid, sid, {"kind": "node_socket",
                                 "bandwidth_gbps": bandwidth["node_socket"]}))
        for other in range(s):
            edges.append((socket_id(f.name, other), sid, {
                "kind": "socket_interconnect",
                "bandwidth_gbps": bandwidth["socket_interconnect"]}))
    for g in f.groups:
        gid = group_id(f.name, g.index)
        nodes.append((gid, {"kind": "gpu_group", "node": f.name, "index": g.index,
                            "gres_type": g.name, "socket": g.socket, "core_ids": g.core_ids,
                            "gpu_indices": g.gpu_indices, "group": g}))
        upstream = socket_id(f.name, g.socket) if g.socket is not None and \
            0 <= g.socket < f.sockets else nid
        edges.append((upstream, gid, {"kind": "pcie", "bandwidth_gbps": bandwidth["pcie"]}))
        for i in g.gpu_indices:
            nodes.append((gpu_id(f.name, i), {"kind": "gpu", "node": f.name, "index": i,
                                              "group": g.index}))
            edges.append((gid, gpu_id(f.name, i), {"kind": "pcie",
                                                   "bandwidth_gbps": bandwidth["pcie"]}))


def _add_gpu_links(graph: nx.Graph, f: NodeFacts, document: Mapping | None,
                   gres_conf: GresConf | None, bandwidth: Mapping[str, float]) -> None:
    """NVLink and shared-PCIe-switch pairs from the probe, else gres.conf ``Links=``."""
    known = {i for g in f.groups for i in g.gpu_indices}
    if document is not None and document.get("gpus"):
        by_nvml = {g.get("nvml_index"): g for g in document["gpus"] if "nvml_index" in g}
        for gpu in document["gpus"]:
            if gpu.get("index") in known:
                graph.nodes[gpu_id(f.name, gpu["index"])].update(
                    {k: gpu.get(k) for k in ("uuid", "pci_bus_id", "numa_node")
                     if gpu.get(k) is not None} | ({"model": gpu["name"]} if gpu.get("name")
                                                   else {}))
        for pair in document.get("gpu_pairs", ()):
            a_doc, b_doc = by_nvml.get(pair["gpus"][0]), by_nvml.get(pair["gpus"][1])
            if a_doc is None or b_doc is None:
                continue
            a, b = a_doc.get("index"), b_doc.get("index")
            if a not in known or b not in known:
                continue
            links = int(pair.get("nvlink_count") or 0)
            if links > 0:
                graph.add_edge(gpu_id(f.name, a), gpu_id(f.name, b), kind="nvlink", links=links,
                               via=pair.get("nvlink_via"),
                               bandwidth_gbps=links * bandwidth["nvlink"])
            elif pair.get("common_ancestor") in ("SINGLE", "MULTIPLE"):
                graph.add_edge(gpu_id(f.name, a), gpu_id(f.name, b), kind="pcie_switch",
                               bandwidth_gbps=bandwidth["pcie_switch"])
        return
    if gres_conf is None:
        return
    for device in gpu_devices_for_node(gres_conf, f.name):
        for peer, links in enumerate(device.links):
            if links > 0 and peer != device.index and {peer, device.index} <= known:
                graph.add_edge(gpu_id(f.name, device.index), gpu_id(f.name, peer),
                               kind="nvlink", links=links, via="gres.conf",
                               bandwidth_gbps=links * bandwidth["nvlink"])


# ---------------------------------------------------------------------------------------
# Helpers the placement policies use.


def node_names(graph: nx.Graph) -> tuple[str, ...]:
    return tuple(graph.graph.get("node_names", ()))


def leaf_of(graph: nx.Graph, node_name: str) -> str | None:
    return graph.graph.get("leaf_of", {}).get(node_name)


def switch_chain(graph: nx.Graph, node_name: str) -> tuple[str, ...]:
    """The node's leaf, then each parent up to the top (first parent by name if several)."""
    parent_of = graph.graph.get("switch_parent", {})
    chain: list[str] = []
    current = leaf_of(graph, node_name)
    while current is not None and current not in chain:
        chain.append(current)
        current = parent_of.get(current)
    return tuple(chain)


def hop_distance(graph: nx.Graph, node_a: str, node_b: str) -> int | None:
    """Links on the network path between two nodes: 0 same node, 2 same leaf, 4 via the
    leaves' common parent, and so on; None if they share no switch (no path Slurm would use).
    """
    if node_a == node_b:
        return 0
    chain_a, chain_b = switch_chain(graph, node_a), switch_chain(graph, node_b)
    position_b = {name: i for i, name in enumerate(chain_b)}
    for i, name in enumerate(chain_a):
        if name in position_b:
            return (i + 1) + (position_b[name] + 1)
    return None


def gpu_groups_of(graph: nx.Graph, node_name: str) -> tuple[GpuGroup, ...]:
    nid = node_id(node_name)
    return tuple(graph.nodes[nid]["gpu_groups"]) if nid in graph else ()


@dataclass(frozen=True)
class GroupFreeGpus:
    """A GPU group of a node with the GPUs of it that are free in a snapshot."""

    node: str
    group: GpuGroup
    free_gpu_indices: tuple[int, ...]

    @property
    def free(self) -> int:
        return len(self.free_gpu_indices)


def free_gpus_by_group(graph: nx.Graph, snapshot: ClusterSnapshot, node_name: str
                       ) -> tuple[GroupFreeGpus, ...]:
    """The node's GPU groups (snapshot's, else the graph's) and their free GPUs.

    A node that is unavailable (down, drained) or absent from the snapshot has no free GPUs.
    """
    node = snapshot.node(node_name)
    groups = (node.gpu_groups if node is not None and node.gpu_groups
              else gpu_groups_of(graph, node_name))
    result = []
    for group in groups:
        free: tuple[int, ...] = ()
        if node is not None and node.available:
            free = tuple(i for i in group.gpu_indices if i not in node.used_gpu_indices)
        result.append(GroupFreeGpus(node_name, group, free))
    return tuple(result)


def partitions_of(graph: nx.Graph, node_name: str, snapshot: ClusterSnapshot | None = None
                  ) -> tuple[str, ...]:
    """Partitions of a node: the snapshot's view if it has one, else what slurm.conf says."""
    if snapshot is not None:
        node = snapshot.node(node_name)
        if node is not None and node.partitions:
            return node.partitions
        listed = tuple(p.name for p in snapshot.partitions if node_name in p.nodes)
        if listed:
            return listed
    nid = node_id(node_name)
    return tuple(graph.nodes[nid].get("partitions", ())) if nid in graph else ()


def nodes_under_switch(graph: nx.Graph, switch_name: str) -> tuple[str, ...]:
    """Every node below a switch (through child switches), in natural name order."""
    sid = switch_id(switch_name)
    if sid not in graph:
        return ()
    level = graph.nodes[sid]["level"]
    found: set[str] = set()
    stack, seen = [(sid, level)], {sid}
    while stack:
        current, current_level = stack.pop()
        for neighbour in graph.adj[current]:
            attrs = graph.nodes[neighbour]
            if neighbour in seen:
                continue
            if attrs["kind"] == "node" and attrs.get("leaf") == graph.nodes[current]["name"]:
                found.add(attrs["name"])
            elif attrs["kind"] == "switch" and attrs["level"] < current_level:
                seen.add(neighbour)
                stack.append((neighbour, attrs["level"]))
    return tuple(sorted(found, key=natural_key))
