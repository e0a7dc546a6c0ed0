"""Tiresias' 2D-Gittins: 2D-LAS queues, and inside a queue the highest Gittins index first.

The Gittins index of a job that has attained ``a`` GPU-s, for a service quantum ``delta``,
over the job-size distribution S fitted from history:

    G(a) = P(S - a <= delta | S > a) / E[min(S - a, delta) | S > a]

i.e. the chance of finishing within the next quantum per GPU-s spent trying. The default
history is the GPU-time sample Tiresias ships (``traces/tiresias_yarn_gput1000.csv``).
Tiresias' own simulator computes E as E[min(S, a + delta)] (absolute sizes instead of the
remaining service); this plugin uses the textbook definition (see docs/simulator.md).

Like Tiresias, running jobs are re-ranked with the rest of their queue at every cycle, so a
waiting job with a higher index preempts a running one (``running_first = false``). With a
restart cost this can thrash (the index of a job that just started may fall below a waiting
one's and back); ``running_first = true`` keeps running jobs ahead of waiting ones of the
same queue, as 2D-LAS does, and lets the index order only the waiting jobs.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Mapping, Sequence
from itertools import accumulate
from pathlib import Path

from slurm_marl.domain import Job
from slurm_marl.policy.order.tiresias_las import (las_service, queue_for_service,
                                                  starvation_deadline_s, validate_thresholds)
from slurm_marl.policy.plugins import PluginError, check_params

KEY = "tiresias_gittins"
DEFAULT_SAMPLES = "traces/tiresias_yarn_gput1000.csv"


def gittins_index(sizes_sorted: Sequence[float], prefix_sums: Sequence[float],
                  attained: float, delta: float) -> float:
    """Gittins index at attained service ``attained``; 0 once past every known size.

    ``prefix_sums[i]`` is the sum of the i smallest sizes (length n + 1).
    """
    n = len(sizes_sorted)
    lo = bisect.bisect_right(sizes_sorted, attained)
    alive = n - lo
    if alive <= 0:
        return 0.0
    hi = bisect.bisect_right(sizes_sorted, attained + delta)
    finishing = hi - lo
    expected = (prefix_sums[hi] - prefix_sums[lo] - attained * finishing
                + delta * (n - hi)) / alive
    return (finishing / alive) / expected if expected > 0 else math.inf


def read_gpu_time_samples(path: Path) -> list[float]:
    """GPU-time samples from a CSV with a ``duration`` (or ``gpu_time``) column."""
    out: list[float] = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            fields = reader.fieldnames or []
            column = next((c for c in ("gpu_time", "duration", "gpu_time_s") if c in fields),
                          None)
            if column is None:
                raise PluginError(f"{path}: needs a 'duration' or 'gpu_time' column, "
                                  f"found {fields}")
            for row in reader:
                try:
                    value = float(row[column])
                except (TypeError, ValueError):
                    raise PluginError(f"{path}:{reader.line_num}: {column}={row[column]!r} "
                                      f"is not a number") from None
                if value < 0 or not math.isfinite(value):
                    raise PluginError(f"{path}:{reader.line_num}: {column} must be >= 0")
                out.append(value)
    except OSError as exc:
        raise PluginError(f"cannot read GPU-time samples {path}: {exc}") from None
    if not out:
        raise PluginError(f"{path}: no GPU-time samples")
    return out


class TiresiasGittins:
    key = KEY
    time_dependent = True

    def __init__(self, samples: Sequence[float], delta_gpu_s: float,
                 thresholds_gpu_s: Sequence[float], num_queues: int,
                 starve_limit: float, running_first: bool = False) -> None:
        self.sizes = tuple(sorted(float(s) for s in samples))
        self.prefix = tuple(accumulate(self.sizes, initial=0.0))
        self.delta_gpu_s = delta_gpu_s
        self.thresholds_gpu_s = tuple(thresholds_gpu_s)
        self.num_queues = num_queues
        self.starve_limit = starve_limit
        self.running_first = running_first

    def index(self, service_gpu_s: float) -> float:
        return gittins_index(self.sizes, self.prefix, service_gpu_s, self.delta_gpu_s)

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        service, _ = las_service(job, now_s, self.starve_limit)
        queue = queue_for_service(service, self.thresholds_gpu_s, self.num_queues)
        waiting = 0 if (self.running_first and job.is_running) else 1
        return queue, (queue, waiting, -self.index(service))

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        service, _ = las_service(job, now_s, self.starve_limit)
        return f"queue {queue}: Gittins index {self.index(service) * 1e6:.3g}e-6 " \
               f"at {service:.0f} GPU-s"

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        service, promoted = las_service(job, now_s, self.starve_limit)
        if job.is_running and job.num_gpus > 0:
            # The index also drifts between events; like Tiresias, re-rank on events and
            # at queue thresholds only.
            marks = [t for t in self.thresholds_gpu_s if t > service]
            if marks:
                return now_s + (min(marks) - service) / job.num_gpus
            return None
        if job.is_pending and not promoted and self.starve_limit > 0 and job.last_run_s > 0 \
                and job.queue_since_s is not None:
            return starvation_deadline_s(job.queue_since_s, job.last_run_s, self.starve_limit)
        return None


def validate(params: Mapping) -> None:
    _settings(params)


def _settings(params: Mapping) -> tuple:
    """(samples given inline or the file to read them from, delta, thresholds, number of
    queues, starve limit) from checked parameters; no file is read."""
    check_params(KEY, params, {"thresholds_gpu_s": (list, tuple), "num_queues": int,
                               "starve_limit": (int, float), "delta_gpu_s": (int, float),
                               "samples_path": str, "gpu_time_samples": (list, tuple),
                               "running_first": bool})
    thresholds, num_queues, starve = validate_thresholds(KEY, params)
    delta = params.get("delta_gpu_s", 3250.0)
    if delta <= 0:
        raise PluginError(f"plugin {KEY!r}: delta_gpu_s must be > 0, got {delta!r}")
    if "gpu_time_samples" in params:
        source = list(params["gpu_time_samples"])
        if not source or not all(isinstance(s, (int, float)) and s >= 0 for s in source):
            raise PluginError(f"plugin {KEY!r}: gpu_time_samples must be numbers >= 0")
    else:
        path = params.get("samples_path")
        if path is None:
            from slurm_marl.shared_data import DataNotFound, data_file
            try:
                source = data_file(DEFAULT_SAMPLES)
            except DataNotFound as exc:
                raise PluginError(f"plugin {KEY!r}: no samples_path given and the default "
                                  f"history is unavailable: {exc}") from None
        else:
            source = Path(path).expanduser()
    return source, float(delta), thresholds, num_queues, starve


def build(params: Mapping, **context) -> TiresiasGittins:
    source, delta, thresholds, num_queues, starve = _settings(params)
    samples = source if isinstance(source, list) else read_gpu_time_samples(source)
    return TiresiasGittins(samples, delta, thresholds, num_queues, starve,
                           params.get("running_first", False))
