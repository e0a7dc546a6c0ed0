"""Per-cycle scheduling state and candidate placements.

``run_cycle`` is pure: everything here is built from one snapshot, mutated only inside one
cycle (placements reserve GPUs so later jobs see them) and thrown away. What does not depend
on the cycle (a node's group layout, a job's shape) is memoised per immutable object, which
keeps a cycle cheap when the caller (the simulator, the daemon) reuses unchanged objects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from slurm_marl.domain import ClusterSnapshot, Job, JobState, Node

ACTIVE_STATES = frozenset(s for s in JobState if s.is_active)
PENDING = JobState.PENDING

# One row per node: free GPUs per GPU group (by position in ``Node.gpu_groups``).
Capacity = list[list[int]]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a cycle needs from a ``Node``, computed once per Node object."""

    name: str
    partitions: frozenset[str]
    usable: bool
    leaf: str | None
    group_ids: tuple[int, ...]        # GpuGroup.index, what GroupAlloc.group carries
    group_cap: tuple[int, ...]        # GPUs per group
    group_free: tuple[int, ...]       # free GPUs per group in the snapshot
    group_names: tuple                # GpuGroup.name (the GRES type), None if untyped
    gpu_pos: dict                     # GPU index -> group position
    free_cpus: int
    free_mem_mib: int
    cpus: int
    mem_mib: int
    gpu_count: int


_NODE_MEMO: dict[int, tuple[Node, NodeInfo]] = {}
_NODE_MEMO_LIMIT = 200_000


def node_info(node: Node, leaf: str | None) -> NodeInfo:
    hit = _NODE_MEMO.get(id(node))
    if hit is not None and hit[0] is node and hit[1].leaf == leaf:
        return hit[1]
    used = node.used_gpu_indices
    gpu_pos = {}
    caps, frees, ids = [], [], []
    for pos, group in enumerate(node.gpu_groups):
        ids.append(group.index)
        caps.append(len(group.gpu_indices))
        frees.append(sum(1 for i in group.gpu_indices if i not in used))
        for i in group.gpu_indices:
            gpu_pos[i] = pos
    info = NodeInfo(name=node.name, partitions=frozenset(node.partitions),
                    usable=node.available, leaf=leaf, group_ids=tuple(ids),
                    group_cap=tuple(caps), group_free=tuple(frees),
                    group_names=tuple(g.name for g in node.gpu_groups), gpu_pos=gpu_pos,
                    free_cpus=node.free_cpus, free_mem_mib=node.free_memory_mib,
                    cpus=node.cpus, mem_mib=node.real_memory_mib, gpu_count=sum(caps))
    if len(_NODE_MEMO) > _NODE_MEMO_LIMIT:
        _NODE_MEMO.clear()
    _NODE_MEMO[id(node)] = (node, info)
    return info


_TABLE_MEMO: list = [None, None, None]


def _node_table(snapshot: ClusterSnapshot):
    """(NodeInfo per node, name -> position, leaf per node) of a snapshot's nodes. Callers
    that reuse the nodes tuple (or most Node objects in it) between cycles pay for what
    changed only. The returned containers are shared: never mutate them."""
    nodes, switches = snapshot.nodes, snapshot.switches
    last_nodes, last_switches, last = _TABLE_MEMO
    if nodes is last_nodes and switches is last_switches:
        return last
    if switches is last_switches and last_nodes is not None \
            and len(last_nodes) == len(nodes):
        infos = list(last[0])
        same_layout = True
        for k, n in enumerate(nodes):
            old = last_nodes[k]
            if n is not old:
                infos[k] = node_info(n, _leaf(n, switches))
                same_layout = same_layout and n.name == old.name \
                    and infos[k].leaf == last[0][k].leaf
        if same_layout:
            table = (infos, last[1], last[2])
            _TABLE_MEMO[:] = [nodes, switches, table]
            return table
    else:
        infos = [node_info(n, _leaf(n, switches)) for n in nodes]
    index = {info.name: k for k, info in enumerate(infos)}
    table = (infos, index, [info.leaf for info in infos])
    _TABLE_MEMO[:] = [nodes, switches, table]
    return table


