"""Binpack: Tetris-style multi-resource packing of GPUs, CPUs and memory.

Per chosen node, two terms (Grandl et al., Tetris, SIGCOMM'14; Volcano's binpack plugin):
alignment - the cosine between the job's demand vector and the node's free vector, so a job
goes where the free resources have its shape; and fullness - the mean utilisation of the
three resources after placement, so nodes fill up before new ones are opened.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slurm_marl.domain import Job
from slurm_marl.policy.plugins import Pure, ReadsHost, check_params
from slurm_marl.policy.state import Candidate, CycleState, per_node_share

KEY = "binpack"


def alignment(demand: Sequence[float], free: Sequence[float]) -> float:
    """Cosine between demand and free vectors (both normalised by node capacity)."""
    dot = sum(d * f for d, f in zip(demand, free))
    norm = math.sqrt(sum(d * d for d in demand)) * math.sqrt(sum(f * f for f in free))
    return dot / norm if norm > 0 else 0.0


def fullness_after(demand: Sequence[float], free: Sequence[float]) -> float:
    """Mean utilisation after placement: 1 - (free - demand), per resource."""
    return sum(1.0 - max(0.0, f - d) for d, f in zip(demand, free)) / len(demand)


def binpack_node_score(demand: Sequence[float], free: Sequence[float],
                       alignment_weight: float = 0.5) -> float:
    return alignment_weight * alignment(demand, free) \
        + (1 - alignment_weight) * fullness_after(demand, free)


class Binpack(ReadsHost, Pure):
    key = KEY

    def __init__(self, alignment_weight: float = 0.5) -> None:
        self.alignment_weight = alignment_weight

    def score(self, job: Job, cand: Candidate, state: CycleState) -> float:
        total = cand.gpus
        placed: dict[int, int] = {}
        for n, _, k in cand.allocs:
            placed[n] = placed.get(n, 0) + k
        scores = []
        for n, k in placed.items():
            info = state.infos[n]
            gcap, ccap, mcap = max(1, info.gpu_count), max(1, info.cpus), \
                max(1, info.mem_mib)
            demand = (k / gcap, per_node_share(job.cpus, k, total) / ccap,
                      per_node_share(job.mem_mib, k, total) / mcap)
            free = (sum(state.view[n]) / gcap, state.free_cpus[n] / ccap,
                    state.free_mem[n] / mcap)
            scores.append(binpack_node_score(demand, free, self.alignment_weight))
        return sum(scores) / len(scores)


def validate(params: Mapping) -> None:
    _alignment_weight(params)


def _alignment_weight(params: Mapping) -> float:
    check_params(KEY, params, {"alignment_weight": (int, float)})
    weight = float(params.get("alignment_weight", 0.5))
    if not 0 <= weight <= 1:
        raise ValueError(f"plugin {KEY!r}: alignment_weight must be in [0, 1]")
    return weight


def build(params: Mapping, **context) -> Binpack:
    return Binpack(_alignment_weight(params))
