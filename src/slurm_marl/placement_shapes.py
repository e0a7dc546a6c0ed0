"""Candidate placements of a job's shape: the framework's one generator.

A candidate is ((node, group, GPUs), ...) over positions in a cycle's node table (node ``k``
of the snapshot, group ``g`` of ``Node.gpu_groups``). Generation reads a cycle's state
through ``PlacementState`` (``policy.state.CycleState`` is the framework's); the policy
framework and the learned models' observation (``agent/observe.py``) both use it, so a
learned agent is offered exactly the framework's placements. Imports nothing of slurm-marl
but the domain model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from slurm_marl.domain import ClusterSnapshot, Job

# One row per node: free GPUs per GPU group (by position in ``Node.gpu_groups``).
Capacity = list[list[int]]


class PlacementState(Protocol):
    """A cycle's state as candidate generation and the learned observation read it."""

    snapshot: ClusterSnapshot
    now_s: float
    infos: list                  # per node: group_cap, group_names, cpus, mem_mib, ...
    leaf_of: Sequence            # per node: its leaf switch
    free: Capacity               # free GPUs per node and group
    view: Capacity               # the capacity being scored (``free`` or a what-if)
    free_cpus: list[int]
    free_mem: list[int]
    dedupe_nodes: bool
    dedupe_colocation: bool
    dedupe_host: bool            # free CPUs/memory part of a node's class (else a filter)
    largest_group_cap: int
    colocation_changed: set[int]  # nodes whose co-location this cycle's claims/releases changed

    @property
    def colocated(self) -> list[list[list[str]]]:
        """Per node and group: model types of the jobs there."""

    @property
    def leaf_multinode(self) -> dict:
        """Per leaf switch: model types of the multi-node jobs under it."""

    def allowed_nodes(self, job: Job) -> tuple[int, ...]: ...

    def fits_host(self, job: Job, node: int, gpus_here: int, gpus_total: int) -> bool: ...

    def min_nodes(self, job: Job) -> int: ...

    def node_class_fits(self, job: Job, cap: Capacity, nodes: Sequence[int], need: int,
                        cpus: int, mem: int, by_host: bool = True, by_colocation: bool = False
                        ) -> list[tuple[int, list[int]]] | None:
        """What ``single_node_fits`` returns with dedupe (``cpus``, ``mem``: the per-node
        shares; co-located model types part of a class with ``by_colocation``), from an
        index of node classes the state keeps up to date; None where it keeps none for this
        question (the caller scans the nodes)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A placement: ((node position, group position, GPUs), ...), sorted by node then group."""

    allocs: tuple[tuple[int, int, int], ...]
    nodes: tuple[int, ...]
    groups: int
    leaves: int

    @property
    def gpus(self) -> int:
        return sum(a[2] for a in self.allocs)


def make_candidate(allocs: Sequence[tuple[int, int, int]], leaf_of: Sequence) -> Candidate:
    allocs = tuple(sorted(allocs))
    nodes = tuple(sorted({a[0] for a in allocs}))
    return Candidate(allocs=allocs, nodes=nodes, groups=len(allocs),
                     leaves=len({leaf_of[n] for n in nodes}))


def job_shape(job: Job) -> tuple[int, int, int]:
    """(total GPUs, GPUs per node or 0 if free to split, node count)."""
    if job.gpus_per_job:
        return job.gpus_per_job, 0, max(1, job.node_count)
    if job.gpus_per_node:
        return job.gpus_per_node * max(1, job.node_count), job.gpus_per_node, \
            max(1, job.node_count)
    return 0, 0, max(1, job.node_count)


def per_node_share(total: int, gpus_here: int, gpus_total: int) -> int:
    """CPUs or memory a node must give: the job's total split in proportion to its GPUs."""
    if total <= 0 or gpus_total <= 0:
        return 0
    return math.ceil(total * gpus_here / gpus_total)


def split_on_node(row: Sequence[int], gpus: int) -> tuple[tuple[int, int], ...] | None:
    """GPUs of one node split over its groups: one best-fitting group if any holds them all,
    else the fewest groups, fullest-free first. None if the node lacks the GPUs."""
    best = -1
    for pos, free in enumerate(row):
        if free >= gpus and (best < 0 or free < row[best]):
            best = pos
    if best >= 0:
        return ((best, gpus),)
    if sum(row) < gpus:
        return None
    out, left = [], gpus
    for pos in sorted(range(len(row)), key=lambda p: (-row[p], p)):
        take = min(row[pos], left)
        if take:
            out.append((pos, take))
            left -= take
        if not left:
            break
    return tuple(sorted(out))


