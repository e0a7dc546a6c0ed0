"""What-if: every profile's jobs against the baseline's at the same strength, over all jobs
and per partition, and the mean wait per user or account."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_marl.sim.jobs import SimJob
from slurm_marl.sim.metrics import percentile
from slurm_marl.sim.perjob import job_ratios, per_job_comparison
from slurm_marl.sim.report.calibration import partitions_in, percentiles, rounded
from slurm_marl.sim.report.runs import RECOMMENDED, Runs
from slurm_marl.sim.report.site import SiteTrace
from slurm_marl.sim.run import SimRun

TOP_GROUPS = 10        # users / accounts with the most jobs in waits_by


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
        for p in partitions_in(j.partition for j in jobs):
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
                     "recorded_mean_wait_s": rounded(sum(recorded) / len(ids)),
                     "mean_wait_s": [rounded(sum(s[i] for i in ids) / len(ids)) for s in started]})
    return {"field": field, "groups": len(groups),
            "runs": [{"profile": r.profile.name, "interference": r.interference}
                     for r in cells], "top": rows}


def job_times(jobs: Sequence[SimJob]) -> dict:
    """Average and p95 JCT and wait (first start - submit) over the finished jobs."""
    done = [j for j in jobs if j.finish_s is not None]
    jct = [j.finish_s - j.submit_s for j in done]
    wait = [j.first_start_s - j.submit_s for j in done]
    return {"jobs": len(jobs), "finished": len(done),
            "avg_jct_s": rounded(sum(jct) / len(jct)) if jct else None,
            "p95_jct_s": rounded(percentile(jct, 95)) if jct else None,
            "avg_wait_s": rounded(sum(wait) / len(wait)) if wait else None,
            "p95_wait_s": rounded(percentile(wait, 95)) if wait else None,
            "preemptions": sum(j.preemptions for j in jobs)}
