"""Slurm unchanged for users (issue 30), the pure rules on hand-built inputs: what the agent
leaves alone (held jobs, a user's begin time, hetjobs), what it never narrows
(``--cpus-per-gpu``), whom it never requeues, how a narrowed job is read back after a
requeue, and that a refused write is not repeated every cycle. The same cases run against
real Slurm in tests/slurm/test_unchanged.py."""

from fakes import FakeClusterSource, FakeDecisionSink
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import (ClusterSnapshot, GpuGroup, GroupAlloc, Job, JobState, Node,
                               Partition, Place, Preempt, SetPriority)
from slurm_marl.slurm_integration.marker import parse_marker, user_begin
from agent_builders import GATED
from slurm_marl.slurm_integration.parse import job_from_json
from slurm_marl.slurm_integration.ports import WriteStatus
from slurm_marl.slurm_integration.sink_plan import plan_gpu_pin, plan_unstick, spread_over_groups

NODES = tuple(Node(name=n, partitions=("gpu", "all"), cpus=8, real_memory_mib=16000,
                   gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
              for n in ("n1", "n2"))
PARTS = (Partition("gpu", ("n1", "n2"), True), Partition("all", ("n1", "n2")))
NOW = 10_000.0


class SeeingPolicy:
    """Remembers the view it was given; decides ``decisions`` for the jobs in it."""

    def __init__(self, decisions=()):
        self.decisions = list(decisions)
        self.seen: list[ClusterSnapshot] = []

    def run_cycle(self, snapshot):
        self.seen.append(snapshot)
        return [d for d in self.decisions if snapshot.job(d.job_id) is not None]


def agent(tmp_path, snap, policy, status=WriteStatus.OK):
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1, "grace_s": 30,
                                  "managed_partitions": ["gpu"],
                                  "preempt_partitions": ["gpu"]}})
    sink = FakeDecisionSink(status)
    return Agent(cfg, FakeClusterSource(snap), sink, Store(tmp_path / "s.sqlite"),
                 policy), sink


def pending(jid, **kw):
    fields = dict(name=f"j{jid}", partition="gpu", gpus_per_node=1, submit_time_s=NOW - 10,
                  eligible_time_s=NOW + 20, priority=100)
    fields.update(kw)
    return Job(jid, **fields)


# ---- parsing ---------------------------------------------------------------------------


def raw_job(**kw):
    base = {"job_id": 7, "job_state": "PENDING", "partition": "gpu", "priority": 1000,
            "tres_per_node": "gres:gpu:2", "node_count": 1, "state_reason": "BeginTime"}
    base.update(kw)
    return base


def test_hetjob_components_are_left_to_slurm():
    job, _ = job_from_json(raw_job(het_job_id=7, het_job_offset=0))
    assert "heterogeneous" in job.left_to_slurm
    later, _ = job_from_json(raw_job(het_job_id={"set": True, "infinite": False,
                                                 "number": 6}, het_job_offset=1))
    assert "heterogeneous" in later.left_to_slurm
    plain, _ = job_from_json(raw_job(het_job_id={"set": True, "infinite": False,
                                                 "number": 0}))
    assert plain.left_to_slurm == ""


def test_cpus_per_gpu_and_holds_are_read():
    job, _ = job_from_json(raw_job(cpus_per_tres="gres:gpu:4"))
    assert job.cpus_per_gpu == 4 and not job.held
    assert job_from_json(raw_job(cpus_per_tres="gres/gpu:3"))[0].cpus_per_gpu == 3
    assert job_from_json(raw_job(cpus_per_tres=""))[0].cpus_per_gpu == 0
    assert job_from_json(raw_job(priority=0, state_reason="JobHeldUser"))[0].held
    assert job_from_json(raw_job(priority=0, state_reason="BadConstraints"))[0].held
    assert job_from_json(raw_job(priority={"set": True, "infinite": False, "number": 5},
                                 state_reason="launch_failed_requeued_held"))[0].held
    running, _ = job_from_json(raw_job(job_state="RUNNING", priority=0))
    assert not running.held