def generate_candidates(job: Job, state: PlacementState, cap: Capacity,
                        nodes: Sequence[int] | None = None,
                        dedupe: tuple[bool, ...] | None = None,
                        alike_in: Capacity | None = None) -> list[Candidate]:
    """Feasible placements of ``job`` on capacity ``cap`` (free GPUs per node and group).

    Bounded on purpose: one candidate per fitting GPU group, one multi-group split per node
    when no single group fits, and for multi-node jobs one packing per leaf switch plus one
    across leaves. Deterministic: node order, then group order. ``dedupe``: (one node per
    class of alike nodes, co-located model types part of the class[, free CPUs and memory
    part of the class]); default the state's ``dedupe_nodes``, ``dedupe_colocation`` and
    ``dedupe_host``. ``alike_in``: a second capacity nodes of one class must also agree in
    (the preemption search judges a what-if capacity but prefers the candidate taking the
    fewest GPUs from running jobs, which the free GPUs now decide).
    """
    total, per_node, count = job_shape(job)
    if total <= 0:
        return []
    if nodes is None:
        nodes = state.allowed_nodes(job)
    if job.gpu_type is not None:
        cap, nodes = typed_capacity(job.gpu_type, state, cap, nodes)
    leaf_of = state.leaf_of
    if dedupe is None:
        dedupe = (state.dedupe_nodes, state.dedupe_colocation, state.dedupe_host)
    by_host = dedupe[2] if len(dedupe) > 2 else state.dedupe_host
    if per_node == 0 or count == 1:
        need = total if per_node == 0 else per_node
        single = _single_node_candidates(job, state, cap, nodes, need, total, dedupe[0],
                                         dedupe[1], by_host, alike_in)
        if single or per_node:
            return single
        return _flexible_multi_node(job, state, cap, nodes, total)
    # Fixed shape across several nodes: `count` nodes each with `per_node` GPUs.
    eligible = []
    for n in nodes:
        row = cap[n]
        if sum(row) >= per_node and state.fits_host(job, n, per_node, total):
            eligible.append(n)
    if len(eligible) < count:
        return []
    out: list[Candidate] = []
    seen = set()
    by_leaf: dict = {}
    for n in eligible:
        by_leaf.setdefault(leaf_of[n], []).append(n)
    groups_of_nodes = [sorted(v, key=lambda n: (sum(cap[n]), n)) for _, v in
                       sorted(by_leaf.items(), key=lambda kv: (str(kv[0]), kv[1][0]))]
    groups_of_nodes.append(sorted(eligible, key=lambda n: (sum(cap[n]), n)))
    classes: set = set()
    for pool in groups_of_nodes:
        if len(pool) < count:
            continue
        chosen = pool[:count]
        if dedupe[0]:
            # Leaves whose chosen nodes are alike (as single-node candidates count alike)
            # give candidates that score alike: the first is kept, as it wins the tie.
            key = tuple(_class_of(state, cap, n, by_host, dedupe[1], alike_in)
                        for n in chosen) + (len({leaf_of[n] for n in chosen}),)
            if key in classes:
                continue
            classes.add(key)
        allocs = []
        for n in chosen:
            split = split_on_node(cap[n], per_node)
            allocs.extend((n, g, k) for g, k in split)
        cand = make_candidate(allocs, leaf_of)
        if cand.allocs not in seen:
            seen.add(cand.allocs)
            out.append(cand)
    return out


def _class_of(state: PlacementState, cap: Capacity, n: int, by_host: bool,
              by_colocation: bool, alike_in: Capacity | None = None) -> tuple:
    key = node_class(cap[n], state.free_cpus[n], state.free_mem[n], state.infos[n], by_host,
                     state.colocated[n] if by_colocation else None)
    return key if alike_in is None else key + (tuple(alike_in[n]),)


