"""The topology's sources merged into its parts, before any graph is built: the switches
(each one's level and parent), every node's facts (sockets, CPUs, memory, partitions,
features, leaf switch, GPU groups and where the groups came from) and the partitions.

Sources, in priority order (``topology/graph.py``'s module docstring): the snapshot (what
the Slurm layer saw live), then slurm.conf / gres.conf / topology.conf, then node probe
documents (NVML and hwloc), which fill unknown sockets and give groups to nodes the files do
not describe. ``topology_parts`` is what ``graph.build_topology_graph`` builds its graph
from, and ``hierarchy_index`` the models' row index from, without the graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Node, Switch
from slurm_marl.topology.confparse import natural_key
from slurm_marl.topology.gres_conf import GresConf
from slurm_marl.topology.hierarchy_index import HierarchyIndex
from slurm_marl.topology.layout import snapshot_layout_from_files
from slurm_marl.topology.slurm_conf import NodeSpec, SlurmConf
from slurm_marl.topology.topology_conf import TopologyConf


@dataclass(frozen=True)
class NodeFacts:
    name: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    cpus: int
    real_memory_mib: int
    partitions: tuple[str, ...]
    features: tuple[str, ...]
    leaf: str | None
    groups: tuple[GpuGroup, ...]
    groups_source: str


def _facts_from_domain(node: Node, groups: tuple[GpuGroup, ...], source: str,
                       partitions: tuple[str, ...], leaf: str | None) -> NodeFacts:
    return NodeFacts(node.name, node.sockets, node.cores_per_socket, node.threads_per_core,
                      node.cpus, node.real_memory_mib, node.partitions or partitions,
                      node.features, node.leaf_switch or leaf, groups, source)


def _facts_from_spec(spec: NodeSpec, groups: tuple[GpuGroup, ...], source: str,
                     partitions: tuple[str, ...], leaf: str | None) -> NodeFacts:
    return NodeFacts(spec.name, spec.sockets, spec.cores_per_socket, spec.threads_per_core,
                      spec.cpus, spec.real_memory_mib, partitions, spec.features, leaf,
                      groups, source)


def groups_from_probe(document: Mapping) -> tuple[GpuGroup, ...]:
    return tuple(GpuGroup(index=position, gpu_indices=tuple(sorted(g["gpu_indices"])),
                          name=g.get("name"), socket=g.get("socket"),
                          core_ids=tuple(g.get("core_ids") or ()))
                 for position, g in enumerate(document.get("gpu_groups", ())))


def refine_sockets(groups: tuple[GpuGroup, ...], document: Mapping | None
                   ) -> tuple[GpuGroup, ...]:
    """Fill a group's unknown socket from a probe that located all of the group's GPUs."""
    if document is None:
        return groups
    socket_of = {g["index"]: g.get("socket") for g in document.get("gpus", ())
                 if isinstance(g.get("index"), int)}
    refined = []
    for group in groups:
        if group.socket is None:
            sockets = {socket_of.get(i) for i in group.gpu_indices}
            if len(sockets) == 1 and None not in sockets:
                group = GpuGroup(group.index, group.gpu_indices, group.name, sockets.pop(),
                                 group.core_ids)
        refined.append(group)
    return tuple(refined)


def _switch_levels(switches: Mapping[str, Switch]) -> dict[str, int]:
    levels: dict[str, int] = {}

    def level(name: str, trail: frozenset[str]) -> int:
        if name in levels:
            return levels[name]
        children = [c for c in switches[name].switches if c in switches and c not in trail]
        value = 0 if not children else 1 + max(level(c, trail | {name}) for c in children)
        levels[name] = value
        return value

    for name in switches:
        level(name, frozenset())
    return levels


@dataclass(frozen=True)
class TopologyParts:
    """What the graph is built from, merged from files, snapshot and probes: the switches
    with their levels and each one's parent, the nodes' facts in order, the partitions.
    ``hierarchy_index`` builds the models' row index from these without the graph."""

    switches: dict[str, Switch]
    levels: dict[str, int]
    parent_of: dict[str, str]
    facts: list[NodeFacts]
    partitions: list[str]


