"""What depends only on a cluster's layout, for the placement agents: each agent's rows of
the topology (``AgentView``), the layout-wide index between the featuriser's rows and a
cycle's node table (``Topology``, built once per layout), and ``Observation``, one agent's
view of one decision with the map from its group actions to candidate placements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import torch

from slurm_marl.domain import ClusterSnapshot
from slurm_marl.agent.features import Featuriser
from slurm_marl.topology.sources import hierarchy_index


@dataclass
class AgentView:
    """One agent's rows of each level (global row numbers, ascending) and local parents."""

    name: str
    rows: dict[str, np.ndarray]
    parent: dict[str, torch.Tensor]
    local_group: np.ndarray            # global group row -> local index, -1 outside

    @property
    def n_groups(self) -> int:
        return len(self.rows["gpu_group"])


def agent_view(name: str, node_rows: np.ndarray, index) -> AgentView:
    node_rows = np.unique(node_rows)
    group_parent, gpu_parent = index.parent["gpu_group"], index.parent["gpu"]
    groups = np.flatnonzero(np.isin(group_parent, node_rows))
    gpus = np.flatnonzero(np.isin(gpu_parent, groups))
    leaves = np.unique(index.parent["node"][node_rows])
    spines = np.unique(index.parent["leaf"][leaves])
    rows = {"gpu": gpus, "gpu_group": groups, "node": node_rows, "leaf": leaves,
            "spine": spines}
    parent = {
        "gpu": np.searchsorted(groups, gpu_parent[gpus]),
        "gpu_group": np.searchsorted(node_rows, group_parent[groups]),
        "node": np.searchsorted(leaves, index.parent["node"][node_rows]),
        "leaf": np.searchsorted(spines, index.parent["leaf"][leaves]),
    }
    local = np.full(len(group_parent), -1, dtype=np.int64)
    local[groups] = np.arange(len(groups))
    return AgentView(name, rows, {k: torch.from_numpy(v.astype(np.int64))
                                  for k, v in parent.items()}, local)


def same_layout(a: ClusterSnapshot, b: ClusterSnapshot) -> bool:
    """Same nodes in the same order with the same partitions, leaves and GPU groups."""
    if len(a.nodes) != len(b.nodes):
        return False
    for x, y in zip(a.nodes, b.nodes):
        if x is y:
            continue
        if x.name != y.name or x.partitions != y.partitions or \
                x.leaf_switch != y.leaf_switch or not (x.gpu_groups is y.gpu_groups
                                                       or x.gpu_groups == y.gpu_groups):
            return False
    return (a.switches is b.switches or a.switches == b.switches)


MAX_LAYOUTS = 8   # layouts kept besides the current one (one per partition in the daemon)


def layout_key(snapshot: ClusterSnapshot) -> tuple[str, ...]:
    return tuple(n.name for n in snapshot.nodes)


