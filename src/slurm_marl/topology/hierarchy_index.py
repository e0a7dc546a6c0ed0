"""The row index of the hierarchy the learned models see: GPU -> GPU group -> node -> leaf
-> spine (``LEVELS``), built once per topology by ``HierarchyIndex.from_graph`` (or, without
the graph, ``topology.sources.hierarchy_index``).

How the switch tree maps onto two network levels: a *leaf* is a switch that lists nodes
(level 0); its *spine* is the top of its chain of parents, so intermediate switches of deeper
trees collapse into the spine. A leaf without parent (a flat cluster) hangs under one virtual
spine ``(virtual-spine)``; nodes under no switch hang under a virtual leaf ``(virtual-leaf)``
below that virtual spine.

Rows are ordered so that every parent's children are contiguous (spines by name, leaves by
spine then name, nodes by leaf then name, groups by node then index, GPUs by group then
index); ``parent[level]`` gives, for every row, the row of its parent one level up (no entry
for ``spine``). ``features.Featuriser`` fills its per-level tensors along this index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from slurm_marl.domain import GpuGroup
from slurm_marl.topology.confparse import natural_key

LEVELS = ("gpu", "gpu_group", "node", "leaf", "spine")
VIRTUAL_SPINE = "(virtual-spine)"
VIRTUAL_LEAF = "(virtual-leaf)"


def _spine_sort_key(name: str) -> tuple:
    return (name == VIRTUAL_SPINE, natural_key(name))


@dataclass
class HierarchyIndex:
    """Row order and parent arrays of one topology; computed once, reused every cycle."""

    names: dict[str, list[str]]
    parent: dict[str, np.ndarray]
    node_rows: dict[str, int]
    node_gpu_start: np.ndarray
    node_gpu_end: np.ndarray
    node_group_start: np.ndarray
    node_group_end: np.ndarray
    leaf_node_start: np.ndarray
    leaf_node_end: np.ndarray
    spine_leaf_start: np.ndarray
    spine_leaf_end: np.ndarray
    gpu_row_by_index: list[dict[int, int]]   # per node row: Slurm GPU index -> gpu row
    group_size: np.ndarray
    node_partitions: list[tuple[str, ...]]   # from the graph (slurm.conf / snapshot)
    partition_names: list[str]
    gpu_parent_list: list[int]               # parent["gpu"] as a list, for Python loops

    @property
    def sizes(self) -> dict[str, int]:
        return {level: len(self.names[level]) for level in LEVELS}

    @classmethod
    def from_graph(cls, graph: nx.Graph) -> HierarchyIndex:
        """The index of a topology graph (``topology.graph``)."""
        levels: dict[str, int] = {}
        nodes = []
        for _, attrs in graph.nodes(data=True):
            kind = attrs["kind"]
            if kind == "node":
                nodes.append((attrs["name"], attrs.get("leaf"), attrs.get("gpu_groups", ()),
                              tuple(attrs.get("partitions", ()))))
            elif kind == "switch":
                levels[attrs["name"]] = attrs["level"]
        return cls.from_parts(graph.graph.get("switch_parent", {}), levels, nodes,
                              graph.graph.get("partitions", ()))

    @classmethod
    def from_parts(cls, parent_of: Mapping[str, str], switch_levels: Mapping[str, int],
                   nodes: Sequence[tuple[str, str | None, Sequence[GpuGroup], tuple[str, ...]]],
                   partitions: Sequence[str]) -> HierarchyIndex:
        """The index from the switches (each one's level and parent) and the nodes (name,
        leaf switch, GPU groups, partitions), as the graph holds them
        (``sources.hierarchy_index`` builds it without the graph)."""
        switches = set(switch_levels)
        leaves = {name for name, level in switch_levels.items() if level == 0}
        leaves |= {leaf for _, leaf, _, _ in nodes if leaf in switches}

        def top_of(leaf: str) -> str:
            current, seen = leaf, {leaf}
            while current in parent_of and parent_of[current] not in seen:
                current = parent_of[current]
                seen.add(current)
            return current if current != leaf else VIRTUAL_SPINE

        leaf_of_node = {name: (leaf if leaf in leaves else VIRTUAL_LEAF)
                        for name, leaf, _, _ in nodes}
        if VIRTUAL_LEAF in leaf_of_node.values():
            leaves.add(VIRTUAL_LEAF)
        spine_of_leaf = {leaf: (VIRTUAL_SPINE if leaf == VIRTUAL_LEAF else top_of(leaf))
                         for leaf in leaves}
        spines = sorted(set(spine_of_leaf.values()), key=_spine_sort_key)
        spine_row = {s: i for i, s in enumerate(spines)}
        leaf_list = sorted(leaves, key=lambda lf: (spine_row[spine_of_leaf[lf]], lf == VIRTUAL_LEAF,
                                                   natural_key(lf)))
        leaf_row = {lf: i for i, lf in enumerate(leaf_list)}
        nodes = sorted(nodes, key=lambda n: (leaf_row[leaf_of_node[n[0]]], natural_key(n[0])))

        node_names = [name for name, _, _, _ in nodes]
        group_names, gpu_names = [], []
        group_parent, gpu_parent, group_size = [], [], []
        gpu_start, gpu_end, group_start, group_end = [], [], [], []
        gpu_row_by_index: list[dict[int, int]] = []
        for row, (name, _, groups, _) in enumerate(nodes):
            gpu_start.append(len(gpu_names))
            group_start.append(len(group_names))
            rows: dict[int, int] = {}
            for group in sorted(groups, key=lambda g: g.index):
                group_row = len(group_names)
                group_names.append(f"{name}/g{group.index}")
                group_parent.append(row)
                group_size.append(group.gpu_count)
                for gpu in sorted(group.gpu_indices):
                    rows[gpu] = len(gpu_names)
                    gpu_names.append(f"{name}/g{group.index}/gpu{gpu}")
                    gpu_parent.append(group_row)
            gpu_end.append(len(gpu_names))
            group_end.append(len(group_names))
            gpu_row_by_index.append(rows)

        node_parent = np.array([leaf_row[leaf_of_node[n]] for n in node_names], dtype=np.int64)
        leaf_parent = np.array([spine_row[spine_of_leaf[lf]] for lf in leaf_list], dtype=np.int64)
        leaf_start = np.searchsorted(node_parent, np.arange(len(leaf_list)), side="left")
        leaf_end = np.searchsorted(node_parent, np.arange(len(leaf_list)), side="right")
        spine_start = np.searchsorted(leaf_parent, np.arange(len(spines)), side="left")
        spine_end = np.searchsorted(leaf_parent, np.arange(len(spines)), side="right")
        return cls(
            names={"gpu": gpu_names, "gpu_group": group_names, "node": node_names,
                   "leaf": leaf_list, "spine": spines},
            parent={"gpu": np.array(gpu_parent, dtype=np.int64),
                    "gpu_group": np.array(group_parent, dtype=np.int64),
                    "node": node_parent, "leaf": leaf_parent},
            node_rows={n: i for i, n in enumerate(node_names)},
            node_gpu_start=np.array(gpu_start, dtype=np.int64),
            node_gpu_end=np.array(gpu_end, dtype=np.int64),
            node_group_start=np.array(group_start, dtype=np.int64),
            node_group_end=np.array(group_end, dtype=np.int64),
            leaf_node_start=leaf_start, leaf_node_end=leaf_end,
            spine_leaf_start=spine_start, spine_leaf_end=spine_end,
            gpu_row_by_index=gpu_row_by_index,
            group_size=np.array(group_size, dtype=np.float32),
            node_partitions=[tuple(parts) for _, _, _, parts in nodes],
            partition_names=list(partitions),
            gpu_parent_list=list(gpu_parent),
        )
