"""Trace windows as training and evaluation workloads: partitions assigned, split into
episodes.

Philly names no partitions, so jobs are dealt to the cluster's partitions round-robin by
their position in the window (deterministic); a job too large for every partition is
dropped by the simulator (``drop_oversized``), as ``slurm-marl simulate`` would refuse it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.traces import TraceJob, load_trace


def assign_partitions(jobs: list[TraceJob], partitions: list[str]) -> list[TraceJob]:
    """Round-robin over ``partitions`` for jobs without one; others keep theirs."""
    if not partitions:
        raise ValueError("no partitions to assign jobs to")
    return [j if j.partition else replace(j, partition=partitions[i % len(partitions)])
            for i, j in enumerate(jobs)]


def rebase(jobs: list[TraceJob]) -> list[TraceJob]:
    if not jobs:
        return jobs
    t0 = jobs[0].submit_time_s
    return [replace(j, submit_time_s=j.submit_time_s - t0) for j in jobs]


def fits(job: TraceJob, cluster: SimCluster) -> bool:
    sizes = {p.name: p.nodes * p.sockets * p.gpus_per_socket for p in cluster.partitions_spec}
    return job.num_gpus <= sizes.get(job.partition, 0)


def load_workload(trace: str | Path, window: str | None, cluster: SimCluster
                  ) -> list[TraceJob]:
    jobs = load_trace(trace, window)
    jobs = assign_partitions(jobs, [p.name for p in cluster.partitions])
    return [j for j in jobs if fits(j, cluster)]


def episodes(jobs: list[TraceJob], jobs_per_episode: int) -> list[list[TraceJob]]:
    """Consecutive slices of ``jobs_per_episode`` jobs, each rebased to start at 0."""
    if jobs_per_episode < 1:
        raise ValueError("jobs_per_episode must be >= 1")
    return [rebase(jobs[i:i + jobs_per_episode])
            for i in range(0, len(jobs), jobs_per_episode)
            if len(jobs[i:i + jobs_per_episode]) >= max(1, jobs_per_episode // 2)]


def cluster_and_windows(trace: str | Path, windows: list[str], cluster: str
                        ) -> tuple[SimCluster, list[list[TraceJob]]]:
    """The simulated cluster of ``cluster`` and each window's jobs that fit it; a
    ``ValueError`` (one line) for a bad trace, window or cluster, or a window with no such
    job."""
    from slurm_marl.sim.cluster import ClusterSpecError, parse_cluster
    from slurm_marl.sim.traces import TraceError
    try:
        sim_cluster = parse_cluster(cluster)
        jobs = [load_workload(trace, w or None, sim_cluster) for w in windows]
    except (TraceError, ClusterSpecError, OSError) as exc:
        raise ValueError(str(exc)) from None
    for w, j in zip(windows, jobs):
        if not j:
            raise ValueError(f"no jobs in {trace} for window {w!r} that fit cluster "
                             f"{cluster!r}")
    return sim_cluster, jobs
