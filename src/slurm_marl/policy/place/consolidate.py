"""Consolidate: fewest nodes, fewest GPU groups, one leaf, fullest first (best fit).

Like Slurm's cons_tres best fit: a job goes where it leaves the fewest free GPUs behind, so
whole groups and whole nodes stay free for large jobs; a job that needs several groups or
nodes uses as few as the cluster allows, under one leaf switch when it can.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_marl.domain import Job
from slurm_marl.policy.place._common import fill_stats, min_groups
from slurm_marl.policy.plugins import Pure, check_params
from slurm_marl.policy.state import Candidate, CycleState

KEY = "consolidate"


def consolidate_score(nodes: int, fewest_nodes: int, groups: int, fewest_groups: int,
                      leaves: int, group_left: int, group_cap: int, node_left: int,
                      node_cap: int) -> float:
    """In [0, 1]: 0.4 for the fewest nodes, 0.2 fewest groups, 0.2 one leaf, 0.2 for filling
    the chosen groups and nodes (half each)."""
    node_term = min(1.0, fewest_nodes / nodes)
    group_term = min(1.0, fewest_groups / groups)
    leaf_term = 1.0 / leaves
    fill = 0.5 * (1 - group_left / group_cap if group_cap else 1.0) \
        + 0.5 * (1 - node_left / node_cap if node_cap else 1.0)
    return 0.4 * node_term + 0.2 * group_term + 0.2 * leaf_term + 0.2 * fill


class Consolidate(Pure):
    key = KEY

    def score(self, job: Job, cand: Candidate, state: CycleState) -> float:
        if len(cand.allocs) == 1:  # one group of one node: the common case, kept cheap
            n, g, k = cand.allocs[0]
            row, info = state.view[n], state.infos[n]
            return consolidate_score(1, 1, 1, 1, 1, row[g] - k, info.group_cap[g],
                                     sum(row) - k, info.gpu_count)
        gpus = cand.gpus
        group_left, group_cap, node_left, node_cap = fill_stats(cand, state)
        return consolidate_score(len(cand.nodes), state.min_nodes(job), cand.groups,
                                 min_groups(cand, state, gpus), cand.leaves, group_left,
                                 group_cap, node_left, node_cap)

    def score_many(self, job: Job, cands: Sequence[Candidate], state: CycleState
                   ) -> list[float]:
        """``score`` of each (``JudgesMany``)."""
        score = self.score
        return [score(job, c, state) for c in cands]


def validate(params: Mapping) -> None:
    check_params(KEY, params, {})


def build(params: Mapping, **context) -> Consolidate:
    validate(params)
    return Consolidate()
