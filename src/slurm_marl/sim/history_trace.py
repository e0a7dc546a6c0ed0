"""A history as a simulator trace: each job that ran becomes one ``TraceJob`` whose
duration is what it ran and whose GPUs are what it held, submitted when it was submitted
(rebased to the first job). A job that ran for 0 s has nothing to simulate and is
counted, not kept."""

from __future__ import annotations

from collections import Counter

from slurm_marl.history.records import HistoryJob
from slurm_marl.sim.traces import TraceJob


def to_trace(jobs: list[HistoryJob]) -> tuple[list[TraceJob], Counter]:
    kept, skipped = [], Counter()
    ran = sorted((j for j in jobs if j.start_s is not None), key=lambda j: (j.submit_s, j.job_id))
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
    return kept, +skipped
