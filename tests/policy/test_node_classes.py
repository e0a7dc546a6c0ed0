"""The index of node classes (``policy/node_classes.py``, issue 17) answers single-node
candidate generation exactly as the scan of the nodes does, through any sequence of the
changes a cycle makes to its state: claims, backfill holds, preempted jobs' releases; with
hosts' free CPUs and memory part of a class (fine) or only a filter (coarse), and with or
without the co-located model types of each GPU group part of a class (what least
interference reads)."""

from __future__ import annotations

import random
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy_builders import node
from slurm_marl.domain import ClusterSnapshot, Job, JobState, Switch
from slurm_marl.placement_shapes import (Candidate, generate_candidates, job_shape,
                                         per_node_share, single_node_fits, split_on_node)
from slurm_marl.policy.node_classes import NodeClasses
from slurm_marl.policy.state import CycleState
from slurm_marl.topology.synthetic import synthetic_snapshot


@pytest.fixture(autouse=True, scope="module")
def _index_from_the_first_question():
    """The index answers from the first question, not after a few scans of its pool."""
    with mock.patch.object(NodeClasses, "SCANS_BEFORE_INDEX", 0):
        yield


def _synthetic(rng: random.Random) -> ClusterSnapshot:
    snap = synthetic_snapshot(rng.randint(8, 70), busy_fraction=rng.choice([0.2, 0.5, 0.8]),
                              seed=rng.randrange(1000), gpus_per_node=rng.choice([4, 8]),
                              sockets=rng.choice([1, 2]), partitions=rng.choice([1, 2, 3]),
                              nodes_per_leaf=rng.choice([4, 40]))
    nodes = []
    for n in snap.nodes:
        if rng.random() < 0.5:     # hosts with CPUs or memory used beyond their GPU jobs'
            n = replace(n, alloc_cpus=min(n.cpus, n.alloc_cpus + rng.choice([0, 4, 16, 60])),
                        alloc_memory_mib=n.alloc_memory_mib + rng.choice([0, 100_000, 480_000]))
        if rng.random() < 0.05:
            n = replace(n, state="DRAIN")
        nodes.append(n)
    jobs = tuple(replace(j, cpus=rng.choice([1, 4, 16]), mem_mib=rng.choice([0, 8_000, 64_000]),
                         model_type=rng.choice(["a", "b"])) for j in snap.jobs)
    return replace(snap, nodes=tuple(nodes), jobs=jobs)