def _leaf(node: Node, switches) -> str | None:
    if node.leaf_switch:
        return node.leaf_switch
    for sw in switches:
        if node.name in sw.nodes:
            return sw.name
    return None


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


class CycleState:
    """Free resources as the cycle goes; placements made earlier in the cycle are claimed."""

    def __init__(self, snapshot: ClusterSnapshot, *, track_colocation: bool = False,
                 track_holders: bool = False) -> None:
        self.now_s = snapshot.time_s
        self.snapshot = snapshot
        self.infos, self.index, self.leaf_of = _node_table(snapshot)
        self.free: Capacity = [list(i.group_free) for i in self.infos]
        # The capacity a plugin scores against: ``free`` normally, a what-if overlay while
        # planning a reservation or a preemption.
        self.view: Capacity = self.free
        self.free_cpus = [i.free_cpus for i in self.infos]
        self.free_mem = [i.free_mem_mib for i in self.infos]
        self._partition_nodes: dict[str, tuple[int, ...]] = {}
        self._min_nodes: dict[tuple[str, int], int] = {}
        self._allowed: dict[tuple, tuple[int, ...]] = {}   # node usability is per snapshot
        self.track_colocation = track_colocation
        self.track_holders = track_holders
        # Score plugins by resources, not node identity, unless one says otherwise; the
        # co-located model types are part of a node's class when a plugin reads them.
        self.dedupe_nodes = True
        self.dedupe_colocation = track_colocation
        # Built on first use (see ``_ensure_running_index``): (node, group) -> model types of
        # jobs there; leaf -> model types of multi-node jobs; (node, group) -> [(job_id,
        # GPUs)] of running jobs, for choosing preemption victims.
        self._colocated: list[list[list[str]]] | None = None
        self._leaf_multinode: dict[str | None, list[str]] = {}
        self._holders: list[list[list[tuple[int, int]]]] | None = None
        self._running_allocs: dict[int, tuple[tuple[int, int, int], ...]] | None = None
        # Placements claimed this cycle, noted before the running index exists.
        self._claimed: list[tuple[Job, tuple[tuple[int, int, int], ...]]] = []

    def _ensure_running_index(self) -> None:
        if self._running_allocs is not None:
            return
        self._colocated = [[[] for _ in i.group_cap] for i in self.infos]
        self._holders = [[[] for _ in i.group_cap] for i in self.infos]
        self._running_allocs = {}
        for job in self.snapshot.jobs:
            if job.state in ACTIVE_STATES and job.gpu_alloc:
                allocs = self.allocs_of_running(job)
                self._running_allocs[job.job_id] = allocs
                self._note_colocation(job, allocs)
                for n, g, k in allocs:
                    self._holders[n][g].append((job.job_id, k))
        for job, allocs in self._claimed:
            self._note_colocation(job, allocs)

    @property
    def colocated(self) -> list[list[list[str]]]:
        self._ensure_running_index()
        return self._colocated

    @property
    def leaf_multinode(self) -> dict[str | None, list[str]]:
        self._ensure_running_index()
        return self._leaf_multinode

    @property
    def holders(self) -> list[list[list[tuple[int, int]]]]:
        self._ensure_running_index()
        return self._holders

    @property
    def running_allocs(self) -> dict[int, tuple[tuple[int, int, int], ...]]:
        self._ensure_running_index()
        return self._running_allocs

    # -- lookups -------------------------------------------------------------------------
    def allocs_of_running(self, job: Job) -> tuple[tuple[int, int, int], ...]:
        counts: dict[tuple[int, int], int] = {}
        for node_name, gpus in job.gpu_alloc:
            n = self.index.get(node_name)
            if n is None:
                continue
            pos_of = self.infos[n].gpu_pos
            for gpu in gpus:
                pos = pos_of.get(gpu)
                if pos is not None:
                    counts[(n, pos)] = counts.get((n, pos), 0) + 1
        return tuple(sorted((n, g, k) for (n, g), k in counts.items()))

    def partition_nodes(self, partition: str) -> tuple[int, ...]:
        hit = self._partition_nodes.get(partition)
        if hit is not None:
            return hit
        if not partition:
            nodes = tuple(range(len(self.infos)))
        else:
            nodes = tuple(k for k, i in enumerate(self.infos) if partition in i.partitions)
            if not nodes:
                part = self.snapshot.partition(partition)
                if part is not None:
                    nodes = tuple(sorted(self.index[n] for n in part.nodes if n in self.index))
            part = self.snapshot.partition(partition)
            if part is not None and part.state.upper() not in ("UP", ""):
                nodes = ()
        self._partition_nodes[partition] = nodes
        return nodes

    def allowed_nodes(self, job: Job) -> tuple[int, ...]:
        key = (job.partition, job.required_nodes, job.excluded_nodes)
        hit = self._allowed.get(key)
        if hit is not None:
            return hit
        nodes = self.partition_nodes(job.partition)
        infos = self.infos
        nodes = tuple(n for n in nodes if infos[n].usable)
        if job.required_nodes:
            req = set(job.required_nodes)
            nodes = tuple(n for n in nodes if infos[n].name in req)
        if job.excluded_nodes:
            exc = set(job.excluded_nodes)
            nodes = tuple(n for n in nodes if infos[n].name not in exc)
        self._allowed[key] = nodes
        return nodes

    @cached_property
    def largest_group_cap(self) -> int:
        """GPUs in the largest GPU group of the cluster (1 if it has none)."""
        return max((max(i.group_cap) for i in self.infos if i.group_cap), default=1)

    def min_nodes(self, job: Job) -> int:
        """The fewest nodes any placement of this job could use on this cluster."""
        total, per_node, count = job_shape(job)
        if per_node:
            return count
        memo_key = (job.partition, total)
        hit = self._min_nodes.get(memo_key)
        if hit is not None:
            return hit
        caps = sorted((self.infos[n].gpu_count for n in self.partition_nodes(job.partition)),
                      reverse=True)
        used, left = 0, total
        for c in caps:
            if left <= 0:
                break
            left -= c
            used += 1
        self._min_nodes[memo_key] = max(1, used)
        return max(1, used)

    # -- claims --------------------------------------------------------------------------
    def fits_host(self, job: Job, node: int, gpus_here: int, gpus_total: int) -> bool:
        return (self.free_cpus[node] >= per_node_share(job.cpus, gpus_here, gpus_total)
                and self.free_mem[node] >= per_node_share(job.mem_mib, gpus_here, gpus_total))

    def claim(self, job: Job, cand: Candidate) -> None:
        total = cand.gpus
        per_node: dict[int, int] = {}
        for n, g, k in cand.allocs:
            if self.free[n][g] < k:
                raise AssertionError(f"claim of {k} GPUs on {self.infos[n].name} group {g} "
                                     f"exceeds {self.free[n][g]} free")
            self.free[n][g] -= k
            per_node[n] = per_node.get(n, 0) + k
        for n, k in per_node.items():
            self.free_cpus[n] -= per_node_share(job.cpus, k, total)
            self.free_mem[n] -= per_node_share(job.mem_mib, k, total)
        if self._running_allocs is None:
            self._claimed.append((job, cand.allocs))
        else:
            self._note_colocation(job, cand.allocs)

    def release_running(self, job: Job) -> tuple[tuple[int, int, int], ...]:
        """A preempted job's GPUs go back to the free pool; it no longer holds or
        co-locates anything."""
        allocs = self.running_allocs.pop(job.job_id, ())
        model = job.model_type or "unknown"
        per_node: dict[int, int] = {}
        for n, g, k in allocs:
            self.free[n][g] += k
            per_node[n] = per_node.get(n, 0) + k
            self._holders[n][g] = [h for h in self._holders[n][g] if h[0] != job.job_id]
            if model in self._colocated[n][g]:
                self._colocated[n][g].remove(model)
        total = sum(per_node.values())
        for n, k in per_node.items():
            self.free_cpus[n] += per_node_share(job.cpus, k, total)
            self.free_mem[n] += per_node_share(job.mem_mib, k, total)
        if len(per_node) > 1:
            for leaf in {self.leaf_of[n] for n in per_node}:
                models = self._leaf_multinode.get(leaf, [])
                if model in models:
                    models.remove(model)
        return allocs

    def _note_colocation(self, job: Job, allocs) -> None:
        model = job.model_type or "unknown"
        for n, g, _ in allocs:
            self._colocated[n][g].append(model)
        nodes = {a[0] for a in allocs}
        if len(nodes) > 1:
            for leaf in {self.leaf_of[n] for n in nodes}:
                self._leaf_multinode.setdefault(leaf, []).append(model)

    def colocated_by_level(self, cand: Candidate) -> dict[str, tuple[str, ...]]:
        """Model types the candidate would share with: same GPU group, same node (other
        groups), same leaf (multi-node jobs, only for a multi-node candidate)."""
        chosen = {(n, g) for n, g, _ in cand.allocs}
        group_level: list[str] = []
        node_level: list[str] = []
        for n in cand.nodes:
            for g, models in enumerate(self.colocated[n]):
                (group_level if (n, g) in chosen else node_level).extend(models)
        leaf_level: list[str] = []
        if len(cand.nodes) > 1:
            for leaf in {self.leaf_of[n] for n in cand.nodes}:
                leaf_level.extend(self.leaf_multinode.get(leaf, ()))
        return {"group": tuple(sorted(group_level)), "node": tuple(sorted(node_level)),
                "leaf": tuple(sorted(leaf_level))}


