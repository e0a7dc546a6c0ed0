"""A place plugin that picks which waiting job starts next (``plugins.Picker``): the windows
the framework offers it, and what a pick may and may not change (``allocation.py``)."""

from __future__ import annotations

import random

import pytest

from policy_builders import kinds, node, pending, running, snapshot
from slurm_marl.policy.allocation import Allocation
from slurm_marl.policy.framework import Policy
from slurm_marl.policy.plugins import abilities, build_plugin
from slurm_marl.policy.profile import profile_from_mapping
from slurm_marl.policy.state import CycleState

PROFILE = profile_from_mapping({"name": "p", "preemption": False, "backfill": True,
                                "backfill_reserve": False,
                                "order": {"plugin": "tiresias_las"}})


class Plain:
    """Consolidate's scores, with a filter refusing the jobs ``refuse`` names."""

    key = "picking"

    def __init__(self, refuse: frozenset[int] = frozenset()):
        self.inner = build_plugin("place", "consolidate", {})
        self.refuse = refuse

    def score(self, job, cand, state):
        return self.inner.score(job, cand, state)

    def feasible(self, job, cand, state):
        return job.job_id not in self.refuse


class Picking(Plain):
    """``Plain`` that picks by ``rule(window) -> index``; records every window."""

    def __init__(self, rule, window: int = 4, refuse: frozenset[int] = frozenset()):
        super().__init__(refuse)
        self.rule = rule
        self.pick_window = window
        self.windows: list[list[int]] = []

    def pick_next(self, window, state):
        self.windows.append([j.job_id for j in window])
        return self.rule(window), "test rule"


def policy(picker, order: str = "tiresias_las", profile=PROFILE) -> Policy:
    return Policy(profile, build_plugin("order", order, {}), [(picker, 1.0)])


def started(decisions) -> list[int]:
    return [d.job_id for d in kinds(decisions, "Place") if d.start_now]


def last(window):
    return len(window) - 1


def test_the_picked_job_starts_first_and_its_reason_says_so():
    nodes = [node("n1", groups=(2, 2))]
    jobs = [pending(1, 4, submit=0.0), pending(2, 4, submit=1.0)]
    keep = Picking(lambda w: 0)
    assert started(policy(keep).run_cycle(snapshot(nodes, jobs))) == [1]
    assert keep.windows == [[1, 2]]
    pick = Picking(last)
    decisions = policy(pick).run_cycle(snapshot(nodes, jobs))
    assert started(decisions) == [2]
    place = kinds(decisions, "Place")[0]
    assert "picked ahead of job 1 (picking: test rule)" in place.reason
    # the job reached is offered again, alone now (no room left for it): not asked
    assert pick.windows == [[1, 2]]


def test_a_window_holds_only_jobs_of_the_same_partition_and_queue_that_can_start_now():
    nodes = [node("n1", groups=(2, 2)), node("m1", groups=(2, 2), partitions=("other",))]
    jobs = [pending(1, 2, submit=0.0),
            pending(2, 2, submit=1.0, partition="other"),    # another partition: skipped
            pending(3, 8, submit=2.0),                        # cannot start now: skipped
            pending(4, 1, submit=3.0),
            pending(5, 1, submit=4.0, attained_gpu_s=10_000.0),   # a later 2D-LAS queue
            pending(6, 1, submit=5.0)]
    pick = Picking(lambda w: 0)
    policy(pick).run_cycle(snapshot(nodes, jobs))
    # the queue-0 jobs of "gpu" that can start: 1, 4, 6 (5 is in queue 1, after them);
    # 2 is alone in its partition
    assert pick.windows[0] == [1, 4, 6]
    assert all(2 not in w and 3 not in w and 5 not in w for w in pick.windows)