def typed_capacity(gpu_type: str, state: PlacementState, cap: Capacity,
                   nodes: Sequence[int]) -> tuple[dict[int, list[int]], tuple[int, ...]]:
    """A user's explicit GPU type is a constraint: only groups of that GRES type count
    (free GPUs of other groups read as 0), on nodes that have such a group."""
    infos = state.infos
    out: dict[int, list[int]] = {}
    keep = []
    for n in nodes:
        names = infos[n].group_names
        if gpu_type not in names:
            continue
        out[n] = [free if names[g] == gpu_type else 0 for g, free in enumerate(cap[n])]
        keep.append(n)
    return out, tuple(keep)


def has_candidate(job: Job, state: PlacementState, cap: Capacity) -> bool:
    """``bool(generate_candidates(job, state, cap))``, stopping at the first node that
    fits a single-node job."""
    total, per_node, count = job_shape(job)
    if total <= 0:
        return False
    nodes = state.allowed_nodes(job)
    if job.gpu_type is not None:
        cap, nodes = typed_capacity(job.gpu_type, state, cap, nodes)
    if per_node == 0 or count == 1:
        need = total if per_node == 0 else per_node
        for n in nodes:
            if sum(cap[n]) >= need and state.fits_host(job, n, need, total):
                return True
        if per_node:
            return False
    return bool(generate_candidates(job, state, cap, nodes))


def node_class(row: Sequence[int], free_cpus: int, free_mem: int, info, by_host: bool,
               colocated: Sequence[Sequence[str]] | None = None) -> tuple:
    """Which nodes single-node candidates treat as alike (they score alike, so one per class
    is kept): (free GPUs per group, their sum, GPUs per group) and, where hosts count
    (``by_host``), (free CPUs, free memory, CPUs, memory); where co-location counts, last,
    the model types co-located in each of its groups (``colocated``: the node's row of
    ``PlacementState.colocated``). A single-node candidate's co-location by level (its
    groups' models, the node's other groups' models) and its span (groups, from the free
    GPUs) are the same on every node of a class. The scan below and the cycle state's index
    of node classes both use it."""
    key = (tuple(row), sum(row), info.group_cap)
    if by_host:
        key += (free_cpus, free_mem, info.cpus, info.mem_mib)
    if colocated is not None:
        key += (tuple(tuple(sorted(models)) for models in colocated),)
    return key


def single_node_fits(job: Job, state: PlacementState, cap: Capacity, nodes: Sequence[int],
                     need: int, total: int, dedupe: bool, by_colocation: bool | None = None,
                     by_host: bool | None = None, alike_in: Capacity | None = None
                     ) -> list[tuple[int, list[int]]]:
    """The nodes of ``nodes`` (in order) that can take ``need`` of the job's ``total`` GPUs
    (free GPUs, CPUs and memory), each with its groups that hold all ``need`` (none: the node
    splits them over its groups, ``split_on_node``).

    With ``dedupe``, nodes alike in free GPUs per group, free CPUs and memory, capacity (and
    co-located model types with ``by_colocation``, default ``state.dedupe_colocation``)
    score alike, so only the first of each such class (in node order, which also wins score
    ties) is kept. Without ``by_host`` (default ``state.dedupe_host``) free CPUs and memory
    are no part of the class, only a filter: each class keeps its first node that fits.
    With ``alike_in`` (``generate_candidates``), nodes of a class also agree in that
    capacity. The state may answer from its index of node classes
    (``PlacementState.node_class_fits``) instead of this scan, but not with ``alike_in``."""
    coloc = state.dedupe_colocation if by_colocation is None else by_colocation
    host = state.dedupe_host if by_host is None else by_host
    cpus, mem = per_node_share(job.cpus, need, total), per_node_share(job.mem_mib, need, total)
    if dedupe and alike_in is None:
        indexed = state.node_class_fits(job, cap, nodes, need, cpus, mem, host, coloc)
        if indexed is not None:
            return indexed
    out = []
    seen: set = set()
    infos = state.infos
    free_cpus, free_mem = state.free_cpus, state.free_mem
    for n in nodes:
        row = cap[n]
        if sum(row) < need or free_cpus[n] < cpus or free_mem[n] < mem:
            continue
        if dedupe:
            key = node_class(row, free_cpus[n], free_mem[n], infos[n], host,
                             state.colocated[n] if coloc else None)
            if alike_in is not None:
                key += (tuple(alike_in[n]),)
            if key in seen:
                continue
            seen.add(key)
        out.append((n, [g for g, free in enumerate(row) if free >= need]))
    return out


