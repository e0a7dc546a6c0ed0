"""A simulated cluster under a site's own names and switches: the nodes ``build_cluster``
made renamed to the site's (slurm.conf), under the leaf switches of its topology.conf.

Topology the simulator cannot model is said, not refused: without topology.conf all nodes
share one leaf; deeper trees are flattened to leaf + spine, several top switches joined
under one spine, and nodes under no switch put under a leaf of their own.
"""

from __future__ import annotations

import dataclasses

from slurm_marl.domain import Switch
from slurm_marl.sim.cluster_model import SimCluster
from slurm_marl.slurm_integration.text import collapse_hosts
from slurm_marl.topology.topology_conf import TopologyConf


def with_site_names(built: SimCluster, members: list[list[str]], topo: TopologyConf | None,
                    notes: list[str]) -> SimCluster:
    """The built nodes renamed to the site's nodes (``members``: each partition's, in
    order), under the site's leaf switches; ``notes`` (with what this adds) become its
    ``not_modelled``."""
    site_names = [n for names in members for n in names]
    rename = dict(zip((n.name for n in built.nodes), site_names, strict=True))
    leaves = _site_leaves(site_names, topo, notes)
    leaf_of = {n: leaf for leaf, names in leaves.items() for n in names}
    nodes = tuple(dataclasses.replace(n, name=rename[n.name],
                                      leaf_switch=leaf_of[rename[n.name]])
                  for n in built.nodes)
    switches = tuple(Switch(name=leaf, nodes=tuple(names)) for leaf, names in leaves.items())
    spine = Switch(name="spine", switches=tuple(s.name for s in switches))
    partitions = tuple(dataclasses.replace(p, nodes=tuple(rename[n] for n in p.nodes))
                       for p in built.partitions)
    share = {rename[k]: v for k, v in built.share_by_node.items()}
    specs = tuple(dataclasses.replace(p, nodes_per_leaf=_per_leaf(names, leaf_of))
                  for p, names in zip(built.partitions_spec, members, strict=True))
    said = tuple(dict.fromkeys(notes))
    return dataclasses.replace(built, partitions_spec=specs, nodes=nodes,
                               switches=switches + (spine,), partitions=partitions,
                               share_by_node=share, not_modelled=said)



def _site_leaves(site_names: list[str], topo: TopologyConf | None,
                 notes: list[str]) -> dict[str, list[str]]:
    """Leaf switch -> the modelled nodes under it, as topology.conf has them (flattened to
    leaf + spine; nodes under no switch under a leaf of their own)."""
    modelled = set(site_names)
    leaves: dict[str, list[str]] = {}
    if topo is None:
        notes.append("no topology.conf: all nodes under one leaf switch")
        leaves["leaf1"] = list(site_names)
        return leaves
    levels = _levels(topo)
    if levels > 2:
        notes.append(f"{topo.path}: {levels} switch levels flattened to leaf + spine")
    roots = [s.name for s in topo.switches
             if not any(s.name in t.switches for t in topo.switches)]
    if len(roots) > 1 and levels > 1:
        notes.append(f"{topo.path}: {len(roots)} top switches ({', '.join(roots)}) joined "
                     f"under one spine")
    for node, leaf in topo.leaf_of_node().items():
        if node in modelled:
            leaves.setdefault(leaf, []).append(node)
    placed = {n for names in leaves.values() for n in names}
    missing = [n for n in site_names if n not in placed]
    if missing:
        notes.append(f"{topo.path}: nodes {collapse_hosts(sorted(missing))} under no switch: "
                     f"put under one leaf of their own")
        leaves["unswitched"] = missing
    return leaves


def _per_leaf(names: list[str], leaf_of: dict[str, str]) -> int:
    """The spec's ``nodes_per_leaf`` where the partition's leaves hold equal runs of it
    (the last may hold fewer), else 0; the cluster's switches are the site's either way."""
    runs: list[list[str]] = []
    for name in names:
        if runs and leaf_of[runs[-1][0]] == leaf_of[name]:
            runs[-1].append(name)
        else:
            runs.append([name])
    if len({leaf_of[r[0]] for r in runs}) != len(runs) or len(runs) == 1:
        return 0
    size = len(runs[0])
    ok = all(len(r) == size for r in runs[:-1]) and len(runs[-1]) <= size
    return size if ok else 0


def _levels(topo: TopologyConf) -> int:
    by_name = {s.name: s for s in topo.switches}

    def depth(name: str) -> int:
        children = by_name[name].switches
        return 1 + max((depth(c) for c in children if c in by_name), default=0)

    return max((depth(s.name) for s in topo.switches), default=0)
