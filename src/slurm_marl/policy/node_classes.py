"""Nodes of one cycle grouped into the classes single-node candidate generation keeps one
node of, kept up to date as the cycle claims, holds and releases GPUs.

``placement_shapes.single_node_fits`` with dedupe keeps the first node (in node order) of
each class of nodes alike in free GPUs per group, free CPUs, free memory and capacity. On a
large cluster almost every node it looks at is thrown away as a repeat, so instead of
scanning the nodes for each pending job, ``CycleState`` keeps an index: class -> its nodes,
ascending, per set of usable partition nodes; a job walks the classes (a few dozen) rather
than the nodes (thousands), and gets exactly what the scan would have returned. A pool's
classes are built once the cycle has scanned it a few times over (``SCANS_BEFORE_INDEX``):
a cycle that asks about one or two jobs scans.

The index reads the state's own ``free``, ``free_cpus`` and ``free_mem`` lists, which change
only through ``CycleState.claim``, ``hold`` and ``release_running``: those call ``touch``
with the nodes they changed.

With a coarse key (no place plugin reads hosts' free CPUs or memory: ``dedupe_host`` off),
a class is only (free GPUs per group, their sum, GPUs per group), and free CPUs and memory
are a filter: per class, the first node (in node order) with the GPUs, CPUs and memory the
job needs. Hosts whose CPU and memory use differ would otherwise make every node a class.

With co-location in the key (a place plugin reads ``colocated_by_level``: least interference,
the learned plugin's what-if), a class is also alike in the model types co-located in each
of its groups, read from the state's ``colocated`` lists. Those change only through
``claim`` and ``release_running``, which ``touch`` their nodes after changing them (claims
made before the lists are built are noted as they are built, before any class reads them).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from operator import itemgetter

from slurm_marl.placement_shapes import node_class

_first = itemgetter(0)


class NodeClasses:
    """Class -> nodes (ascending), for each pool of nodes asked about (a partition's usable
    nodes), over the capacity lists ``free``, ``free_cpus``, ``free_mem`` of one state and,
    for classes by co-location, its per node and group model types (got from the state as
    the first such classes are built)."""

    # A pool's classes are built once the scans they would replace have gone over the pool
    # this many times (building them costs a class key per node, about that much), so a
    # cycle that asks about a few jobs, as most of the simulator's do, only scans.
    SCANS_BEFORE_INDEX = 4

    def __init__(self, free: list[list[int]], free_cpus: list[int], free_mem: list[int],
                 infos: Sequence) -> None:
        self.free, self.free_cpus, self.free_mem = free, free_cpus, free_mem
        self._infos = infos
        self._colocated: list[list[list[str]]] | None = None
        # (id(pool tuple), coarse, by colocation) -> (pool, (coarse, by colocation),
        # class -> nodes ascending, node -> class)
        self._pools: dict[tuple[int, bool, bool],
                          tuple[tuple[int, ...], tuple[bool, bool],
                                dict[tuple, list[int]], dict[int, tuple]]] = {}
        # Same keys as ``_pools``, before a pool's classes are built: (pool, nodes scanned)
        self._scanned: dict[tuple[int, bool, bool], tuple[tuple[int, ...], int]] = {}
        # id(allowed tuple) -> (that tuple, its nodes as a set): a pool minus a few nodes
        self._subsets: dict[int, tuple[tuple[int, ...], frozenset[int]]] = {}

    def _key(self, n: int, kind: tuple[bool, bool]) -> tuple:
        """Node ``n``'s class (``placement_shapes.node_class``) of ``kind``: (coarse, that
        is without hosts; with co-located model types)."""
        coarse, by_colocation = kind
        return node_class(self.free[n], self.free_cpus[n], self.free_mem[n], self._infos[n],
                          not coarse, self._colocated[n] if by_colocation else None)

    def _classes(self, pool: tuple[int, ...], kind: tuple[bool, bool], asked: int,
                 colocated: Callable[[], list[list[list[str]]]] | None
                 ) -> dict[tuple, list[int]] | None:
        """The pool's classes of ``kind``; None (scan ``asked`` nodes) until the scans add
        up to ``SCANS_BEFORE_INDEX`` times the pool."""
        slot = (id(pool), *kind)
        hit = self._pools.get(slot)
        if hit is not None and hit[0] is pool:
            return hit[2]
        scanned = self._scanned.get(slot)
        done = scanned[1] if scanned is not None and scanned[0] is pool else 0
        if done < self.SCANS_BEFORE_INDEX * len(pool):
            self._scanned[slot] = (pool, done + asked)
            return None
        if colocated is not None:
            self._colocated = colocated()
        classes: dict[tuple, list[int]] = {}
        class_of: dict[int, tuple] = {}
        for n in pool:                       # ascending, so each class's list is too
            key = self._key(n, kind)
            class_of[n] = key
            classes.setdefault(key, []).append(n)
        self._pools[slot] = (pool, kind, classes, class_of)
        return classes

    def touch(self, nodes) -> None:
        """Nodes whose free GPUs, CPUs or memory, or co-located model types, changed move to
        their class now."""
        if not self._pools:
            return
        for n in nodes:
            keys: dict[tuple[bool, bool], tuple] = {}
            for _, kind, classes, class_of in self._pools.values():
                old = class_of.get(n)
                if old is None:
                    continue
                key = keys.get(kind)
                if key is None:
                    key = keys[kind] = self._key(n, kind)
                if key == old:
                    continue
                members = classes[old]
                del members[bisect_left(members, n)]
                if not members:
                    del classes[old]
                insort(classes.setdefault(key, []), n)
                class_of[n] = key

    def fits(self, pool: tuple[int, ...], nodes: tuple[int, ...], need: int, cpus: int,
             mem: int, coarse: bool = False,
             colocated: Callable[[], list[list[list[str]]]] | None = None
             ) -> list[tuple[int, list[int]]] | None:
        """``single_node_fits`` (dedupe) over ``nodes``, ascending, which are ``pool`` or a
        subset of it: per class with ``need`` GPUs, ``cpus`` CPUs and ``mem`` memory free,
        its first node in ``nodes`` and the groups holding all ``need``; in node order.
        ``coarse``: classes by GPUs alone, each giving its first node in ``nodes`` with
        ``cpus`` and ``mem`` free. ``colocated``: classes also by co-located model types,
        as this gives them (the state's per node and group lists, the same every time;
        called only to build classes: the lists cost a pass over running jobs). None when
        ``nodes`` is a small part of ``pool`` or the pool's classes are not built yet
        (``SCANS_BEFORE_INDEX``): scanning is cheaper."""
        if nodes is not pool and 2 * len(nodes) < len(pool):
            return None
        classes = self._classes(pool, (coarse, colocated is not None), len(nodes), colocated)
        if classes is None:
            return None
        allowed = None
        if nodes is not pool:
            hit = self._subsets.get(id(nodes))
            if hit is None or hit[0] is not nodes:
                hit = self._subsets[id(nodes)] = (nodes, frozenset(nodes))
            allowed = hit[1]
        out = []
        fc, fm = self.free_cpus, self.free_mem
        for key, members in classes.items():
            # key: (free per group, free GPUs, group sizes[, free CPUs, free memory, ...]
            # [, co-located models])
            if key[1] < need or (not coarse and (key[3] < cpus or key[4] < mem)):
                continue
            if allowed is None and not coarse:
                first = members[0]
            else:   # the first member allowed and (coarse) with the CPUs and memory
                first = next((n for n in members if (allowed is None or n in allowed)
                              and (not coarse or (fc[n] >= cpus and fm[n] >= mem))), None)
                if first is None:
                    continue
            out.append((first, [g for g, free in enumerate(key[0]) if free >= need]))
        out.sort(key=_first)
        return out
