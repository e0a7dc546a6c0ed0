"""Per job on real Slurm: every run of a replay against its own Slurm-alone run.

The simulator's comparison (``sim/perjob.py``) on replayed jobs: a job's ratio is its JCT /
max(its JCT under Slurm alone, ``floor_s``), over the jobs finished in both runs. Jobs are
matched by their *trace* job id: every run of a plan submits the same jobs, but each run's
fresh cluster numbers its Slurm job ids from 1 again, in submission order, so a Slurm id
names a job only within one run.

Seconds: ``result.json`` keeps each job's times in wall seconds after the replay's start;
JCTs here are trace seconds, (end - planned arrival) x speedup, as in the replay's summary,
so the floor (600 s) is 600 trace seconds too (3.3 wall seconds at 180x).

Real Slurm is not deterministic. A second Slurm-alone run of the same plan (same jobs,
arrivals, model types and seeds) is compared with the first the same way: its comparison is
the *noise floor*. A job of an agent run is *beyond the noise floor* when its ratio exceeds
``BEYOND_RATIO`` (1.5) and exceeds the noise floor's worst ratio: a slowdown Slurm alone
does not produce against itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from slurm_marl.sim.perjob import FLOOR_S, JobTime, job_ratios, job_times, \
    per_job_comparison

BEYOND_RATIO = 1.5


def trace_job_times(plan, jobs: Iterable) -> list[JobTime]:
    """A run's jobs (``runner.JobTimes``, or their dicts as ``result.json`` holds them) as
    ``sim.perjob.JobTime`` values: the trace's job id, GPU count and user (Philly: its
    virtual cluster), the JCT in trace seconds from the planned arrival (None: not ended).
    A job's place in the plan (``index``) says which trace job it is."""
    out = []
    for j in jobs:
        get = j.get if isinstance(j, Mapping) else lambda k, j=j: getattr(j, k, None)
        index = get("index")
        if not isinstance(index, int) or not 0 <= index < len(plan.jobs):
            raise ValueError(f"replayed job {get('job_id')}: index {index!r} is not a job "
                             f"of the plan ({len(plan.jobs)} jobs)")
        planned, source = plan.jobs[index], plan.sim_trace[index]
        traced = get("trace_job_id")
        if traced is not None and traced != planned.trace_job_id:
            raise ValueError(f"replayed job {get('job_id')}: trace job {traced}, but the "
                             f"plan's job {index} is trace job {planned.trace_job_id}: "
                             "results of another plan")
        end = get("end_s")
        jct = None if end is None else (end - get("arrival_s")) * plan.speedup
        out.append(JobTime(planned.trace_job_id, max(1, planned.num_gpus), source.user, jct))
    return out


def beyond_noise_floor(jobs: Iterable, baseline_jobs: Iterable, noise_worst_ratio: float,
                       floor_s: float = FLOOR_S, min_ratio: float = BEYOND_RATIO) -> dict:
    """The jobs of ``jobs`` whose ratio against ``baseline_jobs`` (``JobTime`` values)
    exceeds both ``min_ratio`` and ``noise_worst_ratio``, worst first (ties: lowest id)."""
    mine = {t.job_id: t for t in job_times(jobs)}
    base = {t.job_id: t for t in job_times(baseline_jobs)}
    ratios = job_ratios(mine.values(), base.values(), floor_s)
    beyond = sorted((i for i, r in ratios.items() if r > min_ratio and r > noise_worst_ratio),
                    key=lambda i: (-ratios[i], i))
    return {"min_ratio": min_ratio, "noise_worst_ratio": noise_worst_ratio,
            "jobs": len(beyond),
            "job_list": [{"job_id": i, "num_gpus": mine[i].num_gpus, "user": mine[i].user,
                          "baseline_jct_s": round(base[i].jct_s, 2),
                          "jct_s": round(mine[i].jct_s, 2), "ratio": round(ratios[i], 4)}
                         for i in beyond]}


def per_job_report(runs: Mapping[str, Sequence[JobTime]], baseline_key: str,
                   noise_key: str | None = None, labels: Mapping[str, str] | None = None,
                   floor_s: float = FLOOR_S, min_ratio: float = BEYOND_RATIO) -> dict:
    """The replay report's ``per_job``: every run of ``runs`` (run key -> its jobs as
    ``JobTime`` values, trace seconds) but the baseline and the noise run against the
    baseline; the noise run (a second Slurm-alone run) against it as ``noise_floor``; and
    each run's jobs beyond the noise floor (None without a noise run, or where it compared
    no job)."""
    labels = labels or {}
    if baseline_key not in runs:
        raise ValueError(f"no run {baseline_key!r} to compare with (runs: {', '.join(runs)})")
    if noise_key is not None and noise_key not in runs:
        raise ValueError(f"no noise-floor run {noise_key!r} (runs: {', '.join(runs)})")
    base = runs[baseline_key]
    name = labels.get(baseline_key, baseline_key)
    noise = None if noise_key is None else per_job_comparison(runs[noise_key], base, floor_s,
                                                              baseline=name)
    noise_worst = None if noise is None else noise["worst_ratio"]
    compared = {}
    for key, jobs in runs.items():
        if key in (baseline_key, noise_key):
            continue
        entry = per_job_comparison(jobs, base, floor_s, baseline=name)
        entry["beyond_noise_floor"] = None if noise_worst is None else beyond_noise_floor(
            jobs, base, noise_worst, floor_s, min_ratio)
        compared[key] = entry
    return {"baseline": baseline_key, "baseline_label": name, "floor_s": float(floor_s),
            "seconds": "trace", "beyond_min_ratio": min_ratio,
            "noise_run": noise_key, "noise_floor": noise, "runs": compared}


def ratio_series(runs: Mapping[str, Sequence[JobTime]], baseline_key: str,
                 labels: Mapping[str, str] | None = None, floor_s: float = FLOOR_S
                 ) -> dict[str, list[float]]:
    """{run label: its jobs' ratios against the baseline} for every other run (the noise
    run included), for the ratio CDF plot."""
    labels = labels or {}
    return {labels.get(key, key): list(job_ratios(jobs, runs[baseline_key], floor_s).values())
            for key, jobs in runs.items() if key != baseline_key}
