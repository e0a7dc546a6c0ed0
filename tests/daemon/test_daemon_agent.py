"""The agent's translation of policy decisions into writes, on hand-built snapshots.

The policy here is a fixed list of decisions (what to decide is the policy tests' business);
the shared fake sink records what it is asked to write (the real sink is tested against real
Slurm)."""

from dataclasses import replace

from agent_builders import NODES, PARTS, agent, pending
from fakes import FakeClusterSource, FakeDecisionSink
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import (ClusterSnapshot, Defer, EndReservation, GroupAlloc, Job,
                               JobState, Place, Preempt, Reserve, SetPriority)

def test_priorities_written_only_when_changed_with_base(tmp_path):
    now = 1000.0
    snap = ClusterSnapshot(now, NODES, (pending(1, now), pending(2, now, priority=1_000_002)),
                           PARTS)
    a, sink = agent(tmp_path, snap, [SetPriority(1, "las", "q0", 2, 0),
                                     SetPriority(2, "las", "q0", 1, 0)])
    a.store.written.mark([(2, "priority", "1000002")], now - 1)   # the agent's own
    a.cycle()
    writes = sink.calls[0]
    # job 2 already sits in the policy's order: kept; job 1 goes one SPACING above it
    # (its priority is Slurm's, not one the agent wrote: rewritten even if in order)
    assert [(d.job_id, d.priority) for d in writes if isinstance(d, SetPriority)] == \
        [(1, 1_000_002 + 1024)]
    a.source.snap = ClusterSnapshot(now + 1, NODES, (pending(1, now, priority=1_001_026),
                                                     pending(2, now, priority=1_000_002)),
                                    PARTS)
    a.cycle()   # nothing changed: nothing written (the sink is not even called)
    assert not [d for c in sink.calls[1:] for d in c if isinstance(d, SetPriority)]


def test_placement_written_once_then_held_until_slurm_starts_it(tmp_path):
    now = 1000.0
    job = pending(1, now)
    place = Place(1, "consolidate", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 1, 1),))
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (job,), PARTS), [place])
    a.cycle()
    assert any(isinstance(d, Place) for d in sink.calls[0])
    # Next cycle: Slurm has not started it yet. It is not re-placed: the policy sees it
    # running where it was told to start (not preemptible), its GPU taken, so the guard's
    # replica does not take it for ended.
    seen = []
    a.policy = type("P", (), {"run_cycle": lambda self, s: seen.append(s) or []})()
    a.source = FakeClusterSource(ClusterSnapshot(now + 1, NODES, (job,), PARTS))
    a.cycle()
    told = seen[0].job(1)
    assert told.is_running and not told.preemptible and told.start_time_s == now
    assert told.gpu_alloc == (("n1", (2,)),) and 2 in seen[0].node("n1").used_gpu_indices
    assert not sink.calls[1:] or not any(isinstance(d, Place) for d in sink.calls[-1])


def test_lease_defers_waiting_jobs_about_to_become_eligible(tmp_path):
    now = 1000.0
    soon, later = pending(1, now, eligible_in=1), pending(2, now, eligible_in=25)
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (soon, later), PARTS),
                    [SetPriority(1, "las", "", 2, 0), SetPriority(2, "las", "", 1, 0)])
    a.cycle()
    defers = [d for d in sink.calls[0] if isinstance(d, Defer)]
    assert [(d.job_id, d.seconds) for d in defers] == [(1, 30.0)]


def test_user_begin_time_and_held_jobs_are_left_alone(tmp_path):
    """...and so is a job Slurm requeued itself (a node went down under it) while Slurm's
    requeue delay runs: restarting it at once on a node just back drained the node
    ("Duplicate jobid"). A job the agent preempted itself is restarted in turn."""
    now = 1000.0
    user_begin = pending(1, now, eligible_in=3600)
    held = pending(2, now, pending_reason="JobHeldUser")
    requeued = pending(3, now, eligible_in=121, restart_count=1)
    by_slurm = pending(4, now, eligible_in=121, restart_count=1)
    seen = []
    a, _ = agent(tmp_path, ClusterSnapshot(now, NODES, (user_begin, held, requeued, by_slurm),
                                           PARTS), [])
    a.memory.preempted[3] = -1e9
    a.policy = type("P", (), {"run_cycle": lambda self, s: seen.append(s) or []})()
    a.cycle()
    assert [j.job_id for j in seen[0].pending] == [3]


