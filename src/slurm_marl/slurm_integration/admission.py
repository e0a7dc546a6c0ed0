"""Admission: which of Slurm's jobs the agent may decide this cycle, and why not.

The one place that answers it, at the Slurm door (the daemon's pipeline asks it once a
cycle, between reading Slurm and deciding). A job is not the agent's to decide when:

- its request cannot be modelled (``Job.left_to_slurm``, set when Slurm's record is read:
  arrays, ``--gpus-per-task``, several partitions, ...): Slurm alone schedules it; one the
  gate delayed gets its start released at once (a user's own later ``--begin`` is kept);
- it is held (by a user, an admin or Slurm itself) or cannot run now (a dependency, ...):
  nothing is written to it;
- a begin time its user or an admin set has not come: at submission (the gate's marker
  keeps it), later by an update, while held, or before a move into a managed partition.
  Any future begin that is neither the gate's delay nor the agent's own lease is such a
  begin (``begin_asked``): the agent starts the job no earlier;
- Slurm requeued it (a node failure) and its delay stands, or its begin time lies beyond
  the gate's grace (the user's or Slurm's, not the agent's lease);
- it was told to start and Slurm has not started it yet (an in-flight start): not decided
  again, its planned GPUs count as taken.

A running job outside ``preempt_partitions`` is admitted as not preemptible. A job the
agent itself narrowed or pinned earlier is read back as its user's request (the marker).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from slurm_marl.domain import (ACTIVE_STATES, ClusterSnapshot, Decision, Job, JobState, Place,
                               Release)
from slurm_marl.slurm_integration.marker import (marker_gpus_per_node, parse_marker,
                                                 requested_gpu_fields, user_begin,
                                                 user_gpu_request)
from slurm_marl.slurm_integration.vocabulary import unschedulable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdmissionRules:
    """What of the agent's configuration admission reads."""

    grace_s: float                          # the gate's delay (``agent.grace_s``)
    interval_s: float                       # the cycle's interval (``agent.interval_s``)
    preempt_partitions: Collection[str] = ()  # where the agent may requeue jobs


@dataclass
class Admitted:
    """One cycle's admission."""

    # the snapshot with in-flight starts held: their jobs gone, their planned GPUs taken
    held: ClusterSnapshot
    # each managed partition's jobs the agent may decide (``decidable``), by partition
    views: dict[str, ClusterSnapshot]
    # jobs left to Slurm whose gate delay is released now (written with the cycle's writes)
    released: list[Release] = field(default_factory=list)
    # (decision, status, message) rows for the decision log: jobs left to Slurm, first seen
    logged: list[tuple[Decision, str, str]] = field(default_factory=list)
    # why a pending job is left alone this cycle (held, its user's begin time), by job
    alone: dict[int, str] = field(default_factory=dict)


def partition_view(snap: ClusterSnapshot, partition: str) -> ClusterSnapshot:
    """The part of the cluster one agent decides for: its nodes and the jobs that may run
    there (a job submitted to several partitions is seen by each)."""
    return partition_views(snap, [partition])[partition]


def partition_views(snap: ClusterSnapshot, partitions: list[str]
                    ) -> dict[str, ClusterSnapshot]:
    """``partition_view`` of each partition, in one pass over the jobs: a running job is in
    the partitions of its nodes, any other job in those it was submitted to."""
    wanted = set(partitions)
    nodes: dict[str, list] = {p: [] for p in partitions}
    parts_of_node: dict[str, tuple[str, ...]] = {}
    for n in snap.nodes:
        parts_of_node[n.name] = n.partitions
        for p in n.partitions:
            if p in wanted:
                nodes[p].append(n)
    jobs: dict[str, list] = {p: [] for p in partitions}
    by_nodes: dict[tuple[str, ...], tuple[str, ...]] = {}     # memo: alike jobs abound
    by_request: dict[str, tuple[str, ...]] = {}
    active = ACTIVE_STATES
    for j in snap.jobs:
        if j.state in active:
            parts = by_nodes.get(j.nodes)
            if parts is None:
                parts = by_nodes[j.nodes] = tuple(sorted(
                    {p for n in j.nodes for p in parts_of_node.get(n, ()) if p in wanted}))
        else:
            parts = by_request.get(j.partition)
            if parts is None:
                parts = by_request[j.partition] = tuple(
                    p for p in dict.fromkeys(j.partition.split(",")) if p in wanted)
        for p in parts:
            jobs[p].append(j)
    return {p: ClusterSnapshot(time_s=snap.time_s, nodes=tuple(nodes[p]), jobs=tuple(jobs[p]),
                               partitions=tuple(x for x in snap.partitions if x.name == p),
                               switches=snap.switches)
            for p in partitions}


