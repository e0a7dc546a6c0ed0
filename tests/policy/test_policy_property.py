"""Property: whatever the cluster and queue, a cycle never hands out more than is free."""

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy_builders import node, snapshot
from slurm_marl.domain import Job, JobState
from slurm_marl.placement_shapes import job_shape, per_node_share
from slurm_marl.policy.framework import run_cycle
from slurm_marl.policy.profile import load_profile

PROFILES = [load_profile(p) for p in (
    "fifo-consolidate", "fifo-backfill", "las-consolidate", "las-skew", "las-lif",
    "las-spread", "las-binpack", "gittins-consolidate", "srtf-consolidate")]
MODELS = ["vgg19", "resnet50", "lm_bs20", None]


@st.composite
def clusters(draw):
    n_nodes = draw(st.integers(1, 5))
    nodes, jobs, next_id = [], [], 100
    for i in range(n_nodes):
        groups = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
        total = sum(groups)
        used = sorted(draw(st.sets(st.integers(0, total - 1), max_size=total)))
        state = draw(st.sampled_from(["IDLE", "IDLE", "MIXED", "DRAIN", "DOWN*"]))
        part = draw(st.sampled_from([("gpu",), ("gpu",), ("other",), ("gpu", "other")]))
        name = f"n{i}"
        nodes.append(node(name, groups=groups, leaf=f"leaf{i % 2}", partitions=part,
                          state=state, cpus=16, alloc_cpus=0))
        # the used GPUs belong to one or two running jobs on this node
        cut = draw(st.integers(0, len(used)))
        for chunk in (used[:cut], used[cut:]):
            if chunk:
                next_id += 1
                jobs.append(Job(job_id=next_id, partition=part[0], state=JobState.RUNNING,
                                gpus_per_job=len(chunk), cpus=len(chunk),
                                gpu_alloc=((name, tuple(chunk)),), nodes=(name,),
                                submit_time_s=draw(st.floats(0, 500)),
                                start_time_s=draw(st.floats(0, 500)),
                                attained_gpu_s=draw(st.sampled_from([0.0, 4000.0, 30000.0])),
                                duration_s=draw(st.floats(1, 5000)),
                                model_type=draw(st.sampled_from(MODELS))))
    for j in range(draw(st.integers(0, 8))):
        fixed = draw(st.booleans())
        per_node, count = draw(st.integers(1, 4)), draw(st.integers(1, 2))
        jobs.append(Job(
            job_id=j + 1, partition=draw(st.sampled_from(["gpu", "other"])),
            gpus_per_job=0 if fixed else draw(st.integers(1, 10)),
            gpus_per_node=per_node if fixed else 0, node_count=count if fixed else 1,
            cpus=draw(st.integers(1, 8)), submit_time_s=draw(st.floats(0, 900)),
            attained_gpu_s=draw(st.sampled_from([0.0, 5000.0])),
            last_run_s=draw(st.sampled_from([0.0, 10.0])), queue_since_s=500.0,
            duration_s=draw(st.floats(1, 5000)), model_type=draw(st.sampled_from(MODELS)),
            excluded_nodes=draw(st.sampled_from([(), ("n0",)]))))
    return snapshot(nodes, jobs, now=1000.0), draw(st.sampled_from(PROFILES))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_placements_never_exceed_free_resources(case):
    snap, prof = case
    decisions = run_cycle(snap, prof)
    jobs = {j.job_id: j for j in snap.jobs}
    nodes = {n.name: n for n in snap.nodes}

    prios = [d.job_id for d in decisions if type(d).__name__ == "SetPriority"]
    assert Counter(prios) == Counter(j.job_id for j in snap.jobs if j.is_pending)

    preempted = [d.job_id for d in decisions if type(d).__name__ == "Preempt"]
    assert len(set(preempted)) == len(preempted)
    assert not preempted or prof.preemption
    free = {}
    cpus_free = {n.name: n.free_cpus for n in snap.nodes}
    for n in snap.nodes:
        for g in n.gpu_groups:
            free[(n.name, g.index)] = len(n.free_in_group(g))
    for job_id in preempted:
        job = jobs[job_id]
        assert job.is_running
        for name, gpus in job.gpu_alloc:
            for gpu in gpus:
                free[(name, nodes[name].group_of_gpu(gpu).index)] += 1

    taken = Counter()
    started = set()
    for d in decisions:
        if type(d).__name__ != "Place":
            continue
        job = jobs[d.job_id]
        assert job.is_pending
        assert d.gpus == job.num_gpus
        per_node = Counter()
        for a in d.allocs:
            n = nodes[a.node]
            assert a.gpus > 0
            assert job.partition in n.partitions
            assert a.node not in job.excluded_nodes
            assert a.gpus <= next(g.gpu_count for g in n.gpu_groups if g.index == a.group)
            per_node[a.node] += a.gpus
        if job.gpus_per_node:
            assert set(per_node.values()) == {job.gpus_per_node}
            assert len(per_node) == job.node_count
        if d.start_now:
            assert d.job_id not in started
            started.add(d.job_id)
            for a in d.allocs:
                assert nodes[a.node].available
                taken[(a.node, a.group)] += a.gpus
            total = job_shape(job)[0]
            for name, k in per_node.items():
                cpus_free[name] -= per_node_share(job.cpus, k, total)
    for key, count in taken.items():
        assert count <= free[key], (key, count, free[key], prof.name)
    # A victim yields its GPUs to a job started now that ranks above it.
    if preempted:
        from slurm_marl.policy.framework import build_policy
        policy = build_policy(prof)
        key_of = {r.job.job_id: r.sort_key for r in policy.rank(list(snap.jobs), snap.time_s)}
        for job_id in preempted:
            groups = {(name, nodes[name].group_of_gpu(g).index)
                      for name, gpus in jobs[job_id].gpu_alloc for g in gpus}
            assert groups & set(taken), (job_id, groups, taken)
            assert any(key_of[s] < key_of[job_id] for s in started)
    for name, left in cpus_free.items():
        slack = sum(per_node_share(jobs[j].cpus, len(g), jobs[j].num_gpus)
                    for j in preempted for n, g in jobs[j].gpu_alloc if n == name)
        assert left + slack >= 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_evaluating_one_node_per_class_changes_no_decision(case):
    """The framework scores one node of each class of alike nodes; scoring them all must
    give the same decisions (plugins score resources, not node names)."""
    from slurm_marl.policy.framework import build_policy

    snap, prof = case
    fast = build_policy(prof)
    slow = build_policy(prof)
    slow._dedupe_nodes = False
    assert fast.run_cycle(snap) == slow.run_cycle(snap)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_has_candidate_is_whether_any_candidate_exists(case):
    """The framework's quick room check (asked before a plugin proposes a placement) agrees
    with the candidate generator for every job, with and without node classes."""
    from slurm_marl.placement_shapes import generate_candidates, has_candidate
    from slurm_marl.policy.state import CycleState

    snap, _ = case
    for coloc in (False, True):
        state = CycleState(snap, track_colocation=coloc)
        for job in snap.jobs:
            if not job.is_pending:
                continue
            for dedupe in (True, False):
                state.dedupe_nodes = dedupe
                assert has_candidate(job, state, state.free) == bool(
                    generate_candidates(job, state, state.free)), job
