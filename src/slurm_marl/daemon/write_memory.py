"""What the agent remembers of its own writes between cycles.

Jobs told to start that Slurm has not started yet (in flight: admission holds them), the
begin times of its leases and the priorities it wrote (so that a begin or a priority someone
else set is told from its own), jobs
it requeued itself and when (it may restart them, skipping Slurm's own delay after a
requeue, but not within ``REQUEUE_SETTLE_S`` of it: ``settled``), when each of its
reservations was last written, and jobs whose last write Slurm refused. A refusal that
will not change (a job Slurm holds, a request it will not take) is retried with a doubling
pause, not every cycle, and logged once.

Why the settling: a requeue revokes the ended run's job credential on its nodes, stamped in
whole seconds, and slurmd refuses a credential made in that second or before ("Job
credential revoked"), upon which Slurm fails the batch job instead of requeueing it. Slurm's
own delay after a requeue (``cred_expire`` + 1 s) avoids that; an agent restarting the job
within the same second does not (seen in a 60x replay: a job requeued 0.3 s after it
started and placed again 0.7 s later ended FAILED). A few seconds clear it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from slurm_marl.daemon.writes import place_key
from slurm_marl.domain import (ClusterSnapshot, Decision, Defer, EndReservation, Place,
                               Preempt, Release, Reserve, SetPriority)
from slurm_marl.slurm_integration.ports import WriteResult, WriteStatus

log = logging.getLogger(__name__)


@dataclass
class Written:
    """What a cycle's accepted writes change in the store."""

    reservations_added: list[tuple[str, int, str]] = field(default_factory=list)
    reservations_ended: list[str] = field(default_factory=list)
    # (job id, kind, value): what was written, for the next cycle's ``written``
    marks: list[tuple[int, str, str]] = field(default_factory=list)


