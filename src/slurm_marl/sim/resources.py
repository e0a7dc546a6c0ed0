"""The simulated cluster's resources: which GPU slots, CPUs and memory of each node are
taken, which running jobs sit where (for co-location), and the ``Node`` objects a snapshot
shows for them.

A placement takes GPUs from the named groups, lowest free indices first, and each node's
CPUs and memory in proportion to the GPUs the job holds there. With GPU sharing
(``share=K``) a job of the trace's ``gpu_fraction`` f takes max(1, round(f x K)) slots of
one physical GPU (``same_gpu``, see ``sim.jobs``): the slots of the GPU of the named group
with the most free slots; a placement no single GPU can hold is refused (the job stays
pending), as Slurm allocates a job's shards of a node from one GPU.

Speed: a node's ``Node`` object is rebuilt only when its GPUs change, so the snapshot
reuses every other one.
"""

from __future__ import annotations

import math

from slurm_marl.colocation import ColocationIndex
from slurm_marl.domain import Node, Place
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.jobs import SimJob, SimulationError

# (node index, position of the GPU group on the node, the GPU slots taken there)
Alloc = tuple[int, int, tuple[int, ...]]


class ClusterResources:
    """What is taken on each node of ``cluster``, and the nodes as the policy sees them."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.sharing = any(p.share > 1 for p in cluster.partitions_spec)
        self.nodes: list[Node] = list(cluster.nodes)
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.group_pos = [{g.index: p for p, g in enumerate(n.gpu_groups)} for n in self.nodes]
        self.used: list[set[int]] = [set() for _ in self.nodes]
        self.alloc_cpus = [0] * len(self.nodes)
        self.alloc_mem = [0] * len(self.nodes)
        self.leaf = [n.leaf_switch for n in self.nodes]
        self.free_slots = sum(n.gpu_count for n in self.nodes)
        self.total_slots = self.free_slots
        # Running jobs by where they hold GPUs (physical GPUs as (node, GPU) with sharing).
        self.coloc = ColocationIndex([[g.gpu_count for g in n.gpu_groups] for n in self.nodes],
                                     self.leaf)
        self.snapshot_nodes: tuple[Node, ...] = tuple(self.nodes)

    def take(self, j: SimJob, place: Place) -> tuple[list[Alloc], list[int]] | None:
        """Take what ``place`` gives job ``j``: (its allocations, the nodes touched); None
        when a same-GPU job cannot have its slots on one physical GPU there (refused before
        anything changed). A placement the cluster cannot hold is a ``SimulationError``."""
        chosen = self._slots(j, place)
        if chosen is None:
            return None
        allocs, per_node = chosen
        for n, _, take in allocs:
            self.used[n].update(take)
        if j.gpus_per_node and any(k != j.gpus_per_node for k in per_node.values()):
            raise SimulationError(f"policy split job {j.job_id} as {per_node}, it asks for "
                                  f"{j.gpus_per_node} GPUs on each of {j.node_count} nodes")
        for n, k in per_node.items():
            self.alloc_cpus[n] += math.ceil(j.cpus * k / j.num_gpus)
            self.alloc_mem[n] += math.ceil(j.mem_mib * k / j.num_gpus)
        self.free_slots -= j.num_gpus
        self.coloc.add(j.job_id, j.model_type, [(n, g, len(t)) for n, g, t in allocs],
                       self._physical(allocs) if self.sharing else ())
        touched = list(per_node)
        for n in touched:
            self._refresh_node(n)
        return allocs, touched

    def _slots(self, j: SimJob, place: Place) -> tuple[list[Alloc], dict[int, int]] | None:
        """The slots ``place`` names for ``j`` and the GPUs it takes per node, checked
        against what is free (None: a same-GPU job refused)."""
        allocs: list[Alloc] = []
        per_node: dict[int, int] = {}
        taken: dict[int, set[int]] = {}
        for a in place.allocs:
            n = self.node_index.get(a.node)
            if n is None or a.group not in self.group_pos[n]:
                raise SimulationError(f"policy placed job {j.job_id} on unknown "
                                      f"{a.node} group {a.group}")
            if j.partition not in self.nodes[n].partitions:
                raise SimulationError(f"policy placed job {j.job_id} (partition "
                                      f"{j.partition}) on {a.node}")
            pos = self.group_pos[n][a.group]
            group = self.nodes[n].gpu_groups[pos]
            busy = taken.setdefault(n, set())
            free = [i for i in group.gpu_indices if i not in self.used[n] and i not in busy]
            if len(free) < a.gpus:
                raise SimulationError(f"policy placed {a.gpus} GPUs of job {j.job_id} on "
                                      f"{a.node} group {a.group}, which has {len(free)} free")
            take = tuple(free[:a.gpus])
            if j.same_gpu:
                take = (self.cluster.one_gpu_slots(self.nodes[n].name, free, a.gpus)
                        if len(place.allocs) == 1 else None)
                if take is None:
                    return None
            busy.update(take)
            allocs.append((n, pos, take))
            per_node[n] = per_node.get(n, 0) + a.gpus
        return allocs, per_node

    def release(self, j: SimJob) -> list[int]:
        """Give back everything the running job ``j`` holds; the nodes touched."""
        per_node = {n for n, _, _ in j.allocs}
        for n, _, gpus in j.allocs:
            self.used[n].difference_update(gpus)
        counts: dict[int, int] = {}
        for n, _, gpus in j.allocs:
            counts[n] = counts.get(n, 0) + len(gpus)
        for n, k in counts.items():
            self.alloc_cpus[n] -= math.ceil(j.cpus * k / j.num_gpus)
            self.alloc_mem[n] -= math.ceil(j.mem_mib * k / j.num_gpus)
        self.coloc.remove(j.job_id)
        self.free_slots += j.num_gpus
        for n in per_node:
            self._refresh_node(n)
        return list(per_node)

    def _node_obj(self, n: int) -> Node:
        """Node ``n`` as it is now: the cluster's node with its usage written into a copy's
        ``__dict__`` (a frozen dataclass; cheaper than ``dataclasses.replace`` on every
        start and stop)."""
        base = self.cluster.nodes[n]
        new = object.__new__(Node)
        d = new.__dict__
        d.update(base.__dict__)
        d["used_gpu_indices"] = frozenset(self.used[n])
        d["alloc_cpus"] = self.alloc_cpus[n]
        d["alloc_memory_mib"] = self.alloc_mem[n]
        d["state"] = "ALLOCATED" if self.used[n] else "IDLE"
        return new

    def _refresh_node(self, n: int) -> None:
        self.nodes[n] = self._node_obj(n)
        nodes = list(self.snapshot_nodes)
        nodes[n] = self.nodes[n]
        self.snapshot_nodes = tuple(nodes)

    def _physical(self, allocs: list[Alloc]) -> list[tuple[int, int]]:
        """(node, physical GPU) of the slots of ``allocs``, each once (two slots of one GPU
        share it with the same jobs)."""
        keys: dict[tuple[int, int], None] = {}
        for n, _, gpus in allocs:
            name = self.nodes[n].name
            for gpu in gpus:
                keys[(n, self.cluster.physical_gpu(name, gpu))] = None
        return list(keys)
