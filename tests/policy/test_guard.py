"""The Slurm-alone guard (issue 33, ``policy/guard.py``) on hand-built inputs: its FCFS
shadow, when a job becomes protected, that a protected job ranks first and is never
preempted nor passed by a later arrival, and that it uses nothing from the future."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from slurm_marl.domain import (ClusterSnapshot, GpuGroup, Job, JobState, Node, Partition,
                               Place, Preempt)
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.guard import (GuardedOrder, GuardSettings, SlurmAloneShadow,
                                     guard_settings, shadow_starts)
from slurm_marl.policy.survival import Survival
from slurm_marl.policy.profile import ProfileError, load_profile, profile_from_mapping
from slurm_marl.sim.cluster import parse_cluster
from slurm_marl.sim.engine import Simulator
from slurm_marl.sim.traces import TraceJob

LAS = {"name": "las-guard", "preemption": True, "backfill": True, "backfill_reserve": False,
       "order": {"plugin": "tiresias_las", "thresholds_gpu_s": [600]},
       "place": {"consolidate": 1.0}}


def guarded(**guard):
    return profile_from_mapping({**LAS, "guard": guard or {"slack": 0.0, "slack_min_s": 0}})


def test_shadow_is_first_come_first_served_on_the_gpus():
    # 4 GPUs: job 1 (4 GPUs, 100 s) blocks job 2 (2 GPUs) until 100 although 3 (1 GPU)
    # arrived later; no backfill: 3 starts with 2 at 100, 4 (4 GPUs) when both end
    starts, (last, ends, free) = shadow_starts(
        [(1, 0.0, 4, 100.0), (2, 10.0, 2, 50.0), (3, 20.0, 1, 30.0), (4, 30.0, 4, 10.0)], 4)
    assert starts == {1: 0.0, 2: 100.0, 3: 100.0, 4: 150.0}
    assert last == 150.0 and free == 0
    # a job larger than the cluster waits for all of it, then holds all of it
    big, _ = shadow_starts([(1, 0.0, 2, 100.0), (2, 0.0, 8, 10.0), (3, 0.0, 1, 5.0)], 4)
    assert big == {1: 0.0, 2: 100.0, 3: 110.0}
    # a prefix folded into a base state gives the same starts
    whole, _ = shadow_starts([(1, 0.0, 3, 50.0), (2, 5.0, 2, 20.0), (3, 6.0, 2, 5.0)], 4)
    _, base = shadow_starts([(1, 0.0, 3, 50.0)], 4)
    rest, _ = shadow_starts([(2, 5.0, 2, 20.0), (3, 6.0, 2, 5.0)], 4, base)
    assert rest == {2: whole[2], 3: whole[3]} == {2: 50.0, 3: 50.0}


def test_settings_are_checked():
    assert guard_settings({}) == GuardSettings(0.1, 60.0)
    assert guard_settings({"model": "replica", "tick_s": 30}).model == "replica"
    for bad in ({"slack": -1}, {"slack_min_s": "x"}, {"slack": True}, {"other": 1},
                {"model": "exact"}, {"model": 1}, {"tick_s": -5}):
        with pytest.raises(ValueError):
            guard_settings(bad)
    with pytest.raises(ProfileError, match=r"\[guard\]"):
        profile_from_mapping({**LAS, "guard": {"slack": -0.5}})
    assert profile_from_mapping(LAS).guard == {}
    assert isinstance(build_policy(guarded()).order, GuardedOrder)
    assert not isinstance(build_policy(profile_from_mapping(LAS)).order, GuardedOrder)


def job(jid, submit, gpus, state=JobState.PENDING, attained=0.0):
    return Job(jid, partition="p", gpus_per_node=gpus, submit_time_s=submit, state=state,
               attained_gpu_s=attained, start_time_s=submit if state is JobState.RUNNING
               else None)


def test_expected_lengths_come_from_runs_that_ended_and_runs_still_alive():
    shadow = SlurmAloneShadow(GuardSettings(0.0, 0.0, step_s=0.0))
    shadow.capacity = 4
    shadow.observe([job(1, 0, 4, JobState.RUNNING, 400), job(2, 5, 4)], 100.0)
    # nothing has ended: a running job is expected to need what it has had so far
    assert shadow.expected_length(100.0) == 100.0
    assert shadow.starts == {1: 0.0, 2: 100.0} and 2 in shadow.protected
    # 1 is gone at 120: it had run 100 s when last seen at 100, and ran on until some time
    # before 120 (the simulator's cycles come at every end: exactly then)
    shadow.observe([job(2, 5, 4, JobState.RUNNING, 4 * 20)], 120.0)
    assert list(shadow.lengths) == [120.0]
    assert shadow.expected_length(10.0) == 120.0 and shadow.expected_length(150.0) == 150.0
    assert 2 not in shadow.protected or shadow.protected[2] == 100.0
    # a long run still alive counts as longer than it has run: 3 has run 5000 s
    shadow.observe([job(2, 5, 4, JobState.RUNNING, 4 * 40),
                    job(3, 130, 4, JobState.RUNNING, 4 * 5000)], 140.0)
    assert shadow.expected_length(0.0) > 100.0


def test_jobs_are_protected_only_at_step_boundaries():
    """The shadow is recomputed and jobs protected once a step: between boundaries the
    order stays as it was (the daemon's placement reuse holds), and the next change is
    announced at the boundary on or after a job's due time."""
    shadow = SlurmAloneShadow(GuardSettings(0.0, 30.0, step_s=60.0))
    shadow.capacity = 4
    running = job(1, 0, 4, JobState.RUNNING, 4 * 10)
    waiting = job(2, 5, 4)
    shadow.observe([running, waiting], 10.0)        # step 0: 2 starts at 10 in the shadow
    assert shadow.starts[2] == 10.0 and shadow.due_s(2) == 40.0
    assert shadow.next_change_s(waiting, 10.0) == 60.0 and 2 not in shadow.protected
    shadow.observe([running, waiting], 50.0)        # past due, same step: not yet
    assert 2 not in shadow.protected
    late = job(3, 55, 1)
    shadow.observe([running, waiting, late], 55.0)  # seen mid-step: placed at the boundary
    assert 3 not in shadow.starts and shadow.next_change_s(late, 55.0) == 60.0
    shadow.observe([running, waiting, late], 60.0)  # the boundary
    assert shadow.protected == {2: 60.0} and 3 in shadow.starts
    assert shadow.next_change_s(waiting, 60.0) is None


def test_survival_is_kaplan_meier_with_the_alive_runs_censored():
    # nothing censored: the plain mean of the runs longer than what the job has had
    km = Survival([100.0, 300.0, 1100.0])
    assert km.conditional_mean(50.0) == pytest.approx(500.0)
    assert km.conditional_mean(200.0) == pytest.approx(700.0)
    assert km.conditional_mean(2000.0) == 2000.0
    # one run alive at 1000 s: S falls to 2/3 at 100, to 1/3 at 300, and the alive run
    # counts as ending at the longest run seen (1000): not the ended runs' mean of 200
    km = Survival([100.0, 300.0], alive=[1000.0])
    assert km.s(99.0) == 1.0 and km.s(100.0) == pytest.approx(2 / 3)
    assert km.s(300.0) == pytest.approx(1 / 3) and km.s(5000.0) == pytest.approx(1 / 3)
    assert km.conditional_mean(0.0) == pytest.approx(100 + 200 * 2 / 3 + 700 / 3)
    assert km.conditional_mean(200.0) == pytest.approx(650.0)
    # ties: runs ending at a time count before runs censored then
    km = Survival([10.0, 10.0], alive=[10.0, 20.0])
    assert km.s(10.0) == pytest.approx(0.5)
    assert Survival().conditional_mean(42.0) == 42.0


def test_a_job_past_its_shadow_start_is_protected_ranked_first_and_kept_running():
    policy = build_policy(guarded(slack=0.0, slack_min_s=0))
    order = policy.order
    # a big old job whose FCFS turn has come, small newer jobs ahead of it in LAS
    old = job(1, 0.0, 4, attained=0.0)
    small = [job(10 + i, 50.0 + i, 1) for i in range(3)]
    runner = job(9, 40.0, 4, JobState.RUNNING, attained=4 * 2000.0)   # demoted by LAS
    order.shadow.capacity = 8
    order.begin_cycle([old, runner, *small], 3000.0)
    assert 1 in order.shadow.protected
    ranked = policy.rank([old, *small], 3000.0)
    assert ranked[0].job.job_id == 1
    assert "protected by the Slurm-alone guard" in order.describe(old, 3000.0, 0)


def test_a_prediction_never_pushes_a_protected_job_back():
    """The guard wraps the predicted order too: a job predicted to need far more GPU-time
    than the others ranks last while unprotected and first once past its shadow start."""
    prof = profile_from_mapping({
        "name": "pred-guard", "preemption": True, "backfill": True, "backfill_reserve": False,
        "order": {"plugin": "predicted_las"}, "place": {"consolidate": 1.0},
        "guard": {"slack": 0.0, "slack_min_s": 0, "step_s": 0}})
    policy = build_policy(prof)
    order = policy.order
    assert isinstance(order, GuardedOrder)
    huge = replace(job(1, 0.0, 4), predicted_gpu_s=1e9)
    small = [replace(job(10 + i, 50.0 + i, 1), predicted_gpu_s=100.0) for i in range(3)]
    runner = job(9, -10.0, 4, JobState.RUNNING, attained=4 * 100.0)
    order.shadow.capacity = 4
    order.begin_cycle([huge, runner, *small], 60.0)      # 9 holds the GPUs till 90
    assert 1 not in order.shadow.protected
    assert policy.rank([huge, *small], 60.0)[-1].job.job_id == 1
    order.begin_cycle([huge, *small], 90.0)              # 9 has ended (by 90)
    order.begin_cycle([huge, *small], 3000.0)            # 1's FCFS turn has come
    assert 1 in order.shadow.protected
    assert policy.rank([huge, *small], 3000.0)[0].job.job_id == 1


def _trace(rng: random.Random) -> list[TraceJob]:
    t, jobs = 0.0, []
    for i in range(rng.randint(15, 40)):
        t += rng.expovariate(1 / 150)
        gpus = rng.choice([1, 1, 2, 4, 8])
        jobs.append(TraceJob(i, t, rng.choice([60, 300, 1800, 7200, 30_000]) * rng.random()
                             + 30, gpus))
    return jobs


class Recorder:
    """The policy the simulator runs, keeping every cycle's snapshot and decisions."""

    def __init__(self, policy) -> None:
        self._policy = policy
        self.cycles: list[tuple] = []

    def run_cycle(self, snap):
        out = self._policy.run_cycle(snap)
        self.cycles.append((snap, out, dict(self._policy.order.shadow.protected)))
        return out

    def __getattr__(self, name):
        return getattr(self._policy, name)


MODELS = pytest.mark.parametrize("model", ["fluid", "replica", "replica+rewind",
                                           "replica+rewind+running"])


def shadow_keys(model: str) -> dict:
    """The ``[guard]`` keys of a shadow: the fluid one, the replica, the replica revising
    its past, and that one protecting running jobs too."""
    name, *more = model.split("+")
    return {"model": name, **({"rewind_s": 3600.0} if "rewind" in more else {}),
            **({"protect_running": True} if "running" in more else {})}


@MODELS
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_protected_jobs_are_never_preempted_nor_passed_by_a_later_arrival(model, rng):
    """Over whole simulated runs: a job protected at a cycle is not preempted that cycle,
    and no job submitted after it starts while it is left waiting (unless protected too)."""
    rec = Recorder(build_policy(guarded(slack=0.0, slack_min_s=0, **shadow_keys(model))))
    Simulator(parse_cluster("2x2x2"), _trace(rng), rec, seed=rng.randrange(10)).run()
    checked = 0
    for snap, decisions, protected in rec.cycles:
        preempted = {d.job_id for d in decisions if isinstance(d, Preempt)}
        starts = {d.job_id for d in decisions if isinstance(d, Place) and d.start_now}
        for job_id in protected:
            j = snap.job(job_id)
            if j is None:
                continue
            checked += 1
            assert job_id not in preempted, (snap.time_s, job_id)
            if j.is_pending and job_id not in starts:
                later = [s for s in starts if s not in protected
                         and snap.job(s).submit_time_s > j.submit_time_s]
                assert not later, (snap.time_s, job_id, later)
    assume(checked)   # draws where no job waited past its FCFS turn test nothing


@MODELS
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_the_guard_uses_nothing_from_the_future(model, rng):
    """Two runs whose traces agree up to a time T and differ after it (later arrivals
    changed, jobs still running at T made longer): every decision made before T is the
    same in both."""
    trace = _trace(rng)
    first = Recorder(build_policy(guarded(slack=0.0, slack_min_s=0, **shadow_keys(model))))
    Simulator(parse_cluster("2x2x2"), trace, first, seed=1).run()
    cut = trace[len(trace) // 2].submit_time_s
    # what ended before the cut is the same; whatever was running or queued then is longer
    snap_at_cut = [s for s, _, _ in first.cycles if s.time_s <= cut][-1]
    unfinished = {j.job_id for j in snap_at_cut.jobs}
    changed = [replace(t, duration_s=t.duration_s * 3) if t.job_id in unfinished else
               replace(t, num_gpus=rng.choice([1, 2, 4]), duration_s=t.duration_s * 0.5)
               if t.submit_time_s > cut else t for t in trace]
    second = Recorder(build_policy(guarded(slack=0.0, slack_min_s=0, **shadow_keys(model))))
    Simulator(parse_cluster("2x2x2"), changed, second, seed=1).run()
    before = [(s.time_s, out, p) for s, out, p in first.cycles if s.time_s < cut]
    again = [(s.time_s, out, p) for s, out, p in second.cycles if s.time_s < cut]
    assume(before)   # degenerate draws (every job at one instant) compare nothing
    assert before == again


def _big_job_behind_a_runner() -> ClusterSnapshot:
    """Two 4-GPU nodes: job 1 runs on n1; 8-GPU job 2 (older) waits for it; 1-GPU job 3
    (later) would fit on n2."""
    nodes = tuple(Node(name=n, partitions=("p",), cpus=8, real_memory_mib=16000,
                       gpu_groups=(GpuGroup(0, (0, 1), "s0", 0),
                                   GpuGroup(1, (2, 3), "s1", 1)),
                       used_gpu_indices=frozenset(used), alloc_cpus=len(used))
                  for n, used in (("n1", (0, 1, 2, 3)), ("n2", ())))
    running = Job(1, partition="p", gpus_per_node=4, submit_time_s=0.0,
                  state=JobState.RUNNING, start_time_s=10.0, attained_gpu_s=4 * 4990.0,
                  nodes=("n1",), gpu_alloc=(("n1", (0, 1, 2, 3)),))
    big = Job(2, partition="p", gpus_per_node=4, node_count=2, submit_time_s=5.0)
    small = Job(3, partition="p", gpus_per_node=1, submit_time_s=100.0)
    return ClusterSnapshot(5000.0, nodes, (running, big, small), (Partition("p", ("n1", "n2")),))


def test_a_blocked_protected_job_holds_the_gpus_it_waits_for():
    """8 GPUs; a protected job runs on n1's 4; an older protected 8-GPU job waits for it
    (protected jobs do not preempt each other). It holds n2's free GPUs, where it will
    start: a 1-GPU job that arrived later would fit there (fit-first backfill would start
    it), and waits too."""
    snap = _big_job_behind_a_runner()
    # a slack no job reaches here: protected are the two the test names
    policy = build_policy(guarded(slack=10.0, slack_min_s=1e6))
    policy.order.shadow.protected.update({1: 100.0, 2: 200.0})
    decisions = policy.run_cycle(snap)
    assert not [d for d in decisions if isinstance(d, Preempt)
                or isinstance(d, Place) and d.start_now], decisions
    held = [d for d in decisions if isinstance(d, Place)]
    assert [(d.job_id, d.nodes) for d in held] == [(2, ("n1", "n2"))], held
    # unprotected, the 1-GPU job would start on n2 (fit-first backfill)
    policy = build_policy(guarded(slack=10.0, slack_min_s=1e6))
    policy.order.shadow.protected.update({1: 100.0})
    assert {d.job_id for d in policy.run_cycle(snap) if isinstance(d, Place)} == {3}


def test_a_later_arrival_passes_a_blocked_protected_job_on_gpus_it_does_not_wait_for():
    """The shape that made jobs wait hours that Slurm alone starts at once: a protected
    job blocked (here 8 GPUs on two nodes, n1 busy) used to keep every later arrival of
    its partition waiting behind it. It holds the GPUs it will start on (n2's 4 and those
    free on the node it pairs n2 with); a later 1-GPU job starts on a free GPU it does not
    wait for."""
    group = (GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1))
    nodes = tuple(Node(name=n, partitions=("p",), cpus=8, real_memory_mib=16000,
                       gpu_groups=group, used_gpu_indices=frozenset(used),
                       alloc_cpus=len(used))
                  for n, used in (("n1", (0, 1, 2, 3)), ("n2", ()), ("n3", (0, 1, 2)),
                                  ("n4", (0, 1, 2))))
    running = [Job(i, partition="p", gpus_per_node=k, submit_time_s=0.0,
                   state=JobState.RUNNING, start_time_s=10.0, attained_gpu_s=k * 4990.0,
                   nodes=(n,), gpu_alloc=((n, tuple(range(k))),))
               for i, n, k in ((1, "n1", 4), (4, "n3", 3), (5, "n4", 3))]
    big = Job(2, partition="p", gpus_per_node=4, node_count=2, submit_time_s=5.0)
    small = Job(3, partition="p", gpus_per_node=1, submit_time_s=100.0)
    snap = ClusterSnapshot(5000.0, nodes, (*running, big, small),
                           (Partition("p", ("n1", "n2", "n3", "n4")),))
    policy = build_policy(guarded(slack=10.0, slack_min_s=1e6))
    policy.order.shadow.protected.update({1: 100.0, 2: 200.0, 4: 100.0, 5: 100.0})
    decisions = policy.run_cycle(snap)
    started = {d.job_id: d.nodes for d in decisions if isinstance(d, Place) and d.start_now}
    held = {d.job_id: d.nodes for d in decisions if isinstance(d, Place) and not d.start_now}
    assert set(held) == {2} and "n2" in held[2], decisions
    assert set(started) == {3} and started[3][0] not in held[2], decisions


def test_a_blocked_protected_job_holds_back_only_its_own_partition():
    """As above, with a second partition q beside p: q's 1-GPU job, later than p's
    blocked protected job, starts on q's free node (the daemon decides q on its own view;
    the simulator's cycle over both partitions must not hold it), while p's waits."""
    group = (GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1))
    nodes = tuple(Node(name=n, partitions=(part,), cpus=8, real_memory_mib=16000,
                       gpu_groups=group, used_gpu_indices=frozenset(used),
                       alloc_cpus=len(used))
                  for n, part, used in (("n1", "p", (0, 1, 2, 3)), ("n2", "p", ()),
                                        ("m1", "q", ())))
    running = Job(1, partition="p", gpus_per_node=4, submit_time_s=0.0,
                  state=JobState.RUNNING, start_time_s=10.0, attained_gpu_s=4 * 4990.0,
                  nodes=("n1",), gpu_alloc=(("n1", (0, 1, 2, 3)),))
    big = Job(2, partition="p", gpus_per_node=4, node_count=2, submit_time_s=5.0)
    small_p = Job(3, partition="p", gpus_per_node=1, submit_time_s=100.0)
    small_q = Job(4, partition="q", gpus_per_node=1, submit_time_s=120.0)
    snap = ClusterSnapshot(5000.0, nodes, (running, big, small_p, small_q),
                           (Partition("p", ("n1", "n2")), Partition("q", ("m1",))))
    policy = build_policy(guarded(slack=10.0, slack_min_s=1e6))
    policy.order.shadow.protected.update({1: 100.0, 2: 200.0})
    decisions = policy.run_cycle(snap)
    assert [d.job_id for d in decisions if isinstance(d, Preempt)
            or isinstance(d, Place) and d.start_now] == [4], decisions