class WriteMemory:
    REFUSED_PAUSE_MAX_S = 600.0
    # No start of a job the agent requeued until this long after the cycle that requeued it
    # (module docstring): the requeue is written within the cycle, and a second stamp on
    # either side of it is cleared.
    REQUEUE_SETTLE_S = 3.0

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        # job id -> (placement, when it was told to start)
        self.inflight: dict[int, tuple[Place, float]] = {}
        # job id -> the time of the cycle in which this agent requeued it
        self.preempted: dict[int, float] = {}
        self.resv_renewed: dict[str, float] = {}
        # job id -> (no write before, refusals in a row)
        self.refused: dict[int, tuple[float, int]] = {}
        # job id -> (earliest, latest) begin time this agent's last lease can have given it
        # (``StartTime=now+N`` is timed by slurmctld): a begin time outside it that the
        # gate did not write either is its user's or an admin's (admission keeps it)
        self.begins: dict[int, tuple[float, float]] = {}
        # job id -> the priority this agent last wrote (``Priority=``): one that differs
        # in Slurm was set by someone else (``scontrol top``, an admin, a release)
        self.priorities: dict[int, int] = {}
        # job id -> its nice value when this agent first wrote its priority: Slurm sets a
        # job's nice to 0 when its priority is set, and the agent keeps the user's ask
        self.nices: dict[int, int] = {}

    def inflight_nodes(self) -> set[str]:
        return {n for place, _ in self.inflight.values() for n in place.nodes}

    def past_backoff(self, writes: list[Decision], now_s: float) -> list[Decision]:
        """``writes`` but those to jobs whose last write was refused and whose pause is not
        over (reservations are always ended)."""
        if not self.refused:
            return writes
        for job_id in [j for j, (until, _) in self.refused.items()
                       if until < now_s - self.REFUSED_PAUSE_MAX_S]:
            del self.refused[job_id]   # long past: forgotten
        return [d for d in writes if isinstance(d, EndReservation)
                or self.refused.get(d.job_id, (0.0, 0))[0] <= now_s]

    def settled(self, writes: list[Decision], now_s: float) -> list[Decision]:
        """``writes`` but the starts of jobs this agent requeued less than
        ``REQUEUE_SETTLE_S`` ago (module docstring): they wait a cycle or two, pending."""
        if not self.preempted:
            return writes
        out = []
        for d in writes:
            since = self.preempted.get(d.job_id)
            if isinstance(d, Place) and d.start_now and since is not None \
                    and now_s - since < self.REQUEUE_SETTLE_S:
                log.debug("job %s: not started yet, %.1f s after the agent requeued it "
                          "(Slurm revokes the ended run's credential by the second)",
                          d.job_id, now_s - since)
                continue
            out.append(d)
        return out

    def remember(self, results: list[WriteResult], snap: ClusterSnapshot,
                 done_s: float | None = None) -> Written:
        """Take in a cycle's write results (``done_s``: when the writes ended, the
        cycle's time if not given); what they change in the store."""
        self._note_refusals(results, snap.time_s)
        self._forget_gone(snap)
        done_s = snap.time_s if done_s is None else max(done_s, snap.time_s)
        out = Written()
        for r in results:
            d = r.decision
            if isinstance(d, Reserve):
                if r.ok:
                    out.reservations_added.append((d.name, d.job_id, ",".join(d.nodes)))
                    self.resv_renewed[d.name] = snap.time_s
            elif isinstance(d, EndReservation):
                if r.ok or r.status is WriteStatus.VANISHED:
                    out.reservations_ended.append(d.name)
                    self.resv_renewed.pop(d.name, None)
            elif not r.ok:
                continue
            elif isinstance(d, Preempt):
                self.preempted[d.job_id] = snap.time_s
            elif isinstance(d, SetPriority):
                self._priority_written(d, snap, out)
            elif isinstance(d, Defer):
                lo, hi = snap.time_s + d.seconds, done_s + d.seconds
                self.begins[d.job_id] = (lo, hi)
                out.marks.append((d.job_id, "begin", f"{lo:.0f},{hi:.0f}"))
            elif isinstance(d, Place):
                out.marks.append((d.job_id, "place", place_key(d)))
                if d.start_now:
                    self.inflight[d.job_id] = (d, snap.time_s)
                    self.begins.pop(d.job_id, None)
            elif isinstance(d, Release):
                self.begins.pop(d.job_id, None)
        return out

    def _priority_written(self, d: SetPriority, snap: ClusterSnapshot, out: Written) -> None:
        """A priority written: a SiteFactor as the store's mark; a ``Priority=`` also
        remembered, with the job's nice then (Slurm sets it to 0 on the write)."""
        if d.site_factor:
            out.marks.append((d.job_id, "site_factor", str(d.priority)))
            return
        self.priorities[d.job_id] = d.priority
        out.marks.append((d.job_id, "priority", str(d.priority)))
        job = snap.job(d.job_id)
        if job is not None and job.nice and self.nices.get(d.job_id) != job.nice:
            self.nices[d.job_id] = job.nice
            out.marks.append((d.job_id, "nice", str(job.nice)))

    def take_back(self, written: dict[tuple[int, str], str]) -> None:
        """The leases and priorities a restarted agent wrote before (the store's marks of
        the jobs still waiting)."""
        for (job_id, kind), value in written.items():
            try:
                if kind == "begin":
                    lo, hi = (float(v) for v in value.split(","))
                    self.begins[job_id] = (lo, hi)
                elif kind == "priority":
                    self.priorities[job_id] = int(value)
                elif kind == "nice":
                    self.nices[job_id] = int(value)
            except ValueError:
                log.debug("job %s: unreadable %s mark %r", job_id, kind, value)

    def _forget_gone(self, snap: ClusterSnapshot) -> None:
        """Forget the requeues of jobs Slurm no longer lists (ended and purged): a daemon
        that runs for months would otherwise keep one entry for every job it ever
        requeued. Checked only once the table outgrows the queue, so a cycle pays for it
        rarely."""
        limit = max(64, 2 * len(snap.jobs))
        tables = (self.preempted, self.begins, self.priorities, self.nices)
        if max(len(t) for t in tables) <= limit:
            return
        listed = {j.job_id for j in snap.jobs}
        for table in tables:
            for job_id in [j for j in table if j not in listed]:
                del table[job_id]

    def _note_refusals(self, results: list[WriteResult], now_s: float) -> None:
        ok = {r.decision.job_id for r in results if r.ok}
        for job_id in ok:
            self.refused.pop(job_id, None)
        for r in results:
            d = r.decision
            if r.status is not WriteStatus.REFUSED or d.job_id in ok \
                    or isinstance(d, (Reserve, EndReservation)):
                continue
            _, count = self.refused.get(d.job_id, (0.0, 0))
            pause = min(self.REFUSED_PAUSE_MAX_S, max(1.0, self.interval_s) * 2 ** count)
            self.refused[d.job_id] = (now_s + pause, count + 1)
            (log.warning if count == 0 else log.debug)(
                "job %s: Slurm refused the agent's %s (%s); no write to it for %.0f s%s",
                d.job_id, type(d).__name__, r.message, pause,
                "" if count == 0 else f" (refusal {count + 1} in a row)")
