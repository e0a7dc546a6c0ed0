"""FIFO: jobs start in submit order (the framework breaks ties by submit time, then id)."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_marl.domain import Job
from slurm_marl.policy.plugins import check_params

KEY = "fifo"


class Fifo:
    key = KEY
    time_dependent = False
    settles_at_wakes = True

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        return 0, ()

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        return "FIFO by submit time"

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        return None


def validate(params: Mapping) -> None:
    check_params(KEY, params, {})


def build(params: Mapping, **context) -> Fifo:
    validate(params)
    return Fifo()