def single_node_fit_arrays(job: Job, state: PlacementState, group_free: np.ndarray,
                           group_node: np.ndarray, nodes: Sequence[int], need: int,
                           total: int) -> tuple[np.ndarray, np.ndarray]:
    """``single_node_fits`` without dedupe, over arrays: the same rule for many nodes at
    once (the learned observation scores every group of a large cluster per decision).

    ``group_free[i]``: free GPUs of group ``i`` of the capacity being judged, on node
    ``group_node[i]`` (groups of one node contiguous, in group order). Returns (a mask over
    the groups that hold all ``need``, the nodes of ``nodes`` that fit but only split over
    their groups, ascending). ``tests/unit/test_placement_shapes.py`` proves the two forms
    agree."""
    n_nodes = len(state.infos)
    ok = np.zeros(n_nodes, dtype=bool)
    ok[np.asarray(nodes, dtype=np.int64)] = True
    ok &= np.asarray(state.free_cpus) >= per_node_share(job.cpus, need, total)
    ok &= np.asarray(state.free_mem) >= per_node_share(job.mem_mib, need, total)
    ok &= np.bincount(group_node, weights=group_free, minlength=n_nodes) >= need
    fits = (group_free >= need) & ok[group_node]
    has_fit = np.zeros(n_nodes, dtype=bool)
    has_fit[group_node[fits]] = True
    return fits, np.flatnonzero(ok & ~has_fit)


def _single_node_candidates(job, state, cap, nodes, need, total, alike: bool,
                            by_colocation: bool, by_host: bool = True,
                            alike_in: Capacity | None = None) -> list[Candidate]:
    out = []
    for n, fitting in single_node_fits(job, state, cap, nodes, need, total, alike,
                                       by_colocation, by_host, alike_in):
        if fitting:
            for g in fitting:
                out.append(Candidate(allocs=((n, g, need),), nodes=(n,), groups=1, leaves=1))
        else:
            split = split_on_node(cap[n], need)
            out.append(Candidate(allocs=tuple((n, g, k) for g, k in split), nodes=(n,),
                                 groups=len(split), leaves=1))
    return out


def _pack_nodes(job, state, cap, pool, total, free_of) -> list[tuple[int, int, int]] | None:
    """Fill nodes with the most free GPUs first; the remainder goes to the node that fits it
    most tightly (best fit), so a multi-node job leaves few scattered holes. ``free_of``:
    node -> free GPUs in ``cap``, counted once for all the pools of a job."""
    order = sorted(pool, key=lambda n: (-free_of[n], n))
    chosen: list[tuple[int, int]] = []
    left = total
    idx = 0
    while left > 0 and idx < len(order):
        n = order[idx]
        free = free_of[n]
        if free <= 0:
            break
        if free >= left:
            best = min((m for m in order[idx:] if free_of[m] >= left),
                       key=lambda m: (free_of[m], m))
            chosen.append((best, left))
            left = 0
            break
        chosen.append((n, free))
        left -= free
        idx += 1
    if left > 0:
        return None
    allocs = []
    for n, k in chosen:
        if not state.fits_host(job, n, k, total):
            return None
        split = split_on_node(cap[n], k)
        allocs.extend((n, g, c) for g, c in split)
    return allocs


def _flexible_multi_node(job, state, cap, nodes, total) -> list[Candidate]:
    leaf_of = state.leaf_of
    free_of = {n: sum(cap[n]) for n in nodes}
    usable = [n for n in nodes if free_of[n] > 0]
    if sum(free_of[n] for n in usable) < total:
        return []
    by_leaf: dict = {}
    for n in usable:
        by_leaf.setdefault(leaf_of[n], []).append(n)
    pools = [v for _, v in sorted(by_leaf.items(), key=lambda kv: (str(kv[0]), kv[1][0]))]
    if len(pools) > 1:
        pools.append(usable)
    out, seen = [], set()
    for pool in pools:
        if sum(free_of[n] for n in pool) < total:
            continue
        allocs = _pack_nodes(job, state, cap, pool, total, free_of)
        if allocs is None:
            continue
        cand = make_candidate(allocs, leaf_of)
        if cand.allocs not in seen:
            seen.add(cand.allocs)
            out.append(cand)
    return out