def _hand_built(rng: random.Random) -> ClusterSnapshot:
    """Few shapes, so many nodes alike; nodes in one or two partitions."""
    nodes = []
    for k in range(rng.randint(4, 40)):
        groups = rng.choice([(4, 4), (8,), (2, 2, 2, 2), (4,)])
        gpus = sum(groups)
        used = rng.sample(range(gpus), rng.choice([0, 0, 1, 2, gpus // 2, gpus]))
        cpus = rng.choice([16, 64])
        mem = rng.choice([128_000, 512_000])
        nodes.append(node(f"h{k:02d}", used=used, groups=groups, leaf=f"l{k // 8}",
                          partitions=rng.choice([("gpu",), ("gpu", "big"), ("big",)]),
                          state=rng.choice(["IDLE"] * 9 + ["DOWN"]), cpus=cpus, mem_mib=mem,
                          alloc_cpus=rng.choice([0, 0, cpus // 2, cpus]),
                          alloc_mem=rng.choice([0, 0, mem // 2, mem - 1_000])))
    leaves: dict[str, list[str]] = {}
    for n in nodes:
        leaves.setdefault(n.leaf_switch, []).append(n.name)
    return ClusterSnapshot(time_s=0.0, nodes=tuple(nodes), jobs=(),
                           switches=tuple(Switch(name=k, nodes=tuple(v))
                                          for k, v in leaves.items()))


def _jobs(rng: random.Random, snap: ClusterSnapshot) -> list[Job]:
    names = [n.name for n in snap.nodes]
    parts = sorted({p for n in snap.nodes for p in n.partitions}) + [""]
    jobs = []
    for i in range(12):
        gpus = rng.randint(1, 8)
        kw: dict = {}
        pick = rng.random() if i else 1.0     # the first: no node constraints
        if pick < 0.15:           # a few nodes excluded: the index filters its classes
            kw["excluded_nodes"] = tuple(rng.sample(names, rng.randint(1, 3)))
        elif pick < 0.22:         # most excluded: the scan answers
            kw["excluded_nodes"] = tuple(rng.sample(names, len(names) * 3 // 4))
        elif pick < 0.30:         # -w with a few nodes, or with most of them
            kw["required_nodes"] = tuple(rng.sample(names, rng.choice(
                [1, 2, max(1, len(names) * 3 // 4)])))
        shape = ({"gpus_per_job": gpus} if rng.random() < 0.7 else
                 {"gpus_per_node": gpus, "node_count": 1})
        jobs.append(Job(job_id=100_000 + i, partition=rng.choice(parts),
                        cpus=rng.choice([1, 2, 8, 32, 64]),
                        mem_mib=rng.choice([0, 4_000, 64_000, 300_000]), submit_time_s=0.0,
                        state=JobState.PENDING, model_type=rng.choice(["a", "b", "c"]), **shape,
                        **kw))
    return jobs


def _random_candidate(rng: random.Random, state: CycleState, spread: bool) -> Candidate:
    """GPUs on one or two random nodes with some free (or none, for a hold)."""
    allocs = []
    for n in rng.sample(range(len(state.free)), min(len(state.free), 2 if spread else 1)):
        row = state.free[n]
        if not spread and sum(row) and rng.random() < 0.5:
            split = split_on_node(row, rng.randint(1, sum(row)))
            allocs.extend((n, g, k) for g, k in split)
            continue
        g = rng.randrange(len(row))
        if row[g]:
            allocs.append((n, g, rng.randint(1, row[g])))
    allocs.sort()
    return Candidate(allocs=tuple(allocs), nodes=tuple(sorted({a[0] for a in allocs})),
                     groups=len(allocs), leaves=1)


def _check(state: CycleState, jobs: list[Job]) -> int:
    """Indexed and scanned answers agree for every job, with hosts' free CPUs and memory in
    the class (fine) or only a filter (coarse), with co-location in the class or not;
    returns how many the index gave."""
    indexed = 0
    scan_cap = [row[:] for row in state.free]    # not ``state.free``: forces the scan
    for job in jobs:
        total, per_node, _ = job_shape(job)
        need = total if per_node == 0 else per_node
        nodes = state.allowed_nodes(job)
        for host, coloc in ((True, False), (False, False), (True, True), (False, True)):
            got = single_node_fits(job, state, state.free, nodes, need, total, True, coloc,
                                   host)
            assert got == single_node_fits(job, state, scan_cap, nodes, need, total, True,
                                           coloc, host)
            flags = (True, coloc, host)
            assert generate_candidates(job, state, state.free, dedupe=flags) == \
                generate_candidates(job, state, scan_cap, dedupe=flags)
            from_index = state.node_class_fits(
                job, state.free, nodes, need, per_node_share(job.cpus, need, total),
                per_node_share(job.mem_mib, need, total), host, coloc) is not None
            if not job.required_nodes and not job.excluded_nodes:
                assert from_index, "the index answers a job free of node constraints"
            indexed += from_index
    return indexed


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.booleans())
def test_index_matches_the_scan_through_any_cycle(rng, hand_built):
    snap = _hand_built(rng) if hand_built else _synthetic(rng)
    state = CycleState(snap)
    jobs = _jobs(rng, snap)
    running = [j for j in snap.jobs if j.state is JobState.RUNNING]
    rng.shuffle(running)
    if rng.random() < 0.5:            # the index may be built before or after the first events
        _check(state, jobs)
    indexed = 0
    for _ in range(30):
        event = rng.random()
        if event < 0.35:              # a job starts where the generator says
            job = rng.choice(jobs)
            cands = generate_candidates(job, state, state.free, dedupe=(
                True, rng.random() < 0.5, rng.random() < 0.5))
            if cands:
                state.claim(job, rng.choice(cands))
        elif event < 0.55:            # any placement, multi-node ones too
            cand = _random_candidate(rng, state, spread=rng.random() < 0.3)
            if cand.allocs:
                state.claim(rng.choice(jobs), cand)
        elif event < 0.75:            # a backfill reservation holds GPUs
            state.hold(_random_candidate(rng, state, spread=rng.random() < 0.3))
        elif running:                 # a preempted job's GPUs, CPUs and memory come back
            state.release_running(running.pop())
        if rng.random() < 0.2:        # a what-if on other hosts leaves the index alone
            with state.hosts_as(state.free_cpus[:], state.free_mem[:]):
                job = rng.choice(jobs)
                for host in (True, False):
                    assert state.node_class_fits(job, state.free, state.allowed_nodes(job),
                                                 1, 0, 0, host, rng.random() < 0.5) is None
        indexed += _check(state, jobs)
    assert indexed >= 60


def test_overlays_and_other_node_lists_are_scanned():
    snap = synthetic_snapshot(20, busy_fraction=0.5, seed=3)
    state = CycleState(snap)
    job = Job(job_id=1, partition="p0", gpus_per_job=2, submit_time_s=0.0)
    nodes = state.allowed_nodes(job)
    assert state.node_class_fits(job, state.free, nodes, 2, 1, 0) is not None
    assert state.node_class_fits(job, [r[:] for r in state.free], nodes, 2, 1, 0) is None
    assert state.node_class_fits(job, state.free, list(nodes), 2, 1, 0) is None


def test_a_pool_is_scanned_until_its_scans_would_have_paid_for_its_classes():
    snap = synthetic_snapshot(20, busy_fraction=0.5, seed=3)
    state = CycleState(snap)
    job = Job(job_id=1, partition="p0", gpus_per_job=2, submit_time_s=0.0)
    nodes = state.allowed_nodes(job)
    with mock.patch.object(NodeClasses, "SCANS_BEFORE_INDEX", 3):
        answers = [state.node_class_fits(job, state.free, nodes, 2, 1, 0) for _ in range(5)]
    assert [a is None for a in answers] == [True, True, True, False, False]
    assert answers[3] == single_node_fits(job, state, [r[:] for r in state.free], nodes, 2, 2,
                                          True, False, True)
