"""The scheduling cycle: order jobs, place them one by one, backfill, preempt.

Mechanism apart from policy (as in the Kubernetes scheduler framework): the order plugin
ranks jobs, place plugins filter and score candidate placements. The cycle allocates jobs in
rank order (``allocation.py``); for a job that cannot start on free GPUs the other actions
(``actions.py``: preemption, then backfill's reservation) run over the same snapshot and
state. ``run_cycle`` is deterministic, so the daemon and the simulator reach the same
decisions from the same snapshots; it is a pure function of the snapshot except for an order
plugin that keeps state across cycles (``CycleAwareOrder``: Tiresias' queue lists, the
guard's shadow), which then depends on the snapshots seen before.

What a cycle returns:

* ``SetPriority`` for every pending job, in rank order (priority n..1, larger first);
* ``Preempt`` for running jobs that yield (only with ``profile.preemption``): all jobs,
  running and pending, are walked in order; a pending job that cannot start on free GPUs
  takes GPUs of the lowest-ranked running jobs below it (fewest victim GPUs first);
* ``Place(start_now=True)`` for jobs that start now (winner of the weighted place plugins,
  claimed in the cycle state so later jobs see it);
* with backfill and ``backfill_reserve``, ``Place(start_now=False)`` for the first job of
  each partition that cannot start: the GPUs it will wait for, which later jobs may not
  take this cycle. Without backfill a partition's walk ends at its first blocked job.

Decisions come in that order: priorities, then preemptions, then placements.

Reuse (``Policy.reuse_decisions``, the daemon's ``agent.reuse_decisions``): priorities are
computed every cycle (the ranking, and reasons that name attained service), but the
preemptions and placements that follow are a function of the ranking and of the snapshot's
jobs and nodes without what only the clock moves (``NOT_READ_BY_PLACEMENT``): when all place
plugins declare themselves ``Pure`` and neither the ranking (of pending jobs, and of running
ones where preemption may pick victims), the jobs the guard protects, nor those inputs
changed since the last cycle of the same partitions, that cycle's preemptions and placements
are returned again instead of being searched for. On an unchanged cluster most of a cycle's
work is that search. A plugin that is not pure (the learned one: deferrals kept across
cycles, a clock in its features) takes part when it says, after each cycle, until when that
cycle's decisions would be made again on the same inputs (``ReuseHorizon``: a time, inf for
ever, -inf not at all); the reuse then also needs the clock before that time, and not before
the cycle's own time (a clock that went back is decided afresh: a plugin's horizon bounds
the clock going forward, as a clock read in steps would be one step back).
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import fields
from operator import attrgetter

from slurm_marl.domain import ClusterSnapshot, Decision, GroupAlloc, Job, Place, SetPriority
from slurm_marl.policy.actions import Preemption, RankedJob
from slurm_marl.policy.asked_order import asked_note, asked_order
from slurm_marl.policy.allocation import Allocation
from slurm_marl.policy.guard import GuardedOrder, guard_settings
from slurm_marl.policy.plugins import (CycleAwareOrder, OrderPlugin, PlacePlugin, abilities,
                                      build_plugin)
from slurm_marl.placement_shapes import Candidate, generate_candidates, has_candidate
from slurm_marl.policy.profile import (SLURM_ALONE_PROFILE, Profile, ProfileError,
                                      decides_as_slurm_alone, load_profile)
from slurm_marl.policy.replica import ReplicaShadow
from slurm_marl.policy.scoring import judged_at_once, score_at_once
from slurm_marl.policy.state import ACTIVE_STATES, PENDING, CycleState

log = logging.getLogger(__name__)

# Job fields that placement, preemption and reservation never read: what the clock alone
# moves (service attained and work done, which reach decisions only through the ranking,
# compared on its own) and what the daemon reads before deciding (Slurm's priority and
# pending reason, the begin time a lease moves, the comments carrying its markers).
NOT_READ_BY_PLACEMENT = frozenset({"attained_gpu_s", "progress_gpu_s", "eligible_time_s",
                                   "priority", "pending_reason", "admin_comment", "comment"})
_PLACEMENT_INPUTS = attrgetter(*(f.name for f in fields(Job)
                                 if f.name not in NOT_READ_BY_PLACEMENT))


class Policy:
    """A profile with its plugins built; ``run_cycle`` is a pure function of the snapshot."""

    def __init__(self, profile: Profile, order: OrderPlugin,
                 place: Sequence[tuple[PlacePlugin, float]]) -> None:
        self.profile = profile
        self.order = order
        self._begin_cycle = order.begin_cycle if isinstance(order, CycleAwareOrder) else None
        self._guard = order if isinstance(order, GuardedOrder) else None
        self._guard_nodes = None
        self.place = tuple(place)
        # What the plugins implement and declare (``plugins.abilities``).
        ab = [abilities(p) for p, _ in self.place]
        self._needs_colocation = any(a.reads_colocation for a in ab)
        # Plugins that score by node identity (not only resources) opt out of evaluating
        # one node per class of alike nodes.
        self._dedupe_nodes = not any(a.node_identity for a in ab)
        # Hosts' free CPUs and memory are part of a node's class only when a plugin scores
        # by them; otherwise alike-GPU nodes score alike and CPUs/memory only filter.
        self._dedupe_host = any(a.reads_host for a in ab)
        # Plugins that hand some jobs to another plugin (the learned plugin's fallback):
        # candidates for such a job are generated as that plugin needs them.
        self._delegates = tuple(a.delegates for a in ab)
        self._delegating = any(self._delegates)
        self._proposers = tuple(p.propose for (p, _), a in zip(self.place, ab) if a.proposes)
        # "A job of size s found no room, so a larger alike job will not either" holds only
        # when no plugin filters candidates (a filter may accept a larger job's shape).
        self._monotone = not any(a.filters for a in ab)
        self._abilities = ab
        # A place plugin that picks which waiting job of a queue starts next (``Picker``),
        # where the order plugin says within which queues (``pick_group``).
        group = getattr(order, "pick_group", None)
        self._picker = next((p for (p, _), a in zip(self.place, ab)
                             if a.picks and p.pick_window > 1), None) if group else None
        self._pick_group = group if self._picker is not None else None
        self._filters = [p.feasible for (p, _), a in zip(self.place, ab) if a.filters]
        # Reuse of the last cycle's preemptions and placements (module docstring).
        self.reuse_decisions = False
        # A caller that never writes priorities (the simulator) turns the per-job
        # SetPriority decisions off: a reason string per pending job per cycle otherwise.
        self.emit_priorities = True
        self._settled_at: float | None = None    # settle_order's time, if it was called
        # Reuse needs every place plugin pure, or able to say until when the cycle it just
        # decided would be decided the same on the same inputs (``reuse_horizon``).
        self._timed = [p for (p, _), a in zip(self.place, ab) if not a.pure]
        self._reusable = all(a.reuse_horizon for a in ab if not a.pure)
        self._last_state: CycleState | None = None
        # (partitions) -> (inputs, preemptions and placements, horizon, the cycle's time)
        self._reuse: dict[tuple, tuple[tuple, list[Decision], float, float]] = {}
        self.reused_cycles = 0

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
    def settle_order(self, jobs: Sequence[Job], now_s: float,
                     views: Sequence[ClusterSnapshot] = ()) -> None:
        """Bring the order plugin's state kept across cycles (``CycleAwareOrder``: Tiresias'
        queue lists) up to ``now_s`` over ``jobs``, for a caller that decides one cycle in
        several views (the daemon: a partition at a time); ``run_cycle`` at that time then
        does not do it again. Done view by view, a running job seen by two views (on nodes
        of two partitions) would be moved twice in one cycle: a job demoted this cycle would
        leave the tail of its new queue before the second view is decided. ``views``: the
        snapshots the cycle decides, whose nodes the guard's shadow of Slurm alone needs
        before it is brought up to ``now_s``."""
        for view in views:          # the guard's shadow sees their nodes first
            self._guard_sees(view)
        if self._begin_cycle is not None:
            self._begin_cycle(jobs, now_s)
            self._settled_at = now_s

    @property
    def watches_ends(self) -> bool:
        """Whether the policy learns from when each job ends (the guard's shadow: its
        lengths), so that a caller cycling only while jobs wait (the simulator) shows it
        each end too, as the daemon's cycles do."""
        return self._guard is not None

    def _guard_sees(self, snapshot: ClusterSnapshot) -> None:
        """The guard's shadow of Slurm alone runs on the nodes of the views seen."""
        if self._guard is not None and snapshot.nodes is not self._guard_nodes:
            self._guard_nodes = snapshot.nodes
            self._guard.see_cluster(snapshot)

    @property
    def decides_partitions_apart(self) -> bool:
        """Whether a partition's preemptions and placements depend only on what is in it
        (its nodes, its jobs, its jobs' ranks among themselves, and, where
        ``reads_leaves``, the multi-node jobs on its leaf switches), so that a partition in
        which nothing changed since its last cycle decides nothing new and a caller may
        leave it out (``run_cycle(partitions=...)``, the simulator). A blocked job's effects
        (the walk's end without backfill, backfill's reservation, the guard's hold on later
        arrivals) stay in its partition (``_allocate``). Not with a guard (its shadow of
        Slurm alone spans every job it has seen), nor with a plugin whose filter reads more
        than the candidate's nodes (the learned agents: their own placement only), nor with
        an order whose keys drift between events (``settles_at_wakes``: the Gittins index,
        predicted remaining time measured against progress)."""
        return (self._guard is None
                and getattr(self.order, "settles_at_wakes", False)
                and all(not a.filters or a.local_filter for a in self._abilities))

    @property
    def reads_leaves(self) -> bool:
        """A filter reads co-location, whose leaf level (multi-node candidates) holds the
        multi-node jobs of every partition on the leaf switch."""
        return any(a.filters and a.reads_colocation for a in self._abilities)

    def run_cycle(self, snapshot: ClusterSnapshot,
                  partitions: frozenset[str] | None = None) -> list[Decision]:
        """The cycle's decisions (module docstring). ``partitions``: decide only the pending
        jobs of these partitions (the rest of the snapshot is seen as it is); only for a
        policy that ``decides_partitions_apart``, whose other partitions would decide
        nothing new."""
        now = snapshot.time_s
        profile = self.profile
        self._guard_sees(snapshot)
        if self._begin_cycle is not None and self._settled_at != now:
            self._begin_cycle(snapshot.jobs, now)
        pending = [j for j in snapshot.jobs if j.state is PENDING
                   and (partitions is None or j.partition in partitions)]
        # what users and admins asked of Slurm's order (--nice, scontrol top) kept
        ranked = asked_order(self.rank(pending, now))

        describe = self.order.describe
        order_key = self.order.key
        n_pending = len(pending)
        priorities: list[Decision] = [
            SetPriority(job_id=r.job.job_id, plugin=order_key,
                        reason=describe(r.job, now, r.queue) + asked_note(r.job),
                        priority=n_pending - rank, queue=r.queue)
            for rank, r in enumerate(ranked)] if self.emit_priorities else []
        if not pending:
            return priorities
        running = None
        reuse_key = inputs = None
        if self.reuse_decisions and self._reusable:
            if profile.preemption:
                running = self.rank([j for j in snapshot.jobs if j.state in ACTIVE_STATES],
                                    now)
            reuse_key = (tuple(p.name for p in snapshot.partitions), partitions)
            # (the guard's protected jobs too: a blocked one is passed by no later arrival,
            # and a job may become protected without changing its rank)
            inputs = _placement_inputs(snapshot, ranked, running), (
                frozenset(self._guard.shadow.protected) if self._guard is not None else None)
            last = self._reuse.get(reuse_key)
            # (a horizon of inf holds at any clock, inf too: a trace's job may arrive there)
            if last is not None and last[0] == inputs and now >= last[3] \
                    and (last[2] == math.inf or now < last[2]):
                self.reused_cycles += 1
                return priorities + last[1]
        placed = self._allocate(snapshot, ranked, running)
        if reuse_key is not None:
            if len(self._reuse) > 64:  # views of other partition sets come and go
                self._reuse.clear()
            state, self._last_state = self._last_state, None
            horizon = min((p.reuse_horizon(state) for p in self._timed), default=math.inf)
            self._reuse[reuse_key] = (inputs, placed, horizon, now)
        return priorities + placed

    def _allocate(self, snapshot: ClusterSnapshot, ranked: list[RankedJob],
                  running: list[RankedJob] | None) -> list[Decision]:
        """Preemptions and placements for the ranked pending jobs (``running``: the running
        jobs ranked, when the caller has ranked them already)."""
        now = snapshot.time_s
        profile = self.profile
        state = CycleState(snapshot, track_colocation=self._needs_colocation,
                           track_holders=profile.preemption)
        if self._timed and self.reuse_decisions:
            self._last_state = state    # for the plugins' reuse_horizon
        state.dedupe_nodes = self._dedupe_nodes
        state.dedupe_host = self._dedupe_host
        preemption = (Preemption(self, snapshot.jobs, now, state, ranked=running)
                      if profile.preemption else None)
        protected = self._guard.shadow.protected if self._guard is not None else {}
        return Allocation(self, profile, state, preemption, protected,
                          self._monotone).run(ranked)

    # -- placement helpers ---------------------------------------------------------------
    def score(self, job: Job, cands: list[Candidate], state: CycleState):
        """Best feasible candidate by weighted plugin score; ties keep generation order."""
        best = None
        best_total = 0.0
        best_terms: tuple = ()
        n_ok = 0
        place = self._deciders(job, state)
        if judged_at_once(place):    # each plugin asked once for all (policy/scoring.py)
            return score_at_once(place, job, cands, state)
        keys = tuple(p.key for p, _ in place)
        filters = self._filters if place is self.place else \
            [p.feasible for p, _ in place if abilities(p).filters]
        for cand in cands:
            ok = True
            for feasible in filters:
                if not feasible(job, cand, state):
                    ok = False
                    break
            if not ok:
                continue
            n_ok += 1
            terms = tuple((key, weight * plugin.score(job, cand, state))
                          for (plugin, weight), key in zip(place, keys))
            total = sum(t[1] for t in terms)
            if best is None or total > best_total + 1e-12:
                best, best_total, best_terms = cand, total, terms
        return best, best_terms, n_ok

    def _deciders(self, job: Job, state: CycleState) -> tuple[tuple[PlacePlugin, float], ...]:
        """The place plugins with their weights as they decide this job: a plugin that
        hands the job to another (the learned plugin's fallback, or its what-if heuristic
        past the agents' depth) is replaced by that one, asked directly (``Delegating``:
        outside what-if questions its answers are the delegate's), so a decision names the
        plugin that really decided. Asked once per job and question: what a delegating
        plugin answers may change as it decides (an agent looks at the job)."""
        if not self._delegating or state.what_if:
            return self.place
        return self._resolved(job, state)

    def _resolved(self, job: Job, state: CycleState) -> tuple[tuple[PlacePlugin, float], ...]:
        """The place plugins with their weights, each delegating one replaced by the plugin
        it hands this job to (``plugin_for``)."""
        return tuple((p.plugin_for(job, state) if delegates else p, w)
                     for (p, w), delegates in zip(self.place, self._delegates))

    def best_candidate(self, job: Job, cands: list[Candidate], state: CycleState
                       ) -> Candidate | None:
        """The candidate this policy's place plugins would take now, or None (none
        feasible: the job would wait); ``state.view`` must be the free capacity."""
        return self.score(job, cands, state)[0]

    def _dedupe_for(self, job: Job, state: CycleState) -> tuple[bool, bool, bool]:
        """(one node per class of alike nodes, co-located models part of the class, hosts'
        free CPUs and memory part of the class) for this job: no dedupe if a plugin
        deciding it needs node identity."""
        if not self._delegating:
            return state.dedupe_nodes, state.dedupe_colocation, state.dedupe_host
        # what-if questions included: candidates come as the job's own decider needs them
        ab = [abilities(p) for p, _ in self._resolved(job, state)]
        return (not any(a.node_identity for a in ab),
                any(a.reads_colocation for a in ab),
                any(a.reads_host for a in ab))

    def generate(self, job: Job, state: CycleState, cap,
                 flags: tuple[bool, bool, bool] | None = None, alike_in=None
                 ) -> list[Candidate]:
        """The job's candidates on capacity ``cap``, deduplicated as its plugins allow (and,
        with ``alike_in``, by that capacity too: ``generate_candidates``)."""
        return generate_candidates(job, state, cap, dedupe=(
            self._dedupe_for(job, state) if flags is None else flags), alike_in=alike_in)

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
                cands = self.generate(job, state, cap, flags)
        else:
            cands = self.generate(job, state, cap, flags)
        if not cands:
            return None
        with state.judging(cap):
            best, terms, n_ok = self.score(job, cands, state)
        return None if best is None else (best, terms, n_ok)

    @staticmethod
    def decision(job: Job, cand: Candidate, terms, start_now: bool, state: CycleState,
                 reason: str) -> Place:
        """The ``Place`` decision for ``cand`` (``terms``: the plugins' weighted scores)."""
        infos = state.infos
        allocs = tuple(GroupAlloc(node=infos[n].name, group=infos[n].group_ids[g], gpus=k)
                       for n, g, k in cand.allocs)
        plugin = max(terms, key=lambda t: t[1])[0] if terms else ""
        return Place(job_id=job.job_id, plugin=plugin, reason=reason,
                     nodes=tuple(infos[n].name for n in cand.nodes), allocs=allocs,
                     start_now=start_now,
                     scores=tuple((k, round(v, 6)) for k, v in terms))


