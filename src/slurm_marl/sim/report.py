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

A profile that orders by predicted GPU-time (``learned-order``) learns its predictor in the
run (``sim/online_prediction.py``) from the jobs that finish in it and, from the start, from
the site's history before the period (``prior_history``): only jobs that ran and *ended*
before the period's start (``--from``), so no learned component sees the period's outcomes;
a job submitted before the period and still running at its start is in neither. Each
simulated job is described to the predictor by its own request (account, name, QOS, nodes,
time limit), as the prior's jobs are.

For the plots of the HTML report (``report_html``), which draws only from these dicts
(so the HTML and the JSON cannot disagree), calibration keeps the percentiles 0..100 of
the recorded and simulated waits and of the start errors, and the GPUs busy over time
(recorded and simulated, the same jobs); each what-if entry keeps the percentiles of its
per-job JCT ratios against the baseline. ``waits_by`` gives the mean wait per user or
account, recorded and in each run.

``calibration``, ``what_if`` and ``waits_by`` return JSON-ready dicts; docs/operations.md
("Before switching it on") lists their keys.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_marl.history.records import HistoryJob
from slurm_marl.policy.profile import Profile, load_profile
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.history_trace import trace_with_sources
from slurm_marl.sim.jobs import SimJob, SimOutcome
from slurm_marl.sim.metrics import percentile, summarize
from slurm_marl.sim.online_prediction import PriorHistory
from slurm_marl.sim.perjob import job_ratios, per_job_comparison
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
BUSY_BINS = 120        # time bins of the GPUs-busy series
TOP_GROUPS = 10        # users / accounts with the most jobs in waits_by

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


def prior_history(jobs: Iterable[HistoryJob], start_s: float | None) -> list[HistoryJob]:
    """The history a learned predictor may know when the period starts at ``start_s``: the
    jobs that ran (GPUs, a start) and ended strictly before it (None: no period start was
    named, so no job is known before it)."""
    if start_s is None:
        return []
    return [j for j in jobs if j.start_s is not None and j.end_s is not None
            and j.end_s < start_s and j.gpus > 0]


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
    recommended: dict[str, str] | None = None          # partition -> RECOMMENDED's profile


@dataclass(frozen=True)
class SimTask:
    """One run of the report, as data (so it can run in another process or a Slurm task:
    ``run_task``)."""

    trace: list[TraceJob]
    cluster: SimCluster
    profile: Profile
    strength: str
    seed: int
    restart_delay_s: float
    prior: PriorHistory

    @property
    def label(self) -> str:
        return f"{self.profile.name} ({self.strength})"


def run_task(task: SimTask, progress: Callable[[int, int], None] | None = None) -> SimRun:
    """Simulate ``task`` (``progress(jobs done, jobs)``)."""
    return run_simulation(task.trace, task.cluster, task.profile, interference=task.strength,
                          seed=task.seed, restart_delay_s=task.restart_delay_s,
                          drop_oversized=True, progress=progress, prior=task.prior)


# mapper(fn, tasks, on_done) -> [fn(task) for task in tasks], in any processes;
# on_done(index, result, done, total) as each finishes. An error is raised (one line).
Mapper = Callable[[Callable, Sequence, Callable[[int, object, int, int], None]], list]


def report_tasks(site: SiteTrace, cluster: SimCluster, profiles: Sequence[Profile],
                 strengths: Sequence[str], *, seed: int = 0, restart_delay_s: float = 30.0,
                 prior: Sequence[HistoryJob] = (),
                 recommended: Mapping[str, Profile] | None = None) -> list[SimTask]:
    """The report's simulations (``run_all``), each once: the calibration run, then at each
    strength the baseline, the profiles and the recommended ones."""
    base = load_profile(BASELINE)
    chosen = _unique_profiles((recommended or {}).values())
    plan: list[tuple[Profile, str]] = [(base, CALIBRATION_STRENGTH)]
    for s in strengths:
        plan += [(base, s)] + [(p, s) for p in [*profiles, *chosen] if p != base]
    known = PriorHistory(tuple(prior), site.origin_s, site.sources)
    return [SimTask(site.trace, cluster, prof, s, seed, restart_delay_s, known)
            for prof, s in _unique(plan)]