def topology_parts(*, slurm_conf: SlurmConf | None = None,
                   gres_conf: GresConf | None = None,
                   topology_conf: TopologyConf | None = None,
                   snapshot: ClusterSnapshot | None = None,
                   probes: Mapping[str, Mapping] | None = None,
                   layout: Mapping[str, tuple[GpuGroup, ...]] | None = None) -> TopologyParts:
    """The sources merged (see the module docstring), before any graph is built."""
    probes = probes or {}
    switches = _collect_switches(snapshot, topology_conf)
    leaf_of: dict[str, str] = {}
    for s in switches.values():
        for n in s.nodes:
            leaf_of.setdefault(n, s.name)
    if layout is None and slurm_conf is not None:
        layout = snapshot_layout_from_files(slurm_conf, gres_conf)
    layout = layout or {}
    facts = _collect_nodes(snapshot, slurm_conf, layout, probes, leaf_of)
    for f in facts:
        if f.leaf is not None and f.leaf not in switches:
            switches[f.leaf] = Switch(name=f.leaf, nodes=(f.name,))
    levels = _switch_levels(switches)
    parents: dict[str, list[str]] = {}
    for name, s in switches.items():
        for child in s.switches:
            if child in switches:
                parents.setdefault(child, []).append(name)
    parent_of = {child: sorted(ps, key=natural_key)[0] for child, ps in parents.items()}
    partitions: list[str] = []
    if snapshot is not None:
        partitions.extend(p.name for p in snapshot.partitions)
    if slurm_conf is not None:
        partitions.extend(p.name for p in slurm_conf.partitions)
    for f in facts:
        partitions.extend(f.partitions)
    return TopologyParts(switches, levels, parent_of, facts, list(dict.fromkeys(partitions)))


def hierarchy_index(**sources) -> HierarchyIndex:
    """The models' row index (``HierarchyIndex``) of the graph ``build_topology_graph``
    would build from these sources, without building it (the graph's sockets, GPUs and
    links as networkx objects cost most of a layout's first cycle at 10,000 nodes; the
    index needs none of them). Equal to ``HierarchyIndex.from_graph`` of that graph
    (tested)."""
    parts = topology_parts(**sources)
    return HierarchyIndex.from_parts(
        parts.parent_of, parts.levels,
        [(f.name, f.leaf, f.groups, f.partitions) for f in parts.facts], parts.partitions)


def _collect_switches(snapshot: ClusterSnapshot | None, topology_conf: TopologyConf | None
                      ) -> dict[str, Switch]:
    if snapshot is not None and snapshot.switches:
        return {s.name: s for s in snapshot.switches}
    if topology_conf is not None:
        return {s.name: s for s in topology_conf.to_domain()}
    return {}


def _collect_nodes(snapshot: ClusterSnapshot | None, slurm_conf: SlurmConf | None,
                   layout: Mapping[str, tuple[GpuGroup, ...]],
                   probes: Mapping[str, Mapping], leaf_of: Mapping[str, str]
                   ) -> list[NodeFacts]:
    facts: list[NodeFacts] = []
    seen: set[str] = set()

    def groups_for(name: str, live: tuple[GpuGroup, ...]) -> tuple[tuple[GpuGroup, ...], str]:
        document = probes.get(name)
        if live:
            return refine_sockets(live, document), "snapshot"
        if layout.get(name):
            return refine_sockets(layout[name], document), "files"
        if document is not None and document.get("gpu_groups"):
            return groups_from_probe(document), "probe"
        return (), "none"

    def file_partitions(name: str) -> tuple[str, ...]:
        return slurm_conf.partitions_of(name) if slurm_conf is not None else ()

    for node in (snapshot.nodes if snapshot is not None else ()):
        groups, source = groups_for(node.name, node.gpu_groups)
        facts.append(_facts_from_domain(node, groups, source, file_partitions(node.name),
                                        leaf_of.get(node.name)))
        seen.add(node.name)
    for spec in (slurm_conf.nodes if slurm_conf is not None else ()):
        if spec.name in seen:
            continue
        groups, source = groups_for(spec.name, ())
        facts.append(_facts_from_spec(spec, groups, source, file_partitions(spec.name),
                                      leaf_of.get(spec.name)))
        seen.add(spec.name)
    for name in sorted(set(probes) - seen, key=natural_key):
        groups, source = groups_for(name, ())
        facts.append(NodeFacts(name, 1, 1, 1, 1, 0, (), (), leaf_of.get(name), groups,
                                source))
    return facts