def _placement_inputs(snapshot: ClusterSnapshot, ranked: list[RankedJob],
                      running: list[RankedJob] | None) -> tuple:
    """What a cycle's preemptions and placements are a function of (module docstring): the
    jobs and nodes as placement reads them, the pending jobs in rank order with their queues
    and, where preemption may pick victims, the running jobs in rank order and where each
    pending job falls among them (the sort keys themselves may be re-encoded from one cycle
    to the next without changing any order: Tiresias' queue lists)."""
    cuts = None
    if running is not None:
        keys = [r.sort_key for r in running]
        cuts = (tuple(r.job.job_id for r in running),
                tuple(bisect_right(keys, r.sort_key) for r in ranked))
    return (tuple(map(_PLACEMENT_INPUTS, snapshot.jobs)), snapshot.nodes,
            snapshot.partitions, snapshot.switches,
            tuple((r.job.job_id, r.queue) for r in ranked), cuts)


# -- building -------------------------------------------------------------------------------

def build_policy(profile: Profile, **context) -> Policy:
    """Plugins built from the profile; ``context`` reaches every plugin's ``build`` (e.g.
    ``interference_estimator=`` for least_interference). A plugin that cannot be built (a
    model or sample file unreadable: loading the profile checked only its parameters) is a
    ``ProfileError`` naming the profile's file."""
    try:
        order = build_plugin("order", profile.order, profile.order_params, **context)
        if profile.guard and not decides_as_slurm_alone(profile):
            settings = guard_settings(profile.guard)
            order = GuardedOrder(order, settings, shadow=(
                ReplicaShadow(settings, _slurm_alone_cycle())
                if settings.model == "replica" else None))
        place = []
        for key, weight in profile.place:
            params = profile.place_params.get(key, {})
            place.append((build_plugin("place", key, params, **context), weight))
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{profile.source}: {exc}") from None
    except Exception as exc:  # a plugin's model file unreadable, ...: still the profile's
        raise ProfileError(f"{profile.source}: {type(exc).__name__}: {exc}") from None
    return Policy(profile, order, place)




def _slurm_alone_cycle():
    """One cycle of Slurm's own policy as the simulator measures it (``fifo-backfill``):
    the guard's replica shadow schedules with it."""
    policy = build_policy(load_profile(SLURM_ALONE_PROFILE))
    policy.emit_priorities = False
    return policy.run_cycle


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