def test_reservation_for_waiting_multinode_job_then_ended_when_it_runs(tmp_path):
    now = 1000.0
    big = pending(5, now, node_count=2)
    wait = Place(5, "consolidate", "waits", nodes=("n1", "n2"), start_now=False,
                 allocs=(GroupAlloc("n1", 0, 1), GroupAlloc("n2", 0, 1)))
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (big,), PARTS), [wait])
    a.cycle()
    reserves = [d for d in sink.calls[0] if isinstance(d, Reserve)]
    assert [(r.name, r.nodes) for r in reserves] == [("slurm-marl-5", ("n1", "n2"))]
    a.cycle()  # same plan: no second reservation
    assert not any(isinstance(d, Reserve) for c in sink.calls[1:] for d in c)
    running = replace(big, state=JobState.RUNNING, nodes=("n1", "n2"),
                      gpu_alloc=(("n1", (0,)), ("n2", (0,))), start_time_s=now + 2)
    a.source = FakeClusterSource(ClusterSnapshot(now + 3, NODES, (running,), PARTS))
    a.cycle()
    ends = [d for d in sink.calls[-1] if isinstance(d, EndReservation)]
    assert [e.name for e in ends] == ["slurm-marl-5"]
    assert a.store.reservations.active() == {}


def test_preemption_only_in_opted_in_partitions(tmp_path):
    now = 1000.0
    run = Job(7, partition="gpu", state=JobState.RUNNING, gpus_per_node=1, nodes=("n1",),
              gpu_alloc=(("n1", (0,)),), start_time_s=now - 100)
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (run,), PARTS),
                    [Preempt(7, "las", "demoted")])
    a.cycle()
    assert not sink.calls or not any(isinstance(d, Preempt) for d in sink.calls[0])
    b, sink_b = agent(tmp_path / "b", ClusterSnapshot(now, NODES, (run,), PARTS),
                      [Preempt(7, "las", "demoted")], preempt_partitions=["gpu"])
    b.cycle()
    assert any(isinstance(d, Preempt) for d in sink_b.calls[0])


def test_shadow_mode_writes_nothing_but_records(tmp_path):
    now = 1000.0
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (pending(1, now),), PARTS),
                    [SetPriority(1, "las", "", 2, 0)], shadow=True)
    report = a.cycle()
    assert report.error is None and sink.calls == []
    assert [r["status"] for r in a.store.log.decisions(job_id=1)] == ["shadow"]


def test_shadow_mode_records_a_decision_when_it_changes(tmp_path):
    """Not every cycle: an unchanged queue would be a row per job and cycle. A new reason
    alone (it may name the time) is no change; a new priority or placement is."""
    now = 1000.0
    snap = ClusterSnapshot(now, NODES, (pending(1, now), pending(2, now)), PARTS)
    place = Place(2, "consolidate", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 0, 1),))
    a, _ = agent(tmp_path, snap, [SetPriority(1, "las", "0 s attained", 2, 0), place],
                 shadow=True)
    a.cycle()
    a.policy.decisions = [SetPriority(1, "las", "9 s attained", 2, 0), place]
    a.cycle()
    rows = lambda job: [(r["kind"], r["reason"]) for r in a.store.log.decisions(job_id=job)]
    assert rows(1) == [("SetPriority", "0 s attained")] and len(rows(2)) == 1
    moved = Place(2, "consolidate", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 1, 1),))
    a.policy.decisions = [SetPriority(1, "las", "9 s attained", 3, 1), moved]
    a.cycle()
    assert len(rows(1)) == 2 and len(rows(2)) == 2


