"""What an agent sees: rows of its partition, masks from the framework's candidates, live
what-if features that follow claims made earlier in the cycle."""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

from slurm_marl.domain import Job
from slurm_marl.models.interference import InterferenceModel, Vocabulary
from slurm_marl.agent.observe import LIVE_FEATURES, Observer, job_dim
from slurm_marl.placement_shapes import generate_candidates
from slurm_marl.policy.state import CycleState
from slurm_marl.sim.cluster import parse_cluster
from models_helpers import snapshot_with

COL = {name: i for i, name in enumerate(LIVE_FEATURES)}


@pytest.fixture
def model():
    return InterferenceModel.new(Vocabulary.fit(["lm", "resnet18", "a3c"]), seed=0)


def cycle_state(snap):
    """What the framework builds for the learned plugin (which is node-specific)."""
    state = CycleState(snap, track_colocation=True)
    state.dedupe_nodes = False
    return state


def pending(job_id, gpus, partition="a", model_type="resnet18_bs16"):
    return Job(job_id=job_id, partition=partition, gpus_per_job=gpus, cpus=1,
               model_type=model_type, submit_time_s=0.0)


def test_one_gpu_job_sees_its_partition_and_neighbours(two_partitions, model):
    job = pending(10, 1)
    snap = snapshot_with(two_partitions, running=[(1, "lm_bs20", (("a01", (0,)),))],
                         pending=[job])
    state = cycle_state(snap)
    obs = Observer(model, ("a", "b")).observe(job, state)
    assert obs.agent == "a"
    assert {k: tuple(v.shape) for k, v in obs.x.items()} == {
        "gpu": (8, 4), "gpu_group": (4, 5 + 4), "node": (2, 8), "leaf": (1, 5),
        "spine": (1, 5)}
    assert obs.job.shape == (job_dim(4),) and obs.live.shape == (4, len(LIVE_FEATURES))
    # 4 groups; no defer: a group at the job's ideal speed (a02, empty) is free
    assert obs.mask.tolist() == [True] * 4 + [False]
    assert obs.live[:, COL["speed_vs_ideal"]].max() >= 0.8
    lenient = Observer(model, ("a", "b"), defer_only_below=1.01).observe(job, state)
    assert lenient.mask.tolist() == [True] * 5 and torch.equal(lenient.live, obs.live)
    assert obs.allocs_for(1) == ((0, 1, 1),) and obs.group_for(((1, 0, 1),)) == 2
    live = obs.live
    assert live[0, COL["free_fraction"]] == 0.5        # a01/g0: one of two GPUs busy
    assert live[0, COL["left_group_fraction"]] == 0.0
    assert live[1, COL["left_group_fraction"]] == 0.5
    assert live[0, COL["log_group_jobs"]] == pytest.approx(math.log1p(1))
    assert live[1, COL["log_node_jobs"]] == pytest.approx(math.log1p(1))
    assert live[2, COL["log_group_jobs"]] == 0 and live[2, COL["log_node_jobs"]] == 0
    # the lm job shows up in a01/g0's family counts (group level input of the encoder)
    lm = model.vocab.index("lm")
    assert obs.x["gpu_group"][0, 5 + lm] == 0.5
    # reward = predicted speed - predicted imposed slowdown, per group
    assert obs.reward == pytest.approx(
        (live[:, COL["pred_speed"]] - live[:, COL["imposed_slowdown"]]).numpy())
    assert all(0 < s <= 1 for s in live[:, COL["pred_speed"]].tolist())


def test_multi_group_job_anchors_on_the_split_candidate(two_partitions, model):
    job = pending(11, 4)
    snap = snapshot_with(two_partitions, running=[(1, "lm", (("a01", (0,)),))],
                         pending=[job])
    state = cycle_state(snap)
    obs = Observer(model, ("a", "b")).observe(job, state)
    assert obs.mask.tolist() == [False, False, True, True, False]   # a good spot: no defer
    split = ((1, 0, 2), (1, 1, 2))           # a02 (state node 1): two GPUs in each group
    assert obs.multi == {2: split, 3: split}
    assert obs.allocs_for(3) == split and obs.group_for(split) == 2
    with pytest.raises(ValueError, match="masked"):
        obs.allocs_for(0)
    assert obs.live[2, COL["log2_cand_groups"]] == 1.0
    assert obs.live[2, COL["left_node_fraction"]] == 0.0
    assert obs.live[0].abs().sum() > 0 and obs.live[0, COL["valid"]] == 0


def test_single_agent_sees_every_group_but_may_use_only_the_jobs_partition(two_partitions,
                                                                          model):
    job = pending(12, 2, partition="b")
    snap = snapshot_with(two_partitions, pending=[job])
    state = cycle_state(snap)
    obs = Observer(model, ("cluster",), mode="single").observe(job, state)
    assert obs.agent == "cluster" and obs.mask.shape == (9,)
    assert obs.mask.tolist() == [False] * 4 + [True] * 4 + [False]