def generate_candidates(job: Job, state: CycleState, cap: Capacity,
                        nodes: Sequence[int] | None = None) -> list[Candidate]:
    """Feasible placements of ``job`` on capacity ``cap`` (free GPUs per node and group).

    Bounded on purpose: one candidate per fitting GPU group, one multi-group split per node
    when no single group fits, and for multi-node jobs one packing per leaf switch plus one
    across leaves. Deterministic: node order, then group order.
    """
    total, per_node, count = job_shape(job)
    if total <= 0:
        return []
    if nodes is None:
        nodes = state.allowed_nodes(job)
    if job.gpu_type is not None:
        cap, nodes = typed_capacity(job.gpu_type, state, cap, nodes)
    leaf_of = state.leaf_of
    if per_node == 0 or count == 1:
        need = total if per_node == 0 else per_node
        single = _single_node_candidates(job, state, cap, nodes, need, total)
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
    for pool in groups_of_nodes:
        if len(pool) < count:
            continue
        chosen = pool[:count]
        allocs = []
        for n in chosen:
            split = split_on_node(cap[n], per_node)
            allocs.extend((n, g, k) for g, k in split)
        cand = make_candidate(allocs, leaf_of)
        if cand.allocs not in seen:
            seen.add(cand.allocs)
            out.append(cand)
    return out