def run_all(site: SiteTrace, cluster: SimCluster, profiles: Sequence[Profile],
            strengths: Sequence[str], *, seed: int = 0, restart_delay_s: float = 30.0,
            progress: Callable[[str, int, int], None] | None = None,
            prior: Sequence[HistoryJob] = (),
            recommended: Mapping[str, Profile] | None = None,
            mapper: Mapper | None = None) -> Runs:
    """The calibration run and every profile x strength (in that order; the baseline of a
    strength runs once). ``progress(label, done, total)``: jobs simulated so far over all
    runs (with a ``mapper``: runs done so far over all runs). ``prior``: what a learned
    predictor knows at the start (``prior_history``). ``recommended`` (partition ->
    profile, ``--tune``'s): one more cell per strength, ``RECOMMENDED``, whose jobs of each
    partition are those of that partition's profile's run (``recommended_run``).
    ``mapper``: runs the tasks (``SimTask``, ``run_task``) elsewhere, e.g. as one Slurm
    array job (``report --backend``); None: one after the other here."""
    base = load_profile(BASELINE)
    tasks = report_tasks(site, cluster, profiles, strengths, seed=seed,
                         restart_delay_s=restart_delay_s, prior=prior, recommended=recommended)
    plan = [(t.profile, t.strength) for t in tasks]
    if mapper is not None:
        results = mapper(run_task, tasks, lambda i, _r, n, total: progress and progress(
            tasks[i].label, n, total))
    else:
        total = len(plan) * len(site.trace)
        results = []
        for k, task in enumerate(tasks):
            offset = k * len(site.trace)
            tick = None if progress is None else \
                (lambda n, _t, label=task.label, offset=offset:
                 progress(label, offset + n, total))
            results.append(run_task(task, tick))
    done = {_key(prof, s): run for (prof, s), run in zip(plan, results)}
    cells = []
    for s in strengths:
        for p in profiles:
            cells.append((done[_key(p, s)], None if p == base else done[_key(base, s)]))
        if recommended:
            cells.append((recommended_run({part: done[_key(p, s)] for part, p in
                                           recommended.items()}), done[_key(base, s)]))
    return Runs(done[_key(base, CALIBRATION_STRENGTH)], cells,
                None if not recommended else {k: p.name for k, p in recommended.items()})


RECOMMENDED = "recommended"


def recommended_run(by_partition: Mapping[str, SimRun]) -> SimRun:
    """One run made of each partition's jobs from the run of its own profile (all at one
    strength, on the same trace and cluster). The simulated partitions share no nodes
    (``site_config``) and a job waits only for GPUs of its own partition, so each
    partition's jobs are what that profile alone would give them. Its profile is the
    first partition's, renamed ``RECOMMENDED``, its description naming each partition's."""
    items = list(by_partition.items())
    first = items[0][1]
    jobs = [j for part, run in items for j in run.outcome.jobs if j.partition == part]
    o = first.outcome
    outcome = SimOutcome(
        jobs=jobs, cycles=sum(r.outcome.cycles for _, r in items),
        wall_time_s=sum(r.outcome.wall_time_s for _, r in items),
        preemptions=sum(j.preemptions for j in jobs), reservations=0, samples=[],
        end_time_s=max((j.finish_s for j in jobs if j.finish_s is not None),
                       default=o.end_time_s),
        unfinished=sum(j.finish_s is None for j in jobs), total_gpus=o.total_gpus,
        dropped=o.dropped)
    described = ", ".join(f"{part}: {run.profile.name}" for part, run in items)
    profile = dataclasses.replace(first.profile, name=RECOMMENDED,
                                  description=f"per partition: {described}")
    return SimRun(profile, first.cluster, first.interference, first.seed, outcome,
                  summarize(outcome))


