"""Which partitions the simulator's next cycle must decide, when the policy decides
partitions apart (``Policy.decides_partitions_apart``).

Where the policy's partitions cannot affect each other's decisions, a cycle decides only
the partitions in which something happened since their last cycle (an arrival, a finish, a
refused start, a prediction gate that flipped), the others having nothing new to decide.
Partitions sharing nodes are touched together; with ``reads_leaves``, a multi-node job
starting or ending on a leaf switch touches every partition there; a wake-up or a tick
touches all. The decisions are those of a cycle over every partition
(``tests/sim/test_partitions_apart.py``: the same run, job by job); without this, a cycle
costs every pending job of the cluster however few partitions changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from slurm_marl.domain import ClusterSnapshot, Node
from slurm_marl.policy.framework import Policy


class TouchedPartitions:
    """The partitions touched since the last cycle (or all of them)."""

    def __init__(self, nodes: list[Node], apart: bool, reads_leaves: bool) -> None:
        self.apart = apart                   # the policy decides partitions apart
        self.reads_leaves = reads_leaves     # its decisions read leaf-level co-location
        self.dirty: set[str] = set()
        self.all_dirty = True
        self.group_of, self.parts_on_leaf = partition_groups(nodes)

    def touch(self, partition: str) -> None:
        """Something changed in ``partition``: its next cycle decides it (and the
        partitions sharing nodes with it)."""
        group = self.group_of.get(partition)
        if group is None:
            self.all_dirty = True
        else:
            self.dirty.update(group)

    def touch_all(self) -> None:
        self.all_dirty = True

    def touch_leaves(self, leaves: Iterable) -> None:
        """Every partition with nodes under ``leaves``."""
        for leaf in leaves:
            for part in self.parts_on_leaf.get(leaf, ()):
                self.touch(part)

    def on_leaves(self, leaves: Iterable) -> set[str]:
        """The partitions with nodes under ``leaves``."""
        return {p for leaf in leaves for p in self.parts_on_leaf.get(leaf, ())}

    def decide(self, policy: Policy, snap: ClusterSnapshot, now: float,
               leaves_moved: Callable[[list], set]) -> list:
        """The cycle's decisions: of every partition, or (``apart``) of those touched since
        their last cycle. With ``reads_leaves``, a multi-node job started or preempted in
        the cycle (``leaves_moved``: the leaf switches of those of some decisions) changes
        the leaf-level co-location of every partition on its leaves: decided again with
        those in (as one cycle of them all would have)."""
        if not self.apart or self.all_dirty:
            decisions = policy.run_cycle(snap)
        else:
            policy.settle_order(snap.jobs, now)
            view = frozenset(self.dirty)
            decisions = policy.run_cycle(snap, view)
            while self.reads_leaves:
                more = self.on_leaves(leaves_moved(decisions)) - view
                if not more:
                    break
                for part in more:
                    self.touch(part)
                view = frozenset(self.dirty)
                decisions = policy.run_cycle(snap, view)
        self.decided()
        return decisions

    def decided(self) -> None:
        """A cycle decided what was touched: nothing is, until the next change."""
        self.dirty.clear()
        self.all_dirty = False


def partition_groups(nodes: list[Node]) -> tuple[dict[str, frozenset[str]],
                                                 dict[object, frozenset[str]]]:
    """(partition -> the partitions sharing nodes with it, transitively, itself included;
    leaf switch -> the partitions with nodes under it)."""
    parent: dict[str, str] = {}

    def root(p: str) -> str:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    on_leaf: dict[object, set[str]] = {}
    for node in nodes:
        parts = list(node.partitions)
        for p in parts:
            parent.setdefault(p, p)
        for p in parts[1:]:
            parent[root(p)] = root(parts[0])
        on_leaf.setdefault(node.leaf_switch, set()).update(parts)
    members: dict[str, set[str]] = {}
    for p in parent:
        members.setdefault(root(p), set()).add(p)
    group_of = {p: frozenset(members[root(p)]) for p in parent}
    return group_of, {leaf: frozenset(ps) for leaf, ps in on_leaf.items()}
