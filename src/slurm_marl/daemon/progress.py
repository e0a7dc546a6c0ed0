"""Observed speeds from jobs' progress reports: the interference model's online samples.

Harmony fits its interference (reward) model on *observed* speeds of co-located jobs. On a
real cluster the agent cannot see a job's speed from Slurm; a job that wants its placements
learned reports its progress in ``<progress_dir>/<job id>`` as one line

    <work done, in seconds at solo speed> <unix time of the report>

(a training loop writes iterations done x its solo seconds per iteration; the replay's
payload writes exactly this). Every cycle the sampler works out each running job's
co-location the way the performance model reads it (``colocation.snapshot_neighbourhoods``:
models in its GPU groups, in the other groups of its nodes, multi-node jobs under its leaf
switches) and keeps one open *segment* per job. When the co-location changes, or the job
stops, the segment closes: two reports inside it give ``speed = d(work) / d(time)``, and if
the stretch lasted at least ``min_s`` it becomes a sample in the interference model's format
(``models/interference.py``), stored for ``slurm-marl train interference --from-store``.

Reports that are missing, unreadable, from an earlier run of the job (older than its start)
or going backwards are skipped: a sample is made only from two good reports.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from slurm_marl.domain import ClusterSnapshot, Job, JobState
from slurm_marl.colocation import sample_colocated, snapshot_neighbourhoods

log = logging.getLogger(__name__)

MAX_SPEED = 1.0  # speeds are relative to running alone; a report above it is timing noise


@dataclass
class _Segment:
    key: str
    sample: dict
    run_start_s: float
    first: tuple[float, float] | None   # (work done, report time) at the segment's start


def read_report(path: Path, max_bytes: int = 256) -> tuple[float, float] | None:
    """``(work done, report time)`` from a progress file, or None if it is not usable."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(max_bytes).decode("ascii", "replace").split()
        done, when = float(text[0]), float(text[1])
    except (OSError, ValueError, IndexError):
        return None
    if not (math.isfinite(done) and math.isfinite(when)) or done < 0:
        return None
    return done, when


class ProgressSampler:
    def __init__(self, directory: str | Path, min_s: float = 5.0) -> None:
        self.dir = Path(directory)
        self.min_s = float(min_s)
        self.open: dict[int, _Segment] = {}
        self.skipped = 0

    def _report(self, job_id: int, not_before: float) -> tuple[float, float] | None:
        rep = read_report(self.dir / str(job_id))
        if rep is None or rep[1] < not_before:
            return None
        return rep

    def observe(self, snap: ClusterSnapshot) -> list[dict]:
        """Fold one snapshot in; return the samples of the segments that closed."""
        out: list[dict] = []
        running = {j.job_id: j for j in snap.jobs
                   if j.state is JobState.RUNNING and j.gpu_alloc}
        hoods = snapshot_neighbourhoods(snap, lambda j: j.model_type)
        colocated = {job_id: sample_colocated(hood) for job_id, (_, hood) in hoods.items()}

        def key(job: Job) -> str | None:
            levels = colocated.get(job.job_id)
            return None if levels is None else repr((job.gpu_alloc, levels))

        for job_id in list(self.open):
            job = running.get(job_id)
            seg = self.open[job_id]
            if job is not None and key(job) == seg.key and \
                    (job.start_time_s or seg.run_start_s) == seg.run_start_s:
                if seg.first is None:
                    seg.first = self._report(job_id, seg.run_start_s)
                continue
            sample = self._close(job_id, seg)
            if sample is not None:
                out.append(sample)
            del self.open[job_id]
        for job_id, job in running.items():
            if job_id in self.open or job_id not in hoods or not job.model_type:
                continue
            start = job.start_time_s or snap.time_s
            model, hood = hoods[job_id]
            sample = {"job_id": job_id, "run": job.restart_count, "model_type": model,
                      "num_gpus": sum(len(i) for _, i in job.gpu_alloc) or job.num_gpus,
                      "groups": max(1, hood.n_groups), "nodes": max(1, hood.n_nodes),
                      "leaves": max(1, hood.n_leaves), "cross_leaf": hood.n_leaves > 1,
                      "colocated": colocated[job_id], "source": "observed"}
            self.open[job_id] = _Segment(key(job), sample, start, self._report(job_id, start))
        return out

    def _close(self, job_id: int, seg: _Segment) -> dict | None:
        first = seg.first
        last = self._report(job_id, seg.run_start_s)
        if first is None or last is None:
            self.skipped += 1
            return None
        elapsed = last[1] - first[1]
        work = last[0] - first[0]
        if elapsed < self.min_s or work < 0:
            self.skipped += 1
            return None
        speed = min(MAX_SPEED, work / elapsed)
        if speed <= 0:
            self.skipped += 1
            return None
        return {**seg.sample, "time_s": round(last[1], 3), "duration_s": round(elapsed, 3),
                "speed": round(speed, 5)}

    def forget(self) -> None:
        self.open.clear()


def usable_dir(directory: str) -> Path | None:
    """The configured progress directory, or None (with a log line) if it cannot be read."""
    if not directory:
        return None
    path = Path(directory)
    if not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
        log.warning("agent.progress_dir %s is not a readable directory: no speed samples "
                    "until it is", path)
        return None
    return path