class Admission:
    """Admits jobs cycle after cycle; remembers only which jobs left to Slurm it has
    logged (each is logged and recorded once)."""

    def __init__(self, rules: AdmissionRules) -> None:
        self.rules = rules
        self._left_logged: set[int] = set()

    def admit(self, snap: ClusterSnapshot, managed: list[str],
              inflight: dict[int, tuple[Place, float]], preempted: Collection[int],
              own_begins: Mapping[int, tuple[float, float]] | None = None) -> Admitted:
        """The cycle's admission of ``snap`` for the ``managed`` partitions Slurm lists.
        ``inflight``: jobs told to start, with their placement and when (those gone,
        running or past their time are removed from it); ``preempted``: jobs this agent
        requeued itself (it may restart them at once; Slurm's own requeue delay stands);
        ``own_begins``: the begin times this agent wrote itself (its leases), by job, as
        (earliest, latest) the written ``now+N`` can have become."""
        own = own_begins or {}
        released, logged = self._left_to_slurm(snap, managed, own)
        moved_out = self._moved_out(snap, managed, own)
        released += moved_out
        held = self.hold_inflight(snap, inflight)
        alone: dict[int, str] = {}
        views = partition_views(held, managed)
        decidable = {part: self.decidable(views[part], part, preempted, alone, own)
                     for part in managed}
        return Admitted(held, decidable, released, logged, alone)

    def horizon(self, now_s: float) -> float:
        """How far ahead a begin time still counts as the gate's grace (a job whose begin
        is later is the user's or Slurm's, not the agent's to decide or to count)."""
        return now_s + self.rules.grace_s + 2 * self.rules.interval_s

    def may_requeue(self, part: str, victim: Job | None) -> bool:
        """Whether the agent may requeue ``victim`` for a job of ``part``: both partitions
        are among ``preempt_partitions``, wherever the victim runs (a job of an unmanaged
        partition on shared nodes is never requeued)."""
        allowed = self.rules.preempt_partitions
        return (victim is not None and part in allowed
                and bool(victim.partition) and victim.partition in allowed)

    def left_waiting(self, snap: ClusterSnapshot) -> list[Job]:
        """Pending GPU jobs left to Slurm that Slurm may start now or within one grace
        (not held, no unmet dependency, no later begin time of their own)."""
        horizon = self.horizon(snap.time_s)
        return [j for j in snap.pending
                if j.left_to_slurm and j.num_gpus and not j.held
                and not unschedulable(j.pending_reason)
                and (j.eligible_time_s is None or j.eligible_time_s <= horizon)]

    # ---- jobs left to Slurm -------------------------------------------------------------
    def _left_to_slurm(self, snap: ClusterSnapshot, managed: list[str],
                       own: Mapping[int, tuple[float, float]]
                       ) -> tuple[list[Release], list[tuple[Decision, str, str]]]:
        """Pending jobs whose request the agent cannot model: never decided, never leased.
        (releases of those the gate delayed, decision-log rows of those first seen)."""
        released: list[Release] = []
        logged: list[tuple[Decision, str, str]] = []
        for job in snap.pending:
            if not job.left_to_slurm or not any(p in managed
                                                for p in job.partition.split(",")):
                continue
            marker = parse_marker(job.admin_comment)
            if job.held:
                # held by a user, an admin or Slurm itself: no write at all (a start time
                # written to it would be refused, or outlive the hold)
                continue
            if marker is not None and not job.num_gpus and requested_gpu_fields(marker):
                # a GPU request emptied by an older agent's half-done re-pin: repaired by
                # repair_half_done, never released without its GPUs
                continue
            gated = self._delayed_by_agent(job, marker, snap.time_s, own.get(job.job_id))
            release = Release(job.job_id, "left-to-slurm", f"left to Slurm: {job.left_to_slurm}")
            if job.job_id not in self._left_logged:
                self._left_logged.add(job.job_id)
                log.info("job %s: left to Slurm (%s)%s", job.job_id, job.left_to_slurm,
                         "; its gate delay is released" if gated else "")
                if not gated:
                    logged.append((release, "skipped", "nothing to write"))
            if gated:
                released.append(release)
        if len(self._left_logged) > 100_000:
            self._left_logged.clear()
        return released, logged

    def _delayed_by_agent(self, job: Job, marker, now_s: float,
                          own: tuple[float, float] | None) -> bool:
        """Whether the job waits only for a begin time of the gate's or this agent's own
        (not its user's, not Slurm's after a requeue), and may start now as far as its
        user asked: such a delay is released when the job is left to Slurm."""
        eligible = job.eligible_time_s
        if eligible is None or eligible <= now_s + 1 or job.restart_count:
            return False
        asked = user_begin(job, marker)
        if asked is not None and asked > now_s:
            return False
        return self._is_own_begin(job, marker, own)

    def _is_own_begin(self, job: Job, marker, own: tuple[float, float] | None) -> bool:
        """Whether the job's begin time is one the gate or this agent wrote: the gate's
        (submission + grace, on a marked job) or a lease this agent wrote (``own``)."""
        eligible = job.eligible_time_s
        if eligible is None:
            return False
        if own is not None and own[0] - 1 <= eligible <= own[1] + 1:
            return True
        gate = job.submit_time_s + self.rules.grace_s
        return marker is not None and gate - 2 <= eligible <= gate + 5

    def begin_asked(self, job: Job, marker, own: tuple[float, float] | None,
                    now_s: float) -> float | None:
        """The begin time the job's user (or an admin) asks for now, or None: a future
        begin the gate and this agent did not write (set at submission, by a later update,
        while held, before a move into a managed partition), else the marker's (its
        ``--begin`` at submission, ``user_begin``). A requeued job's delay is Slurm's."""
        asked = user_begin(job, marker)
        eligible = job.eligible_time_s
        if eligible is None or eligible <= now_s + 1 or job.restart_count:
            return asked
        if self._is_own_begin(job, marker, own):
            return asked
        return eligible

    def _moved_out(self, snap: ClusterSnapshot, managed: list[str],
                   own: Mapping[int, tuple[float, float]]) -> list[Release]:
        """Marked jobs a user moved to partitions the agent does not manage, still waiting
        for the gate's delay (or the agent's lease): released, as Slurm alone would let
        them start now (a begin their user asked for is kept)."""
        out = []
        wanted = set(managed)
        for job in snap.pending:
            if job.held or not job.admin_comment or any(
                    p in wanted for p in job.partition.split(",")):
                continue
            marker = parse_marker(job.admin_comment)
            if marker is None or not self._delayed_by_agent(job, marker, snap.time_s,
                                                           own.get(job.job_id)):
                continue
            why = (f"moved to partition {job.partition}, which the agent does not manage: "
                   "the gate's delay is released")
            if job.job_id not in self._left_logged:
                self._left_logged.add(job.job_id)
                log.info("job %s: %s", job.job_id, why)
            out.append(Release(job.job_id, "left-to-slurm", why))
        return out

    # ---- in-flight starts ---------------------------------------------------------------
    def hold_inflight(self, snap: ClusterSnapshot, inflight: dict[int, tuple[Place, float]]
                      ) -> ClusterSnapshot:
        """Slurm starts a released job a moment after ``StartTime=now``. Until it does (or
        six intervals pass), the job is decided as running where it was told to start
        (since then, on its planned GPUs, not preemptible): the next cycle neither moves
        it nor gives its GPUs to another job, and the Slurm-alone guard keeps seeing it
        (a job gone from the view is a job ended, to the guard's replica: it would free
        the job's GPUs there and run ahead of Slurm alone). For deciding only: writes see
        the real state."""
        ttl = max(5.0, 6 * self.rules.interval_s)
        held: dict[str, set[int]] = {}
        told: dict[int, Job] = {}
        for job_id, (place, when) in list(inflight.items()):
            job = snap.job(job_id)
            if job is None or not job.is_pending or snap.time_s - when > ttl:
                del inflight[job_id]
                continue
            taken = _take_planned(snap, place, held)
            told[job_id] = job.with_(
                state=JobState.RUNNING, nodes=tuple(taken) or tuple(place.nodes),
                start_time_s=when,
                gpu_alloc=tuple((n, tuple(sorted(g))) for n, g in taken.items()),
                preemptible=False, pending_reason="")
        if not told:
            return snap
        nodes = tuple(replace(n, used_gpu_indices=n.used_gpu_indices | held[n.name])
                      if n.name in held else n for n in snap.nodes)
        return replace(snap, nodes=nodes, jobs=tuple(told.get(j.job_id, j)
                                                     for j in snap.jobs))

    # ---- the jobs of one partition ------------------------------------------------------
    def decidable(self, view: ClusterSnapshot, part: str = "",
                  preempted: Collection[int] = (), alone: dict[int, str] | None = None,
                  own_begins: Mapping[int, tuple[float, float]] | None = None
                  ) -> ClusterSnapshot:
        """``view`` without the pending jobs the agent must not touch (the module's list);
        why a held or not-yet-begun job is left alone goes into ``alone``. Running jobs
        outside ``preempt_partitions`` (or all, if ``part`` is not one) are marked not
        preemptible. A job the agent narrowed to one GPU group (moving its request to the
        per-job field) is read as the per-node request its user made (the marker)."""
        alone = alone if alone is not None else {}
        own = own_begins or {}
        horizon = self.horizon(view.time_s)
        keep = []
        pending = JobState.PENDING
        for j in view.jobs:
            if j.state is pending:
                j = self._pending_admitted(j, view.time_s, horizon, preempted, alone,
                                           own.get(j.job_id))
                if j is None:
                    continue
            elif j.preemptible and not self.may_requeue(part, j):
                j = j.with_(preemptible=False)
            keep.append(j)
        return ClusterSnapshot(time_s=view.time_s, nodes=view.nodes, jobs=tuple(keep),
                               partitions=view.partitions, switches=view.switches)

    def _pending_admitted(self, j: Job, now_s: float, horizon: float,
                          preempted: Collection[int], alone: dict[int, str],
                          own: tuple[float, float] | None = None) -> Job | None:
        """A pending job as the agent decides it, or None if it is not the agent's."""
        if j.left_to_slurm:
            return None
        if j.held or unschedulable(j.pending_reason):
            alone[j.job_id] = (
                f"held by Slurm ({j.pending_reason or 'priority 0'}): nothing written "
                "until it is released" if j.held else
                f"cannot run now ({j.pending_reason}): nothing written")
            return None
        marker = parse_marker(j.admin_comment)
        begin = self.begin_asked(j, marker, own, now_s)
        if begin is not None and begin > now_s:
            # a begin its user or an admin set: Slurm alone would not start it yet
            alone[j.job_id] = (
                "waits for the begin time its user (or an admin) set, "
                f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(begin))}"
                ": the agent starts it no earlier")
            return None
        if marker is not None:
            j = _as_user_asked(j, marker)
        if (j.restart_count > 0 and j.job_id not in preempted
                and j.eligible_time_s and j.eligible_time_s > now_s + 1):
            return None  # requeued by Slurm (node failure...): Slurm's delay stands
        # a user's later --begin is theirs; Slurm's own delay after a requeue
        # (cred_expire + 1 s) is not, and the agent restarts such jobs in turn
        if j.eligible_time_s and j.eligible_time_s > horizon and j.restart_count == 0:
            return None
        return j


