"""Least interference reads co-location, so its single-node candidates come from node classes
that include the model types co-located in each GPU group (issue 17): the index of node
classes answers for it as the scan of the nodes did, so las-lif decides exactly as before;
and one node per such class decides exactly what every node would (the class holds all that
the plugin reads of a single-node candidate)."""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_marl.colocation import GROUP, LEAF, NODE, SPAN
from slurm_marl.domain import ClusterSnapshot, Job, JobState
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.node_classes import NodeClasses
from slurm_marl.policy.profile import load_profile
from slurm_marl.placement_shapes import make_candidate
from slurm_marl.policy.state import CycleState
from slurm_marl.topology.synthetic import synthetic_snapshot

MODELS = ("a", "b", "c", None)


class NeighbourSlowdown:
    """A job's speed falls with each model type it would share a group or a node with (by
    level and type) and with its spread: candidates with other neighbours score apart."""

    SLOW = {GROUP: {"a": 0.71, "b": 0.83, "c": 0.9}, NODE: {"a": 0.97, "b": 0.93, "c": 0.99}}

    def predict_speed(self, job, colocated_by_level) -> float:
        speed = 1.0
        for level, slow in self.SLOW.items():
            for model in colocated_by_level.get(level, ()):
                speed *= slow.get(model, 0.95)
        for tag in colocated_by_level.get(SPAN, ()):
            speed *= 0.9 - 0.01 * len(tag)
        return speed