def test_requeued_job_placed_again_where_it_was_is_restarted(tmp_path):
    """Same placement as before its preemption: it must still get StartTime=now, or it waits
    behind the requeue delay (and the agent's lease) for ever."""
    now = 1000.0
    place = Place(1, "consolidate", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 0, 1),))
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (pending(1, now, eligible_in=0),),
                                              PARTS), [place])
    a.memory.preempted.update({1: -1e9})  # requeued by the agent itself, long ago
    a.cycle()
    assert any(isinstance(d, Place) for d in sink.calls[-1])
    requeued = pending(1, now + 60, eligible_in=121, restart_count=1)
    a.source = FakeClusterSource(ClusterSnapshot(now + 60, NODES, (requeued,), PARTS))
    before = len(sink.calls)
    a.cycle()
    assert len(sink.calls) == before + 1
    assert any(isinstance(d, Place) for d in sink.calls[-1])


class RecordingPolicy:
    """Records the snapshots the agent lets the policy decide on."""

    def __init__(self):
        self.seen = []

    def run_cycle(self, snapshot):
        self.seen.append(snapshot)
        return []


def test_a_requeued_job_is_free_to_resume_elsewhere_unless_the_user_pinned_it(tmp_path):
    """Slurm keeps the agent's ReqNodeList across a requeue. The marker says whether the
    user named nodes: if not, the list is the agent's own pin and the policy sees no
    constraint (Tiresias resumes a preempted job wherever GPUs are free)."""
    now = 1000.0
    own = pending(1, now, eligible_in=121, restart_count=1, required_nodes=("n1",),
                  admin_comment="slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=")
    users = pending(2, now, eligible_in=121, restart_count=1, required_nodes=("n1",),
                    admin_comment="slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=n1")
    unknown = pending(3, now, eligible_in=121, restart_count=1, required_nodes=("n1",),
                      admin_comment="slurm-marl:v1;tpn=gres:gpu:1;tpj=")
    a, _ = agent(tmp_path, ClusterSnapshot(now, NODES, (own, users, unknown), PARTS), [])
    a.policy = RecordingPolicy()
    a.memory.preempted.update(dict.fromkeys((1, 2, 3), -1e9))  # requeued by the agent itself
    a.cycle()
    seen = a.policy.seen[-1]
    assert seen.job(1).required_nodes == ()
    assert seen.job(2).required_nodes == ("n1",) and seen.job(3).required_nodes == ("n1",)


def test_fifo_inside_a_queue_keeps_the_first_submit_time_across_a_requeue(tmp_path):
    """Slurm resets SubmitTime when it requeues a job; Tiresias orders by arrival."""
    now = 1000.0
    a, _ = agent(tmp_path, ClusterSnapshot(now, NODES, (pending(1, now),), PARTS), [])
    a.policy = RecordingPolicy()
    a.memory.preempted.update({1: -1e9})  # requeued by the agent itself, long ago
    a.cycle()
    requeued = replace(pending(1, now + 100, eligible_in=121, restart_count=1),
                       submit_time_s=now + 99)
    a.source = FakeClusterSource(ClusterSnapshot(now + 100, NODES, (requeued,), PARTS))
    a.cycle()
    assert a.policy.seen[-1].job(1).submit_time_s == now - 10


def test_an_order_that_needs_no_write_is_recorded_when_its_queue_changes(tmp_path):
    """Slurm's order already agrees: nothing is written, but `explain` still needs the
    order's reason (queue, prediction): recorded as planned once per queue."""
    now = 1000.0
    snap = ClusterSnapshot(now, NODES, (pending(1, now, priority=1_000_002),), PARTS)
    a, sink = agent(tmp_path, snap, [SetPriority(1, "las", "predicted 50 GPU-s", 1, 1)])
    a.store.written.mark([(1, "priority", "1000002")], now - 1)   # the agent's own
    a.cycle()
    a.cycle()
    rows = lambda: [(r["status"], r["reason"]) for r in a.store.log.decisions(job_id=1)
                    if r["kind"] == "SetPriority"]
    assert not any(isinstance(d, SetPriority) for c in sink.calls for d in c)
    assert rows() == [("planned", "predicted 50 GPU-s")]
    a.policy.decisions = [SetPriority(1, "las", "outlived its prediction", 1, 2)]
    a.cycle()
    assert rows()[0] == ("planned", "outlived its prediction") and len(rows()) == 2