def test_claims_earlier_in_the_cycle_change_the_next_observation(two_partitions, model):
    first, second = pending(13, 1), pending(14, 1, model_type="a3c")
    snap = snapshot_with(two_partitions, pending=[first, second])
    state = cycle_state(snap)
    observer = Observer(model, ("a", "b"))
    before = observer.observe(second, state)
    cand = generate_candidates(first, state, state.free)[0]   # a01 group 0
    state.claim(first, cand)
    after = observer.observe(second, state)
    assert before.live[0, COL["free_fraction"]] == 1.0
    assert after.live[0, COL["free_fraction"]] == 0.5
    assert after.live[0, COL["log_group_jobs"]] == pytest.approx(math.log1p(1))
    assert after.live[1, COL["log_node_jobs"]] == pytest.approx(math.log1p(1))
    assert after.live[0, COL["imposed_slowdown"]] != before.live[0, COL["imposed_slowdown"]]


def test_no_agent_for_the_partition_and_idle_agents(two_partitions, model):
    job = pending(15, 1, partition="b")
    snap = snapshot_with(two_partitions, pending=[job])
    state = cycle_state(snap)
    observer = Observer(model, ("a",))
    assert observer.observe(job, state) is None
    idle = observer.idle("a", snap)
    assert idle.mask.tolist() == [False] * 4 + [True]
    assert torch.count_nonzero(idle.live) == 0


def test_a_new_layout_rebuilds_the_topology(two_partitions, model):
    from slurm_marl.sim.cluster import parse_cluster
    observer = Observer(model, ("a",))
    observer.cycle(snapshot_with(two_partitions))
    first = observer.topology
    observer.cycle(snapshot_with(two_partitions))
    assert observer.topology is first
    observer.cycle(snapshot_with(parse_cluster("3x2x2:name=a")))
    assert observer.topology is not first and observer.topology.n_groups == 6


def random_running(cluster, rng, models):
    """Running jobs on about 40% of the GPUs, one job per group, of random models."""
    running, job_id = [], 1
    for node in cluster.nodes:
        for grp in node.gpu_groups:
            take = [g for g in grp.gpu_indices if rng.random() < 0.4]
            if take:
                running.append((job_id, rng.choice(models), ((node.name, tuple(take)),)))
                job_id += 1
    return running


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_valid_actions_are_exactly_the_frameworks_candidates(data):
    """Random busy states and job shapes: the observer's valid actions (group rows of
    ``single_node_fits``' nodes, or others' allocs) stand for the same placements
    ``generate_candidates`` offers."""
    cluster = parse_cluster("3x2x2:leaf=2:name=a+2x1x4:name=b")
    running = random_running(cluster, random.Random(data.draw(st.integers(0, 10_000))),
                             ["lm", "a3c"])
    gpus = data.draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    per_node = data.draw(st.sampled_from([0, 0, 1, 2]))
    partition = data.draw(st.sampled_from(["a", "b"]))
    if per_node:
        job = Job(job_id=99, partition=partition, gpus_per_node=per_node,
                  node_count=max(1, gpus // per_node), cpus=1, model_type="lm")
    else:
        job = Job(job_id=99, partition=partition, gpus_per_job=gpus, cpus=1,
                  model_type="lm")
    model = InterferenceModel.new(Vocabulary.fit(["lm", "a3c"]))
    state = cycle_state(snapshot_with(cluster, running=running, pending=[job]))
    cands = generate_candidates(job, state, state.view)
    obs = Observer(model, ("a", "b")).observe(job, state)
    offered = {obs.allocs_for(g) for g in obs.valid_groups()}
    assert offered == {c.allocs for c in cands}
    for c in cands:
        assert obs.allocs_for(obs.group_for(c.allocs)) == c.allocs


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_predictions_once_per_distinct_candidate_row_equal_once_per_candidate(data):
    """Random busy states and job shapes: the interference model run once per distinct
    neighbourhood (``Predictor.dedupe``) gives every candidate the prediction it gets run
    once per candidate, so the observation is the same."""
    cluster = parse_cluster("4x2x2:leaf=2:name=a+3x1x4:name=b")
    running = random_running(cluster, random.Random(data.draw(st.integers(0, 10_000))),
                             ["lm", "a3c", "resnet18"])
    gpus = data.draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    job = Job(job_id=99, partition=data.draw(st.sampled_from(["a", "b"])), gpus_per_job=gpus,
              cpus=1, model_type=data.draw(st.sampled_from(["lm", "a3c"])))
    model = InterferenceModel.new(Vocabulary.fit(["lm", "a3c", "resnet18"]), seed=1)
    state = cycle_state(snapshot_with(cluster, running=running, pending=[job]))
    fast = Observer(model, ("a", "b"))
    reference = Observer(model, ("a", "b"))
    reference.predictor.dedupe = False
    got, want = fast.observe(job, state), reference.observe(job, state)
    assert torch.equal(got.mask, want.mask)
    assert torch.allclose(got.live, want.live, atol=1e-6, rtol=0)
    assert torch.allclose(got.job, want.job, atol=1e-6, rtol=0)


def test_distinct_rows_finds_first_occurrences_exactly():
    import numpy as np
    from slurm_marl.agent.predict import distinct_rows
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 3, size=(300, 2, 5)).astype(np.float32)
    for rows in (counts, counts * 10.0, counts + 0.5, counts * 1e6, counts[:1]):
        first, inverse = distinct_rows(rows)
        assert np.array_equal(rows[first][inverse], rows)       # every row recovered
        assert len(first) == len(np.unique(rows.reshape(len(rows), -1), axis=0))
        for i, f in enumerate(first):                            # the first of each
            same = np.flatnonzero((rows == rows[f]).all(axis=(1, 2)))
            assert same[0] == f and inverse[f] == i
