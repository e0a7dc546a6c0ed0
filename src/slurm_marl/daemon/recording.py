"""The pipeline's record stage: what a cycle tells the store, so ``explain``, ``status``
and ``queues`` can say what the agent did and why, and a restarted agent goes on.

The job records and the runs that ended (accounting), jobs left alone and why, jobs the
Slurm-alone guard protects, repairs made outside a decision, and the decisions with
Slurm's answers (in shadow mode, what the agent would write, when it changes).
"""

from __future__ import annotations

import json
import logging
from dataclasses import fields
from operator import attrgetter

from slurm_marl.daemon.store import Store
from slurm_marl.daemon.write_memory import Written
from slurm_marl.daemon.writes import place_key
from slurm_marl.domain import ClusterSnapshot, Decision, Place, Release, SetPriority
from slurm_marl.policy.guard import GuardedOrder
from slurm_marl.slurm_integration.ports import WriteResult
from slurm_marl.slurm_integration.vocabulary import NEVER_RUNNABLE

log = logging.getLogger(__name__)

_FIELDS_BUT_REASON: dict[type, attrgetter] = {}


def _without_reason(d: Decision) -> tuple:
    """A decision's fields but its reason (which may name the time or service attained)."""
    get = _FIELDS_BUT_REASON.get(type(d))
    if get is None:
        get = _FIELDS_BUT_REASON[type(d)] = attrgetter(
            *(f.name for f in fields(d) if f.name != "reason"))
    return get(d)


class Recorder:
    """Writes a cycle's outcome into the store; remembers what it last recorded of jobs
    left alone and, in shadow mode, of each job's decisions (recorded once per change)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # shadow mode: the last decision recorded per (job, kind), but for its reason
        self._shadow_last: dict[tuple[int, type], tuple] = {}
        # why a pending job was left alone, as last recorded
        self._alone_recorded: dict[int, str] = {}

    def accounting(self, records, finished_runs) -> None:
        """The job records folded this cycle and the runs that ended."""
        self.store.records.save(records)
        for run in finished_runs:
            self.store.log.record_outcome(run.job_id, run.run, user=run.user, name=run.name,
                                          model_type=run.model_type,
                                          num_gpus=run.num_gpus, nodes=run.nodes,
                                          gpu_alloc=run.gpu_alloc,
                                          colocated=json.dumps(run.colocated),
                                          start_s=run.start_s, end_s=run.end_s,
                                          state=run.state)

    def rows(self, cycle: int, now_s: float, rows: list[tuple[Decision, str, str]]) -> None:
        if rows:
            self.store.log.record(cycle, now_s, rows)

    def alone(self, cycle: int, now_s: float, alone: dict[int, str]) -> None:
        """Record, once per change, why pending jobs were left alone this cycle (held, a
        user's begin time), so ``explain`` says it; forget jobs no longer left alone."""
        rows = []
        for job_id, why in alone.items():
            if self._alone_recorded.get(job_id) != why:
                rows.append((Release(job_id, "slurm", why), "skipped", "nothing written"))
                log.info("job %s: %s", job_id, why)
        self._alone_recorded = alone
        self.rows(cycle, now_s, rows)

    def guard(self, guards: list[GuardedOrder], snap: ClusterSnapshot) -> int | None:
        """The jobs a Slurm-alone guard protects now (any policy's, for jobs Slurm still
        lists), for `status`, `queues` and the metrics; how many (None: no guard)."""
        if not guards:
            return None
        live = {j.job_id for j in snap.jobs if j.is_pending or j.is_running}
        protected = {}
        for g in guards:
            for job_id, since in g.shadow.protected.items():
                if job_id in live:
                    protected[job_id] = (since, g.shadow.starts.get(job_id))
        self.store.guard.set(protected)
        return len(protected)

    def repairs(self, cycle: int, snap: ClusterSnapshot, job_ids: list[int]) -> None:
        """Say in ``explain`` why the agent rewrote a job's GPU request outside a decision:
        a narrowing Slurm turned down (never runnable) widened back, or a half-done re-pin
        of an older agent restored."""
        rows = []
        for job_id in job_ids:
            job = snap.job(job_id)
            if job is not None and job.pending_reason in NEVER_RUNNABLE:
                why = (f"{job.pending_reason} after the agent narrowed its GPU request: "
                       "its user's request given back (Slurm 22.05, which takes a typed "
                       "request no longer back to untyped: widened over its node's GPU "
                       "groups instead); never narrowed again")
            else:
                why = "GPU request emptied by an older agent's half-done re-pin: restored"
            rows.append((Release(job_id, "repair", why), "ok", ""))
        if rows:
            try:
                self.store.log.record(cycle, snap.time_s, rows)
            except Exception:
                log.exception("could not record the repairs of jobs %s", job_ids)

    def shadow(self, cycle: int, snap: ClusterSnapshot, decisions: list[Decision]) -> None:
        """What the agent would write, recorded when it changes (a decision equal but for
        its reason to the last one recorded for its job is not recorded again): an
        unchanged queue of 5,000 jobs is not 10,000 rows a cycle."""
        changed = self._shadow_changes(decisions, snap)
        self.store.log.record(cycle, snap.time_s, [(d, "shadow", "") for d in changed])

    def _shadow_changes(self, decisions: list[Decision], snap: ClusterSnapshot
                        ) -> list[Decision]:
        last = self._shadow_last
        present = {j.job_id for j in snap.jobs}
        for key in [k for k in last if k[0] not in present]:
            del last[key]  # jobs gone from Slurm
        changed = []
        for d in decisions:
            key = (d.job_id, type(d))
            value = _without_reason(d)
            if last.get(key) != value:
                last[key] = value
                changed.append(d)
        return changed

    def applied(self, cycle: int, snap: ClusterSnapshot, results: list[WriteResult],
                written: Written, advice: list[Place], decisions: list[Decision],
                last_queue: dict[int, int]) -> None:
        """The writes Slurm took and what they change; the decisions with Slurm's answers.
        Plans that need no write (a job waits for GPUs) are recorded once per change, so
        ``explain`` can say what a waiting job waits for; an order that needed no write
        (Slurm's order already agrees) when the job's queue changes (``last_queue``: each
        ordered job's queue of the last cycle), so ``explain`` still says why a job sits
        where it does."""
        now = snap.time_s
        for name, job_id, nodes in written.reservations_added:
            self.store.reservations.add(name, job_id, nodes, now)
        for name in written.reservations_ended:
            self.store.reservations.end(name, now)
        if written.marks:
            self.store.written.mark(written.marks, now)
        self.store.written.mark([(d.job_id, "place", place_key(d)) for d in advice], now)
        done = {r.decision.job_id for r in results if isinstance(r.decision, SetPriority)}
        kept = [d for d in decisions if isinstance(d, SetPriority) and d.job_id not in done
                and last_queue.get(d.job_id) != d.queue]
        self.store.log.record(
            cycle, now,
            [(r.decision, r.status.value, r.message) for r in results]
            + [(d, "planned", "waits; nothing written") for d in advice]
            + [(d, "planned", "order kept; no write needed") for d in kept])