def test_a_partition_with_its_own_profile_is_decided_by_its_own_policy(tmp_path):
    """agent.partition_profiles: each managed partition's view goes to its policy only."""
    now = 1000.0
    snap = ClusterSnapshot(now, NODES, (pending(1, now), replace(pending(2, now),
                                                                 partition="cpu")), PARTS)
    seen: dict[str, list] = {"default": [], "own": []}

    class Recording:
        def __init__(self, name, decisions):
            self.name, self.decisions = name, decisions

        def run_cycle(self, view):
            seen[self.name].append(sorted(j.job_id for j in view.pending))
            return [d for d in self.decisions if view.job(d.job_id) is not None]

    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "managed_partitions":
                                  ["gpu", "cpu"], "partition_profiles": {"cpu": "las-lif"}}})
    sink = FakeDecisionSink()
    a = Agent(cfg, FakeClusterSource(snap), sink, Store(tmp_path / "s.sqlite"),
              Recording("default", [SetPriority(1, "las", "default", 5, 0)]),
              partition_policies={"cpu": Recording("own", [SetPriority(2, "lif", "own", 7, 1)])})
    report = a.cycle()
    assert seen == {"default": [[1]], "own": [[2]]}
    assert {(d.job_id, d.reason) for d in report.decisions} == {(1, "default"), (2, "own")}


def test_build_agent_loads_each_partitions_profile_and_names_a_bad_one(tmp_path):
    import pytest

    from slurm_marl.daemon.wiring import build_agent
    from slurm_marl.policy.profile import ProfileError

    knobs = tmp_path / "knobs.toml"     # as `slurm-marl train thresholds` writes one
    knobs.write_text('name = "cpu-knobs"\npreemption = false\n[order]\nplugin = "tiresias_las"'
                     '\nthresholds_gpu_s = [100]\nstarve_limit = 0\n[place]\nconsolidate = 1.0\n')
    base = {"state_dir": str(tmp_path), "managed_partitions": ["gpu", "cpu"]}
    a = build_agent(parse_config({"agent": {**base, "partition_profiles": {
        "cpu": str(knobs)}}}))
    assert a.policy.profile.name == "las-consolidate"
    own = a.partition_policies["cpu"].profile
    assert own.name == "cpu-knobs" and own.preemption is False
    assert tuple(own.order_params["thresholds_gpu_s"]) == (100,)
    with pytest.raises(ProfileError, match=r"agent.partition_profiles.cpu: unknown profile"):
        build_agent(parse_config({"agent": {**base,
                                            "partition_profiles": {"cpu": "no-such"}}}))


def test_a_job_demoted_this_cycle_can_be_preempted_from_a_second_partition_on_its_node(
        tmp_path):
    """Tiresias: a running job demoted this cycle sits at the tail of its new queue, behind
    that queue's waiting jobs, which may preempt it. Partition "cpu" shares n1 with "gpu";
    the policy's queue lists serve both. Settled view by view, "gpu"'s view entered J in
    queue 1 and "cpu"'s view, which sees J too, moved it ahead of W at once, so W (queue
    1, waiting in "cpu") could not preempt it."""
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import load_profile
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "shadow": True,
                                  "managed_partitions": ["gpu", "cpu"],
                                  "preempt_partitions": ["gpu", "cpu"]}})
    src = FakeClusterSource(None)
    a = Agent(cfg, src, FakeDecisionSink(), Store(tmp_path / "s.sqlite"),
              build_policy(load_profile("las-consolidate")))
    n1 = replace(NODES[0], partitions=("gpu", "cpu"))

    def at(now, jobs):
        used = {i for j in jobs if j.state is JobState.RUNNING for _, g in j.gpu_alloc
                for i in g}
        src.snap = ClusterSnapshot(now, (replace(n1, used_gpu_indices=frozenset(used)),
                                         NODES[1]), tuple(jobs), PARTS)
        report = a.cycle()
        assert report.error is None, report.error
        return report

    def w_job(state, **kw):
        return Job(7, name="w", user="u", partition="cpu", gpus_per_node=4, node_count=1,
                   submit_time_s=0.0, state=state, **kw)

    def j_job(start):
        return Job(8, name="j", user="u", partition="gpu", gpus_per_node=4, node_count=1,
                   submit_time_s=100.0, state=JobState.RUNNING, start_time_s=start,
                   nodes=("n1",), gpu_alloc=(("n1", (0, 1, 2, 3)),))

    # W ran 900 s on n1's 4 GPUs (3,600 GPU-s: queue 1), then was requeued
    at(1000.0, [w_job(JobState.RUNNING, start_time_s=100.0, nodes=("n1",),
                      gpu_alloc=(("n1", (0, 1, 2, 3)),))])
    # J took n1 (2,000 GPU-s by 1,500: queue 0); W waits in queue 1
    report = at(1500.0, [w_job(JobState.PENDING, restart_count=1), j_job(1000.0)])
    assert not [d for d in report.decisions if isinstance(d, Preempt)]
    # J passes 3,250 GPU-s: demoted to queue 1, behind W, which preempts it
    report = at(1900.0, [w_job(JobState.PENDING, restart_count=1), j_job(1000.0)])
    assert [d.job_id for d in report.decisions if isinstance(d, Preempt)] == [8]
    assert [d.job_id for d in report.decisions if isinstance(d, Place)] == [7]