def co_located_snapshot(rng: random.Random) -> ClusterSnapshot:
    """A synthetic cluster whose running jobs are of a few model types, with pending jobs of
    varied shapes and types (some that cannot start, for preemption and backfill)."""
    snap = synthetic_snapshot(rng.randint(8, 60), busy_fraction=rng.choice([0.3, 0.5, 0.8]),
                              seed=rng.randrange(1000), gpus_per_node=rng.choice([4, 8]),
                              sockets=rng.choice([1, 2]), partitions=rng.choice([1, 2]),
                              nodes_per_leaf=rng.choice([4, 40]))
    running = tuple(replace(j, model_type=rng.choice(MODELS),
                            start_time_s=snap.time_s - rng.uniform(0, 36_000),
                            attained_gpu_s=rng.uniform(0, 40_000)) for j in snap.jobs)
    parts = [p.name for p in snap.partitions]
    pending = []
    for i in range(rng.randint(5, 40)):
        gpus = rng.choice([1, 1, 2, 3, 4, 8, 16])
        count = max(1, gpus // 8) if rng.random() < 0.8 else 1
        shape = ({"gpus_per_node": gpus // count, "node_count": count}
                 if rng.random() < 0.7 else {"gpus_per_job": gpus})
        pending.append(Job(job_id=700_000 + i, partition=rng.choice(parts),
                           state=JobState.PENDING, model_type=rng.choice(MODELS),
                           cpus=rng.choice([1, 4]), mem_mib=rng.choice([0, 8_000]),
                           submit_time_s=snap.time_s - rng.uniform(0, 3600),
                           time_limit_s=rng.choice([600, 3600, 36_000]), **shape))
    return replace(snap, jobs=running + tuple(pending))


@contextmanager
def colocation_classes_scanned():
    """The cycle state's index leaves classes by co-location to the scan (as before issue
    17's change); yields the count of questions the index would have answered."""
    indexed = CycleState.node_class_fits
    asked = [0]

    def fits(self, job, cap, nodes, need, cpus, mem, by_host=True, by_colocation=False):
        if by_colocation:
            asked[0] += indexed(self, job, cap, nodes, need, cpus, mem, by_host,
                                by_colocation) is not None
            return None
        return indexed(self, job, cap, nodes, need, cpus, mem, by_host, by_colocation)

    with mock.patch.object(CycleState, "node_class_fits", fits):
        yield asked


def lif_profile(variant: str):
    profile = load_profile("las-lif")
    if variant == "neighbours":      # scores by neighbours' speeds too, no deferral bar
        params = {k: dict(v) for k, v in profile.place_params.items()}
        params["least_interference"] = {"defer_below": 0.0, "include_neighbours": True}
        profile = replace(profile, place_params=params)
    return profile


def decide(profile, snap: ClusterSnapshot, every_node: bool = False):
    policy = build_policy(profile, interference_estimator=NeighbourSlowdown())
    assert policy._needs_colocation and policy._dedupe_nodes
    if every_node:
        policy._dedupe_nodes = False
    return policy.run_cycle(snap)


@pytest.mark.parametrize("scans_first", [0, NodeClasses.SCANS_BEFORE_INDEX])
@pytest.mark.parametrize("variant", ["las-lif", "neighbours"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_colocation_classes_from_the_index_decide_as_the_scan(variant, scans_first, rng):
    """The index answering from the first question, or (the default) once the cycle's
    scans have gone over the pool a few times."""
    snap = co_located_snapshot(rng)
    profile = lif_profile(variant)
    with mock.patch.object(NodeClasses, "SCANS_BEFORE_INDEX", scans_first):
        indexed = decide(profile, snap)
        with colocation_classes_scanned() as asked:
            assert decide(profile, snap) == indexed
    assert asked[0] > 0 or scans_first


@pytest.mark.parametrize("preemption", [False, True])
@pytest.mark.parametrize("variant", ["las-lif", "neighbours"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_one_node_per_colocation_class_decides_as_every_node(variant, preemption, rng):
    """Preemption included: its search prefers the fewest GPUs taken from running jobs, so
    its classes are of the what-if capacity and the free GPUs now together (before session
    29 the what-if capacity alone, and one node per class could choose other victims)."""
    snap = co_located_snapshot(rng)
    profile = replace(lif_profile(variant), preemption=preemption)
    assert decide(profile, snap) == decide(profile, snap, every_node=True)


def scanned_by_level(self, cand):
    """``CycleState.colocated_by_level`` without its memo: the node's groups scanned on
    every question (the reference the memoised answers are checked against)."""
    group_level, node_level, leaf_level = [], [], []
    chosen = {(n, g) for n, g, _ in cand.allocs}
    for n in cand.nodes:
        for g, models in enumerate(self.colocated[n]):
            (group_level if (n, g) in chosen else node_level).extend(models)
    if len(cand.nodes) > 1:
        for leaf in {self.leaf_of[n] for n in cand.nodes}:
            leaf_level.extend(self.leaf_multinode.get(leaf, ()))
    return {GROUP: tuple(sorted(group_level)), NODE: tuple(sorted(node_level)),
            LEAF: tuple(sorted(leaf_level))}


@pytest.mark.parametrize("variant", ["las-lif", "neighbours"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_memoised_colocation_decides_as_scanning_every_time(variant, rng):
    """The state keeps a one-node candidate's co-location until a claim or a preemption
    changes the node: with preemption on (releases) and many claims a cycle, the decisions
    are those of the scan on every question."""
    snap = co_located_snapshot(rng)
    profile = replace(lif_profile(variant), preemption=True)
    memoised = decide(profile, snap)
    with mock.patch.object(CycleState, "colocated_by_level", scanned_by_level):
        assert decide(profile, snap) == memoised


def test_a_claim_and_a_release_change_the_memoised_colocation_of_their_node():
    snap = co_located_snapshot(random.Random(3))
    state = CycleState(snap, track_colocation=True, track_holders=True)
    running = next(j for j in snap.jobs if j.gpu_alloc and j.model_type == "a"
                   and len({n for n, _, _ in state.running_allocs[j.job_id]}) == 1)
    n, g, _ = state.running_allocs[running.job_id][0]
    there = make_candidate(((n, g, 1),), state.leaf_of)
    elsewhere = make_candidate((((n + 1) % len(state.infos), 0, 1),), state.leaf_of)
    before = state.colocated_by_level(there)[GROUP]
    untouched = state.colocated_by_level(elsewhere)
    assert "a" in before
    state.release_running(running)
    assert state.colocated_by_level(there)[GROUP] == scanned_by_level(state, there)[GROUP]
    assert len(state.colocated_by_level(there)[GROUP]) == len(before) - 1
    job = Job(job_id=1, partition=running.partition, state=JobState.PENDING, model_type="b",
              gpus_per_job=1)
    state.claim(job, there)
    assert state.colocated_by_level(there) == scanned_by_level(state, there)
    assert "b" in state.colocated_by_level(there)[GROUP]
    assert state.colocated_by_level(elsewhere) is untouched    # another node: kept
