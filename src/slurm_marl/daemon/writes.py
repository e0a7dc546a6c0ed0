"""Decisions to Slurm writes: what of a cycle's decisions must be written, and how.

Priorities and placements only where they changed; a waiting multi-node job gets a
reservation on its chosen nodes, renewed while it waits and ended when it starts or goes;
preemption of running jobs; the lease (jobs the agent keeps waiting get their begin time
pushed by one grace again shortly before it ends, so a dead agent's jobs become eligible
within one grace). Pure: the agent passes in what its store and memory say was written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_marl.daemon.config import AgentSection
from slurm_marl.daemon.priorities import plan_priorities
from slurm_marl.domain import (ClusterSnapshot, Decision, Defer, EndReservation, Job, Place,
                               Preempt, Release, Reserve, SetPriority)
from slurm_marl.slurm_integration.vocabulary import MAX_PRIORITY, reservation_name


def place_key(p: Place) -> str:
    return json.dumps([list(p.nodes), [[a.node, a.group, a.gpus] for a in p.allocs],
                       p.start_now])


def _pending_in_order(snap: ClusterSnapshot, order: list[SetPriority]
                      ) -> list[tuple[SetPriority, Job]]:
    """``order``'s decisions of pending jobs with their jobs, highest priority first (the
    policy hands them so; sorting a sorted list is one pass). Jobs whose priority a user
    or an admin set (``Job.priority_asked``) are not written: their priority is theirs."""
    job = snap.job
    ranked = [(d, j) for d in order if (j := job(d.job_id)) is not None and j.is_pending
              and not j.priority_asked]
    ranked.sort(key=_minus_priority)
    return ranked


def _minus_priority(dj: tuple[SetPriority, Job]) -> int:
    return -dj[0].priority


def _with_priority(d: SetPriority, priority: int, site_factor: bool) -> SetPriority:
    """``replace(d, priority=..., site_factor=...)`` without its ``__init__``: a shadow
    agent plans every pending job's write every cycle, and ``replace``'s ``__init__`` was
    much of ``priority_writes``' time (docs/benchmarks.md, "Priority writes planned
    without ``dataclasses.replace``")."""
    new = object.__new__(SetPriority)
    new.__dict__.update(d.__dict__)
    new.__dict__["priority"] = priority
    new.__dict__["site_factor"] = site_factor
    return new


def priority_writes(snap: ClusterSnapshot, order: list[SetPriority], priority_base: int
                    ) -> list[SetPriority]:
    """The priorities to write so Slurm's order of this partition's pending jobs is the
    policy's, changing as few jobs as possible (``plan_priorities``)."""
    return ordered_writes(snap, order, priority_base)[0]


def queue_head(ranked: list[tuple[SetPriority, Job]], left: list[Job]) -> tuple[int, int]:
    """(how many of the policy's first jobs must be eligible now, the Slurm priority they
    must all be above) so that no job left to Slurm starts ahead of one submitted before it.

    A job left to Slurm (an array, several partitions, ...) is eligible at once, while the
    agent's jobs wait ineligible for its next cycle (the lease): when GPUs free, Slurm would
    start it first, ahead of jobs Slurm alone would have started before it (it ranks jobs by
    submission under priority/basic; the age factor does so under multifactor). So every job
    the policy ranks at or above the lowest-ranked job submitted before some left job is
    made eligible, with a priority above those left jobs': Slurm itself then starts them
    first, in the policy's order, the moment GPUs free. O(jobs + left)."""
    if not ranked or not left:
        return 0, 0
    first = min((j.submit_time_s, j.job_id) for _, j in ranked)
    jumping = [lj for lj in left if (lj.submit_time_s, lj.job_id) > first]
    if not jumping:
        return 0, 0
    latest = max((lj.submit_time_s, lj.job_id) for lj in jumping)
    head = 1 + max(i for i, (_, j) in enumerate(ranked)
                   if (j.submit_time_s, j.job_id) < latest)
    return head, max(lj.priority for lj in jumping)


def gpus_ahead(ranked: list[tuple[SetPriority, Job]], gpus: int) -> int:
    """How many of the policy's first jobs fit in ``gpus`` GPUs together (the first one
    always, if ``gpus`` > 0): the jobs kept eligible so Slurm starts them between cycles."""
    if gpus <= 0:
        return 0
    total = n = 0
    for _, j in ranked:
        total += j.num_gpus
        if n and total > gpus:
            break
        n += 1
    return n


