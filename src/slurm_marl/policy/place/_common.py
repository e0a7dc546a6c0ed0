"""Numbers place plugins share: what a candidate leaves free where it lands."""

from __future__ import annotations

import math

from slurm_marl.policy.state import Candidate, CycleState


def fill_stats(cand: Candidate, state: CycleState) -> tuple[int, int, int, int]:
    """(GPUs left free in the chosen groups, their capacity, GPUs left free on the chosen
    nodes, their capacity), against the capacity the cycle is scoring (``state.view``)."""
    view = state.view
    infos = state.infos
    group_left = group_cap = 0
    placed_on: dict[int, int] = {}
    for n, g, k in cand.allocs:
        group_left += view[n][g] - k
        group_cap += infos[n].group_cap[g]
        placed_on[n] = placed_on.get(n, 0) + k
    node_left = node_cap = 0
    for n, k in placed_on.items():
        node_left += sum(view[n]) - k
        node_cap += infos[n].gpu_count
    return group_left, group_cap, node_left, node_cap


def min_groups(cand: Candidate, state: CycleState, gpus: int) -> int:
    """The fewest GPU groups the job's GPUs could occupy on the chosen nodes."""
    largest = max(max(state.infos[n].group_cap) for n in cand.nodes)
    return max(len(cand.nodes), math.ceil(gpus / largest)) if largest else 1
