"""The scheduling cycle: order jobs, place them one by one, backfill, preempt.

Mechanism apart from policy (as in the Kubernetes scheduler framework): the order plugin
ranks jobs, place plugins filter and score candidate placements, and the actions (backfill,
preemption) are steps of this cycle over the same snapshot. ``run_cycle`` is deterministic,
so the daemon and the simulator reach the same decisions from the same snapshots; it is a
pure function of the snapshot except for an order plugin that keeps state across cycles
(``CycleAwareOrder``: Tiresias' queue lists), which then depends on the snapshots seen before.

What a cycle returns:

* ``SetPriority`` for every pending job, in rank order (priority n..1, larger first);
* ``Preempt`` for running jobs that yield (only with ``profile.preemption``): all jobs,
  running and pending, are walked in order; a pending job that cannot start on free GPUs
  takes GPUs of the lowest-ranked running jobs below it (fewest victim GPUs first);
* ``Place(start_now=True)`` for jobs that start now (winner of the weighted place plugins,
  claimed in the cycle state so later jobs see it);
* with backfill and ``backfill_reserve``, ``Place(start_now=False)`` for the first job that
  cannot start: the GPUs it will wait for, which later jobs may not take this cycle.

Decisions come in that order: priorities, then preemptions, then placements.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from slurm_marl.domain import (ClusterSnapshot, Decision, GroupAlloc, Job, Place, Preempt,
                               SetPriority)
from slurm_marl.policy.plugins import (CycleAwareOrder, Delegating, OrderPlugin, PlacePlugin,
                                      Proposer, build_plugin)
from slurm_marl.placement_shapes import (Candidate, generate_candidates, has_candidate,
                                         job_shape, per_node_share)
from slurm_marl.policy.profile import Profile, ProfileError
from slurm_marl.policy.state import ACTIVE_STATES, PENDING, CycleState

log = logging.getLogger(__name__)


class RankedJob(NamedTuple):
    job: Job
    queue: int
    sort_key: tuple


class Policy:
    """A profile with its plugins built; ``run_cycle`` is a pure function of the snapshot."""

    def __init__(self, profile: Profile, order: OrderPlugin,
                 place: Sequence[tuple[PlacePlugin, float]]) -> None:
        self.profile = profile
        self.order = order
        self._begin_cycle = order.begin_cycle if isinstance(order, CycleAwareOrder) else None
        self.place = tuple(place)
        self._needs_colocation = any(p.needs_colocation for p, _ in self.place)
        # Plugins that score by node identity (not only resources) opt out of evaluating
        # one node per class of alike nodes.
        self._dedupe_nodes = not any(p.node_specific for p, _ in self.place)
        # Plugins that hand some jobs to another plugin (the learned plugin's fallback):
        # candidates for such a job are generated as that plugin needs them.
        self._delegating = any(isinstance(p, Delegating) for p, _ in self.place)
        self._proposers = tuple(p.propose for p, _ in self.place if isinstance(p, Proposer))
        # "A job of size s found no room, so a larger alike job will not either" holds only
        # when no plugin filters candidates (a filter may accept a larger job's shape).
        self._monotone = not any(p.filters for p, _ in self.place)

    # -- ordering ------------------------------------------------------------------------
    def rank(self, jobs: Sequence[Job], now_s: float) -> list[RankedJob]:
        classify = self.order.classify
        keyed = []
        for i, job in enumerate(jobs):
            queue, key = classify(job, now_s)
            keyed.append((key + (job.submit_time_s, job.job_id), i, queue))
        keyed.sort()
        return [RankedJob(jobs[i], queue, key) for key, i, queue in keyed]

    def next_wakeup_s(self, snapshot: ClusterSnapshot) -> float | None:
        """The earliest time a job's queue or key changes by itself (Tiresias demotion or
        starvation promotion), so an event-driven caller knows when to run a cycle."""
        return self.next_change_s(
            (j for j in snapshot.jobs if j.is_pending or j.is_running), snapshot.time_s)

    def next_change_s(self, jobs: Iterable[Job], now_s: float) -> float | None:
        nxt = None
        change = self.order.next_change_s
        for job in jobs:
            t = change(job, now_s)
            if t is not None and t > now_s and (nxt is None or t < nxt):
                nxt = t
        return nxt

    # -- the cycle -----------------------------------------------------------------------
    def run_cycle(self, snapshot: ClusterSnapshot) -> list[Decision]:
        now = snapshot.time_s
        profile = self.profile
        if self._begin_cycle is not None:
            self._begin_cycle(snapshot.jobs, now)
        pending = [j for j in snapshot.jobs if j.state is PENDING]
        ranked = self.rank(pending, now)

        describe = self.order.describe
        order_key = self.order.key
        n_pending = len(pending)
        priorities: list[Decision] = [
            SetPriority(job_id=r.job.job_id, plugin=order_key,
                        reason=describe(r.job, now, r.queue), priority=n_pending - rank,
                        queue=r.queue)
            for rank, r in enumerate(ranked)]
        if not pending:
            return priorities

        state = CycleState(snapshot, track_colocation=self._needs_colocation,
                           track_holders=profile.preemption)
        state.dedupe_nodes = self._dedupe_nodes
        # Running jobs are ranked only once some pending job cannot start on free GPUs:
        # walking all jobs in order and skipping the running ones is the same as asking,
        # for each pending job, which running jobs rank below it.
        running_ranked: list[RankedJob] | None = None
        running_keys: list[tuple] = []
        running_gpus_from: list[int] = []
        preempted: set[int] = set()
        preempts: list[Decision] = []
        places: list[Decision] = []
        blocked = False
        reserved = False
        failed_sizes: dict[tuple, int] = {}

        for r in ranked:
            job = r.job
            if blocked:
                break
            total, _, _ = job_shape(job)
            if total <= 0:
                continue
            memo_key = _failure_key(job) if self._monotone else None
            known_fail = failed_sizes.get(memo_key) if self._monotone else None
            choice = None
            if known_fail is None or total < known_fail:
                choice = self._best(job, state, state.free)
            if choice is not None:
                cand, terms, _ = choice
                state.claim(job, cand)
                places.append(self._place(job, cand, terms, True, state,
                                          f"starts now on {len(cand.nodes)} node(s), "
                                          f"{cand.groups} GPU group(s)"))
                continue
            if profile.preemption:
                if running_ranked is None:
                    running_ranked = self.rank(
                        [j for j in snapshot.jobs if j.state in ACTIVE_STATES], now)
                    running_keys = [x.sort_key for x in running_ranked]
                    # GPUs held by running jobs from the i-th down (a search bound).
                    running_gpus_from = [0] * (len(running_ranked) + 1)
                    for i in range(len(running_ranked) - 1, -1, -1):
                        running_gpus_from[i] = (running_gpus_from[i + 1]
                                                + job_shape(running_ranked[i].job)[0])
                first = bisect.bisect_right(running_keys, r.sort_key)
                taken = None
                if first < len(running_ranked):
                    taken = self._place_by_preemption(
                        job, state, _lower_running(running_ranked, first, preempted),
                        running_gpus_from[first])
                if taken is not None:
                    cand, terms, victims = taken
                    for victim in victims:
                        preempted.add(victim.job_id)
                        preempts.append(Preempt(
                            job_id=victim.job_id, plugin=order_key,
                            reason=f"yields to job {job.job_id} (queue {r.queue})"))
                        state.release_running(victim)
                        failed_sizes.clear()
                    state.claim(job, cand)
                    places.append(self._place(
                        job, cand, terms, True, state,
                        "starts now after preempting "
                        + ",".join(str(v.job_id) for v in victims)))
                    continue
            if self._monotone and (known_fail is None or total < known_fail):
                failed_sizes[memo_key] = total
            if not profile.backfill:
                blocked = True
                continue
            if profile.backfill_reserve and not reserved:
                plan = self._plan(job, state)
                if plan is not None:
                    cand, terms = plan
                    reserved = True
                    for n, g, k in cand.allocs:
                        state.free[n][g] -= min(k, state.free[n][g])
                    failed_sizes.clear()
                    places.append(self._place(job, cand, terms, False, state,
                                              "first blocked job: holds these GPUs"))
        return priorities + preempts + places

    # -- placement helpers ---------------------------------------------------------------
    def _score(self, job: Job, cands: list[Candidate], state: CycleState):
        """Best feasible candidate by weighted plugin score; ties keep generation order."""
        best = None
        best_total = 0.0
        best_terms: tuple = ()
        n_ok = 0
        for cand in cands:
            ok = True
            for plugin, _ in self.place:
                if not plugin.feasible(job, cand, state):
                    ok = False
                    break
            if not ok:
                continue
            n_ok += 1
            terms = tuple((plugin.key, weight * plugin.score(job, cand, state))
                          for plugin, weight in self.place)
            total = sum(t[1] for t in terms)
            if best is None or total > best_total + 1e-12:
                best, best_total, best_terms = cand, total, terms
        return best, best_terms, n_ok

    def best_candidate(self, job: Job, cands: list[Candidate], state: CycleState
                       ) -> Candidate | None:
        """The candidate this policy's place plugins would take now, or None (none
        feasible: the job would wait); ``state.view`` must be the free capacity."""
        return self._score(job, cands, state)[0]

    def _dedupe_for(self, job: Job, state: CycleState) -> tuple[bool, bool]:
        """(one node per class of alike nodes, co-located models part of the class) for
        this job: no dedupe if a plugin deciding it needs node identity."""
        if not self._delegating:
            return state.dedupe_nodes, state.dedupe_colocation
        plugins = [p.plugin_for(job, state) if isinstance(p, Delegating) else p
                   for p, _ in self.place]
        return (not any(p.node_specific for p in plugins),
                any(p.needs_colocation for p in plugins))

    def _generate(self, job: Job, state: CycleState, cap,
                  flags: tuple[bool, bool] | None = None) -> list[Candidate]:
        saved = state.dedupe_nodes, state.dedupe_colocation
        state.dedupe_nodes, state.dedupe_colocation = (self._dedupe_for(job, state)
                                                       if flags is None else flags)
        try:
            return generate_candidates(job, state, cap)
        finally:
            state.dedupe_nodes, state.dedupe_colocation = saved

    def _best(self, job: Job, state: CycleState, cap):
        flags = self._dedupe_for(job, state)
        if self._proposers and cap is state.free and not flags[0]:
            if not has_candidate(job, state, cap):   # no room: nothing to propose
                return None
            for propose in self._proposers:
                proposed = propose(job, state)
                if proposed is not None:
                    cands = proposed
                    break
            else:
                cands = self._generate(job, state, cap, flags)
        else:
            cands = self._generate(job, state, cap, flags)
        if not cands:
            return None
        with state.judging(cap):
            best, terms, n_ok = self._score(job, cands, state)
        if best is None:
            return None
        return best, terms, n_ok

    def _place_by_preemption(self, job: Job, state: CycleState, lower: Iterable[Job],
                             lower_gpus: int):
        """Free GPUs of the lowest-ranked running jobs below ``job`` until it fits.

        ``lower`` yields the running jobs ranked below ``job``, lowest first; ``lower_gpus``
        bounds the GPUs they hold, so hopeless cases stop before any search.
        """
        total, _, _ = job_shape(job)
        allowed = set(state.allowed_nodes(job))
        free_now = sum(sum(state.free[n]) for n in allowed)
        if free_now + lower_gpus < total:
            return None
        overlay = [row[:] for row in state.free]
        cpus, mem = state.free_cpus[:], state.free_mem[:]
        added: list[Job] = []
        saved_cpus, saved_mem = state.free_cpus, state.free_mem
        try:
            state.free_cpus, state.free_mem = cpus, mem
            for victim in lower:
                allocs = state.running_allocs.get(victim.job_id, ())
                if not any(n in allowed for n, _, _ in allocs):
                    continue
                vtotal = sum(k for _, _, k in allocs)
                for n, g, k in allocs:
                    overlay[n][g] += k
                    if n in allowed:
                        free_now += k
                for n, k in _per_node(allocs).items():
                    cpus[n] += per_node_share(victim.cpus, k, vtotal)
                    mem[n] += per_node_share(victim.mem_mib, k, vtotal)
                added.append(victim)
                if free_now < total:
                    continue
                cands = self._generate(job, state, overlay)
                if not cands:
                    continue
                # Fewest GPUs taken from running jobs first, then the plugins' preference.
                taken = [sum(max(0, k - state.free[n][g]) for n, g, k in c.allocs)
                         for c in cands]
                fewest = min(taken)
                cands = [c for c, t in zip(cands, taken) if t == fewest]
                with state.judging(overlay):
                    best, terms, _ = self._score(job, cands, state)
                if best is None:
                    continue
                return best, terms, self._victims_for(best, state, added)
        finally:
            state.free_cpus, state.free_mem = saved_cpus, saved_mem
        return None

    @staticmethod
    def _victims_for(cand: Candidate, state: CycleState, added: list[Job]) -> list[Job]:
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

    def _plan(self, job: Job, state: CycleState):
        """Where the first blocked job will start once running jobs end: any placement on
        the usable capacity, preferring the one with the most GPUs already free."""
        overlay = [list(i.group_cap) for i in state.infos]
        saved = state.free_cpus, state.free_mem
        try:
            state.free_cpus = [i.cpus for i in state.infos]
            state.free_mem = [i.mem_mib for i in state.infos]
            cands = self._generate(job, state, overlay)
        finally:
            state.free_cpus, state.free_mem = saved
        if not cands:
            return None
        ready = [sum(min(k, state.free[n][g]) for n, g, k in c.allocs) for c in cands]
        most = max(ready)
        cands = [c for c, r in zip(cands, ready) if r == most]
        with state.judging(overlay):
            best, terms, _ = self._score(job, cands, state)
        if best is None:
            return None
        return best, terms

    @staticmethod
    def _place(job: Job, cand: Candidate, terms, start_now: bool, state: CycleState,
               reason: str) -> Place:
        infos = state.infos
        allocs = tuple(GroupAlloc(node=infos[n].name, group=infos[n].group_ids[g], gpus=k)
                       for n, g, k in cand.allocs)
        plugin = max(terms, key=lambda t: t[1])[0] if terms else ""
        return Place(job_id=job.job_id, plugin=plugin, reason=reason,
                     nodes=tuple(infos[n].name for n in cand.nodes), allocs=allocs,
                     start_now=start_now,
                     scores=tuple((k, round(v, 6)) for k, v in terms))


def _lower_running(running_ranked: list[RankedJob], first: int,
                   preempted: set[int]) -> Iterator[Job]:
    """Running jobs ranked from ``first`` down, lowest first, not yet preempted."""
    for i in range(len(running_ranked) - 1, first - 1, -1):
        job = running_ranked[i].job
        if job.job_id not in preempted:
            yield job


def _per_node(allocs) -> dict[int, int]:
    out: dict[int, int] = {}
    for n, _, k in allocs:
        out[n] = out.get(n, 0) + k
    return out


def _failure_key(job: Job) -> tuple:
    """Jobs alike in everything but size: if one of size s found no room this cycle, a
    larger one will not either (free resources only shrink while the cycle walks)."""
    total, per_node, count = job_shape(job)
    cpus_per_gpu = job.cpus / total if total else 0
    mem_per_gpu = job.mem_mib / total if total else 0
    return (job.partition, per_node, count if per_node else 0, job.model_type,
            job.required_nodes, job.excluded_nodes, round(cpus_per_gpu, 6),
            round(mem_per_gpu, 3))


# -- building -------------------------------------------------------------------------------

def build_policy(profile: Profile, **context) -> Policy:
    """Plugins built from the profile; ``context`` reaches every plugin's ``build`` (e.g.
    ``interference_estimator=`` for least_interference). A plugin that cannot be built (a
    model or sample file unreadable: loading the profile checked only its parameters) is a
    ``ProfileError`` naming the profile's file."""
    try:
        order = build_plugin("order", profile.order, profile.order_params, **context)
        place = []
        for key, weight in profile.place:
            params = profile.place_params.get(key, {})
            place.append((build_plugin("place", key, params, **context), weight))
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{profile.source}: {exc}") from None
    except Exception as exc:  # a plugin's model file unreadable, ...: still the profile's
        raise ProfileError(f"{profile.source}: {type(exc).__name__}: {exc}") from None
    return Policy(profile, order, place)


_POLICY_CACHE: dict[Profile, Policy] = {}


def run_cycle(snapshot: ClusterSnapshot, profile: Profile) -> list[Decision]:
    """One scheduling cycle with a profile's default plugin context, from scratch: an order
    that keeps state across cycles starts empty (callers that run a sequence of cycles build
    their own policy with ``build_policy``)."""
    policy = _POLICY_CACHE.get(profile)
    if policy is None or policy.profile is not profile:
        policy = build_policy(profile)
        if len(_POLICY_CACHE) > 64:
            _POLICY_CACHE.clear()
        _POLICY_CACHE[profile] = policy
    if isinstance(policy.order, CycleAwareOrder):
        policy.order.reset()
    return policy.run_cycle(snapshot)


def decisions_by_kind(decisions: Sequence[Decision]) -> Mapping[str, list[Decision]]:
    out: dict[str, list[Decision]] = {}
    for d in decisions:
        out.setdefault(type(d).__name__, []).append(d)
    return out
