"""A site's own history on its own cluster: how well the simulator reproduces what its Slurm
did (calibration), and what each profile would have done instead (what-if). The logic of
``slurm-marl report`` (issue 34; the command is ``slurm_marl/report_cli.py``).

The history (``HistoryJob``, from sacct) becomes a trace (``history_trace``): each job that
ran is submitted when it was and runs for as long as it ran. Jobs of partitions the
simulated cluster does not have are left out and counted, as are jobs larger than their
partition as modelled (``drop_oversized``).

**Calibration** runs ``fifo-backfill`` (the stand-in for Slurm alone) without simulated
interference (the recorded run times already hold whatever slowed the jobs) and compares
each job's simulated start with the start sacct recorded. A job's wait is start - submit
(its first start). A simulated start is *within tolerance* when it is at most
max(``TOLERANCE_SHARE`` x the recorded JCT, ``TOLERANCE_FLOOR_S``) from the recorded one.

**What-if** runs every profile at every interference strength on the same trace and
compares each job's JCT with its JCT under ``fifo-backfill`` at the same strength
(``perjob.per_job_comparison``), over all jobs and per partition.

``calibration`` and ``what_if`` return JSON-ready dicts; docs/operations.md ("Before
switching it on") lists their keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from slurm_marl.history.records import HistoryJob
from slurm_marl.policy.profile import Profile, load_profile
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.history_trace import trace_with_sources
from slurm_marl.sim.jobs import SimJob
from slurm_marl.sim.metrics import percentile
from slurm_marl.sim.perjob import per_job_comparison
from slurm_marl.sim.run import SimRun
from slurm_marl.sim.run import simulate as run_simulation
from slurm_marl.sim.traces import TraceJob

BASELINE = "fifo-backfill"            # Slurm alone: the calibration and what-if baseline
CALIBRATION_STRENGTH = "none"
# The shipped profiles that run on a history with no other input (las-learned runs too,
# with the demo checkpoint shipped for the test cluster, not one trained for the site).
DEFAULT_PROFILES = ("fifo-backfill", "las-consolidate", "las-lif", "learned-order")
DEFAULT_STRENGTHS = ("none", "medium")
TOLERANCE_SHARE, TOLERANCE_FLOOR_S = 0.10, 60.0
WORST_STARTS = 5

# What the simulation leaves out whatever the site's files say (site_config names the rest).
SIMULATOR_NOT_MODELLED = (
    "backfill without time limits: the first job that cannot start holds the free GPUs of "
    "the placement it waits for, and any later job that fits on the other free GPUs starts "
    "however long it will run (Slurm's backfill starts it only if its time limit ends "
    "before the blocked job's expected start, or on resources that job will not use)",
    "job order is submission order (FIFO): Slurm's priorities (multifactor age, fair share, "
    "QOS, PriorityTier), QOS and association limits, reservations and preemption are not "
    "modelled",
    "the cluster starts empty: jobs submitted before the period that were still running "
    "in it are not there (their GPUs look free)",
    "GPU jobs only: jobs without GPUs (their use of the GPU nodes' CPUs and memory) are not "
    "in the history; a job takes CPUs and memory in proportion to its GPUs",
    "a job runs for the time sacct recorded (Start to End): time limits, node failures, "
    "drains and requeues are not modelled",
    "a multi-node job keeps GPUs / nodes GPUs per node when they divide evenly; otherwise "
    "its GPUs may be placed on any nodes",
)


class ReportError(ValueError):
    """Input the report cannot use (one line)."""


@dataclass
class SiteTrace:
    """The trace of a history's jobs on a cluster, and what was left out."""

    trace: list[TraceJob]
    sources: dict[int, HistoryJob]       # trace job id -> its history job
    origin_s: float                      # Unix time of trace time 0
    left_out: Counter                    # reason -> jobs


def in_period(jobs: Iterable[HistoryJob], start_s: float | None = None,
              end_s: float | None = None) -> list[HistoryJob]:
    """The jobs submitted in [start_s, end_s) (None: unbounded)."""
    return [j for j in jobs if (start_s is None or j.submit_s >= start_s)
            and (end_s is None or j.submit_s < end_s)]


def site_trace(jobs: list[HistoryJob], cluster: SimCluster) -> SiteTrace:
    """``jobs`` as a trace for ``cluster``: jobs of a partition it lacks are left out (a job
    with no partition goes to the first, Slurm's default)."""
    trace, skipped, sources, origin = trace_with_sources(jobs)
    names = {p.name for p in cluster.partitions_spec}
    left = Counter(skipped)
    kept = []
    for t in trace:
        if t.partition and t.partition not in names:
            left[f"partition {t.partition} not in the simulated cluster"] += 1
            del sources[t.job_id]
        else:
            kept.append(t)
    return SiteTrace(kept, sources, origin, +left)


def cluster_doc(cluster: SimCluster) -> dict:
    """The simulated cluster as the report states it."""
    parts = [{"name": p.name, "nodes": p.nodes, "gpus": p.nodes * p.slots_per_node,
              "sockets": p.sockets, "gpus_per_socket": p.gpus_per_socket}
             for p in cluster.partitions_spec]
    return {"partitions": parts, "gpus": sum(p["gpus"] for p in parts),
            "not_modelled": list(cluster.not_modelled)}


# ---------------------------------------------------------------------------------------
# the runs


@dataclass
class Runs:
    calibration: SimRun                                # BASELINE at CALIBRATION_STRENGTH
    cells: list[tuple[SimRun, SimRun | None]]          # (run, its baseline; None: is it)