def _as_user_asked(j: Job, marker) -> Job:
    """A marked job with the agent's own earlier pins taken off: read as its user asked."""
    if j.required_nodes and marker.user_gave_no_nodes:
        # Slurm keeps the agent's ReqNodeList across a requeue; unless the user named
        # nodes at submission, it is the agent's own pin, not a constraint (else a
        # preempted job could only ever resume where it ran before).
        j = j.with_(required_nodes=())
    if j.gpu_type is not None and user_gpu_request(j)[1] is None:
        j = j.with_(gpu_type=None)  # the agent's own earlier pin, not the user's
    if j.gpus_per_job and not j.gpus_per_node and marker.per_node_request:
        # the agent's own narrowing (TresPerJob, NumNodes=1-1): still the user's
        # per-node request, not a per-job one free to spread over nodes
        per_node = marker_gpus_per_node(marker)
        j = j.with_(gpus_per_node=per_node, gpus_per_job=0,
                    node_count=max(1, j.gpus_per_job // per_node))
    return j


def _take_planned(snap: ClusterSnapshot, place: Place, held: dict[str, set[int]]
                  ) -> dict[str, set[int]]:
    """The GPUs an in-flight placement will take, added to ``held`` (by node); returns
    them (by node, in the placement's order of nodes)."""
    taken_here: dict[str, set[int]] = {}
    for a in place.allocs:
        node = snap.node(a.node)
        if node is None or a.group >= len(node.gpu_groups):
            continue
        taken = held.setdefault(a.node, set())
        free = [i for i in node.free_in_group(node.gpu_groups[a.group]) if i not in taken]
        taken.update(free[:a.gpus])
        taken_here.setdefault(a.node, set()).update(free[:a.gpus])
    return taken_here