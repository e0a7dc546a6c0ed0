"""Training and validation windows: the virtual cluster's past (a Philly trace) or any
trace's jobs, rebased, with their load."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.traces import TraceError, TraceJob, Window, load_trace



@dataclass(frozen=True)
class HistoryWindow:
    window: str             # "vc=...,rows=A:B"
    first_row: int
    end_row: int            # exclusive
    load: float
    jobs: tuple[TraceJob, ...]


def load_of(jobs: Sequence[TraceJob], gpus: int) -> float:
    """GPU-seconds submitted per second of the submit span, per cluster GPU."""
    if len(jobs) < 2 or gpus <= 0:
        return 0.0
    span = jobs[-1].submit_time_s - jobs[0].submit_time_s
    work = sum(j.duration_s * j.num_gpus for j in jobs)
    return work / span / gpus if span > 0 else math.inf


def _rebased(jobs: Sequence[TraceJob]) -> tuple[TraceJob, ...]:
    from dataclasses import replace
    t0 = jobs[0].submit_time_s if jobs else 0.0
    return tuple(replace(j, job_id=i, submit_time_s=j.submit_time_s - t0)
                 for i, j in enumerate(jobs))


def trace_window(label: str, jobs: Sequence[TraceJob], gpus: int) -> HistoryWindow:
    """Any trace's jobs (in submit order) as one window the search and the guard take,
    rebased to its first submission, with its load on ``gpus`` GPUs: how a site's own
    history (``train/site_tuning.py``) is learned from, where a Philly trace has
    ``history_windows``. Its rows are the jobs' positions in ``jobs``."""
    return HistoryWindow(label, 0, len(jobs), load_of(jobs, gpus), _rebased(jobs))


def history_windows(trace: str, vc: str, before_row: int, cluster: SimCluster, *,
                    rows: int = 500, count: int = 2, min_load: float = 0.9,
                    exclude: Sequence[str | Window] = ()) -> list[HistoryWindow]:
    """Up to ``count`` windows of ``rows`` consecutive rows of virtual cluster ``vc``, all
    ending at or before ``before_row`` (only rows ``0:before_row`` are read), none
    overlapping an ``exclude`` window of that cluster, most recent first, keeping those with
    load >= ``min_load`` (ordering only matters where jobs wait). If fewer are that busy,
    the most recent of the others fill up. Empty when there are fewer than ``rows`` rows."""
    if before_row < rows:
        return []
    try:
        past = load_trace(trace, Window(cluster=vc, first_row=0, rows=before_row))
    except TraceError:
        return []
    banned = []
    for w in exclude:
        w = Window.parse(w) if isinstance(w, str) else w
        if w.cluster == vc:
            banned.append((w.first_row, math.inf if w.rows is None else w.first_row + w.rows))
    gpus = sum(p.nodes * p.sockets * p.gpus_per_socket for p in cluster.partitions_spec)
    busy, quiet = [], []
    end = min(before_row, len(past))
    while end - rows >= 0 and len(busy) < count:
        a = end - rows
        clash = [lo for lo, hi in banned if a < hi and lo < end]
        if clash:
            end = min(clash)
            continue
        jobs = past[a:end]
        hw = HistoryWindow(f"vc={vc},rows={a}:{end}", a, end, load_of(jobs, gpus),
                           _rebased(jobs))
        (busy if hw.load >= min_load else quiet).append(hw)
        end = a
    return busy + quiet[:count - len(busy)]


def split_history(found: Sequence[HistoryWindow], validation_windows: int
                  ) -> tuple[list[HistoryWindow], list[HistoryWindow]]:
    """(validation, training) windows of a ``history_windows`` answer (most recent first):
    the nearest ``validation_windows`` validate, the ones before them train. Both empty
    when there is not at least one window to train on."""
    if len(found) <= validation_windows:
        return [], []
    return list(found[:validation_windows]), list(found[validation_windows:])
