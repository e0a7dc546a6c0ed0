"""Fixed-shape tensors per hierarchy level for the learned models (hierarchical GNN).

The contract (the GNN is written against it): ``LEVELS`` (from ``hierarchy_index``),
``HierarchyTensors`` and ``feature_dims()``. Levels run GPU -> GPU group -> node -> leaf ->
spine; ``parent[level]`` gives, for every row, the row of its parent one level up (no entry
for ``spine``).

Rows follow ``hierarchy_index.HierarchyIndex`` (how switches map onto leaf and spine, virtual
leaf and spine, row order); the index arrays are computed once per topology, and a changed
node is re-featurised in place without touching the rest (``Featuriser.update_node``). This
avoids ``torch_geometric.utils.from_networkx``, which measured much slower
(docs/benchmarks.md, "Topology (issue 3)").

Features (all float32):

gpu
    ``free`` (1 when the node is available and no job holds it), ``used`` (1 when Slurm or a
    running job holds it), ``running_jobs`` (jobs holding it; >1 only with GPU sharing),
    ``node_available``. No utilisation: the snapshot does not carry one.
gpu_group
    ``gpu_total``, ``gpu_free``, ``free_fraction``, ``running_jobs`` (distinct jobs on the
    group's GPUs), ``link_load`` (jobs on the group that talk beyond it, i.e. also use
    another group or another node, per GPU of the group: load on its PCIe root / socket link).
node
    ``gpu_total``, ``gpu_free``, ``free_gpu_fraction``, ``free_cpu_fraction``,
    ``free_memory_fraction``, ``available`` (not down/drained), ``running_jobs``,
    ``multi_node_jobs``.
leaf, spine
    ``gpu_total``, ``gpu_free``, ``free_gpu_fraction`` (GPUs below), ``available_node_fraction``,
    ``link_load``: multi-node jobs that cross the leaf's uplink (nodes under more than one
    leaf) and have a node below, divided by the uplink capacity in units of nodes below
    (leaf) or leaves below (spine).

A node missing from the snapshot counts as unavailable with no free GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx
import numpy as np
import torch

from slurm_marl.domain import ClusterSnapshot, Job, JobState, Node
from slurm_marl.topology.hierarchy_index import LEVELS, HierarchyIndex

NO_PARTITION = "(none)"
_ACTIVE = frozenset(s for s in JobState if s.is_active)
_NONE: frozenset[int] = frozenset()

FEATURE_NAMES: dict[str, tuple[str, ...]] = {
    "gpu": ("free", "used", "running_jobs", "node_available"),
    "gpu_group": ("gpu_total", "gpu_free", "free_fraction", "running_jobs", "link_load"),
    "node": ("gpu_total", "gpu_free", "free_gpu_fraction", "free_cpu_fraction",
             "free_memory_fraction", "available", "running_jobs", "multi_node_jobs"),
    "leaf": ("gpu_total", "gpu_free", "free_gpu_fraction", "available_node_fraction",
             "link_load"),
    "spine": ("gpu_total", "gpu_free", "free_gpu_fraction", "available_node_fraction",
              "link_load"),
}


def feature_dims() -> dict[str, int]:
    return {level: len(FEATURE_NAMES[level]) for level in LEVELS}


@dataclass
class HierarchyTensors:
    x: dict[str, torch.Tensor]        # float32 [n_level, feature_dim(level)]
    parent: dict[str, torch.Tensor]   # int64 [n_level]: parent row one level up (not spine)
    names: dict[str, list[str]]       # stable ids per level, e.g. "n3/g1/gpu2"
    node_partition: torch.Tensor      # int64 [n_node] index into partition_names
    partition_names: list[str]
    feature_names: dict[str, list[str]]


@dataclass(slots=True)
class _JobFacts:
    """What one active job contributes, computed once per job per featurise call."""

    job_id: int
    node_rows: tuple[int, ...]
    gpu_rows_by_node: dict[int, tuple[int, ...]]
    multi_node: bool
    cross_leaf: bool


class Featuriser:
    """Full featurisation of a snapshot, then cheap in-place updates of one changed node.

    ``update_node`` mutates the tensors the last ``featurise`` returned (they share memory
    with this object's numpy arrays); clone them first if the old values are still needed.
    """

    def __init__(self, graph: nx.Graph | HierarchyIndex) -> None:
        """``graph``: the topology graph, or its index (``topology.sources.hierarchy_index``,
        which builds no graph)."""
        self.index = graph if isinstance(graph, HierarchyIndex) \
            else HierarchyIndex.from_graph(graph)
        sizes = self.index.sizes
        self._x = {level: np.zeros((sizes[level], len(FEATURE_NAMES[level])), dtype=np.float32)
                   for level in LEVELS}
        self._node_available = np.zeros(sizes["node"], dtype=np.float32)
        # node row -> multi-node jobs there that cross a leaf uplink (rows with none absent)
        self._node_cross_leaf: dict[int, frozenset[int]] = {}
        self._node_partition = np.zeros(sizes["node"], dtype=np.int64)
        self._partition_names: list[str] = []
        self._partition_index: dict[str, int] = {}
        self._leaf_cross: list[set[int]] = [set() for _ in range(sizes["leaf"])]
        self._leaf_counts: list[tuple[int, float]] = [(0, 0.0)] * sizes["leaf"]
        self._tensors: HierarchyTensors | None = None

    # -- jobs ---------------------------------------------------------------------------

    def _job_facts(self, job: Job) -> _JobFacts | None:
        rows_of = self.index.node_rows
        alloc = job.gpu_alloc
        if len(alloc) == 1 and (not job.nodes or job.nodes == (alloc[0][0],)):
            # One node (most jobs): no sets, no sorting, no switch lookups.
            name, indices = alloc[0]
            row = rows_of.get(name)
            if row is None:
                return None
            lookup = self.index.gpu_row_by_index[row]
            return _JobFacts(job.job_id, (row,),
                             {row: tuple([lookup[i] for i in indices if i in lookup])},
                             multi_node=False, cross_leaf=False)
        names = set(job.nodes) | {name for name, _ in alloc}
        rows = tuple(sorted(rows_of[n] for n in names if n in rows_of))
        if not rows:
            return None
        gpu_rows: dict[int, tuple[int, ...]] = {}
        for name, indices in job.gpu_alloc:
            row = rows_of.get(name)
            if row is None:
                continue
            lookup = self.index.gpu_row_by_index[row]
            gpu_rows[row] = gpu_rows.get(row, ()) + tuple(lookup[i] for i in indices
                                                           if i in lookup)
        node_parent = self.index.parent["node"]
        leaves = {int(node_parent[r]) for r in rows}
        return _JobFacts(job.job_id, rows, gpu_rows, multi_node=len(names) > 1,
                         cross_leaf=len(leaves) > 1)

    @staticmethod
    def _active_jobs(snapshot: ClusterSnapshot) -> Iterable[Job]:
        return (j for j in snapshot.jobs if j.state in _ACTIVE)

    # -- per node -----------------------------------------------------------------------

    def _fill_node(self, row: int, node: Node | None, jobs: list[_JobFacts]) -> None:
        """GPU, group and node rows of one node from its Node and the jobs touching it."""
        ix = self.index
        g0, g1 = int(ix.node_gpu_start[row]), int(ix.node_gpu_end[row])
        q0, q1 = int(ix.node_group_start[row]), int(ix.node_group_end[row])
        available = node is not None and node.available
        gpu_x = self._x["gpu"][g0:g1]
        gpu_x[:] = 0.0
        lookup = ix.gpu_row_by_index[row]
        if node is not None:
            for i in node.used_gpu_indices:
                r = lookup.get(i)
                if r is not None:
                    gpu_x[r - g0, 1] = 1.0
        group_jobs: list[set[int]] = [set() for _ in range(q1 - q0)]
        group_external: list[set[int]] = [set() for _ in range(q1 - q0)]
        gpu_parent = ix.parent["gpu"]
        multi = 0
        for job in jobs:
            multi += job.multi_node
            rows = job.gpu_rows_by_node.get(row, ())
            groups = {int(gpu_parent[r]) - q0 for r in rows}
            for r in rows:
                gpu_x[r - g0, 1] = 1.0
                gpu_x[r - g0, 2] += 1.0
            talks_beyond = job.multi_node or len(groups) > 1
            for q in groups:
                group_jobs[q].add(job.job_id)
                if talks_beyond:
                    group_external[q].add(job.job_id)
        gpu_x[:, 3] = 1.0 if available else 0.0
        if available:
            gpu_x[:, 0] = 1.0 - gpu_x[:, 1]
        group_x = self._x["gpu_group"][q0:q1]
        if q1 > q0:
            sizes = ix.group_size[q0:q1]
            free = np.bincount(gpu_parent[g0:g1] - q0, weights=gpu_x[:, 0], minlength=q1 - q0)
            group_x[:, 0] = sizes
            group_x[:, 1] = free
            group_x[:, 2] = np.divide(free, sizes, out=np.zeros_like(sizes), where=sizes > 0)
            group_x[:, 3] = [len(s) for s in group_jobs]
            group_x[:, 4] = [len(s) for s in group_external] / np.maximum(sizes, 1.0)
        total = float(g1 - g0)
        free_gpus = float(gpu_x[:, 0].sum())
        node_x = self._x["node"][row]
        node_x[0] = total
        node_x[1] = free_gpus
        node_x[2] = free_gpus / total if total else 0.0
        if node is not None:
            node_x[3] = node.free_cpus / node.cpus if node.cpus > 0 else 0.0
            node_x[4] = (node.free_memory_mib / node.real_memory_mib
                         if node.real_memory_mib > 0 else 0.0)
        else:
            node_x[3] = node_x[4] = 0.0
        node_x[5] = 1.0 if available else 0.0
        node_x[6] = len(jobs)
        node_x[7] = multi
        self._node_available[row] = node_x[5]
        cross = frozenset(j.job_id for j in jobs if j.cross_leaf)
        if cross:
            self._node_cross_leaf[row] = cross
        else:
            self._node_cross_leaf.pop(row, None)

    def _partition_of(self, row: int, node: Node | None) -> int:
        parts = (node.partitions if node is not None and node.partitions
                 else self.index.node_partitions[row])
        name = parts[0] if parts else NO_PARTITION
        if name not in self._partition_index:
            self._partition_index[name] = len(self._partition_names)
            self._partition_names.append(name)
        return self._partition_index[name]

    # -- switches -----------------------------------------------------------------------

    def _fill_leaf(self, leaf: int) -> None:
        ix = self.index
        n0, n1 = int(ix.leaf_node_start[leaf]), int(ix.leaf_node_end[leaf])
        nodes = self._x["node"][n0:n1]
        total, free = float(nodes[:, 0].sum()), float(nodes[:, 1].sum())
        cross: set[int] = set()
        for r in range(n0, n1):
            cross |= self._node_cross_leaf.get(r, _NONE)
        self._leaf_cross[leaf] = cross
        count = n1 - n0
        self._leaf_counts[leaf] = (count, float(self._node_available[n0:n1].sum()))
        self._x["leaf"][leaf] = (total, free, free / total if total else 0.0,
                                 self._leaf_counts[leaf][1] / count if count else 0.0,
                                 len(cross) / max(1, count))

    def _fill_spine(self, spine: int) -> None:
        ix = self.index
        l0, l1 = int(ix.spine_leaf_start[spine]), int(ix.spine_leaf_end[spine])
        leaves = self._x["leaf"][l0:l1]
        total, free = float(leaves[:, 0].sum()), float(leaves[:, 1].sum())
        cross: set[int] = set()
        nodes = available = 0.0
        for leaf in range(l0, l1):
            cross |= self._leaf_cross[leaf]
            nodes += self._leaf_counts[leaf][0]
            available += self._leaf_counts[leaf][1]
        self._x["spine"][spine] = (total, free, free / total if total else 0.0,
                                   available / nodes if nodes else 0.0,
                                   len(cross) / max(1, l1 - l0))

    # -- public -------------------------------------------------------------------------

    def featurise(self, snapshot: ClusterSnapshot) -> HierarchyTensors:
        """All rows from scratch, vectorised over levels (``update_node`` is the per-node path)."""
        ix = self.index
        sizes = ix.sizes
        n_gpu, n_group, n_node = sizes["gpu"], sizes["gpu_group"], sizes["node"]
        gpu_parent, group_parent = ix.parent["gpu"], ix.parent["gpu_group"]
        nodes = [snapshot.node(name) for name in ix.names["node"]]
        state_ok: dict[str, bool] = {}
        part = [0] * n_node
        avail = [0.0] * n_node
        cpu = [0.0] * n_node
        mem = [0.0] * n_node
        used_rows: list[int] = []
        self._partition_names = list(ix.partition_names)
        self._partition_index = {p: i for i, p in enumerate(self._partition_names)}
        partition_of = self._partition_of
        gpu_row_by_index = ix.gpu_row_by_index
        for row, node in enumerate(nodes):
            part[row] = partition_of(row, node)
            if node is None:
                continue
            ok = state_ok.get(node.state)
            if ok is None:
                ok = state_ok[node.state] = node.available
            avail[row] = ok
            if node.cpus > 0:
                cpu[row] = node.free_cpus / node.cpus
            if node.real_memory_mib > 0:
                mem[row] = node.free_memory_mib / node.real_memory_mib
            if node.used_gpu_indices:
                lookup = gpu_row_by_index[row]
                used_rows.extend([lookup[i] for i in node.used_gpu_indices if i in lookup])
        self._node_partition[:] = part
        available = np.array(avail, dtype=np.float32)
        cpu_free = np.array(cpu, dtype=np.float32)
        mem_free = np.array(mem, dtype=np.float32)

        job_gpu_rows: list[int] = []
        job_group_rows: list[int] = []
        external_group_rows: list[int] = []
        job_node_rows: list[int] = []
        multi_node_rows: list[int] = []
        cross_of_node: dict[int, list[int]] = {}
        group_of_gpu = ix.gpu_parent_list
        for job in self._active_jobs(snapshot):
            facts = self._job_facts(job)
            if facts is None:
                continue
            job_node_rows.extend(facts.node_rows)
            if facts.multi_node:
                multi_node_rows.extend(facts.node_rows)
            if facts.cross_leaf:
                for row in facts.node_rows:
                    cross_of_node.setdefault(row, []).append(facts.job_id)
            for rows in facts.gpu_rows_by_node.values():
                job_gpu_rows.extend(rows)
                groups = {group_of_gpu[r] for r in rows}
                job_group_rows.extend(groups)
                if facts.multi_node or len(groups) > 1:
                    external_group_rows.extend(groups)
        used_rows.extend(job_gpu_rows)
        gpu_jobs = _counts(job_gpu_rows, n_gpu)
        group_jobs = _counts(job_group_rows, n_group)
        group_external = _counts(external_group_rows, n_group)
        node_jobs = _counts(job_node_rows, n_node)
        node_multi = _counts(multi_node_rows, n_node)
        self._node_cross_leaf = {row: frozenset(j) for row, j in cross_of_node.items()}
        self._node_available[:] = available

        used = np.zeros(n_gpu, dtype=np.float32)
        used[used_rows] = 1.0
        gpu_available = available[group_parent[gpu_parent]] if n_gpu else used
        self._x["gpu"][:] = np.stack([gpu_available * (1.0 - used), used, gpu_jobs,
                                      gpu_available], axis=1)
        group_free = np.bincount(gpu_parent, weights=self._x["gpu"][:, 0], minlength=n_group)
        sizes_g = ix.group_size
        self._x["gpu_group"][:] = np.stack([
            sizes_g, group_free, _ratio(group_free, sizes_g), group_jobs,
            group_external / np.maximum(sizes_g, 1.0)], axis=1)
        node_total = (ix.node_gpu_end - ix.node_gpu_start).astype(np.float32)
        node_free = np.bincount(group_parent, weights=group_free, minlength=n_node)
        self._x["node"][:] = np.stack([node_total, node_free, _ratio(node_free, node_total),
                                       cpu_free, mem_free, available, node_jobs, node_multi],
                                      axis=1)
        for leaf in range(sizes["leaf"]):
            self._fill_leaf(leaf)
        for spine in range(sizes["spine"]):
            self._fill_spine(spine)
        self._tensors = HierarchyTensors(
            x={level: torch.from_numpy(self._x[level]) for level in LEVELS},
            parent={level: torch.from_numpy(ix.parent[level]) for level in LEVELS[:-1]},
            names={level: list(ix.names[level]) for level in LEVELS},
            node_partition=torch.from_numpy(self._node_partition),
            partition_names=self._partition_names,
            feature_names={level: list(FEATURE_NAMES[level]) for level in LEVELS},
        )
        return self._tensors

    def update_node(self, snapshot: ClusterSnapshot, node_name: str) -> HierarchyTensors:
        """Re-featurise one node (its GPUs, groups, node row) and its leaf and spine rows."""
        if self._tensors is None:
            return self.featurise(snapshot)
        row = self.index.node_rows.get(node_name)
        if row is None:
            raise KeyError(f"node {node_name} is not in the topology this featuriser was "
                           "built from")
        jobs = []
        for job in snapshot.jobs:
            if node_name in job.nodes or (not job.nodes and
                                          any(n == node_name for n, _ in job.gpu_alloc)):
                if job.state in _ACTIVE:
                    facts = self._job_facts(job)
                    if facts is not None:
                        jobs.append(facts)
        node = snapshot.node(node_name)
        self._fill_node(row, node, jobs)
        self._node_partition[row] = self._partition_of(row, node)
        leaf = int(self.index.parent["node"][row])
        self._fill_leaf(leaf)
        self._fill_spine(int(self.index.parent["leaf"][leaf]))
        return self._tensors


def _counts(rows: list[int], size: int) -> np.ndarray:
    return np.bincount(np.asarray(rows, dtype=np.int64), minlength=size).astype(np.float32)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    out = np.zeros(len(denominator), dtype=np.float32)
    np.divide(numerator, denominator, out=out, where=denominator > 0, casting="unsafe")
    return out


def featurise(graph: nx.Graph, snapshot: ClusterSnapshot) -> HierarchyTensors:
    """One-shot featurisation; keep a ``Featuriser`` to reuse the index across cycles."""
    return Featuriser(graph).featurise(snapshot)
