"""The order users and admins ask of Slurm, kept inside the policy's order.

Slurm alone lets a user ask for a later place (``--nice``, ``scontrol update Nice=``) and
a user or an admin move jobs up (``scontrol top``, an admin's ``Priority=``); a policy that
writes the priorities itself would overwrite every one of these. So the policy's order of
a partition's waiting jobs is adjusted once it is made:

- a job with nice ``N`` goes ``N`` places later (negative: earlier), as under
  ``priority/basic``, where a job's priority is one point below the job submitted before
  it and nice subtracts points;
- a job whose priority was set by someone else (``Job.priority_asked``) keeps the place
  that priority gives it in Slurm: it is put before the first of the other jobs whose
  Slurm priority is below its own, as Slurm would run it. ``scontrol top`` swaps the
  priorities of one user's jobs, so those jobs come out in the order it asked.

Jobs that ask nothing keep the policy's order among themselves; with none asking, the order
is the policy's, unchanged (the simulator's jobs ask nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from slurm_marl.domain import Job

T = TypeVar("T")


def asks(job: Job) -> bool:
    return bool(job.nice) or job.priority_asked


def asked_note(job: Job) -> str:
    """What a job's place owes to what was asked, for its decision's reason ("" if
    nothing)."""
    if job.priority_asked:
        return ("; its priority was set by its user or an admin (scontrol top, Priority=, "
                f"a release): kept at {job.priority}, placed as Slurm ranks it")
    if job.nice:
        way = "later" if job.nice > 0 else "earlier"
        return f"; nice {job.nice}: {abs(job.nice)} places {way}"
    return ""


def asked_order(ranked: Sequence[T], job_of=lambda r: r.job) -> list[T]:
    """``ranked`` (the policy's order, first runs first) with what users and admins asked
    kept (module docstring). ``job_of``: the Job of an entry."""
    if not any(asks(job_of(r)) for r in ranked):
        return list(ranked)
    free = [r for r in ranked if not job_of(r).priority_asked]
    if any(job_of(r).nice for r in free):
        places = sorted(range(len(free)), key=lambda i: (i + job_of(free[i]).nice, i))
        free = [free[i] for i in places]
    asked = sorted((r for r in ranked if job_of(r).priority_asked),
                   key=lambda r: -job_of(r).priority)
    if not asked:
        return free
    out: list[T] = []
    k = 0
    for r in free:
        while k < len(asked) and job_of(asked[k]).priority > job_of(r).priority:
            out.append(asked[k])
            k += 1
        out.append(r)
    out.extend(asked[k:])
    return out
