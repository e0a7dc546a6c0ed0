"""The live part of an observation (``agent/observe.py``): which of an agent's GPU groups
stand for which candidate, and each group's "what if the job landed here" features.

Candidates come in three kinds, kept apart because they are featurised apart: single-group
candidates (global group rows, handled with array operations), splits over the groups of
one node (flattened to one entry per group), and the other shapes (multi-node, handled one
by one). A group used by several multi-group candidates stands for the one with the fewest
groups, first in generation order on ties (``multi_local``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from slurm_marl.agent.views import Topology


@dataclass
class LocalCandidates:
    """The job's candidates within one agent's groups (``local``: global group row to the
    agent's row, negative outside it)."""

    single: np.ndarray                       # global rows of single-group candidates
    splits: list[tuple]                      # splits over one node's groups, kept
    split_cand: np.ndarray                   # per split group: its split's index
    split_row: np.ndarray                    # per split group: its global row
    split_gpus: np.ndarray                   # per split group: GPUs it takes
    others: list[tuple[tuple, list[int]]]    # (allocs, global rows) of the other shapes
    multi_local: dict[int, tuple]            # local row -> the multi-group candidate it stands for

    @classmethod
    def within(cls, single: np.ndarray, splits: list[tuple], others: list[tuple],
               top: Topology, local: np.ndarray) -> LocalCandidates:
        """The candidates whose groups all lie in the agent's view."""
        single = single[local[single] >= 0]
        kept, sp_cand, sp_row, sp_k = [], [], [], []
        for allocs in splits:
            grows = [top.state_group_rows[n][g] for n, g, _ in allocs]
            if local[grows[0]] < 0:
                continue
            c = len(kept)
            kept.append(allocs)
            sp_cand.extend([c] * len(allocs))
            sp_row.extend(grows)
            sp_k.extend(k for _, _, k in allocs)
        multi_local: dict[int, tuple] = {}
        for c, row in zip(sp_cand, sp_row):
            multi_local[int(local[row])] = kept[c]
        other_rows: list[tuple[tuple, list[int]]] = []
        for allocs in others:
            grows = [top.state_group_rows[n][g] for n, g, _ in allocs]
            locs = [int(local[r]) for r in grows]
            if min(locs) < 0:
                continue
            other_rows.append((allocs, grows))
            for lg in locs:
                prev = multi_local.get(lg)
                if prev is None or len(allocs) < len(prev):
                    multi_local[lg] = allocs
        return cls(single, kept, np.array(sp_cand, dtype=np.int64),
                   np.array(sp_row, dtype=np.int64), np.array(sp_k, dtype=np.float32),
                   other_rows, multi_local)

    @property
    def n(self) -> int:
        return len(self.single) + len(self.splits) + len(self.others)


@dataclass
class LiveFeatures:
    """Per agent group: the live features (``observe.LIVE_FEATURES``), the reward of
    placing the job there, and the action mask (defer last, valid until ruled out)."""

    live: np.ndarray
    reward: np.ndarray
    mask: np.ndarray

    @classmethod
    def base(cls, top: Topology, rows: np.ndarray, free: np.ndarray, node_free: np.ndarray,
             counts: np.ndarray, node_counts: np.ndarray, total: int,
             n_features: int) -> LiveFeatures:
        """The features every group has, candidate or not: free shares, size, whether the
        job fits in it, the jobs running in it and on its node."""
        g_count = len(rows)
        live = np.zeros((g_count, n_features), dtype=np.float32)
        cap = top.group_cap[rows]
        nrow = top.group_node[rows]
        ncap = top.node_cap[nrow]
        live[:, 1] = np.divide(free[rows], cap, out=np.zeros_like(cap), where=cap > 0)
        live[:, 2] = np.log2(np.maximum(cap, 1.0))
        live[:, 3] = np.divide(node_free[nrow], ncap, out=np.zeros_like(ncap), where=ncap > 0)
        live[:, 4] = free[rows] >= total
        group_jobs = counts[rows].sum(1)
        live[:, 12] = np.log1p(group_jobs)
        live[:, 13] = np.log1p(node_counts[nrow].sum(1) - group_jobs)
        mask = np.zeros(g_count + 1, dtype=bool)
        mask[-1] = True
        return cls(live, np.zeros(g_count, dtype=np.float32), mask)

    def add_single(self, single: np.ndarray, local: np.ndarray, top: Topology,
                   free: np.ndarray, node_free: np.ndarray, need: int,
                   speed: np.ndarray, imposed: np.ndarray) -> None:
        """Single-group candidates: what is left in the group and its node, the predicted
        speed and imposed slowdown."""
        if not len(single):
            return
        live = self.live
        ls = local[single]
        live[ls, 0] = 1.0
        live[ls, 5] = (free[single] - need) / np.maximum(top.group_cap[single], 1.0)
        nr = top.group_node[single]
        live[ls, 6] = (node_free[nr] - need) / np.maximum(top.node_cap[nr], 1.0)
        live[ls, 10] = speed
        live[ls, 11] = imposed
        self.reward[ls] = speed - imposed
        self.mask[ls] = True

    def add_splits(self, cands: LocalCandidates, local: np.ndarray, top: Topology,
                   free: np.ndarray, node_free: np.ndarray, need: int,
                   speed: np.ndarray, imposed: np.ndarray) -> None:
        """Splits over one node's groups: each group of a split, with its split's span."""
        sp_cand, sp_row, sp_k = cands.split_cand, cands.split_row, cands.split_gpus
        if not len(sp_row):
            return
        live = self.live
        ls = local[sp_row]
        nr = top.group_node[sp_row]
        n_groups = np.bincount(sp_cand, minlength=len(cands.splits))[sp_cand]
        live[ls, 0] = 1.0
        live[ls, 5] = (free[sp_row] - sp_k) / np.maximum(top.group_cap[sp_row], 1.0)
        live[ls, 6] = (node_free[nr] - need) / np.maximum(top.node_cap[nr], 1.0)
        live[ls, 7] = np.log2(n_groups)
        live[ls, 10] = speed[sp_cand]
        live[ls, 11] = imposed[sp_cand]
        self.reward[ls] = speed[sp_cand] - imposed[sp_cand]
        self.mask[ls] = True

    def add_others(self, cands: LocalCandidates, local: np.ndarray, top: Topology,
                   free: np.ndarray, node_free: np.ndarray,
                   speed: np.ndarray, imposed: np.ndarray) -> None:
        """The other shapes: each group that stands for one (``multi_local``), with the
        candidate's span over groups, nodes and leaves."""
        live = self.live
        for i, (allocs, grows) in enumerate(cands.others):
            nodes = {top.group_node[r] for r in grows}
            leaves = {top.node_leaf[n] for n in nodes}
            for (n, g, k), row in zip(allocs, grows):
                lg = int(local[row])
                if cands.multi_local.get(lg) is not allocs:
                    continue
                node = top.group_node[row]
                take_node = sum(kk for (_, _, kk), rr in zip(allocs, grows)
                                if top.group_node[rr] == node)
                live[lg, 0] = 1.0
                live[lg, 5] = (free[row] - k) / max(float(top.group_cap[row]), 1.0)
                live[lg, 6] = (node_free[node] - take_node) / max(float(top.node_cap[node]),
                                                                  1.0)
                live[lg, 7] = math.log2(len(allocs))
                live[lg, 8] = math.log2(len(nodes))
                live[lg, 9] = float(len(leaves) > 1)
                live[lg, 10] = speed[i]
                live[lg, 11] = imposed[i]
                self.reward[lg] = speed[i] - imposed[i]
                self.mask[lg] = True
