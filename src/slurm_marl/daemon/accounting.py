"""Attained service and queue time across cycles and restarts (Tiresias' inputs).

Slurm forgets a job's earlier runs when it is requeued; Tiresias needs them: attained
service (GPUs x seconds run, all runs), the length of the last run (starvation knob), and
when the job last became pending. This module folds each snapshot into the stored job
records and returns the snapshot with those fields filled in. Pure apart from the records
it is handed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

from slurm_marl.colocation import sample_colocated, snapshot_neighbourhoods
from slurm_marl.daemon.store import JobRecord
from slurm_marl.domain import ACTIVE_STATES, ClusterSnapshot, Job, JobState


@dataclass
class FinishedRun:
    """One run of a job that ended (completed, failed, cancelled or requeued)."""

    job_id: int
    run: int
    user: str
    name: str
    model_type: str | None
    num_gpus: int
    nodes: str
    gpu_alloc: str
    colocated: dict
    start_s: float
    end_s: float
    state: str


@dataclass
class AccountingResult:
    snapshot: ClusterSnapshot
    records: dict[int, JobRecord]   # the records handed in, folded (by job id)
    finished_runs: list[FinishedRun] = field(default_factory=list)


@dataclass
class AccountMemo:
    """What one daemon's accounting keeps from cycle to cycle to skip work whose inputs did
    not change (an unchanged cycle of thousands of jobs): for each running job the
    co-location entry last merged into what it has seen (``colocation`` hands out the same
    entry while the running jobs are the same; merging it again changes nothing), and for
    each job not running its enriched copy with the job and values it was made from."""

    merged: dict[int, dict] = field(default_factory=dict)
    enriched: dict[int, tuple] = field(default_factory=dict)


@lru_cache(maxsize=1 << 16)
def _joined(nodes: tuple[str, ...]) -> str:
    return ",".join(nodes)


@lru_cache(maxsize=1 << 16)
def _alloc(gpu_alloc: tuple) -> tuple[str, int]:
    """A running job's GPUs as the store keeps them (JSON), and how many: the same few
    thousand allocations, cycle after cycle."""
    return json.dumps(gpu_alloc), sum(len(i) for _, i in gpu_alloc)


_STATE_TEXT = {s: s.value for s in JobState}


_last_colocation: list = [None, None]  # [inputs, result] of the last call


def colocation(snapshot: ClusterSnapshot) -> dict[int, dict[str, list[str]]]:
    """For each running job: the names of the other running jobs at each co-location level
    (``colocation.LEVELS``, as a co-location sample lists models). The answer of the last
    call is given again (not to be mutated) when the running jobs' names and GPUs, the nodes
    and the switches are the same: cycle after cycle, mostly."""
    inputs = (tuple((j.job_id, j.name, j.gpu_alloc) for j in snapshot.jobs
                    if j.state is JobState.RUNNING and j.gpu_alloc),
              snapshot.nodes, snapshot.switches)
    if _last_colocation[0] == inputs:
        return _last_colocation[1]
    result = {job_id: sample_colocated(hood) for job_id, (_, hood)
              in snapshot_neighbourhoods(snapshot, lambda j: j.name).items()}
    _last_colocation[:] = [inputs, result]
    return result


def _fold_run(rec: JobRecord, end_s: float, state: str, colocated: dict,
              runs: list[FinishedRun]) -> None:
    if rec.run_start_s is None:
        return
    length = max(0.0, end_s - rec.run_start_s)
    rec.attained_gpu_s += rec.num_gpus * length
    rec.last_run_s = length
    runs.append(FinishedRun(rec.job_id, rec.restart_count, rec.user, rec.name,
                            rec.model_type, rec.num_gpus,
                            rec.nodes, rec.gpu_alloc, colocated, rec.run_start_s, end_s,
                            state))
    rec.run_start_s = None


def _run_end(rec: JobRecord, now: float) -> float:
    """When a run that ended unseen ended: the last time it was seen running."""
    return rec.last_running_s or rec.last_seen_s or now


def account(snapshot: ClusterSnapshot, records: dict[int, JobRecord],
            colocated_seen: dict[int, dict] | None = None,
            memo: AccountMemo | None = None) -> AccountingResult:
    """Fold ``snapshot`` into ``records`` (mutated and returned) and enrich its jobs.
    ``memo`` (kept by the caller from cycle to cycle) only saves work: the result is the
    same without it."""
    fold = _Fold(snapshot.time_s, colocation(snapshot),
                 colocated_seen if colocated_seen is not None else {}, memo)
    enriched = fold.jobs(snapshot.jobs, records)
    if memo is not None:
        memo.merged, memo.enriched = fold.merged, fold.kept
    fold.vanished(records)
    snap = ClusterSnapshot(time_s=snapshot.time_s, nodes=snapshot.nodes,
                           jobs=tuple(enriched), partitions=snapshot.partitions,
                           switches=snapshot.switches)
    return AccountingResult(snap, records, fold.runs)


def _new_record(job: Job) -> JobRecord:
    return JobRecord(job_id=job.job_id, user=job.user, name=job.name,
                     partition=job.partition, num_gpus=job.num_gpus,
                     submit_time_s=job.submit_time_s, queue_since_s=job.submit_time_s,
                     restart_count=job.restart_count)


class _Fold:
    """One snapshot folded into the job records, job by job."""

    def __init__(self, now: float, colo_now: dict, colocated_seen: dict[int, dict],
                 memo: AccountMemo | None) -> None:
        self.now = now
        self.colo_now = colo_now
        self.colocated_seen = colocated_seen
        self.runs: list[FinishedRun] = []
        self.seen: set[int] = set()
        self.last_merged = memo.merged if memo is not None else {}
        self.last_enriched = memo.enriched if memo is not None else {}
        self.merged: dict[int, dict] = {}
        self.kept: dict[int, tuple] = {}

    def jobs(self, jobs: tuple[Job, ...], records: dict[int, JobRecord]) -> list[Job]:
        """Fold each job into its record (made if new); the jobs enriched. One loop with
        its state in locals: it runs for every job Slurm lists, every cycle."""
        now = self.now
        seen, kept, last_enriched = self.seen, self.kept, self.last_enriched
        running_state, pending_state = JobState.RUNNING, JobState.PENDING
        enriched = []
        for job in jobs:
            job_id = job.job_id
            state = job.state
            running = state is running_state    # holds GPUs (not COMPLETING / SUSPENDED)
            pending = state is pending_state
            seen.add(job_id)
            rec = records.get(job_id)
            if rec is None:
                rec = records[job_id] = _new_record(job)
            if rec.finished_s is not None and (pending or state in ACTIVE_STATES):
                # Gone from Slurm's list and back (its partition renamed and restored
                # across slurmctld restarts): live again, its record and service kept
                rec.finished_s = None
            if running:
                self._running(job, rec)
            elif pending:
                rec.num_gpus = job.num_gpus or rec.num_gpus
                if rec.run_start_s is not None:  # it ran and came back: requeued
                    self._close_run(rec, "REQUEUED")
                    rec.preemptions += 1
                    rec.queue_since_s = now
            elif not state.is_active:
                self._finished(job, rec)
            # (COMPLETING / SUSPENDED: the run is closed when the job moves on)
            rec.restart_count = job.restart_count
            rec.last_state = _STATE_TEXT[state]
            rec.last_seen_s = now
            # The job with what its record knows. Slurm resets SubmitTime when it
            # requeues a job; Tiresias' FIFO inside a queue is by arrival, so the first
            # submit time seen is kept.
            attained = rec.attained_gpu_s
            if running and rec.run_start_s is not None:
                attained += rec.num_gpus * max(0.0, now - rec.run_start_s)
            values = (attained, rec.last_run_s, rec.submit_time_s or job.submit_time_s,
                      rec.queue_since_s, rec.preemptions, job.model_type or rec.model_type)
            # a job not running whose inputs did not change: last cycle's copy
            # (``AccountMemo``); a running job's service moves every cycle: not kept
            last = last_enriched.get(job_id)
            if last is not None and last[0] is job and last[1] == values:
                out = last[2]
            else:
                out = job.with_(attained_gpu_s=values[0], last_run_s=values[1],
                                submit_time_s=values[2], queue_since_s=values[3],
                                preemptions=values[4], model_type=values[5])
            if not running:
                kept[job_id] = (job, values, out)
            enriched.append(out)
        return enriched

    def _close_run(self, rec: JobRecord, state: str, end_s: float | None = None) -> None:
        _fold_run(rec, _run_end(rec, self.now) if end_s is None else end_s, state,
                  self.colocated_seen.pop(rec.job_id, {}), self.runs)

    def _running(self, job: Job, rec: JobRecord) -> None:
        job_id = job.job_id
        # GPUs actually held (a COMPLETING job reports only the nodes still cleaning up)
        alloc_text, held = _alloc(job.gpu_alloc)
        rec.num_gpus = held or job.num_gpus
        if rec.run_start_s is not None and job.restart_count > rec.restart_count:
            # requeued and restarted between two cycles: close the earlier run
            self._close_run(rec, "REQUEUED")
            rec.preemptions += 1
        if rec.run_start_s is None:
            rec.run_start_s = job.start_time_s or self.now
        rec.last_running_s = self.now
        rec.nodes = _joined(job.nodes)
        rec.gpu_alloc = alloc_text
        entry = self.colo_now.get(job_id, {})
        seen = self.colocated_seen
        if job_id not in seen or self.last_merged.get(job_id) is not entry:
            seen_levels = seen.setdefault(job_id, {})
            for lvl, names in entry.items():
                seen_levels[lvl] = sorted(set(seen_levels.get(lvl, [])) | set(names))
        self.merged[job_id] = entry

    def _finished(self, job: Job, rec: JobRecord) -> None:
        now = self.now
        if rec.run_start_s is not None:
            end = job.end_time_s if job.end_time_s and job.end_time_s <= now else None
            self._close_run(rec, _STATE_TEXT[job.state], end)
        if rec.finished_s is None:
            rec.finished_s = job.end_time_s or now

    def vanished(self, records: dict[int, JobRecord]) -> None:
        """Jobs that left squeue while we thought they ran (MinJobAge passed, slurmctld
        restart)."""
        for job_id, rec in records.items():
            if job_id in self.seen or rec.finished_s is not None:
                continue
            if rec.run_start_s is not None:
                self._close_run(rec, "GONE")
            rec.finished_s = rec.last_seen_s or self.now
