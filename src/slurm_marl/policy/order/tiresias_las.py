"""Tiresias' 2D-LAS (discretised two-dimensional least attained service).

Attained service is GPUs x seconds run. Jobs sit in K queues split by service thresholds
(default 3250 / 7200 / 18000 GPU-s, the limits in Tiresias' simulator); a job is demoted when
its service reaches its queue's limit, and lower queues yield to higher ones (preemption,
when the profile enables it). Inside a queue, running jobs keep their place ahead of waiting
ones and waiting ones go by arrival: this is what Tiresias' simulator does (it moves waiting
jobs behind running ones after every pass), and it stops jobs of one queue preempting each
other back and forth.

STARVELIMIT: a waiting job that has run before is promoted to queue 0 once it has waited
``starve_limit`` x its last run time; during the run that follows, only service from that
run counts for its queue. Fields read (the contract with whoever builds the snapshot):

* ``attained_gpu_s`` - total service so far, including the current run;
* ``start_time_s``   - start of the current (latest) run;
* ``queue_since_s``  - when the job last entered the queue (submit or requeue);
* ``last_run_s``     - length of the last finished run (0 if none).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

from slurm_marl.domain import Job
from slurm_marl.policy.plugins import PluginError, check_params

KEY = "tiresias_las"
DEFAULT_THRESHOLDS_GPU_S = (3250.0, 7200.0, 18000.0)


def queue_for_service(service_gpu_s: float, thresholds_gpu_s: Sequence[float],
                      num_queues: int) -> int:
    """Queue index for a service level: the number of thresholds reached, capped at K-1."""
    return min(bisect.bisect_right(thresholds_gpu_s, service_gpu_s), num_queues - 1)


def starvation_deadline_s(queue_since_s: float, last_run_s: float,
                          starve_limit: float) -> float:
    """When a waiting job that last ran ``last_run_s`` seconds is promoted to queue 0."""
    return queue_since_s + starve_limit * last_run_s


def las_service(job: Job, now_s: float, starve_limit: float) -> tuple[float, bool]:
    """(service that places the job in a queue, whether it holds a starvation promotion)."""
    if starve_limit > 0 and job.last_run_s > 0 and job.queue_since_s is not None:
        limit = starve_limit * job.last_run_s
        if job.is_pending:
            if now_s - job.queue_since_s >= limit:
                return 0.0, True
        elif job.is_running and job.start_time_s is not None \
                and job.start_time_s - job.queue_since_s >= limit:
            return job.num_gpus * max(0.0, now_s - job.start_time_s), True
    return job.attained_gpu_s, False


def validate_thresholds(key: str, params: Mapping) -> tuple[tuple[float, ...], int, float]:
    raw = params.get("thresholds_gpu_s", DEFAULT_THRESHOLDS_GPU_S)
    if not isinstance(raw, (list, tuple)) or not raw \
            or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in raw):
        raise PluginError(f"plugin {key!r}: thresholds_gpu_s must be a non-empty list of "
                          f"numbers, got {raw!r}")
    thresholds = tuple(float(t) for t in raw)
    if any(t <= 0 or not math.isfinite(t) for t in thresholds) \
            or any(b <= a for a, b in zip(thresholds, thresholds[1:])):
        raise PluginError(f"plugin {key!r}: thresholds_gpu_s must be positive and strictly "
                          f"increasing, got {list(thresholds)}")
    num_queues = params.get("num_queues", len(thresholds) + 1)
    if not isinstance(num_queues, int) or isinstance(num_queues, bool) \
            or not 1 <= num_queues <= len(thresholds) + 1:
        raise PluginError(f"plugin {key!r}: num_queues must be an integer in "
                          f"1..{len(thresholds) + 1}, got {num_queues!r}")
    starve = params.get("starve_limit", 0.0)
    if isinstance(starve, bool) or not isinstance(starve, (int, float)) or starve < 0:
        raise PluginError(f"plugin {key!r}: starve_limit must be a number >= 0 (0 = off), "
                          f"got {starve!r}")
    return thresholds[:num_queues - 1], num_queues, float(starve)


class TiresiasLas:
    key = KEY
    time_dependent = True

    def __init__(self, thresholds_gpu_s: Sequence[float], num_queues: int,
                 starve_limit: float, running_first: bool = True) -> None:
        self.thresholds_gpu_s = tuple(thresholds_gpu_s)
        self.num_queues = num_queues
        self.starve_limit = starve_limit
        self.running_first = running_first

    def queue_of(self, job: Job, now_s: float) -> tuple[int, float, bool]:
        service, promoted = las_service(job, now_s, self.starve_limit)
        return queue_for_service(service, self.thresholds_gpu_s, self.num_queues), \
            service, promoted

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        queue, _, _ = self.queue_of(job, now_s)
        waiting = 0 if (self.running_first and job.is_running) else 1
        return queue, (queue, waiting)

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        service, promoted = las_service(job, now_s, self.starve_limit)
        if promoted:
            return f"queue {queue}: promoted after waiting {self.starve_limit:g}x last run"
        return f"queue {queue}: {service:.0f} GPU-s attained"

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        queue, service, promoted = self.queue_of(job, now_s)
        if job.is_running:
            if queue >= self.num_queues - 1 or job.num_gpus <= 0:
                return None
            limit = self.thresholds_gpu_s[queue]
            return now_s + max(0.0, limit - service) / job.num_gpus
        if job.is_pending and not promoted and self.starve_limit > 0 and job.last_run_s > 0 \
                and job.queue_since_s is not None and queue > 0:
            return starvation_deadline_s(job.queue_since_s, job.last_run_s, self.starve_limit)
        return None


def build(params: Mapping, **context) -> TiresiasLas:
    check_params(KEY, params, {"thresholds_gpu_s": (list, tuple), "num_queues": int,
                               "starve_limit": (int, float), "running_first": bool})
    thresholds, num_queues, starve = validate_thresholds(KEY, params)
    return TiresiasLas(thresholds, num_queues, starve, params.get("running_first", True))
