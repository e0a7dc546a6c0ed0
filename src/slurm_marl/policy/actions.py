"""The cycle's actions beyond allocation, as in Volcano's ``actions/``: preemption and
backfill's reservation. ``framework.Policy.run_cycle`` allocates jobs in rank order and
calls these for a job that cannot start on free GPUs.

**Preemption** (Tiresias: demoted jobs yield to higher queues). A pending job that cannot
start on free GPUs takes GPUs of the lowest-ranked running jobs below it: victims are added
from the lowest up until the job fits, and the candidate that takes the fewest GPUs from
running jobs wins (then the place plugins' preference). Running jobs are ranked only when
some pending job first needs them: walking all jobs in order and skipping the running ones
is the same as asking, for each pending job, which running jobs rank below it.

**Backfill's reservation.** With ``backfill_reserve``, the first job of a partition that
cannot start holds the GPUs it will wait for, so later jobs that fit elsewhere start and
none takes those GPUs this cycle. Without it, Tiresias' fit-first: any later job that fits starts, and order is
enforced by preemption.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol

from slurm_marl.domain import Job, Place, Preempt
from slurm_marl.placement_shapes import Candidate, Capacity, job_shape, per_node_share
from slurm_marl.policy.plugins import OrderPlugin
from slurm_marl.policy.state import ACTIVE_STATES, CycleState


class RankedJob(NamedTuple):
    job: Job
    queue: int
    sort_key: tuple


class CyclePolicy(Protocol):
    """What the actions use of the policy running the cycle (``framework.Policy``)."""

    order: OrderPlugin

    def rank(self, jobs: Sequence[Job], now_s: float) -> list[RankedJob]: ...

    def generate(self, job: Job, state: CycleState, cap: Capacity,
                 flags: tuple[bool, bool, bool] | None = None,
                 alike_in: Capacity | None = None) -> list[Candidate]: ...

    def score(self, job: Job, cands: list[Candidate], state: CycleState) -> tuple: ...

    def decision(self, job: Job, cand: Candidate, terms, start_now: bool, state: CycleState,
                 reason: str) -> Place: ...


class Preemption:
    """The preemption action over one cycle's snapshot and state."""

    def __init__(self, policy: CyclePolicy, jobs: Iterable[Job], now_s: float,
                 state: CycleState, ranked: list[RankedJob] | None = None) -> None:
        self.policy = policy
        self.state = state
        self._jobs, self._now = jobs, now_s
        self._ranked: list[RankedJob] | None = None
        self._given = ranked  # the running jobs, when the caller has ranked them already
        self._keys: list[tuple] = []
        self._gpus_from: list[int] = []      # GPUs held from the i-th down: a search bound
        # Allowed nodes -> [lowest index not scanned yet, the nodes as a set, the ranked
        # running jobs scanned holding GPUs there (indices, lowest ranked first; negated),
        # GPUs they hold there summed from the lowest]: scanned upwards as far as a search
        # needs, once a cycle per set of allowed nodes (a partition); a running job's
        # allocations only go (preempted) within a cycle
        self._touching: dict[tuple[int, ...], list] = {}
        self.preempted: set[int] = set()

    def _rank_running(self) -> None:
        ranked = self._ranked = self._given if self._given is not None else self.policy.rank(
            [j for j in self._jobs if j.state in ACTIVE_STATES], self._now)
        self._keys = [x.sort_key for x in ranked]
        self._gpus_from = [0] * (len(ranked) + 1)
        for i in range(len(ranked) - 1, -1, -1):
            self._gpus_from[i] = self._gpus_from[i + 1] + job_shape(ranked[i].job)[0]

    def cut(self, r: RankedJob) -> int:
        """Where ``r`` falls among the running jobs: ``take`` may preempt those from this
        index down (a larger cut, fewer candidates)."""
        if self._ranked is None:
            self._rank_running()
        return bisect.bisect_right(self._keys, r.sort_key)

    def take(self, r: RankedJob) -> tuple[list[Preempt], Place] | None:
        """Start ``r``'s job on GPUs of running jobs ranked below it: (the preemptions, the
        placement), claimed in the state; None when no set of such jobs makes room."""
        first = self.cut(r)
        if first >= len(self._ranked):
            return None
        job, state = r.job, self.state
        # Only the running jobs holding GPUs on the allowed nodes: the others were skipped
        # one by one; the GPUs those hold there bound the search as the GPUs held did.
        touching, m, held = self._touching_from(state.allowed_nodes(job), first)
        taken = self._search(job, self._lower(touching, m), min(self._gpus_from[first], held))
        if taken is None:
            return None
        cand, terms, victims = taken
        preempts = []
        for victim in victims:
            self.preempted.add(victim.job_id)
            preempts.append(Preempt(job_id=victim.job_id, plugin=self.policy.order.key,
                                    reason=f"yields to job {job.job_id} (queue {r.queue})"))
            state.release_running(victim)
        state.claim(job, cand)
        return preempts, self.policy.decision(
            job, cand, terms, True, state,
            "starts now after preempting " + ",".join(str(v.job_id) for v in victims))

    def _touching_from(self, allowed: tuple[int, ...], first: int
                       ) -> tuple[list[int], int, int]:
        """(Indices of the ranked running jobs holding GPUs on ``allowed``, lowest ranked
        first; how many of them rank from ``first`` down; the GPUs those hold there)."""
        t = self._touching.get(allowed)
        if t is None:
            t = self._touching[allowed] = [len(self._ranked), set(allowed), [], [], [0]]
        scanned, nodes, neg, touching, held = t
        if scanned > first:
            allocs_of, ranked = self.state.running_allocs, self._ranked
            for i in range(scanned - 1, first - 1, -1):
                here = sum(k for n, _, k in allocs_of.get(ranked[i].job.job_id, ())
                           if n in nodes)
                if here:
                    neg.append(-i)
                    touching.append(i)
                    held.append(held[-1] + here)
            t[0] = first
        m = bisect.bisect_right(neg, -first)
        return touching, m, held[m]

    def _lower(self, touching: list[int], m: int) -> Iterator[Job]:
        """Running jobs ``touching[:m]`` (ranked, lowest first), not yet preempted and
        preemptible (the daemon marks jobs outside its preempt partitions otherwise)."""
        ranked, preempted = self._ranked, self.preempted
        for j in range(m):
            job = ranked[touching[j]].job
            if job.preemptible and job.job_id not in preempted:
                yield job

    def _search(self, job: Job, lower: Iterable[Job], lower_gpus: int):
        """Free GPUs of the jobs in ``lower`` (lowest first) until ``job`` fits; ``lower_gpus``
        bounds the GPUs they hold, so hopeless cases stop before any search."""
        policy, state = self.policy, self.state
        total, _, _ = job_shape(job)
        allowed = set(state.allowed_nodes(job))
        free_now = sum(sum(state.free[n]) for n in allowed)
        if free_now + lower_gpus < total:
            return None
        # The free rows, each copied when a victim first frees GPUs there (nothing writes
        # the overlay otherwise): not all the cluster's rows per search
        overlay = list(state.free)
        copied: set[int] = set()
        cpus, mem = state.free_cpus[:], state.free_mem[:]
        added: list[Job] = []
        with state.hosts_as(cpus, mem):
            for victim in lower:
                allocs = state.running_allocs.get(victim.job_id, ())
                if not any(n in allowed for n, _, _ in allocs):
                    continue
                vtotal = sum(k for _, _, k in allocs)
                for n, g, k in allocs:
                    if n not in copied:
                        overlay[n] = overlay[n][:]
                        copied.add(n)
                    overlay[n][g] += k
                    if n in allowed:
                        free_now += k
                for n, k in _per_node(allocs).items():
                    cpus[n] += per_node_share(victim.cpus, k, vtotal)
                    mem[n] += per_node_share(victim.mem_mib, k, vtotal)
                added.append(victim)
                if free_now < total:
                    continue
                # One node per class of alike nodes on the what-if capacity *and* the free
                # GPUs now: the rule below prefers the fewest GPUs taken from running jobs,
                # which the free GPUs now decide (nodes alike on the overlay alone need not
                # agree: 4 free + a 4-GPU victim, or 8 GPUs of victims).
                cands = policy.generate(job, state, overlay, alike_in=state.free)
                if not cands:
                    continue
                # Fewest GPUs taken from running jobs first, then the plugins' preference.
                taken = [sum(max(0, k - state.free[n][g]) for n, g, k in c.allocs)
                         for c in cands]
                fewest = min(taken)
                cands = [c for c, t in zip(cands, taken) if t == fewest]
                with state.judging(overlay):
                    best, terms, _ = policy.score(job, cands, state)
                if best is None:
                    continue
                return best, terms, _victims_for(best, state, added)
        return None