def test_marker_carries_the_users_begin_time_and_request_shape():
    m = parse_marker("site note|slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=;beg=1795709171")
    assert m.user_begin_s == 1795709171 and m.user_gave_no_nodes and m.per_node_request
    assert parse_marker(m.render()) == m
    old = parse_marker("slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=")
    assert old.user_begin_s is None and parse_marker(old.render()) == old
    assert parse_marker("slurm-marl:v1;tpn=;tpj=gres:gpu:2;req=;beg=").user_begin_s is None
    assert not parse_marker("slurm-marl:v1;tpn=;tpj=gres:gpu:2;req=").per_node_request


# ---- narrowing -------------------------------------------------------------------------


def test_cpus_per_gpu_jobs_are_pinned_by_nodes_only():
    snap = ClusterSnapshot(NOW, NODES, (), PARTS)
    place = Place(1, "x", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 1, 2),))
    job = pending(1, gpus_per_node=2)
    fields, why = plan_gpu_pin(job, place, snap)
    assert fields["TresPerJob"] == "gres:gpu:s1:2" and not why
    fields, why = plan_gpu_pin(job.with_(cpus_per_gpu=4), place, snap)
    assert fields == {} and "--cpus-per-gpu=4" in why


# ---- what the agent decides ----------------------------------------------------------


def test_held_jobs_are_neither_decided_nor_released(tmp_path):
    held = pending(1, held=True, priority=0, pending_reason="launch_failed_requeued_held")
    gated_array = pending(2, held=True, priority=0, pending_reason="JobHeldUser",
                          left_to_slurm="job array", array_job_id=2,
                          admin_comment="slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=")
    policy = SeeingPolicy([SetPriority(1, "las", "q0", 1, 0)])
    a, sink = agent(tmp_path, ClusterSnapshot(NOW, NODES, (held, gated_array), PARTS), policy)
    a.cycle()
    a.cycle()
    assert policy.seen[0].job(1) is None and policy.seen[0].job(2) is None
    assert not [d for call in sink.calls for d in call]
    rows = a.store.log.decisions(job_id=1)
    assert len(rows) == 1 and "held by Slurm" in rows[0]["reason"]   # once, for explain


def test_a_users_begin_time_is_kept_until_it_passes(tmp_path):
    begin = NOW + 40   # within grace + 2 intervals: the old rule took it for the lease
    job = pending(1, eligible_time_s=begin,
                  admin_comment=f"slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=;beg={int(begin)}")
    _held_for_its_begin_then_decided(tmp_path, job, NOW + 20, begin)


def _held_for_its_begin_then_decided(tmp_path, job, first_cycle_s: float, begin_s: float):
    """Job 1 is left out of the policy's view (nothing written, "begin time" in its
    decisions) at ``first_cycle_s``, and decided and started just after ``begin_s``."""
    place = Place(1, "x", "fits", nodes=("n1",), allocs=(GroupAlloc("n1", 0, 1),),
                  start_now=True)
    policy = SeeingPolicy([place])
    a, sink = agent(tmp_path, ClusterSnapshot(first_cycle_s, NODES, (job,), PARTS), policy)
    a.cycle()
    assert policy.seen[-1].job(1) is None and not sink.calls
    assert "begin time" in a.store.log.decisions(job_id=1)[0]["reason"]
    a.source = FakeClusterSource(ClusterSnapshot(begin_s + 1, NODES, (job,), PARTS))
    a.cycle()
    assert policy.seen[-1].job(1) is not None
    assert any(isinstance(d, Place) and d.start_now for d in sink.calls[-1])


