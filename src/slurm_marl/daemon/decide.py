"""The pipeline's decide stage: each managed partition's policy on the jobs admission gave
it, the decisions of all partitions put together."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slurm_marl.domain import ClusterSnapshot, Decision, Job, Preempt, SetPriority


@dataclass
class Decided:
    """The cycle's decisions, and each partition's order (its SetPriority decisions, in
    the policy's order: priority writes are planned per partition)."""

    decisions: list[Decision] = field(default_factory=list)
    orders: list[tuple[str, list[SetPriority]]] = field(default_factory=list)
    pending: int = 0     # pending jobs the policies saw, summed over partitions
    running: int = 0


def settle_orders(views: Mapping[str, ClusterSnapshot], policy_for: Callable[[str], object],
                  now_s: float) -> None:
    """Each policy's order state (Tiresias' queue lists) settled once a cycle over the
    jobs of all the partitions it decides, as the simulator settles its one snapshot
    (``Policy.settle_order``); a policy without such state is left alone."""
    groups: dict[int, tuple[object, dict[int, Job], list[ClusterSnapshot]]] = {}
    for part, view in views.items():
        policy = policy_for(part)
        _, jobs, seen = groups.setdefault(id(policy), (policy, {}, []))
        seen.append(view)
        for job in view.jobs:
            jobs.setdefault(job.job_id, job)
    for policy, jobs, seen in groups.values():
        settle = getattr(policy, "settle_order", None)
        if settle is not None:
            settle(tuple(jobs.values()), now_s, seen)


def decide(views: Mapping[str, ClusterSnapshot], policy_for: Callable[[str], object],
           may_requeue: Callable[[str, Job | None], bool], snap: ClusterSnapshot,
           now_s: float) -> Decided:
    """Run each partition's policy (``views``: the jobs it may decide, in the managed
    partitions' order). A job submitted to several partitions is decided by the first
    that decides it; a preemption the partition may not make (``may_requeue`` on the
    victim as ``snap`` lists it) is dropped: the policy was told (``Job.preemptible``),
    this is a last guard."""
    settle_orders(views, policy_for, now_s)
    out = Decided()
    decided_jobs: set[int] = set()
    for part, view in views.items():
        out.pending += len(view.pending)
        out.running += len(view.running)
        order: list[SetPriority] = []
        first = len(out.decisions)
        for d in policy_for(part).run_cycle(view):
            if d.job_id in decided_jobs and not isinstance(d, Preempt):
                continue  # a multi-partition job is decided by its first partition
            if isinstance(d, Preempt) and not may_requeue(part, snap.job(d.job_id)):
                continue
            out.decisions.append(d)
            if isinstance(d, SetPriority):
                order.append(d)
        out.orders.append((part, order))
        decided_jobs.update(d.job_id for d in out.decisions[first:])
    return out