def test_a_job_the_agent_requeued_is_not_started_again_within_seconds(tmp_path):
    """A requeue revokes the ended run's credential, stamped by the second; a start in that
    second fails the job ("Job credential revoked", seen in a 60x replay: FAILED, not
    requeued). So the agent asks Slurm to start a job it requeued no sooner than
    ``REQUEUE_SETTLE_S`` after the cycle that requeued it; other jobs' starts go ahead."""
    from slurm_marl.daemon.write_memory import WriteMemory

    now = 1000.0
    victim = Job(1, partition="gpu", state=JobState.RUNNING, gpus_per_node=1, nodes=("n1",),
                 gpu_alloc=(("n1", (0,)),), start_time_s=now - 1, submit_time_s=now - 5)
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (victim,), PARTS),
                    [Preempt(1, "las", "yields to job 2")], preempt_partitions=["gpu"])
    a.cycle()
    assert [type(d) for d in sink.calls[0]] == [Preempt] and 1 in a.memory.preempted
    place = Place(1, "consolidate", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 0, 1),))
    other = Place(2, "consolidate", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 1, 1),))
    settle = WriteMemory.REQUEUE_SETTLE_S
    starts = []
    for dt in (0.5, settle - 0.5, settle + 0.5):
        requeued = pending(1, now, eligible_in=121 - dt, restart_count=1)
        a.source = FakeClusterSource(ClusterSnapshot(now + dt, NODES, (requeued,
                                                                       pending(2, now)), PARTS))
        a.policy = type("P", (), {"run_cycle": lambda self, s: [place, other]})()
        before = len(sink.calls)
        a.cycle()
        starts.append(sorted(d.job_id for c in sink.calls[before:] for d in c
                             if isinstance(d, Place) and d.start_now))
    # job 2 is started at once; job 1 only once the settling time has passed
    assert starts[0] == [2] and [1 in s for s in starts] == [False, False, True]


def test_the_requeues_of_jobs_slurm_no_longer_lists_are_forgotten():
    """A daemon that runs for months keeps no entry for every job it ever requeued: once
    the table outgrows the queue, the requeues of jobs Slurm no longer lists are dropped,
    those of jobs still listed kept (admission still lets the agent restart them)."""
    from slurm_marl.daemon.write_memory import WriteMemory

    memory = WriteMemory(interval_s=5.0)
    memory.preempted = {job_id: 100.0 + job_id for job_id in range(1, 1001)}
    listed = (pending(7, 1000.0, restart_count=1), pending(2000, 1000.0))
    memory.remember([], ClusterSnapshot(1000.0, NODES, listed, PARTS))
    assert memory.preempted == {7: 107.0}
    # below the threshold nothing is scanned: a small table stays as it is
    memory.preempted = {1: 1.0, 2: 2.0}
    memory.remember([], ClusterSnapshot(1000.0, NODES, listed, PARTS))
    assert memory.preempted == {1: 1.0, 2: 2.0}