def ordered_writes(snap: ClusterSnapshot, order: list[SetPriority], priority_base: int,
                   left: list[Job] = (), ahead_gpus: int = 0,
                   own: Mapping[int, int] | None = None
                   ) -> tuple[list[SetPriority], list[int]]:
    """(``priority_writes``, the jobs to make eligible now): with jobs ``left`` to Slurm in
    the partition, the policy's head (``queue_head``) gets priorities above theirs and the
    rest stays below the head, each part changing as few jobs as it can. If the range
    above the left jobs cannot hold the head, the order is written as without them.
    ``ahead_gpus``: the policy's first jobs up to that many GPUs are made eligible too
    (``agent.eligible_ahead_gpus``), in the same order. ``own``: the priorities this
    agent wrote, by job; a job's priority that is not its own is rewritten (so that every
    waiting job carries one of the agent's, and a priority set by someone else later is
    told apart: ``asked_priorities``). None: every current priority counts."""
    ranked = _pending_in_order(snap, order)
    if not ranked:
        return [], []
    current = [j.priority if own is None or own.get(j.job_id) == j.priority else None
               for _, j in ranked]
    head, floor = queue_head(ranked, list(left))
    planned = None
    if head and floor > priority_base:
        try:
            top = plan_priorities(current[:head], floor + 1, MAX_PRIORITY)
            rest = plan_priorities(current[head:], min(priority_base + 1, top[-1] - 1),
                                   top[-1] - 1) if head < len(ranked) else []
            planned = top + rest
        except ValueError:  # no room: the order as before, the queue jump not prevented
            planned = None
    if planned is None:
        planned = plan_priorities(current, priority_base + 1, MAX_PRIORITY)
    writes = [_with_priority(d, p, d.site_factor)
              for (d, _), p, c in zip(ranked, planned, current) if p != c]
    head = max(head, gpus_ahead(ranked, ahead_gpus))
    return writes, [d.job_id for d, _ in ranked[:head]]


def site_factor_writes(snap: ClusterSnapshot, order: list[SetPriority], site_factor_max: int,
                       written: dict) -> list[SetPriority]:
    """``priority_writes`` for a partition whose order goes into the jobs' SiteFactor (added
    to Slurm's multifactor priority): values in [1, ``site_factor_max``]. Slurm shows a
    SiteFactor only through sprio, so the current values are the ones this agent wrote
    (``written``: (job, "site_factor") -> value, the store's)."""
    ranked = _pending_in_order(snap, order)
    if not ranked:
        return []
    current: list[int | None] = []
    for d, _ in ranked:
        value = written.get((d.job_id, "site_factor"))
        current.append(int(value) if value is not None and value.lstrip("-").isdigit()
                       else None)
    planned = plan_priorities(current, 1, site_factor_max)
    return [_with_priority(d, p, True)
            for (d, _), p, c in zip(ranked, planned, current) if p != c]


def translate(snap: ClusterSnapshot, decisions: list[Decision],
              orders: list[tuple[str, list[SetPriority]]], cfg: AgentSection, *,
              written: dict, reservations: dict, left: list[Job], inflight_nodes: set[str],
              resv_renewed: dict[str, float], own_priorities: Mapping[int, int] | None = None
              ) -> tuple[list[Decision], list[Place]]:
    """The pipeline's plan-writes stage: (writes for Slurm, changed plans that need no
    write). ``orders``: each partition's SetPriority decisions, planned apart; ``left``:
    the jobs left to Slurm that Slurm may start soon (admission's ``left_waiting``); the
    rest as ``plan_writes`` takes them; ``own_priorities``: the priorities this agent
    wrote, by job (``ordered_writes``' ``own``)."""
    eligible: set[int] = set()
    priorities = [w for part, order in orders
                  for w in _partition_priorities(snap, part, order, cfg, written, eligible,
                                                 left, own_priorities)]
    return plan_writes(snap, decisions, priorities, cfg, written=written,
                       reservations=reservations, inflight_nodes=inflight_nodes,
                       resv_renewed=resv_renewed, eligible=eligible)


def _partition_priorities(snap: ClusterSnapshot, part: str, order: list[SetPriority],
                          cfg: AgentSection, written: dict, eligible: set[int],
                          left: list[Job], own: Mapping[int, int] | None = None
                          ) -> list[SetPriority]:
    """The partition's priority writes; adds to ``eligible`` the jobs that must not wait
    behind the lease because a job left to Slurm would jump them (``ordered_writes``; not
    for SiteFactor partitions, whose order only nudges Slurm's own)."""
    if part in cfg.site_factor_partitions:
        return site_factor_writes(snap, order, cfg.site_factor_max, written)
    writes, head = ordered_writes(snap, order, cfg.priority_base,
                                  [j for j in left if part in j.partition.split(",")],
                                  cfg.eligible_ahead_gpus, own)
    eligible.update(head)
    return writes


@dataclass
class _Plan:
    """``plan_writes``' work in progress."""

    out: list[Decision]
    advice: list[Place] = field(default_factory=list)
    ending: set[str] = field(default_factory=set)     # reservations ended this cycle
    placed_now: set[int] = field(default_factory=set)  # jobs started this cycle


