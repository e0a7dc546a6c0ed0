"""Shortest remaining GPU-time first: a clairvoyant reference, never a production policy.

Reads ``duration_s`` (only the simulator knows it): remaining = duration x GPUs - attained
service, as Tiresias' ``shortest-gpu`` reference. Jobs without a duration go last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from slurm_marl.domain import Job
from slurm_marl.policy.plugins import check_params

KEY = "srtf"


def remaining_gpu_s(duration_s: float | None, num_gpus: int, attained_gpu_s: float) -> float:
    if duration_s is None:
        return math.inf
    return max(0.0, duration_s * num_gpus - attained_gpu_s)


class Srtf:
    key = KEY
    time_dependent = False
    # a running job's remaining time only falls (it moves ahead of waiting jobs, which can
    # only preempt fewer jobs); a waiting job's does not move
    settles_at_wakes = True

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        return 0, (remaining_gpu_s(job.duration_s, job.num_gpus, job.attained_gpu_s),)

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        rem = remaining_gpu_s(job.duration_s, job.num_gpus, job.attained_gpu_s)
        return "no duration known" if math.isinf(rem) else f"{rem:.0f} GPU-s remaining"

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        return None


def validate(params: Mapping) -> None:
    check_params(KEY, params, {})


def build(params: Mapping, **context) -> Srtf:
    validate(params)
    return Srtf()
