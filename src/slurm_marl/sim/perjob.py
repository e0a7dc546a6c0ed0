"""Each job's completion time against a baseline run of the same trace.

Averages hide that a few jobs, often big and long ones, finish several times later than
under the policy a site runs without the agent (profile ``fifo-backfill``). Here a job's
ratio is its JCT / max(its JCT under the baseline, ``floor_s``), over the jobs finished in
both runs (matched by job id: same trace, window and drop rules). The floor (600 s by
default) keeps a job the baseline ran in seconds from counting as many times slower for a
few minutes of queueing.

``per_job_comparison`` returns a JSON-ready dict (ratios rounded to 4 digits, seconds to
2; None where no job was compared):

- ``baseline``: the baseline's name as given (None if not given); ``floor_s``.
- ``compared_jobs``: jobs finished in both runs; ``not_compared``: jobs of either run that
  did not (unfinished in one, or absent from one).
- ``avg_jct_s``, ``baseline_avg_jct_s``: average JCT over the compared jobs in each run.
- ``jobs_slower_1_1x``, ``jobs_slower_2x``: how many compared jobs have a ratio > 1.1, > 2;
  ``share_slower_1_1x``, ``share_slower_2x``: the same as shares of ``compared_jobs``.
- ``p99_ratio`` (``metrics.percentile``, linear interpolation), ``worst_ratio``.
- ``worst_job``: ``{job_id, num_gpus, user, baseline_jct_s, jct_s, ratio}`` of the worst
  ratio (ties: the lowest job id).
- ``by_gpus``: for each GPU-count class of ``GPU_CLASSES`` (``"1"``, ``"2-4"``,
  ``"5-8"``, ``">8"``; every class present, ``jobs`` 0 where none) the group keys
  ``jobs``, ``jobs_slower_1_1x``, ``jobs_slower_2x``, ``share_slower_1_1x``,
  ``share_slower_2x``, ``p99_ratio``, ``worst_ratio``. A job's GPU count is the trace's: a
  fraction of one GPU counts as 1.
- ``by_user``: None when no job names a user, else ``{"users": N, "worst": [...]}``: the
  ``WORST_USERS`` users with the most jobs > 2x, then > 1.1x, then the worst ratio, each
  the group keys plus ``user``. For Philly traces the user is the virtual cluster.

There is no ``by_account``: traces carry no account (``SimJob`` has none).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_marl.sim.metrics import percentile

FLOOR_S = 600.0
SLOWER, MUCH_SLOWER = 1.1, 2.0
# (label, fewest GPUs, most GPUs or None)
GPU_CLASSES = (("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), (">8", 9, None))
WORST_USERS = 5


@dataclass(frozen=True)
class JobTime:
    """What the comparison needs of one job; ``jct_s`` None: not finished."""

    job_id: int
    num_gpus: int
    user: str
    jct_s: float | None


def job_times(jobs: Iterable) -> list[JobTime]:
    """``SimJob`` records (or ``JobTime`` values, or ``[id, gpus, user, jct]`` lists as
    ``records`` writes them) as ``JobTime`` values."""
    out = []
    for j in jobs:
        if isinstance(j, JobTime):
            out.append(j)
        elif isinstance(j, (list, tuple)):
            out.append(JobTime(int(j[0]), int(j[1]), str(j[2]),
                               None if j[3] is None else float(j[3])))
        else:
            gpus = 1 if getattr(j, "same_gpu", False) else j.num_gpus
            jct = None if j.finish_s is None else j.finish_s - j.submit_s
            out.append(JobTime(j.job_id, gpus, j.user or "", jct))
    return out


def records(jobs: Iterable) -> list[list]:
    """JSON-ready ``[job_id, num_gpus, user, jct_s]`` per job (what a sweep cell keeps)."""
    return [[t.job_id, t.num_gpus, t.user, None if t.jct_s is None else round(t.jct_s, 3)]
            for t in job_times(jobs)]


def job_ratios(jobs: Iterable, baseline_jobs: Iterable, floor_s: float = FLOOR_S
               ) -> dict[int, float]:
    """``{job_id: JCT / max(baseline JCT, floor_s)}`` over the jobs finished in both runs,
    by job id."""
    base = {t.job_id: t.jct_s for t in job_times(baseline_jobs) if t.jct_s is not None}
    return {t.job_id: t.jct_s / max(base[t.job_id], floor_s)
            for t in job_times(jobs) if t.jct_s is not None and t.job_id in base}


def per_job_comparison(jobs: Iterable, baseline_jobs: Iterable, floor_s: float = FLOOR_S,
                       baseline: str | None = None) -> dict:
    """The per-job comparison of ``jobs`` against ``baseline_jobs`` (module docstring)."""
    if floor_s <= 0:
        raise ValueError(f"floor_s must be > 0, got {floor_s!r}")
    mine = {t.job_id: t for t in job_times(jobs)}
    theirs = {t.job_id: t for t in job_times(baseline_jobs)}
    both = sorted(i for i in mine.keys() & theirs.keys()
                  if mine[i].jct_s is not None and theirs[i].jct_s is not None)
    ratio = {i: mine[i].jct_s / max(theirs[i].jct_s, floor_s) for i in both}
    out = {"baseline": baseline, "floor_s": float(floor_s), "compared_jobs": len(both),
           "not_compared": len(mine.keys() | theirs.keys()) - len(both),
           "avg_jct_s": _r(sum(mine[i].jct_s for i in both) / len(both), 2) if both
           else None,
           "baseline_avg_jct_s": _r(sum(theirs[i].jct_s for i in both) / len(both), 2)
           if both else None}
    group = _group([ratio[i] for i in both])
    del group["jobs"]
    out.update(group)
    worst = max(both, key=lambda i: (ratio[i], -i), default=None)
    out["worst_job"] = None if worst is None else {
        "job_id": worst, "num_gpus": mine[worst].num_gpus, "user": mine[worst].user,
        "baseline_jct_s": _r(theirs[worst].jct_s, 2), "jct_s": _r(mine[worst].jct_s, 2),
        "ratio": _r(ratio[worst])}
    out["by_gpus"] = {label: _group([ratio[i] for i in both
                                     if gpu_class(mine[i].num_gpus) == label])
                      for label, _, _ in GPU_CLASSES}
    out["by_user"] = _by_user(both, mine, ratio)
    return out


def gpu_class(num_gpus: int) -> str:
    for label, lo, hi in GPU_CLASSES:
        if lo <= num_gpus and (hi is None or num_gpus <= hi):
            return label
    return GPU_CLASSES[0][0]    # fewer than 1 (not in the simulator's jobs)


def _group(ratios: Sequence[float]) -> dict:
    n = len(ratios)
    slow = sum(1 for r in ratios if r > SLOWER)
    much = sum(1 for r in ratios if r > MUCH_SLOWER)
    return {"jobs": n, "jobs_slower_1_1x": slow, "jobs_slower_2x": much,
            "share_slower_1_1x": _r(slow / n) if n else None,
            "share_slower_2x": _r(much / n) if n else None,
            "p99_ratio": _r(percentile(ratios, 99)) if n else None,
            "worst_ratio": _r(max(ratios)) if n else None}


def _by_user(both: list[int], mine: dict[int, JobTime], ratio: dict[int, float]
             ) -> dict | None:
    if not any(mine[i].user for i in both):
        return None
    users: dict[str, list[float]] = {}
    for i in both:
        users.setdefault(mine[i].user, []).append(ratio[i])
    groups = [{"user": u, **_group(rs)} for u, rs in users.items()]
    groups.sort(key=lambda g: (-g["jobs_slower_2x"], -g["jobs_slower_1_1x"],
                               -g["worst_ratio"], g["user"]))
    return {"users": len(groups), "worst": groups[:WORST_USERS]}


def _r(x: float, digits: int = 4) -> float:
    return round(float(x), digits)