@MODELS
def test_the_daemon_runs_the_guard_and_explain_says_so(tmp_path, model):
    """The agent with a guarded profile: an old 8-GPU job whose FCFS turn came while a
    demoted job holds the GPUs is protected, preempts it, and its decision's reason (what
    `slurm-marl explain` shows) names the guard. The replica shadow gets the partition's
    nodes from the daemon's view before it is brought up to date. Restarted, the agent
    keeps the job protected."""
    from fakes import FakeClusterSource, FakeDecisionSink

    from slurm_marl.daemon.config import parse_config
    from slurm_marl.daemon.service import Agent
    from slurm_marl.daemon.store import Store

    nodes = tuple(Node(name=n, partitions=("p",), cpus=8, real_memory_mib=16000,
                       gpu_groups=(GpuGroup(0, (0, 1), "s0", 0),
                                   GpuGroup(1, (2, 3), "s1", 1)),
                       used_gpu_indices=frozenset(used), alloc_cpus=len(used))
                  for n, used in (("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3))))
    hog = Job(1, partition="p", gpus_per_node=4, node_count=2, submit_time_s=100.0,
              state=JobState.RUNNING, start_time_s=100.0, attained_gpu_s=8 * 4900.0,
              nodes=("n1", "n2"), gpu_alloc=(("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3))))
    old = Job(2, partition="p", gpus_per_node=4, node_count=2, submit_time_s=0.0,
              admin_comment="slurm-marl:v1;tpn=gres:gpu:4;tpj=;req=;beg=")
    snap = ClusterSnapshot(5000.0, nodes, (hog, old), (Partition("p", ("n1", "n2"), True),))
    profile = tmp_path / "guarded.toml"
    profile.write_text('name = "g"\npreemption = true\nbackfill = true\n'
                       'backfill_reserve = false\n[order]\nplugin = "tiresias_las"\n'
                       'thresholds_gpu_s = [600]\n[place]\nconsolidate = 1.0\n'
                       f'[guard]\nslack = 0.1\nslack_min_s = 60\n'
                       + "".join(f"{k} = {json.dumps(v)}\n"
                                 for k, v in shadow_keys(model).items()))
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1, "grace_s": 30,
                                  "profile": str(profile), "managed_partitions": ["p"],
                                  "preempt_partitions": ["p"]}})
    sink = FakeDecisionSink()
    # the agent's first view, at 0: the old job waiting on free nodes (the replica begins
    # with the cluster as it is, so its Slurm-alone start is 0, not a replay of history)
    free = tuple(replace(n, used_gpu_indices=frozenset(), alloc_cpus=0) for n in nodes)
    source = FakeClusterSource(ClusterSnapshot(0.0, free, (old,), snap.partitions))
    agent = Agent(cfg, source, sink, Store(tmp_path / "s.sqlite"),
                  build_policy(load_profile(profile)))
    agent.cycle()
    source.snap = snap
    agent.cycle()
    written = [d for call in sink.calls for d in call]
    assert any(isinstance(d, Preempt) and d.job_id == 1 for d in written), written
    reasons = [r["reason"] for r in agent.store.log.decisions(job_id=2)]
    assert any("protected by the Slurm-alone guard" in r for r in reasons), reasons
    # the admin's view: status counts it, queues marks it, the metric has it
    assert agent.last_report.protected == 1
    assert set(agent.store.guard.get()) == {2}
    from typer.testing import CliRunner

    from slurm_marl.cli import app
    store = str(tmp_path / "s.sqlite")
    out = CliRunner().invoke(app, ["status", "--store", store])
    assert out.exit_code == 0 and "1 job(s) protected by the Slurm-alone guard" in out.output
    out = CliRunner().invoke(app, ["queues", "--store", store, "--json"])
    rows = {r["job_id"]: r["guard"] for r in json.loads(out.output)}
    assert rows[2] is not None and rows[2]["shadow_start_s"] == 0.0
    from slurm_marl.daemon.metrics import Metrics
    metrics = Metrics()
    metrics.observe(agent.last_report)
    assert metrics.protected._value.get() == 1
    # restarted, the agent's shadow begins again at its first view (the replica's would
    # give the old job no start while the hog runs): the job stays protected from the store
    again = Agent(cfg, FakeClusterSource(replace(snap, time_s=5060.0)), FakeDecisionSink(),
                  Store(tmp_path / "s.sqlite"), build_policy(load_profile(profile)))
    again.cycle()
    # (protecting running jobs too, the replica has the hog running since its real start,
    # past due: protected as well)
    assert set(again.store.guard.get()) == ({1, 2} if "running" in model else {2})
    assert again.store.guard.get()[2]["protected_s"] == 5000.0


def test_a_guarded_policy_watches_ends():
    """The simulator shows each end to a policy that learns from ends: a guarded one."""
    assert build_policy(guarded()).watches_ends is True
    assert build_policy(profile_from_mapping(LAS)).watches_ends is False


def test_protect_running_protects_a_running_job_past_its_slurm_alone_start():
    """With ``protect_running`` a job the agent started before Slurm alone would have is
    protected once its Slurm-alone start (plus the slack) has passed, while it runs: no
    pending job may preempt it from then. Without it, only waiting jobs are protected."""
    for running_too in (False, True):
        shadow = SlurmAloneShadow(GuardSettings(slack=0.0, slack_min_s=0.0, step_s=0.0,
                                                protect_running=running_too))
        shadow.capacity = 4
        # a run of 1,000 s seen first: the mean run
        shadow.observe([Job(9, partition="p", gpus_per_node=4, submit_time_s=0.0,
                            state=JobState.RUNNING, start_time_s=0.0)], 0.0)
        shadow.observe([], 1000.0)
        # job 1 (4 GPUs) holds the cluster in the shadow; the agent ran job 2 at once too
        first = Job(1, partition="p", gpus_per_node=4, submit_time_s=1000.0,
                    state=JobState.RUNNING, start_time_s=1000.0, attained_gpu_s=4 * 10.0)
        second = Job(2, partition="p", gpus_per_node=4, submit_time_s=1001.0,
                     state=JobState.RUNNING, start_time_s=1001.0, attained_gpu_s=4 * 9.0)
        shadow.observe([first, second], 1010.0)
        assert shadow.starts[2] > 1010.0 and 2 not in shadow.protected
        # job 1 seen gone at 3,000 (a run of 2,000 s): job 2's Slurm-alone start is 3,000
        shadow.observe([second.with_(attained_gpu_s=4 * 1999.0)], 3000.0)
        assert shadow.starts[2] == 3000.0
        assert (2 in shadow.protected) is running_too


def test_the_daemon_guards_a_profile_without_a_guard_unless_told_not_to(caplog):
    """``agent.guard`` (on by default) puts the default guard in front of a profile that has
    none; a profile's own ``[guard]`` is kept; ``guard = false`` runs profiles as written,
    with a warning in the log. The default is a valid guard: the replica, revising a day."""
    import logging

    from slurm_marl.daemon.config import parse_config
    from slurm_marl.daemon.wiring import _agent_profile
    from slurm_marl.policy.guard import DEFAULT_GUARD, guard_settings
    from slurm_marl.policy.profile import with_default_guard

    assert guard_settings(DEFAULT_GUARD) == GuardSettings(
        model="replica", tick_s=60.0, rewind_s=86_400.0, protect_running=True)
    on = parse_config({})
    off = parse_config({"agent": {"guard": False}})
    assert on.agent.guard is True
    assert dict(_agent_profile(on, "las-consolidate").guard) == dict(DEFAULT_GUARD)
    assert isinstance(build_policy(_agent_profile(on, "las-consolidate")).order, GuardedOrder)
    with caplog.at_level(logging.WARNING):
        assert not _agent_profile(off, "las-consolidate").guard
    assert "no Slurm-alone guard" in caplog.text
    own = guarded(slack=0.5)
    assert with_default_guard(own) is own
    with pytest.raises(Exception, match="guard"):
        parse_config({"agent": {"guard": "yes"}})


def test_the_slack_may_be_a_share_of_the_slurm_alone_jct():
    """``slack_on = "jct"``: a job is due at its shadow start plus the slack's share of its
    shadow wait and the run it is expected to need (the mean run seen), so a
    job may start later by a share of its Slurm-alone JCT; ``"wait"``: of the wait only."""
    due = {}
    for basis in ("wait", "jct"):
        shadow = SlurmAloneShadow(GuardSettings(slack=0.5, slack_min_s=0.0, step_s=0.0,
                                                slack_on=basis))
        shadow.capacity = 4
        shadow.observe([Job(9, partition="p", gpus_per_node=4, submit_time_s=0.0,
                            state=JobState.RUNNING, attained_gpu_s=4 * 1000.0)], 1000.0)
        shadow.observe([Job(1, partition="p", gpus_per_node=4, submit_time_s=500.0)], 1000.0 + 1)
        due[basis] = shadow.due_s(1) - shadow.starts[1]
    # (job 9 seen gone at 1,001: a run of 1,001 s, the mean)
    assert due == {"wait": pytest.approx(0.5 * 501.0), "jct": pytest.approx(0.5 * 1502.0)}
    with pytest.raises(ValueError, match="slack_on"):
        guard_settings({"slack_on": "run"})


def test_a_job_told_to_start_stays_in_the_guards_view_until_slurm_starts_it(tmp_path):
    """The daemon holds a job it told to start, until Slurm starts it, out of re-deciding.
    The guard's replica must still see it: a job gone from its view has ended, to the
    replica, which would free the job's GPUs and run ahead of Slurm alone. (On a real
    cluster every job then came out protected at first sight, and 2D-LAS ran as FIFO.) Job 1
    (the whole node) is told to start at 10 and is still pending at 11 and 12; job 2 (the
    whole node too) waits behind it in the replica, unprotected."""
    from fakes import FakeClusterSource, FakeDecisionSink

    from slurm_marl.daemon.config import parse_config
    from slurm_marl.daemon.service import Agent
    from slurm_marl.daemon.store import Store

    node = Node(name="n1", partitions=("p",), cpus=8, real_memory_mib=16000,
                gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
    parts = (Partition("p", ("n1",), True),)
    first, second = (Job(j, partition="p", gpus_per_node=4, submit_time_s=t)
                     for j, t in ((1, 9.0), (2, 9.5)))
    profile = tmp_path / "guarded.toml"
    profile.write_text('name = "g"\npreemption = true\nbackfill = true\n'
                       'backfill_reserve = false\n[order]\nplugin = "tiresias_las"\n'
                       'thresholds_gpu_s = [600]\n[place]\nconsolidate = 1.0\n'
                       '[guard]\nmodel = "replica"\nslack = 0.1\nslack_min_s = 0.5\n'
                       'step_s = 0\ntick_s = 0\nrewind_s = 3600\nprotect_running = true\n')
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1, "grace_s": 30,
                                  "profile": str(profile), "managed_partitions": ["p"],
                                  "preempt_partitions": ["p"]}})
    sink = FakeDecisionSink()
    source = FakeClusterSource(ClusterSnapshot(10.0, (node,), (first,), parts))
    agent = Agent(cfg, source, sink, Store(tmp_path / "s.sqlite"),
                  build_policy(load_profile(profile)))
    agent.cycle()
    assert any(isinstance(d, Place) and d.job_id == 1 and d.start_now
               for d in sink.calls[0])
    shadow = agent.policy.order.shadow
    for now in (11.0, 12.0):          # Slurm has not started it yet: in flight
        source.snap = ClusterSnapshot(now, (node,), (first, second), parts)
        agent.cycle()
        assert 1 in shadow.running and not shadow.seen[1].ended
        assert 2 not in shadow.starts and 2 not in shadow.protected


def test_a_cycle_is_not_reused_once_a_blocked_job_becomes_protected():
    """Reuse (``reuse_decisions``) must see protection: the blocked 8-GPU job ranks first
    before and after it is protected, so only the protected set tells the two cycles
    apart; protected, it is passed by no later arrival (the test above)."""
    snap = _big_job_behind_a_runner()
    policy = build_policy(guarded(slack=10.0, slack_min_s=1e6))
    policy.reuse_decisions = True
    policy.order.shadow.protected.update({1: 100.0})
    assert [d.job_id for d in policy.run_cycle(snap) if isinstance(d, Place)] == [3]
    policy.order.shadow.protected[2] = 4000.0
    assert [r.job.job_id for r in policy.rank([snap.job(2), snap.job(3)], 5001.0)] == [2, 3]
    decisions = policy.run_cycle(replace(snap, time_s=5001.0))
    assert not [d for d in decisions if isinstance(d, Preempt)
                or isinstance(d, Place) and d.start_now], decisions


def test_a_bound_is_spent_as_a_deadline():
    """``bound``: a job is due once it must start to finish by submit + bound x max(its
    Slurm-alone JCT, 600 s), less the run it still needs; a short job may wait minutes,
    a long one a share of its Slurm-alone JCT."""
    from slurm_marl.policy.guard import deadline_start_s

    # 60 s job that Slurm alone starts at once: deadline 900 s, start by 840 s
    assert deadline_start_s(0.0, 0.0, 0.0, 60.0, 1.5) == 840.0
    # 2,000 s job Slurm alone starts after 1,000 s: deadline 4,500 s, start by 2,500 s
    assert deadline_start_s(0.0, 1000.0, 0.0, 2000.0, 1.5) == 2500.0
    # half of it run already (preempted): 1,000 s still needed, start by 3,500 s
    assert deadline_start_s(0.0, 1000.0, 1000.0, 2000.0, 1.5) == 3500.0
    # never earlier than its Slurm-alone start
    assert deadline_start_s(0.0, 1000.0, 0.0, 2000.0, 1.0) == 1000.0
    with pytest.raises(ValueError, match="bound must be 0"):
        guard_settings({"bound": 0.5})
    assert guard_settings({"bound": 1.5}).bound == 1.5


class _Keeping:
    """The policy the simulator runs, keeping every cycle's time and decisions."""

    def __init__(self, policy, seen: list) -> None:
        self._policy, self._seen = policy, seen

    def run_cycle(self, snap, *args, **kwargs):
        out = self._policy.run_cycle(snap, *args, **kwargs)
        self._seen.append((snap.time_s, out))
        return out

    def __getattr__(self, name):
        return getattr(self._policy, name)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), shape=st.sampled_from(["2x2x2", "4x2x4",
                                                                      "3x1x4:leaf=2"]))
def test_around_slurms_own_policy_the_guard_is_the_identity(rng, shape):
    """fifo-backfill behind the daemon's default guard decides exactly what fifo-backfill
    decides, cycle by cycle, on random traces and clusters (its estimated shadow used to
    reorder and hold jobs there: 14.5% of a backlogged site's jobs more than 2x later)."""
    from slurm_marl.policy.profile import decides_as_slurm_alone, with_default_guard

    trace = _trace(rng)
    plain = load_profile("fifo-backfill")
    behind = with_default_guard(plain)
    assert behind.guard and decides_as_slurm_alone(behind)
    runs = []
    for profile in (plain, behind):
        seen = []
        policy = build_policy(profile)

        Simulator(parse_cluster(shape), trace, _Keeping(policy, seen), seed=1).run()
        runs.append(seen)
    assert runs[0] == runs[1]
    # a profile that decides otherwise keeps its guard
    assert not decides_as_slurm_alone(with_default_guard(load_profile("las-consolidate")))
