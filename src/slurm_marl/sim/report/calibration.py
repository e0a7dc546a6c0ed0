"""Calibration: the simulated starts of Slurm alone's stand-in against the starts sacct
recorded (the package docstring says how), and the GPUs busy over time both ways."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_marl.history.records import HistoryJob
from slurm_marl.sim.metrics import percentile
from slurm_marl.sim.report.site import SiteTrace
from slurm_marl.sim.run import SimRun

TOLERANCE_SHARE, TOLERANCE_FLOOR_S = 0.10, 60.0
WORST_STARTS = 5
BUSY_BINS = 120        # time bins of the GPUs-busy series


@dataclass(frozen=True)
class _Start:
    job: HistoryJob
    partition: str
    recorded_wait_s: float
    simulated_wait_s: float
    error_s: float                      # |simulated start - recorded start|
    within: bool


def calibration(run: SimRun, site: SiteTrace) -> dict:
    """The simulated starts of ``run`` against the recorded ones (module docstring)."""
    starts = []
    for j in run.outcome.jobs:
        if j.first_start_s is None:
            continue
        h = site.sources[j.job_id]
        error = abs(site.origin_s + j.first_start_s - h.start_s)
        tolerance = max(TOLERANCE_SHARE * (h.end_s - h.submit_s), TOLERANCE_FLOOR_S)
        starts.append(_Start(h, j.partition, max(0.0, h.start_s - h.submit_s),
                             j.first_start_s - j.submit_s, error, error <= tolerance))
    worst = sorted(starts, key=lambda s: (-s.error_s, s.job.submit_s))[:WORST_STARTS]
    return {
        "profile": run.profile.name, "interference": run.interference,
        "tolerance": f"max({TOLERANCE_SHARE:g} x recorded JCT, {TOLERANCE_FLOOR_S:g} s)",
        "compared_jobs": len(starts),
        "not_compared": len(run.outcome.jobs) - len(starts) + run.outcome.dropped,
        "all": _calibration_group(starts),
        "by_partition": {p: _calibration_group([s for s in starts if s.partition == p])
                         for p in partitions_in(s.partition for s in starts)},
        "worst_jobs": [{"job_id": s.job.job_id, "partition": s.partition,
                        "gpus": s.job.gpus, "user": s.job.user,
                        "recorded_wait_s": rounded(s.recorded_wait_s),
                        "simulated_wait_s": rounded(s.simulated_wait_s),
                        "start_error_s": rounded(s.error_s)} for s in worst],
        "percentiles": {
            "recorded_wait_s": percentiles([s.recorded_wait_s for s in starts]),
            "simulated_wait_s": percentiles([s.simulated_wait_s for s in starts]),
            "start_error_s": percentiles([s.error_s for s in starts])},
        "gpus_busy": gpus_busy(run, site),
    }


def percentiles(values: Sequence[float]) -> list[float] | None:
    """Percentiles 0, 1, ..., 100 of ``values`` (None: no value): what the report's CDF
    plots draw."""
    if not values:
        return None
    xs = sorted(values)
    return [rounded(percentile(xs, q), 4) for q in range(101)]


def gpus_busy(run: SimRun, site: SiteTrace, bins: int = BUSY_BINS) -> dict | None:
    """Mean GPUs held per time bin, from the first submission to the last end, by the jobs
    that started in ``run``: as sacct recorded them (start to end) and as simulated (first
    start to finish; None where a job was preempted: its run segments are not kept)."""
    started = [j for j in run.outcome.jobs if j.first_start_s is not None]
    if not started:
        return None
    recorded = [(site.sources[j.job_id].start_s, site.sources[j.job_id].end_s, j.num_gpus)
                for j in started]
    preempted = any(j.preemptions for j in started)
    simulated = [] if preempted else [
        (site.origin_s + j.first_start_s, site.origin_s + (
            j.finish_s if j.finish_s is not None else run.outcome.end_time_s), j.num_gpus)
        for j in started]
    t0 = min(site.origin_s + j.submit_s for j in started)
    t1 = max(end for _, end, _ in recorded + simulated)
    width = max(t1 - t0, 1.0) / bins
    return {"from_s": rounded(t0), "bin_s": rounded(width, 3), "gpus": run.outcome.total_gpus,
            "recorded": _busy(recorded, t0, width, bins),
            "simulated": None if preempted else _busy(simulated, t0, width, bins)}


def _busy(spans: Sequence[tuple[float, float, int]], t0: float, width: float,
          bins: int) -> list[float]:
    """Mean of sum(gpus of the spans covering t) over each bin [t0 + k width, + width)."""
    held = [0.0] * bins                       # GPU-seconds per bin
    for start, end, gpus in spans:
        lo, hi = (start - t0) / width, (end - t0) / width
        k = max(int(lo), 0)
        while k < bins and k < hi:
            held[k] += gpus * (min(hi, k + 1) - max(lo, k))
            k += 1
    return [rounded(h, 3) for h in held]


def _calibration_group(starts: Sequence[_Start]) -> dict:
    n = len(starts)
    if not n:
        return {"jobs": 0, "recorded_mean_wait_s": None, "simulated_mean_wait_s": None,
                "wait_ratio": None, "median_start_error_s": None, "p90_start_error_s": None,
                "share_within_tolerance": None}
    recorded = sum(s.recorded_wait_s for s in starts) / n
    simulated = sum(s.simulated_wait_s for s in starts) / n
    errors = [s.error_s for s in starts]
    return {"jobs": n, "recorded_mean_wait_s": rounded(recorded),
            "simulated_mean_wait_s": rounded(simulated),
            "wait_ratio": wait_ratio(simulated, recorded),
            "median_start_error_s": rounded(percentile(errors, 50)),
            "p90_start_error_s": rounded(percentile(errors, 90)),
            "share_within_tolerance": round(sum(s.within for s in starts) / n, 4)}


def wait_ratio(simulated: float, recorded: float) -> float | None:
    """Simulated / recorded mean wait: 1 where both are 0, None where only the recorded
    one is (no finite ratio)."""
    if recorded > 0:
        return round(simulated / recorded, 4)
    return 1.0 if simulated <= 0 else None


def partitions_in(names: Iterable[str]) -> list[str]:
    return sorted(set(names))


def rounded(x: float, digits: int = 2) -> float:
    return round(float(x), digits)