def test_a_begin_time_moved_earlier_by_its_owner_counts(tmp_path):
    """A user moves their own --begin from an hour ahead to the gate's grace (the gate allows
    that much): the agent decides the job from then on, not only after the old begin; it
    still starts nothing before the new one."""
    first = NOW + 3600
    moved = NOW + 30   # scontrol update StartTime=now+30 by the job's owner
    marker = f"slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=;beg={int(first)}"
    job = pending(1, eligible_time_s=moved, admin_comment=marker)
    assert user_begin(job, parse_marker(marker)) == moved
    assert user_begin(job.with_(eligible_time_s=first), parse_marker(marker)) == first
    assert user_begin(job.with_(eligible_time_s=None), parse_marker(marker)) == first
    assert user_begin(job, None) is None
    _held_for_its_begin_then_decided(tmp_path, job, NOW, moved)


def test_a_narrowed_job_is_read_as_its_users_per_node_request(tmp_path):
    """After a requeue the agent's own TresPerJob pin must not read as a per-job request
    free to spread over nodes (a requeued job was pinned to n[1-2] and never ran)."""
    job = pending(1, gpus_per_node=0, gpus_per_job=2, gpu_type="s0", node_count=1,
                  restart_count=1, eligible_time_s=NOW - 1, required_nodes=("n1",),
                  admin_comment="slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=")
    policy = SeeingPolicy()
    a, _ = agent(tmp_path, ClusterSnapshot(NOW, NODES, (job,), PARTS), policy)
    a.memory.preempted[1] = -1e9
    a.cycle()
    seen = policy.seen[0].job(1)
    assert (seen.gpus_per_node, seen.gpus_per_job, seen.node_count) == (2, 0, 1)
    assert seen.gpu_type is None and seen.required_nodes == ()
    # a user's own --gpus (per job) stays per job
    own = job.with_(admin_comment="slurm-marl:v1;tpn=;tpj=gres:gpu:2;req=")
    a.source = FakeClusterSource(ClusterSnapshot(NOW + 1, NODES, (own,), PARTS))
    a.cycle()
    assert policy.seen[-1].job(1).gpus_per_job == 2


def test_jobs_outside_preempt_partitions_are_never_requeued(tmp_path):
    mine = Job(1, partition="gpu", state=JobState.RUNNING, gpus_per_node=2, nodes=("n1",),
               gpu_alloc=(("n1", (0, 1)),), start_time_s=NOW - 100)
    theirs = Job(2, partition="all", state=JobState.RUNNING, gpus_per_node=2, nodes=("n1",),
                 gpu_alloc=(("n1", (2, 3)),), start_time_s=NOW - 100)
    waiting = pending(3, gpus_per_node=4)
    policy = SeeingPolicy([Preempt(2, "las", "yields"), Preempt(1, "las", "yields")])
    a, sink = agent(tmp_path, ClusterSnapshot(NOW, NODES, (mine, theirs, waiting), PARTS),
                    policy)
    a.cycle()
    view = policy.seen[0]
    assert view.job(1).preemptible and not view.job(2).preemptible
    written = [d for call in sink.calls for d in call if isinstance(d, Preempt)]
    assert [d.job_id for d in written] == [1]


def test_a_refused_write_is_not_repeated_every_cycle(tmp_path):
    job = pending(1, admin_comment=GATED)   # gated: eligible when the gate's grace ends
    policy = SeeingPolicy([SetPriority(1, "las", "q0", 1, 0)])
    a, sink = agent(tmp_path, ClusterSnapshot(NOW, NODES, (job,), PARTS), policy,
                    status=WriteStatus.REFUSED)
    for i in range(8):
        a.source = FakeClusterSource(ClusterSnapshot(NOW + i, NODES, (job,), PARTS))
        a.cycle()
    tries = [call for call in sink.calls if any(d.job_id == 1 for d in call)]
    # refused at 0, then paused 1 s, 2 s, 4 s: tried at t+0, +1, +3, +7, not 8 times
    assert len(tries) == 4, sink.calls
    sink.status = WriteStatus.OK
    for i in range(8, 40):
        a.source = FakeClusterSource(ClusterSnapshot(NOW + i, NODES, (job,), PARTS))
        a.cycle()
    assert 1 not in a.memory.refused   # accepted again: the pause is forgotten


