"""Spread: load balancing, the emptiest node and GPU group first.

The opposite of consolidate for small jobs: a job lands where most is still free, which
keeps per-node contention (PCIe, memory bandwidth, CPU) low at the price of fragmentation.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_marl.domain import Job
from slurm_marl.policy.place._common import fill_stats
from slurm_marl.policy.plugins import Pure, check_params
from slurm_marl.policy.state import Candidate, CycleState

KEY = "spread"


def spread_score(group_free_before: int, group_cap: int, node_free_before: int,
                 node_cap: int) -> float:
    """In [0, 1]: half the free fraction of the chosen groups, half of the chosen nodes,
    both counted before the job lands."""
    g = group_free_before / group_cap if group_cap else 0.0
    n = node_free_before / node_cap if node_cap else 0.0
    return 0.5 * g + 0.5 * n


class Spread(Pure):
    key = KEY

    def score(self, job: Job, cand: Candidate, state: CycleState) -> float:
        group_left, group_cap, node_left, node_cap = fill_stats(cand, state)
        gpus = cand.gpus
        return spread_score(group_left + gpus, group_cap, node_left + gpus, node_cap)


def validate(params: Mapping) -> None:
    check_params(KEY, params, {})


def build(params: Mapping, **context) -> Spread:
    validate(params)
    return Spread()