def typed_capacity(gpu_type: str, state: CycleState, cap: Capacity, nodes: Sequence[int]
                   ) -> tuple[dict[int, list[int]], tuple[int, ...]]:
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


def has_candidate(job: Job, state: CycleState, cap: Capacity) -> bool:
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


def _single_node_candidates(job, state, cap, nodes, need, total) -> list[Candidate]:
    """Nodes alike in free GPUs per group, free CPUs and memory, capacity (and co-located
    model types when a plugin looks at them) score alike, so only the first of each such
    class (in node order, which also wins score ties) is offered."""
    out = []
    seen: set = set()
    dedupe = state.dedupe_nodes
    coloc = state.dedupe_colocation
    infos = state.infos
    free_cpus, free_mem = state.free_cpus, state.free_mem
    for n in nodes:
        row = cap[n]
        if sum(row) < need or not state.fits_host(job, n, need, total):
            continue
        if dedupe:
            key = (tuple(row), free_cpus[n], free_mem[n], infos[n].group_cap,
                   infos[n].cpus, infos[n].mem_mib)
            if coloc:
                key += (tuple(tuple(sorted(m)) for m in state.colocated[n]),)
            if key in seen:
                continue
            seen.add(key)
        fitting = [g for g, free in enumerate(row) if free >= need]
        if fitting:
            for g in fitting:
                out.append(Candidate(allocs=((n, g, need),), nodes=(n,), groups=1, leaves=1))
        else:
            split = split_on_node(row, need)
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