def test_the_window_is_bounded_and_ends_at_a_protected_job():
    nodes = [node("n1", groups=(4, 4))]
    jobs = [pending(i, 1, submit=float(i)) for i in range(1, 8)]
    pick = Picking(lambda w: 0, window=3)
    policy(pick).run_cycle(snapshot(nodes, jobs))
    assert pick.windows[0] == [1, 2, 3]
    # job 3 protected by the guard: the window of job 1 ends before it, and a window
    # never starts at it
    pol = policy(Picking(lambda w: 0, window=8))
    state = CycleState(snapshot(nodes, jobs))
    ranked = pol.rank(list(jobs), 1000.0)
    Allocation(pol, PROFILE, state, None, {3: 0.0}, False).run(ranked)
    assert pol._picker.windows[0] == [1, 2]
    assert all(w[0] != 3 and 3 not in w[1:] for w in pol._picker.windows)


def test_no_pick_without_a_queue_to_pick_within():
    nodes = [node("n1", groups=(2, 2))]
    jobs = [pending(1, 4, submit=0.0), pending(2, 4, submit=1.0)]
    pick = Picking(last)
    assert policy(pick, order="fifo")._picker is None
    assert started(policy(pick, order="fifo").run_cycle(snapshot(nodes, jobs))) == [1]
    assert pick.windows == []
    assert abilities(pick).picks
    assert policy(Picking(last, window=1))._picker is None    # a window of one: no choice


def test_a_picked_job_that_does_not_start_waits_at_its_rank_and_is_not_offered_again():
    nodes = [node("n1", groups=(2, 2))]
    jobs = [pending(1, 2, submit=0.0), pending(2, 2, submit=1.0), pending(3, 2, submit=2.0)]
    pick = Picking(last, refuse=frozenset({3}))
    decisions = policy(pick).run_cycle(snapshot(nodes, jobs))
    # 3 picked, refused by the filter; 1 offered again with 2: 2 picked and started; then
    # 1 alone in the window, walked: starts; 3 at its rank, refused
    assert pick.windows == [[1, 2, 3], [1, 2]]
    assert started(decisions) == [2, 1]


def random_cycle(seed: int):
    rng = random.Random(seed)
    nodes = [node(f"n{i}", groups=(2, 2), leaf=f"l{i % 2}") for i in range(3)]
    jobs, free = [], {n.name: list(range(4)) for n in nodes}
    for jid in range(1, 4):
        name = rng.choice(list(free))
        if len(free[name]) >= 2:
            gpus = [free[name].pop(), free[name].pop()]
            jobs.append(running(jid, {name: tuple(gpus)}, attained=rng.choice([0, 5000.0])))
    for jid in range(10, 10 + rng.randrange(2, 9)):
        jobs.append(pending(jid, rng.choice([1, 1, 2, 4, 8]), submit=float(rng.randrange(50)),
                            attained_gpu_s=rng.choice([0.0, 0.0, 5000.0])))
    return snapshot(nodes, jobs)


@pytest.mark.parametrize("seed", range(20))
def test_a_picker_keeping_the_order_decides_as_the_policy_without_one(seed):
    snap = random_cycle(seed)
    for preemption in (False, True):
        prof = profile_from_mapping({"name": "p", "preemption": preemption, "backfill": True,
                                     "backfill_reserve": True,
                                     "order": {"plugin": "tiresias_las"}})
        plain = Policy(prof, build_plugin("order", "tiresias_las", {}), [(Plain(), 1.0)])
        keep = policy(Picking(lambda w: 0), profile=prof)
        assert keep.run_cycle(snap) == plain.run_cycle(snap)


@pytest.mark.parametrize("seed", range(20))
def test_picks_never_start_more_than_fits_nor_a_job_twice(seed):
    snap = random_cycle(seed)
    rng = random.Random(seed)
    pick = Picking(lambda w: rng.randrange(len(w)))
    decisions = policy(pick).run_cycle(snap)
    ids = started(decisions)
    assert len(ids) == len(set(ids))
    used = {}
    for d in kinds(decisions, "Place"):
        if d.start_now:
            for a in d.allocs:
                used[(a.node, a.group)] = used.get((a.node, a.group), 0) + a.gpus
    for n in snap.nodes:
        for g in n.gpu_groups:
            free = len([i for i in g.gpu_indices if i not in n.used_gpu_indices])
            assert used.get((n.name, g.index), 0) <= free
