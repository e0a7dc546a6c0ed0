"""Deduplicating nodes by GPUs alone, with hosts' free CPUs and memory only a filter (the
coarse class key, issue 17), decides exactly what the fine key (CPUs and memory part of a
node's class) decides, for profiles whose place plugins do not read hosts' resources."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_marl.domain import ClusterSnapshot, Job, JobState
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.topology.synthetic import synthetic_snapshot


def _snapshot(rng: random.Random) -> ClusterSnapshot:
    """A synthetic cluster whose hosts use varied CPUs and memory beyond their GPU jobs',
    with pending jobs of varied shapes, CPUs and memory."""
    snap = synthetic_snapshot(rng.randint(10, 60), busy_fraction=rng.choice([0.2, 0.5, 0.8]),
                              seed=rng.randrange(1000), gpus_per_node=rng.choice([4, 8]),
                              sockets=rng.choice([1, 2]), partitions=rng.choice([1, 2]),
                              nodes_per_leaf=rng.choice([4, 40]))
    nodes = tuple(replace(n, alloc_cpus=min(n.cpus, n.alloc_cpus + rng.randint(0, n.cpus // 2)),
                          alloc_memory_mib=min(n.real_memory_mib, n.alloc_memory_mib
                                               + rng.randint(0, n.real_memory_mib // 2)))
                  for n in snap.nodes)
    parts = [p.name for p in snap.partitions]
    names = [n.name for n in nodes]
    pending = []
    for i in range(rng.randint(5, 40)):
        gpus = rng.choice([1, 1, 2, 4, 8, 16])
        count = max(1, gpus // 8)
        kw: dict = {}
        if rng.random() < 0.1:
            kw["excluded_nodes"] = tuple(rng.sample(names, rng.randint(1, 3)))
        pending.append(Job(job_id=500_000 + i, partition=rng.choice(parts),
                           state=JobState.PENDING, gpus_per_node=gpus // count,
                           node_count=count, cpus=rng.choice([1, 4, 16, 48]) * count,
                           mem_mib=rng.choice([0, 8_000, 64_000, 200_000]) * count,
                           submit_time_s=snap.time_s - rng.uniform(0, 3600),
                           time_limit_s=rng.choice([600, 3600, 36_000]), **kw))
    return replace(snap, nodes=nodes, jobs=snap.jobs + tuple(pending))


@pytest.mark.parametrize("profile", ["las-consolidate", "fifo-backfill"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(rng=st.randoms(use_true_random=False))
def test_coarse_and_fine_node_classes_decide_alike(profile, rng):
    snap = _snapshot(rng)
    coarse = build_policy(load_profile(profile))
    fine = build_policy(load_profile(profile))
    assert coarse._dedupe_host is False      # neither profile's plugins read hosts
    fine._dedupe_host = True
    assert coarse.run_cycle(snap) == fine.run_cycle(snap)


@pytest.mark.parametrize("profile", ["las-consolidate", "las-spread", "las-lif"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(rng=st.randoms(use_true_random=False))
def test_multi_node_candidates_of_alike_leaves_deduplicated_score_alike(profile, rng):
    """One multi-node candidate per class of alike leaf pools (issue 17): for every
    multi-node job the policy's best candidate and its score are those it picks among one
    candidate per leaf (no node deduplication)."""
    from slurm_marl.placement_shapes import generate_candidates
    from slurm_marl.policy.state import CycleState
    snap = synthetic_snapshot(rng.randint(16, 80), busy_fraction=rng.choice([0.3, 0.5, 0.7]),
                              seed=rng.randrange(1000), gpus_per_node=8, sockets=2,
                              partitions=1, nodes_per_leaf=rng.choice([2, 4, 8]))
    jobs = [Job(job_id=600_000 + i, partition=snap.partitions[0].name,
                state=JobState.PENDING, gpus_per_node=per, node_count=count,
                cpus=count, submit_time_s=snap.time_s)
            for i, (per, count) in enumerate((rng.choice([1, 2, 4, 8]), rng.randint(2, 4))
                                             for _ in range(20))]
    snap = replace(snap, jobs=snap.jobs + tuple(jobs))
    policy = build_policy(load_profile(profile))
    state = CycleState(snap, track_colocation=policy._needs_colocation)
    state.dedupe_host = policy._dedupe_host
    flags = policy._dedupe_for(snap.jobs[0], state)
    if not flags[0]:
        pytest.skip(f"{profile}: a place plugin needs node identity, nothing is deduplicated")
    for job in jobs:
        few = generate_candidates(job, state, state.free, dedupe=flags)
        every = generate_candidates(job, state, state.free, dedupe=(False,) + flags[1:])
        assert len(few) <= len(every)
        with state.judging(state.free):
            best_few, terms_few, _ = policy.score(job, few, state)
            best_every, terms_every, _ = policy.score(job, every, state)
        assert best_few == best_every and terms_few == terms_every
