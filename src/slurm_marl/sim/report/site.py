"""A site's history as the simulator's trace: the jobs of a period, the history a learned
predictor may know before it, and what the simulation leaves out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from slurm_marl.history.records import HistoryJob
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.history_trace import trace_with_sources
from slurm_marl.sim.traces import TraceJob

BASELINE = "fifo-backfill"            # Slurm alone: the calibration and what-if baseline
CALIBRATION_STRENGTH = "none"
# The shipped profiles that run on a history with no other input (las-learned runs too,
# with the demo checkpoint shipped for the test cluster, not one trained for the site).
DEFAULT_PROFILES = ("fifo-backfill", "las-consolidate", "las-lif", "learned-order")
DEFAULT_STRENGTHS = ("none", "medium")

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
