"""The report's simulations: each run as data (``SimTask``), so it can run here or in
another process or Slurm task, and the runs put together as calibration and what-if cells."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_marl.history.records import HistoryJob
from slurm_marl.policy.profile import Profile, load_profile
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.jobs import SimOutcome
from slurm_marl.sim.metrics import summarize
from slurm_marl.sim.online_prediction import PriorHistory
from slurm_marl.sim.report.site import BASELINE, CALIBRATION_STRENGTH, SiteTrace
from slurm_marl.sim.run import SimRun
from slurm_marl.sim.run import simulate as run_simulation
from slurm_marl.sim.traces import TraceJob


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