def plan_writes(snap: ClusterSnapshot, decisions: list[Decision],
                priorities: list[SetPriority], cfg: AgentSection, *, written: dict,
                reservations: dict, inflight_nodes: set[str], resv_renewed: dict[str, float],
                eligible: frozenset[int] | set[int] = frozenset()
                ) -> tuple[list[Decision], list[Place]]:
    """(writes for Slurm, changed plans that need no write). ``priorities``: the priority
    writes, planned per partition; ``written``: (job, "place") -> the placement last written
    (the store's); ``reservations``: the agent's active ones by name; ``inflight_nodes``:
    nodes of jobs told to start and not yet running; ``resv_renewed``: when each
    reservation was last written; ``eligible``: waiting jobs to make eligible now rather
    than lease (``ordered_writes``: ahead of a job left to Slurm)."""
    plan = _Plan(out=list(priorities))
    # Nodes a job is being started on (this cycle, or told to start and not yet
    # running): a reservation there would keep that very job off them (a Slurm
    # reservation blocks every pending job not inside it), so none is made or kept.
    starting = {n for d in decisions if isinstance(d, Place) and d.start_now
                for n in d.nodes}
    starting |= inflight_nodes
    for d in decisions:
        job = snap.job(d.job_id)
        if job is None:
            continue
        if isinstance(d, Place):
            if job.is_pending:
                _place(plan, snap, job, d, cfg, written, reservations, starting,
                       resv_renewed)
        elif isinstance(d, Preempt):
            if job.is_running:
                plan.out.append(d)
    _lease(plan, snap, decisions, cfg, eligible)
    _end_stale_reservations(plan, snap, reservations)
    return plan.out, plan.advice


def _place(plan: _Plan, snap: ClusterSnapshot, job: Job, d: Place, cfg: AgentSection,
           written: dict, reservations: dict, starting: set[str],
           resv_renewed: dict[str, float]) -> None:
    """A pending job's placement: started now (its reservation ended first), or, for a
    multi-node job that waits, a reservation on its chosen nodes."""
    out = plan.out
    name = reservation_name(job.job_id)
    if not d.start_now and written.get((job.job_id, "place")) != place_key(d):
        plan.advice.append(d)
    if d.start_now:
        plan.placed_now.add(job.job_id)
        if name in reservations:   # ended first (the sink does), then started
            out.append(EndReservation(job.job_id, "agent", "its job starts now", name=name))
            plan.ending.add(name)
        # Written before and the job is eligible: nothing to do. A job that is
        # not eligible (requeued since, or its gate) needs StartTime=now again.
        gated = (job.eligible_time_s is not None
                 and job.eligible_time_s > snap.time_s + 1)
        if gated or written.get((job.job_id, "place")) != place_key(d):
            out.append(d)
    elif len(d.nodes) > 1:
        nodes = ",".join(d.nodes)
        if starting & set(d.nodes):
            if name in reservations:
                out.append(EndReservation(job.job_id, "agent", "another job "
                                          "starts on its nodes first", name=name))
                plan.ending.add(name)
            return
        # Lasts one grace and is extended while the job waits, so a dead
        # agent's reservation blocks its nodes for at most one grace.
        stale = snap.time_s - resv_renewed.get(name, -1e18) > cfg.grace_s / 3.0
        if reservations.get(name, {}).get("nodes") != nodes or stale:
            out.append(Reserve(job.job_id, d.plugin, d.reason, name=name,
                               nodes=d.nodes, duration_s=float(cfg.grace_s)))


def _lease(plan: _Plan, snap: ClusterSnapshot, decisions: list[Decision], cfg: AgentSection,
           eligible: frozenset[int] | set[int]) -> None:
    """The lease: keep waiting jobs from becoming eligible behind the agent's back; but
    never let a job left to Slurm jump ahead of them (``eligible``)."""
    renew_before = snap.time_s + 2 * cfg.interval_s + 1
    decided = {d.job_id for d in decisions}
    for job in snap.pending:
        if job.job_id in plan.placed_now or job.job_id not in decided:
            continue
        if job.job_id in eligible:
            if job.eligible_time_s is not None and job.eligible_time_s > snap.time_s + 1:
                plan.out.append(Release(job.job_id, "queue", "eligible now: a job left to "
                                        "Slurm, submitted after it, waits too; Slurm starts "
                                        "this one first, in the agent's order"))
            continue
        if cfg.lease:
            if job.eligible_time_s is not None and job.eligible_time_s <= renew_before:
                plan.out.append(Defer(job.job_id, "lease", f"waits; eligible on its own in "
                                      f"{cfg.grace_s} s unless the agent renews",
                                      seconds=float(cfg.grace_s)))


def _end_stale_reservations(plan: _Plan, snap: ClusterSnapshot, reservations: dict) -> None:
    """Reservations the agent owns whose job no longer waits (it runs inside it, ended,
    or vanished). A pending job keeps its reservation until it starts in it."""
    for name, row in reservations.items():
        job = snap.job(row["job_id"]) if row["job_id"] else None
        if name in plan.ending:
            continue
        if job is None or not job.is_pending:
            plan.out.append(EndReservation(row["job_id"] or 0, "agent",
                                           "its job started or is gone", name=name))