def _unique_profiles(profiles: Iterable[Profile]) -> list[Profile]:
    return list({repr(p): p for p in profiles}.values())


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
    return [_r(percentile(xs, q), 4) for q in range(101)]


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
    return {"from_s": _r(t0), "bin_s": _r(width, 3), "gpus": run.outcome.total_gpus,
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
    return [_r(h, 3) for h in held]


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


def what_if(runs: Runs, site: SiteTrace) -> list[dict]:
    """One entry per profile x strength (module docstring); each ``per_job.worst_job`` names
    its job as sacct does (``site.sources``)."""
    def compared(jobs: Sequence[SimJob], base_jobs: Sequence[SimJob], base: SimRun) -> dict:
        got = per_job_comparison(jobs, base_jobs, baseline=base.profile.name)
        if got["worst_job"] is not None:
            got["worst_job"]["job_id"] = site.sources[got["worst_job"]["job_id"]].job_id
        return got

    out = []
    for run, base in runs.cells:
        jobs = run.outcome.jobs
        entry = {"profile": run.profile.name, "interference": run.interference,
                 "baseline": None if base is None else base.profile.name,
                 "profiles_by_partition": runs.recommended
                 if run.profile.name == RECOMMENDED else None,
                 "predictions": run.summary.get("predictions"),
                 "prediction_prior_jobs": run.summary.get("prediction_prior_jobs"),
                 "interference_estimator_samples": run.estimator_samples or None,
                 "all": {**job_times(jobs),
                         "gpu_utilisation": run.summary.get("gpu_utilisation")},
                 "per_job": None if base is None else compared(
                     jobs, base.outcome.jobs, base),
                 "ratio_percentiles": None if base is None else percentiles(
                     list(job_ratios(jobs, base.outcome.jobs).values())),
                 "by_partition": {}}
        for p in _partitions(j.partition for j in jobs):
            mine = [j for j in jobs if j.partition == p]
            entry["by_partition"][p] = {**job_times(mine), "per_job": None if base is None
                                        else compared(
                                            mine, [j for j in base.outcome.jobs
                                                   if j.partition == p], base)}
        out.append(entry)
    return out


def waits_by(runs: Runs, site: SiteTrace, field: str, top: int = TOP_GROUPS) -> dict | None:
    """The mean wait of each ``field`` (``user`` or ``account`` of the history) as recorded
    and in each what-if run, over the jobs that started in both, for the ``top`` groups with
    the most jobs (ties: by name); None when no job names one."""
    def name(job_id: int) -> str:
        return getattr(site.sources[job_id], field)

    first = runs.calibration.outcome.jobs
    if not any(name(j.job_id) for j in first):
        return None
    cells = [run for run, _ in runs.cells]
    started = [{j.job_id: j.first_start_s - j.submit_s for j in run.outcome.jobs
                if j.first_start_s is not None} for run in cells]
    groups: dict[str, list[int]] = {}
    for j in first:
        if all(j.job_id in s for s in started):
            groups.setdefault(name(j.job_id), []).append(j.job_id)
    order = sorted(groups, key=lambda g: (-len(groups[g]), g))
    rows = []
    for g in order[:top]:
        ids = groups[g]
        recorded = [max(0.0, site.sources[i].start_s - site.sources[i].submit_s) for i in ids]
        rows.append({"name": g, "jobs": len(ids),
                     "recorded_mean_wait_s": _r(sum(recorded) / len(ids)),
                     "mean_wait_s": [_r(sum(s[i] for i in ids) / len(ids)) for s in started]})
    return {"field": field, "groups": len(groups),
            "runs": [{"profile": r.profile.name, "interference": r.interference}
                     for r in cells], "top": rows}


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
