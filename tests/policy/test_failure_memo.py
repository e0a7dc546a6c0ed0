"""The cycle's memos of jobs that found no room: a job alike (same kind, at least that
size, no more preemption candidates) is not searched again, and the memo never hides room
from a job it does not cover."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy_builders import kinds, node, pending, running, snapshot
from slurm_marl.policy.actions import Preemption
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.domain import Job, JobState
from test_policy_property import clusters


def test_a_typed_job_that_finds_no_room_does_not_keep_an_untyped_one_waiting():
    # s0 busy on both nodes, s1 free: 4 GPUs of type s0 fit nowhere, 4 untyped fit on s1
    nodes = [node("n1", used=range(4)), node("n2", used=range(4))]
    jobs = [pending(1, 0, gpus_per_node=4, node_count=1, gpu_type="s0", submit=1.0),
            pending(2, 0, gpus_per_node=4, node_count=1, submit=2.0)]
    decisions = build_policy(load_profile("las-consolidate")).run_cycle(snapshot(nodes, jobs))
    started = {d.job_id for d in kinds(decisions, "Place") if d.start_now}
    assert started == {2}


def _searches(monkeypatch):
    calls = []
    take = Preemption.take

    def counted(self, r):
        calls.append(r.job.job_id)
        return take(self, r)
    monkeypatch.setattr(Preemption, "take", counted)
    return calls


def test_alike_jobs_behind_a_failed_preemption_search_are_not_searched_again(monkeypatch):
    # one node, its 8 GPUs held by a long-running (demoted) job; ten new 8-GPU jobs rank
    # above it but each asks for 64 CPUs of the node's 32, so no preemption makes room:
    # the first search fails, and the nine alike jobs after it are not searched
    nodes = [node("n1", groups=(4, 4))]
    jobs = [running(100, {"n1": range(8)}, attained=1e6, start=0.0, cpus=1)]
    jobs += [pending(i, 0, gpus_per_node=8, node_count=1, cpus=64, submit=float(i))
             for i in range(1, 11)]
    calls = _searches(monkeypatch)
    decisions = build_policy(load_profile("las-consolidate")).run_cycle(
        snapshot(nodes, jobs))
    assert not kinds(decisions, "Preempt")      # no CPUs for any of them: 32 < 64
    assert calls == [1]                         # the other nine are alike and larger cuts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_preemption_memo_changes_no_decision(case):
    _same_decisions_with_and_without_the_memos(*case)


def _same_decisions_with_and_without_the_memos(snap, prof) -> None:
    if not prof.preemption:
        return
    with_memo = build_policy(prof).run_cycle(snap)
    policy = build_policy(prof)
    policy._monotone = False      # every search done (the memos are kept only if monotone)
    without = policy.run_cycle(snap)
    assert with_memo == without


@st.composite
def crowded(draw):
    """Pending jobs alike but for size and rank, behind and among running jobs of every
    queue: where the memo skips most searches."""
    n_nodes = draw(st.integers(1, 3))
    nodes = [node(f"n{i}", groups=(4, 4), cpus=16) for i in range(n_nodes)]
    jobs, next_id = [], 100
    for i in range(n_nodes):
        free = list(range(8))
        while free and draw(st.booleans()):
            k = draw(st.integers(1, len(free)))
            gpus, free = free[:k], free[k:]
            next_id += 1
            jobs.append(Job(job_id=next_id, partition="gpu", state=JobState.RUNNING,
                            gpus_per_job=k, cpus=k, gpu_alloc=((f"n{i}", tuple(gpus)),),
                            nodes=(f"n{i}",), submit_time_s=draw(st.floats(0, 900)),
                            start_time_s=draw(st.floats(0, 900)),
                            attained_gpu_s=draw(st.sampled_from([0.0, 4000.0, 30000.0])),
                            queue_since_s=draw(st.floats(0, 900))))
    for j in range(draw(st.integers(1, 12))):
        gpus = draw(st.integers(1, 10))
        jobs.append(pending(j + 1, gpus, submit=draw(st.floats(0, 900)), cpus=gpus,
                            attained_gpu_s=draw(st.sampled_from([0.0, 5000.0]))))
    profile = draw(st.sampled_from(["las-consolidate", "gittins-consolidate",
                                    "srtf-consolidate", "las-spread"]))
    return snapshot(nodes, jobs, now=1000.0), load_profile(profile)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded())
def test_the_preemption_memo_changes_no_decision_in_crowded_queues(case):
    _same_decisions_with_and_without_the_memos(*case)