def _victims_for(cand: Candidate, state: CycleState, added: list[Job]) -> list[Job]:
    """The jobs of ``added`` (lowest ranked first) whose GPUs ``cand`` needs."""
    rank_of = {v.job_id: i for i, v in enumerate(added)}  # 0 = lowest ranked
    victims: dict[int, Job] = {}
    by_id = {v.job_id: v for v in added}
    for n, g, k in cand.allocs:
        short = k - state.free[n][g]
        if short <= 0:
            continue
        holders = sorted((h for h in state.holders[n][g] if h[0] in rank_of),
                         key=lambda h: rank_of[h[0]])
        for job_id, gpus in holders:
            if short <= 0:
                break
            if job_id in victims:
                short -= gpus
                continue
            victims[job_id] = by_id[job_id]
            short -= gpus
    return sorted(victims.values(), key=lambda v: rank_of[v.job_id])


def _per_node(allocs) -> dict[int, int]:
    out: dict[int, int] = {}
    for n, _, k in allocs:
        out[n] = out.get(n, 0) + k
    return out


def reserve_for_blocked(policy: CyclePolicy, job: Job, state: CycleState) -> Place | None:
    """Where the first blocked job will start once running jobs end (any placement on the
    usable capacity, preferring the one with the most GPUs already free), its free GPUs
    held in ``state``; None when it fits nowhere even on an empty cluster."""
    overlay = [list(i.group_cap) for i in state.infos]
    # Every node, not one per class: classes are taken on the empty-cluster overlay, where
    # nodes of one shape are alike, but the choice below is by GPUs free *now*, where they
    # are not (one per class kept the first node, not the readiest).
    with state.hosts_as([i.cpus for i in state.infos], [i.mem_mib for i in state.infos]):
        cands = policy.generate(job, state, overlay, (False, False, False))
    if not cands:
        return None
    ready = [sum(min(k, state.free[n][g]) for n, g, k in c.allocs) for c in cands]
    most = max(ready)
    cands = [c for c, r in zip(cands, ready) if r == most]
    with state.judging(overlay):
        best, terms, _ = policy.score(job, cands, state)
    if best is None:
        return None
    state.hold(best)
    return policy.decision(job, best, terms, False, state,
                           "first blocked job: holds these GPUs")