class Topology:
    """Everything that depends only on the cluster's layout: built once, reused per cycle."""

    def __init__(self, snapshot: ClusterSnapshot, agents: Sequence[str], mode: str) -> None:
        self.reference = snapshot
        # (the index alone: the networkx graph, sockets and GPUs included, is not needed)
        self.featuriser = Featuriser(hierarchy_index(snapshot=snapshot))
        index = self.featuriser.index
        self.index = index
        group_row = {name: i for i, name in enumerate(index.names["gpu_group"])}
        # Group rows in CycleState order: node k of snapshot.nodes, group position g.
        self.state_group_rows: list[list[int]] = [
            [group_row[f"{n.name}/g{grp.index}"] for grp in n.gpu_groups]
            for n in snapshot.nodes]
        self.flat_state_rows = np.array(list(chain.from_iterable(self.state_group_rows)),
                                        dtype=np.int64)
        # The inverse: per global group row, its (node, group position) in CycleState.
        self.row_state = np.zeros((len(index.names["gpu_group"]), 2), dtype=np.int64)
        self.flat_state_node = np.zeros(len(self.flat_state_rows), dtype=np.int64)
        flat = 0
        for k, rows in enumerate(self.state_group_rows):
            for g, row in enumerate(rows):
                self.row_state[row] = (k, g)
                self.flat_state_node[flat] = k
                flat += 1
        self.group_node = index.parent["gpu_group"]
        self.node_leaf = index.parent["node"]
        self.n_groups = len(index.names["gpu_group"])
        self.n_nodes = len(index.names["node"])
        self.n_leaves = len(index.names["leaf"])
        self.group_cap = index.group_size.astype(np.float32)
        self.node_cap = np.bincount(self.group_node, weights=self.group_cap,
                                    minlength=self.n_nodes).astype(np.float32)
        # Groups are contiguous per node (rows ordered by node): per-node sums are one
        # ``reduceat`` over the nodes that have groups.
        self._with_groups = np.flatnonzero(index.node_group_end > index.node_group_start)
        self._group_starts = index.node_group_start[self._with_groups]
        self.views: dict[str, AgentView] = {}
        if mode == "single":
            self.views[agents[0]] = agent_view(agents[0], np.arange(self.n_nodes), index)
        else:
            for name in agents:
                rows = [index.node_rows[n.name] for n in snapshot.nodes if name in n.partitions]
                if rows:
                    self.views[name] = agent_view(name, np.array(rows, dtype=np.int64), index)

    def node_sums(self, per_group: np.ndarray) -> np.ndarray:
        """Rows of ``per_group`` (one per global group row) summed per node."""
        out = np.zeros((self.n_nodes,) + per_group.shape[1:], dtype=per_group.dtype)
        if len(self._with_groups):
            out[self._with_groups] = np.add.reduceat(per_group, self._group_starts, axis=0)
        return out

    def agent_for(self, partition: str, mode: str) -> str | None:
        if mode == "single":
            return next(iter(self.views), None)
        return partition if partition in self.views else None


@dataclass
class Observation:
    """One agent's view of one decision, plus what the caller needs to act on it.

    Valid group actions stand for candidate placements: ``allocs_for(group)`` gives the
    candidate's allocs (as ``Candidate.allocs``: (node, group position, GPUs) in
    ``CycleState`` order); ``group_for(allocs)`` the group action that stands for it.
    """

    agent: str
    x: dict[str, torch.Tensor]
    parent: dict[str, torch.Tensor]
    job: torch.Tensor          # [J]
    live: torch.Tensor         # [G, L]
    mask: torch.Tensor         # bool [G + 1], defer last
    reward: np.ndarray | None = None                  # per local group
    job_id: int | None = None
    need: int = 0                                     # GPUs of a single-group candidate
    multi: dict[int, tuple] = field(default_factory=dict)   # group -> allocs (2+ groups)
    state_of_group: np.ndarray | None = None          # local group -> (node, group pos)

    @property
    def defer_action(self) -> int:
        return int(self.mask.shape[0]) - 1

    def valid_groups(self) -> list[int]:
        return torch.nonzero(self.mask[:-1]).flatten().tolist()

    def allocs_for(self, group: int) -> tuple:
        if not (0 <= group < self.defer_action) or not bool(self.mask[group]):
            raise ValueError(f"action {group} is masked for job {self.job_id} (valid: "
                             f"{self.valid_groups()} and defer {self.defer_action})")
        hit = self.multi.get(group)
        if hit is not None:
            return hit
        n, g = self.state_of_group[group]
        return ((int(n), int(g), self.need),)

    def group_for(self, allocs: tuple) -> int | None:
        """The valid group action standing for candidate ``allocs`` (lowest group first)."""
        for group, a in sorted(self.multi.items()):
            if a == allocs:
                return group
        if len(allocs) == 1 and allocs[0][2] == self.need:
            n, g, _ = allocs[0]
            hits = np.flatnonzero((self.state_of_group[:, 0] == n)
                                  & (self.state_of_group[:, 1] == g))
            if len(hits) and bool(self.mask[int(hits[0])]) and int(hits[0]) not in self.multi:
                return int(hits[0])
        return None
