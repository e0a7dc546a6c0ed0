"""What a placement agent sees: its part of the topology, the job, and every GPU group's
"what if the job landed here" numbers. Shared by the training environment and the learned
place plugin, so both build exactly the same observation from a cycle's state (the
framework's ``CycleState``, read as ``placement_shapes.PlacementState``).

Per snapshot (once per scheduling cycle): the topology featuriser's level tensors
(``agent/features.py``) restricted to each agent's rows, with the group level extended by
the count of running jobs of each model family in the group (the vocabulary of the
interference model).

Defer is valid only while no placement on offer reaches ``defer_only_below`` (0.8) of the
job's ideal speed (``speed_vs_ideal``): an agent may wait for a better spot when every spot
is poor, never when a good one is free. That keeps every policy live (a job on an idle
partition is always placed; an untrained agent that deferred everything left jobs queued
for ever with no other bound) and is the same condition under which ``las-lif`` waits; the
agent still decides whether waiting pays. With ``max_defer_s`` > 0, defer is also no longer
valid once the job has been deferred that long
(since the agent first deferred it; the caller says when) while some placement exists: a
bound on how long a policy may keep a job waiting for a better spot. The default, 0, sets
no bound, like ``las-lif``'s ``defer_below``: on a busy Philly window that rule keeps some
jobs waiting very long, and every bound tried cost average JCT there (docs/benchmarks.md,
"2.1 Why the earlier agents lost"). Counting from the job's queueing instead of its first
deferral took the choice to wait away from exactly the jobs that had queued long.

With ``clock_step_s`` > 0 the agent reads the clock in steps of that many seconds: a job's
wait (its one feature that moves with the clock alone) is counted up to the last whole step
(``clocked``), so the agent's inputs, and with them its decisions, stay the same until the
next step. That is what lets a cycle in which an agent placed a job be reused while only
the clock moves (``LearnedPlacement.reuse_horizon``); 0 reads the exact clock.

Per job: candidates come from the framework's own generator (``placement_shapes``); every GPU
group that some candidate uses is a valid action and stands for one candidate (its *anchor*
map: the candidate with the fewest groups among those that use it, first in generation
order on ties). Live features of a group then describe that candidate: free GPUs before and
after, its span (groups, nodes, leaves), the speed the interference model predicts for the
job there and the slowdown it predicts the job imposes on its new neighbours. The same two
predictions make the Harmony-style reward: ``predicted speed - imposed slowdown``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

from slurm_marl.agent.family_counts import FamilyCounts
from slurm_marl.agent.live_features import LiveFeatures, LocalCandidates
from slurm_marl.agent.predict import Predictor
from slurm_marl.agent.views import MAX_LAYOUTS, Observation, Topology, layout_key, same_layout
from slurm_marl.colocation import POOR_VS_IDEAL
from slurm_marl.domain import ClusterSnapshot, Job
from slurm_marl.models.gnn import LEVELS
from slurm_marl.models.interference import InterferenceModel
from slurm_marl.placement_shapes import (PlacementState, generate_candidates, job_shape,
                                         single_node_fit_arrays, split_on_node)
from slurm_marl.agent.features import FEATURE_NAMES, HierarchyTensors

SINGLE_AGENT = "cluster"
# A job deferred this long (since its first deferral) may no longer be deferred while any
# placement exists; 0: no bound (see the module docstring).
DEFAULT_MAX_DEFER_S = 0.0
DEFAULT_DEFER_ONLY_BELOW = POOR_VS_IDEAL
# The clock the agent reads, in steps of this many seconds (0: exact; module docstring).
DEFAULT_CLOCK_STEP_S = 0.0


def clocked(now_s: float, step_s: float) -> float:
    """``now_s`` on a clock read in steps of ``step_s`` (the last whole step; exact at 0)."""
    return math.floor(now_s / step_s) * step_s if step_s > 0 and math.isfinite(now_s) \
        else now_s


def next_step_s(now_s: float, step_s: float) -> float:
    """When a clock read in steps of ``step_s`` next moves (never at 0: it always moves)."""
    return clocked(now_s, step_s) + step_s if step_s > 0 else -math.inf

JOB_FEATURES = ("log2_gpus", "log_attained_gpu_h", "log_wait_10min", "log_pending_here",
                "free_fraction_here", "log_candidates", "log_preemptions", "ideal_speed",
                "may_defer")
LIVE_FEATURES = ("valid", "free_fraction", "log2_group_size", "node_free_fraction",
                 "fits_in_group", "left_group_fraction", "left_node_fraction",
                 "log2_cand_groups", "log2_cand_nodes", "cand_cross_leaf", "pred_speed",
                 "imposed_slowdown", "log_group_jobs", "log_node_jobs", "speed_vs_ideal")


def level_dims(vocab_size: int) -> dict[str, int]:
    dims = {level: len(FEATURE_NAMES[level]) for level in LEVELS}
    dims["gpu_group"] += vocab_size
    return dims


def job_dim(vocab_size: int) -> int:
    return len(JOB_FEATURES) + vocab_size


def feature_names(vocab: Sequence[str]) -> dict[str, tuple[str, ...]]:
    names = {level: tuple(FEATURE_NAMES[level]) for level in LEVELS}
    names["gpu_group"] += tuple(f"jobs:{f}" for f in vocab)
    names["job"] = JOB_FEATURES + tuple(f"family:{f}" for f in vocab)
    names["live"] = LIVE_FEATURES
    return names


@dataclass
class CycleFeatures:
    """Per snapshot: the level tensors of each agent (group level with family counts)."""

    snapshot: ClusterSnapshot
    tensors: HierarchyTensors
    x: dict[str, dict[str, torch.Tensor]]
    pending_by_partition: dict[str, int]
    counts: np.ndarray                 # family counts per global group row at the snapshot
    topology: "Topology | None" = None
    incremental_nodes: int | None = None   # nodes re-featurised in place (None: full)
    # Nodes whose ``counts`` hold the cycle's own claims/preemptions made before they were
    # counted (``PlacementState.colocation_changed``), not the snapshot: recounted next time.
    state_nodes: frozenset[int] = frozenset()


class Observer:
    def __init__(self, interference: InterferenceModel, agents: Sequence[str],
                 mode: str = "multi", max_defer_s: float = DEFAULT_MAX_DEFER_S,
                 defer_only_below: float = DEFAULT_DEFER_ONLY_BELOW,
                 clock_step_s: float = DEFAULT_CLOCK_STEP_S) -> None:
        if mode not in ("multi", "single"):
            raise ValueError(f"mode must be 'multi' or 'single', got {mode!r}")
        if not clock_step_s >= 0:
            raise ValueError(f"clock_step_s must be >= 0, got {clock_step_s!r}")
        self.model = interference
        self.vocab = interference.vocab
        self.agents = tuple(agents)
        self.mode = mode
        self.max_defer_s = max_defer_s
        self.defer_only_below = defer_only_below
        self.clock_step_s = float(clock_step_s)
        self.topology: Topology | None = None
        self._cycle: CycleFeatures | None = None
        self.families = FamilyCounts(self.vocab)
        # Layouts seen before, with their last cycle's features: the daemon decides one
        # partition at a time, so it alternates between the partitions' layouts.
        self._layouts: dict[tuple[str, ...], tuple[Topology, CycleFeatures | None]] = {}
        self._checked: ClusterSnapshot | None = None   # last snapshot matched to topology
        self.predictor = Predictor(interference)

    def clock(self, now_s: float) -> float:
        """``now_s`` as the agents read it (``clocked``: the last whole step)."""
        return clocked(now_s, self.clock_step_s)

    def next_clock_s(self, now_s: float) -> float:
        """When the clock this observer reads next moves (``next_step_s``)."""
        return next_step_s(now_s, self.clock_step_s)

    @property
    def n_vocab(self) -> int:
        return len(self.vocab)

    # -- per topology / per cycle ----------------------------------------------------------
    def topology_for(self, snapshot: ClusterSnapshot) -> Topology:
        """The topology of this snapshot's layout: the current one, one seen before (kept
        with its last cycle's features, for the incremental path), or a new one."""
        top = self.topology
        if self._checked is snapshot and top is not None:
            return top
        if top is None or not same_layout(top.reference, snapshot):
            if top is not None:
                self._layouts[layout_key(top.reference)] = (top, self._cycle)
            hit = self._layouts.pop(layout_key(snapshot), None)
            if hit is not None and same_layout(hit[0].reference, snapshot):
                top, self._cycle = hit
            else:
                top, self._cycle = Topology(snapshot, self.agents, self.mode), None
            self.topology = top
            self.families.forget_live()
            while len(self._layouts) > MAX_LAYOUTS:
                del self._layouts[next(iter(self._layouts))]
        self._checked = snapshot
        return top

    def cycle(self, snapshot: ClusterSnapshot, state: PlacementState | None = None
              ) -> CycleFeatures:
        """Level tensors of every agent for this snapshot (cached until the next one).

        When the previous snapshot had the same layout and only a few ``Node`` objects
        changed (the simulator reuses unchanged ones), only those nodes are re-featurised
        (``Featuriser.update_node``) and their groups' family counts recounted from the
        cycle's co-location index, with those of the nodes whose co-location this cycle or
        the last changed before the counting (a preemption before the cycle's first
        placement); otherwise everything is rebuilt."""
        if self._cycle is not None and self._cycle.snapshot is snapshot:
            return self._cycle
        top = self.topology_for(snapshot)
        prev = self._cycle
        changed = None
        with_state = state is not None and state.snapshot is snapshot
        state_nodes = frozenset(state.colocation_changed) if with_state else frozenset()
        if prev is not None and prev.topology is top and with_state:
            old = prev.snapshot.nodes
            changed = [k for k, node in enumerate(snapshot.nodes) if node is not old[k]]
            # counts to redo beyond the changed nodes: where this cycle (a preemption before
            # its first placement) or the last one changed co-location from its snapshot
            recount = sorted(set(changed) | state_nodes | prev.state_nodes)
            if len(recount) > max(16, len(old) // 20):
                changed = None
        if changed is None:
            tensors = top.featuriser.featurise(snapshot)
            counts = (self.families.state_counts(state, top) if with_state
                      else self.families.snapshot_counts(snapshot, top))
        else:
            tensors = prev.tensors
            counts = prev.counts.copy()
            for k in changed:
                tensors = top.featuriser.update_node(snapshot, snapshot.nodes[k].name)
            for k in recount:
                self.families.recount_node(state, top, counts, k)
        sizes = np.maximum(top.group_cap, 1.0)[:, None]
        group_x = torch.cat([tensors.x["gpu_group"], torch.from_numpy(counts / sizes)], dim=1)
        x = {}
        for name, view in top.views.items():
            x[name] = {level: (group_x if level == "gpu_group" else tensors.x[level])
                       [torch.from_numpy(view.rows[level])] for level in LEVELS}
        pending: dict[str, int] = {}
        for j in snapshot.jobs:
            if j.is_pending:
                pending[j.partition] = pending.get(j.partition, 0) + 1
        self._cycle = CycleFeatures(snapshot, tensors, x, pending, counts, top,
                                    None if changed is None else len(changed), state_nodes)
        return self._cycle

    @staticmethod
    def _free(state: PlacementState, top: Topology) -> np.ndarray:
        """Free GPUs per global group row in the capacity the cycle is scoring."""
        free = np.zeros(top.n_groups, dtype=np.float32)
        free[top.flat_state_rows] = np.fromiter(chain.from_iterable(state.view),
                                                dtype=np.float32,
                                                count=len(top.flat_state_rows))
        return free

    # -- per decision ----------------------------------------------------------------------
    def idle(self, agent: str, snapshot: ClusterSnapshot) -> Observation:
        """An agent with no job to place now: only defer is valid."""
        cyc = self.cycle(snapshot)
        view = self.topology_for(snapshot).views[agent]
        g = view.n_groups
        mask = torch.zeros(g + 1, dtype=torch.bool)
        mask[-1] = True
        return Observation(agent, cyc.x[agent], view.parent,
                           torch.zeros(job_dim(self.n_vocab)),
                           torch.zeros(g, len(LIVE_FEATURES)), mask)

    def observe(self, job: Job, state: PlacementState, deferred_since_s: float | None = None
                ) -> Observation | None:
        """The job's agent's observation, or None when no agent owns the job's partition.
        ``deferred_since_s``: when the agent first deferred the job (None: never).

        Valid actions are exactly the framework's candidates (``generate_candidates`` on
        ``state.view``, which the plugin being node-specific makes one per fitting group):
        single-node candidates are found with array operations, other shapes by the
        framework's generator.
        """
        snapshot = state.snapshot
        cyc = self.cycle(snapshot, state)
        top = self.topology
        agent = top.agent_for(job.partition, self.mode)
        if agent is None:
            return None
        view = top.views[agent]
        total, per_node, count = job_shape(job)
        free = self._free(state, top)
        counts = self.families.live(state, top, free, self._cycle.counts)
        node_counts = top.node_sums(counts)
        node_free = np.bincount(top.group_node, weights=free, minlength=top.n_nodes)

        single, splits, others = self._candidates(job, state, top, free, total, per_node,
                                                  count)
        rows = view.rows["gpu_group"]
        local = view.local_group
        cands = LocalCandidates.within(single, splits, others, top, local)
        need = total if per_node == 0 else per_node
        speed_s, imposed_s, speed_p, imposed_p, speed_m, imposed_m = self.predictor.predict(
            job, total, cands.single, (cands.split_cand, cands.split_row, len(cands.splits)),
            cands.others, counts, node_counts, state, top)
        ideal = self.predictor.ideal_speed(job, total, state)

        feats = LiveFeatures.base(top, rows, free, node_free, counts, node_counts, total,
                                  len(LIVE_FEATURES))
        feats.add_single(cands.single, local, top, free, node_free, need, speed_s, imposed_s)
        feats.add_splits(cands, local, top, free, node_free, need, speed_p, imposed_p)
        feats.add_others(cands, local, top, free, node_free, speed_m, imposed_m)
        live, reward, mask = feats.live, feats.reward, feats.mask
        live[:, 14] = np.where(live[:, 0] > 0, live[:, 10] / max(ideal, 1e-6), 0.0)
        mask[-1] = self._may_defer(live, mask, state.now_s, deferred_since_s)
        job_x = self._job_features(job, self.clock(state.now_s), total,
                                   ideal, cyc, free[rows],
                                   top.group_cap[rows], cands.n, mask[-1])
        return Observation(agent, cyc.x[agent], view.parent, torch.from_numpy(job_x),
                           torch.from_numpy(live), torch.from_numpy(mask), reward,
                           job.job_id, need, cands.multi_local, top.row_state[rows])

    def _may_defer(self, live: np.ndarray, mask: np.ndarray, now_s: float,
                   deferred_since_s: float | None) -> bool:
        """Whether defer stays valid (module docstring): not when a placement on offer
        reaches ``defer_only_below`` of the ideal speed, nor, with ``max_defer_s``, once
        the job has been deferred that long while some placement exists."""
        may = bool(mask[-1])
        valid = mask[:-1]
        if valid.any() and float(live[valid, 14].max()) >= self.defer_only_below - 1e-9:
            may = False
        if (self.max_defer_s > 0 and valid.any() and deferred_since_s is not None
                and now_s - deferred_since_s >= self.max_defer_s):
            may = False
        return may

    def _job_features(self, job: Job, now_s: float, total: int, ideal: float,
                      cyc: CycleFeatures, free_here: np.ndarray, cap: np.ndarray,
                      n_cands: int, may_defer: bool) -> np.ndarray:
        """The job's own features (``JOB_FEATURES``) and its model family, one-hot."""
        wait = now_s - (job.queue_since_s if job.queue_since_s is not None
                        else job.submit_time_s)
        job_x = np.zeros(job_dim(self.n_vocab), dtype=np.float32)
        here_cap = float(cap.sum())
        job_x[:len(JOB_FEATURES)] = (
            math.log2(max(1, total)), math.log1p(max(0.0, job.attained_gpu_s) / 3600.0),
            math.log1p(max(0.0, wait) / 600.0),
            math.log1p(cyc.pending_by_partition.get(job.partition, 0)),
            float(free_here.sum()) / here_cap if here_cap else 0.0,
            math.log1p(n_cands), math.log1p(job.preemptions), ideal, float(may_defer))
        job_x[len(JOB_FEATURES) + self.vocab.index(job.model_type)] = 1.0
        return job_x

    @staticmethod
    def _candidates(job: Job, state: PlacementState, top: Topology, free: np.ndarray,
                    total: int, per_node: int, count: int
                    ) -> tuple[np.ndarray, list[tuple], list[tuple]]:
        """(global rows of single-group candidates, allocs of splits over one node's groups,
        allocs of the other candidates): the framework's candidates on ``state.view`` without
        node dedupe (for a single-node shape, ``single_node_fit_arrays`` on the job's allowed
        nodes, else ``generate_candidates``). ``free``: ``_free(state, top)``."""
        none = np.zeros(0, dtype=np.int64)
        if total <= 0:
            return none, [], []
        if per_node and count > 1:
            return none, [], [c.allocs for c in generate_candidates(job, state, state.view)]
        need = total if per_node == 0 else per_node
        fits, split_nodes = single_node_fit_arrays(
            job, state, free[top.flat_state_rows], top.flat_state_node,
            state.allowed_nodes(job), need, total)
        single = top.flat_state_rows[fits]
        by_free: dict[tuple, tuple] = {}   # nodes alike in free GPUs split alike
        splits = []
        for n in split_nodes.tolist():
            row = tuple(state.view[n])
            split = by_free.get(row)
            if split is None:
                split = by_free[row] = split_on_node(row, need)
            splits.append(tuple((n, g, k) for g, k in split))
        if not len(single) and not splits and per_node == 0:
            return none, [], [c.allocs for c in generate_candidates(job, state, state.view)]
        return single, splits, []
