"""A history as a simulator trace: each job that ran becomes one ``TraceJob`` whose
duration is what it ran and whose GPUs are what it held, submitted when it was submitted
(rebased to the first job). A job that ran for 0 s has nothing to simulate and is
counted, not kept. ``trace_with_sources`` also says which history job each trace job is
(what ``report`` compares the simulated start with).

Jobs submitted in the same second (sacct's resolution) keep Slurm's order, by job id as a
number ("9" before "10", an array's tasks "12_2" before "12_10"), not as text."""

from __future__ import annotations

import re
from collections import Counter

from slurm_marl.history.records import HistoryJob
from slurm_marl.sim.traces import TraceJob


def to_trace(jobs: list[HistoryJob]) -> tuple[list[TraceJob], Counter]:
    kept, skipped, _, _ = trace_with_sources(jobs)
    return kept, skipped


def trace_with_sources(jobs: list[HistoryJob]
                       ) -> tuple[list[TraceJob], Counter, dict[int, HistoryJob], float]:
    """``to_trace``'s jobs and skips, each kept trace job's history job by trace job id, and
    the origin: the Unix time of trace time 0 (the first submission of the jobs that ran)."""
    kept, skipped, sources = [], Counter(), {}
    ran = sorted((j for j in jobs if j.start_s is not None),
                 key=lambda j: (j.submit_s, job_id_order(j.job_id)))
    skipped["never started"] += len(jobs) - len(ran)
    origin = ran[0].submit_s if ran else 0.0
    for k, j in enumerate(ran):
        if j.ran_s <= 0 or j.gpus <= 0:
            skipped["ran 0 s" if j.ran_s <= 0 else "no GPUs"] += 1
            continue
        per_node = j.gpus // j.nodes if j.nodes > 1 and j.gpus % j.nodes == 0 else 0
        kept.append(TraceJob(job_id=k, submit_time_s=j.submit_s - origin, duration_s=j.ran_s,
                             num_gpus=j.gpus, gpus_per_node=per_node, partition=j.partition,
                             user=j.user))
        sources[k] = j
    return kept, +skipped, sources, origin


def job_id_order(job_id: str) -> tuple:
    """A sort key of a Slurm job id: its digit runs as numbers ("9" < "10" < "10_2" <
    "10_10"). ``re.split`` with a group alternates text and digits, so keys compare."""
    return tuple(int(p) if k % 2 else p for k, p in enumerate(re.split(r"(\d+)", job_id)))