def run_all(site: SiteTrace, cluster: SimCluster, profiles: Sequence[Profile],
            strengths: Sequence[str], *, seed: int = 0, restart_delay_s: float = 30.0,
            progress: Callable[[str, int, int], None] | None = None) -> Runs:
    """The calibration run and every profile x strength (in that order; the baseline of a
    strength runs once). ``progress(label, done, total)``: jobs simulated so far over all
    runs."""
    base = load_profile(BASELINE)
    plan: list[tuple[Profile, str]] = [(base, CALIBRATION_STRENGTH)]
    for s in strengths:
        plan += [(base, s)] + [(p, s) for p in profiles if p != base]
    plan = _unique(plan)
    total = len(plan) * len(site.trace)
    done: dict[tuple[str, str], SimRun] = {}
    for k, (prof, s) in enumerate(plan):
        label = f"{prof.name} ({s})"
        offset = k * len(site.trace)
        tick = None if progress is None else \
            (lambda n, _t, label=label, offset=offset: progress(label, offset + n, total))
        done[_key(prof, s)] = run_simulation(
            site.trace, cluster, prof, interference=s, seed=seed,
            restart_delay_s=restart_delay_s, drop_oversized=True, progress=tick)
    cells = []
    for s in strengths:
        for p in profiles:
            cells.append((done[_key(p, s)], None if p == base else done[_key(base, s)]))
    return Runs(done[_key(base, CALIBRATION_STRENGTH)], cells)


def _key(prof: Profile, strength: str) -> tuple[str, str]:
    return (repr(prof), strength)


def _unique(plan: list[tuple[Profile, str]]) -> list[tuple[Profile, str]]:
    seen, out = set(), []
    for prof, s in plan:
        if _key(prof, s) not in seen:
            seen.add(_key(prof, s))
            out.append((prof, s))
    return out


# ---------------------------------------------------------------------------------------
# calibration


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
                         for p in _partitions(s.partition for s in starts)},
        "worst_jobs": [{"job_id": s.job.job_id, "partition": s.partition,
                        "gpus": s.job.gpus, "user": s.job.user,
                        "recorded_wait_s": _r(s.recorded_wait_s),
                        "simulated_wait_s": _r(s.simulated_wait_s),
                        "start_error_s": _r(s.error_s)} for s in worst],
    }


def _calibration_group(starts: Sequence[_Start]) -> dict:
    n = len(starts)
    if not n:
        return {"jobs": 0, "recorded_mean_wait_s": None, "simulated_mean_wait_s": None,
                "wait_ratio": None, "median_start_error_s": None, "p90_start_error_s": None,
                "share_within_tolerance": None}
    recorded = sum(s.recorded_wait_s for s in starts) / n
    simulated = sum(s.simulated_wait_s for s in starts) / n
    errors = [s.error_s for s in starts]
    return {"jobs": n, "recorded_mean_wait_s": _r(recorded),
            "simulated_mean_wait_s": _r(simulated),
            "wait_ratio": wait_ratio(simulated, recorded),
            "median_start_error_s": _r(percentile(errors, 50)),
            "p90_start_error_s": _r(percentile(errors, 90)),
            "share_within_tolerance": round(sum(s.within for s in starts) / n, 4)}


def wait_ratio(simulated: float, recorded: float) -> float | None:
    """Simulated / recorded mean wait: 1 where both are 0, None where only the recorded
    one is (no finite ratio)."""
    if recorded > 0:
        return round(simulated / recorded, 4)
    return 1.0 if simulated <= 0 else None


# ---------------------------------------------------------------------------------------
# what-if


def what_if(runs: Runs) -> list[dict]:
    """One entry per profile x strength (module docstring)."""
    out = []
    for run, base in runs.cells:
        jobs = run.outcome.jobs
        entry = {"profile": run.profile.name, "interference": run.interference,
                 "baseline": None if base is None else base.profile.name,
                 "predictions": run.summary.get("predictions"),
                 "interference_estimator_samples": run.estimator_samples or None,
                 "all": {**job_times(jobs),
                         "gpu_utilisation": run.summary.get("gpu_utilisation")},
                 "per_job": None if base is None else per_job_comparison(
                     jobs, base.outcome.jobs, baseline=base.profile.name),
                 "by_partition": {}}
        for p in _partitions(j.partition for j in jobs):
            mine = [j for j in jobs if j.partition == p]
            entry["by_partition"][p] = {**job_times(mine), "per_job": None if base is None
                                        else per_job_comparison(
                                            mine, [j for j in base.outcome.jobs
                                                   if j.partition == p],
                                            baseline=base.profile.name)}
        out.append(entry)
    return out


def job_times(jobs: Sequence[SimJob]) -> dict:
    """Average and p95 JCT and wait (first start - submit) over the finished jobs."""
    done = [j for j in jobs if j.finish_s is not None]
    jct = [j.finish_s - j.submit_s for j in done]
    wait = [j.first_start_s - j.submit_s for j in done]
    return {"jobs": len(jobs), "finished": len(done),
            "avg_jct_s": _r(sum(jct) / len(jct)) if jct else None,
            "p95_jct_s": _r(percentile(jct, 95)) if jct else None,
            "avg_wait_s": _r(sum(wait) / len(wait)) if wait else None,
            "p95_wait_s": _r(percentile(wait, 95)) if wait else None,
            "preemptions": sum(j.preemptions for j in jobs)}


def _partitions(names: Iterable[str]) -> list[str]:
    return sorted(set(names))


def _r(x: float, digits: int = 2) -> float:
    return round(float(x), digits)