# ---- a narrowing that left a job never runnable is undone ------------------------------


def test_spread_over_groups():
    assert spread_over_groups(2, [("s0", 2), ("s1", 2)]) == {"s0": 1, "s1": 1}
    assert spread_over_groups(3, [("s0", 2), ("s1", 2)]) == {"s0": 2, "s1": 1}
    assert spread_over_groups(4, [("s0", 2), ("s1", 2)]) == {"s0": 2, "s1": 2}
    assert spread_over_groups(3, [("s0", 4), ("s1", 2)]) == {"s0": 2, "s1": 1}
    assert spread_over_groups(1, [("s0", 2), ("s1", 2)]) == {"s0": 1}
    assert spread_over_groups(5, [("s0", 2), ("s1", 2)]) == {}
    assert spread_over_groups(0, [("s0", 2)]) == {}


def stuck(**kw):
    fields = dict(gpus_per_job=2, gpus_per_node=0, gpu_type="s0", required_nodes=("n1",),
                  pending_reason="BadConstraints", priority=0, cpus_per_gpu=4,
                  admin_comment="slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=;beg=")
    fields.update(kw)
    return pending(3, **fields)


def test_a_narrowing_left_never_runnable_is_given_back_in_one_update():
    snap = ClusterSnapshot(NOW, NODES, (stuck(),), PARTS)
    options, why = plan_unstick(stuck(), snap)
    # first its user's own request (24.11 takes it), then spread over the groups (22.05)
    assert options == [
        {"TresPerJob": "", "TresPerNode": "gres:gpu:2", "ReqNodeList": ""},
        {"TresPerJob": "", "TresPerNode": "gres:gpu:s0:1,gres:gpu:s1:1", "ReqNodeList": ""},
    ] and why == ""
    # the user's own -w stays
    users_nodes = stuck(admin_comment="slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=n1;beg=")
    assert all("ReqNodeList" not in o for o in plan_unstick(users_nodes, snap)[0])
    # not pinned to a node: any partition node with that group
    assert plan_unstick(stuck(required_nodes=()), snap)[0][1]["TresPerNode"] \
        == "gres:gpu:s0:1,gres:gpu:s1:1"
    # not the agent's narrowing, or not stuck: nothing, and nothing to say
    for job in (stuck(pending_reason="Resources"),
                stuck(admin_comment="slurm-marl:v1;tpn=gres:gpu:s0:2;tpj=;req=;beg="),
                stuck(admin_comment=""),
                stuck(admin_comment="slurm-marl:v1;tpn=;tpj=gres:gpu:2;req=;beg="),
                stuck(gpus_per_job=0, gpus_per_node=2),
                stuck(state=JobState.RUNNING)):
        assert plan_unstick(job, snap) == ([], ""), job
    # one GPU: no wider form, the user's own request only
    one = stuck(gpus_per_job=1, admin_comment="slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=;beg=")
    assert plan_unstick(one, snap)[0] == [
        {"TresPerJob": "", "TresPerNode": "gres:gpu:1", "ReqNodeList": ""}]
    options, why = plan_unstick(stuck(gpus_per_job=4), snap)
    assert options == [] and "per job, its user for 2 per node" in why


def test_a_widened_request_is_left_to_slurm_with_its_reason():
    raw = raw_job(tres_per_node="gres:gpu:s0:1,gres:gpu:s1:1", state_reason="Priority",
                  admin_comment="slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=;beg=")
    job = job_from_json(raw)[0]
    assert "widened" in job.left_to_slurm and job.num_gpus == 2
    users_own = job_from_json(raw_job(tres_per_node="gres:gpu:s0:1,gres:gpu:s1:1",
                                      admin_comment="slurm-marl:v1;tpn=gres:gpu:s0:1,"
                                                    "gres:gpu:s1:1;tpj=;req=;beg="))[0]
    assert users_own.left_to_slurm == "several GPU types in one request"
