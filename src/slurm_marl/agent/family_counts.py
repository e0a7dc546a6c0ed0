"""Family counts per GPU group: how many running jobs of each interference-model family
(the model's vocabulary) hold GPUs in each group. The group level of the agents' features
and the interference predictions both read them; they are counted from a snapshot, from a
cycle's co-location index, node by node for an incremental cycle, and kept live while a
cycle claims placements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_marl.agent.views import Topology
from slurm_marl.domain import ClusterSnapshot, JobState
from slurm_marl.placement_shapes import PlacementState

_HOLDING = frozenset(s for s in JobState if s.is_active)   # job states that hold GPUs


def _bincount_2d(flat: list[int], rows: int, cols: int) -> np.ndarray:
    """A float32 [rows, cols] table counting the flat indices row * cols + col."""
    return np.bincount(np.asarray(flat, dtype=np.int64), minlength=rows * cols
                       ).astype(np.float32).reshape(rows, cols)


@dataclass
class _LiveCounts:
    """Family counts per group as the cycle claims placements: the snapshot's counts, with
    a group recounted from ``CycleState.colocated`` whenever its free capacity changed (a
    claim adds a co-location entry exactly where it takes GPUs)."""

    state: PlacementState
    counts: np.ndarray
    free: np.ndarray


class FamilyCounts:
    """Counts over one vocabulary; remembers the live counts of the cycle being decided."""

    def __init__(self, vocab) -> None:
        self.vocab = vocab
        self._live: _LiveCounts | None = None

    def forget_live(self) -> None:
        self._live = None

    def state_counts(self, state: PlacementState, top: Topology) -> np.ndarray:
        """Family counts per group from the cycle's co-location index (one bincount)."""
        v = len(self.vocab)
        family = self._family_index()
        flat: list[int] = []
        for rows, groups in zip(top.state_group_rows, state.colocated):
            for row, models in zip(rows, groups):
                if models:
                    base = row * v
                    flat.extend([base + family(m) for m in models])
        return _bincount_2d(flat, top.n_groups, v)

    def _family_index(self):
        """``vocab.index`` memoised per model type (a cycle asks about few distinct ones)."""
        memo: dict = {}
        index = self.vocab.index

        def family(model_type):
            hit = memo.get(model_type)
            if hit is None:
                hit = memo[model_type] = index(model_type)
            return hit
        return family

    def recount_node(self, state: PlacementState, top: Topology, counts: np.ndarray,
                      k: int) -> None:
        index = self.vocab.index
        for g, models in enumerate(state.colocated[k]):
            row = top.state_group_rows[k][g]
            counts[row] = 0.0
            for m in models:
                counts[row, index(m)] += 1.0

    def snapshot_counts(self, snapshot: ClusterSnapshot, top: Topology) -> np.ndarray:
        """Family counts per group of the snapshot's jobs holding GPUs, each once per group
        it uses, as ``state_counts`` counts the cycle's. Reads the topology's own GPU ->
        group index (one dict lookup per GPU): this runs every cycle."""
        v = len(self.vocab)
        family = self._family_index()
        index = top.index
        node_rows, gpu_rows, group_of = (index.node_rows, index.gpu_row_by_index,
                                         index.gpu_parent_list)
        flat: list[int] = []
        for job in snapshot.jobs:
            if job.state not in _HOLDING or not job.gpu_alloc:
                continue
            fam = family(job.model_type)
            rows = set()
            for name, gpus in job.gpu_alloc:
                r = node_rows.get(name)
                if r is None:
                    continue
                lookup = gpu_rows[r]
                rows.update([group_of[lookup[g]] for g in gpus if g in lookup])
            flat.extend([row * v + fam for row in rows])
        return _bincount_2d(flat, top.n_groups, v)

    def live(self, state: PlacementState, top: Topology, free: np.ndarray,
             base: np.ndarray) -> np.ndarray:
        """Family counts per group in ``state`` as the cycle claims placements, from the
        snapshot's counts ``base``; ``free``: free GPUs per group row now."""
        live = self._live
        if live is None or live.state is not state:
            live = self._live = _LiveCounts(state, base.copy(), free)
            return live.counts
        changed = np.flatnonzero(free != live.free)
        if len(changed):
            index = self.vocab.index
            colocated = state.colocated
            for row in changed.tolist():
                k, g = top.row_state[row]
                live.counts[row] = 0.0
                for m in colocated[k][g]:
                    live.counts[row, index(m)] += 1.0
            live.free = free
        return live.counts
