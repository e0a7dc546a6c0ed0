"""Requests the agent cannot model are left to Slurm at once, said so, and never leased;
explicit GPU types are placement constraints; the lease and reservations never outlive one
grace. Hand-built inputs; the real-Slurm counterparts live in tests/slurm."""

from __future__ import annotations

from fakes import ScriptedRunner

from slurm_marl.domain import (ClusterSnapshot, Defer, GpuGroup, GroupAlloc, Job, Node, Place,
                               Release, Reserve, SetPriority)
from slurm_marl.placement_shapes import generate_candidates, has_candidate
from slurm_marl.policy.state import CycleState
from slurm_marl.slurm_integration.marker import Marker, with_marker
from slurm_marl.slurm_integration.parse import job_from_json
from slurm_marl.slurm_integration.sink import CliDecisionSink
from agent_builders import NODES, PARTS, agent, pending

BASE = {"job_id": 7, "job_state": "PENDING", "partition": "gpu", "tres_per_node": "gres:gpu:1",
        "node_count": 1}


def reason(**raw) -> str:
    job, _ = job_from_json({**BASE, **raw})
    return job.left_to_slurm


def test_requests_the_agent_cannot_model_are_named():
    assert reason() == ""
    assert "array" in reason(array_job_id=7, array_task_string="0-9")
    assert "array" in reason(array_job_id=5, array_task_id=2)     # a task split out
    assert "--gpus-per-task" in reason(tres_per_node="", tres_per_task="gres:gpu:1")
    assert "--gpus-per-socket" in reason(tres_per_socket="gres:gpu:1")
    assert "several partitions" in reason(partition="gpu,cpu")
    assert "both per node and per job" in reason(tres_per_job="gres:gpu:2")
    assert "cannot parse" in reason(tres_per_node="gres:gpu:s1:x")
    assert reason(tres_per_node="gres:gpu:s1:2") == ""             # an explicit type is fine
    assert "no GPU request" in reason(tres_per_node="")             # CPU jobs: Slurm's
    assert "--constraint" in reason(features="bigmem")


def gated(jid, now, why, **kw):
    return pending(jid, now, eligible_in=20, left_to_slurm=why,
                   admin_comment=with_marker("", Marker("gres:gpu:1", "", "")), **kw)


def test_gated_unmodelable_jobs_are_released_at_once_never_leased_and_recorded(tmp_path):
    now = 1000.0
    array = gated(1, now, "job array: arrays are left to Slurm")
    per_task = gated(2, now, "--gpus-per-task request")
    user_begin = pending(3, now, eligible_in=3600, left_to_slurm="job array",
                         admin_comment=with_marker("", Marker("gres:gpu:1", "", "")))
    normal = pending(4, now, eligible_in=1)
    seen = []
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (array, per_task, user_begin, normal),
                                              PARTS),
                    [SetPriority(j, "las", "", 1, 0) for j in (1, 2, 3, 4)])
    policy = a.policy
    a.policy = type("P", (), {"run_cycle": lambda self, s: seen.append(s)
                              or policy.run_cycle(s)})()
    a.cycle()
    assert [j.job_id for j in seen[0].pending] == [4]          # only the modelable job
    writes = sink.calls[0]
    assert sorted(d.job_id for d in writes if isinstance(d, Release)) == [1, 2]
    assert [d.job_id for d in writes if isinstance(d, Defer)] == [4]   # lease: job 4 only
    rows = {r["job_id"]: r for r in a.store.log.decisions(limit=50)}
    assert "left to Slurm: job array" in rows[1]["reason"]
    assert "left to Slurm" in rows[3]["reason"] and rows[3]["status"] == "skipped"
    released = tuple(j.with_(eligible_time_s=now) if j.job_id in (1, 2) else j
                     for j in a.source.snap.jobs)
    a.source.snap = ClusterSnapshot(now + 1, NODES, released, PARTS)
    before = len(a.store.log.decisions(limit=50))
    a.cycle()  # released: not written again, not recorded again
    assert not [d for d in sink.calls[-1] if isinstance(d, Release)]
    assert len([r for r in a.store.log.decisions(limit=50) if "left to Slurm" in r["reason"]]) == 3
    assert len(a.store.log.decisions(limit=50)) >= before


def test_a_job_emptied_by_an_old_half_done_re_pin_is_repaired_never_released(tmp_path):
    now = 1000.0
    emptied = pending(1, now, left_to_slurm="no GPU request",
                      admin_comment=with_marker("", Marker("gres:gpu:2", "", ""))
                      ).with_(gpus_per_node=0)
    cpu_job = pending(2, now, left_to_slurm="no GPU request",
                      admin_comment=with_marker("", Marker("gres:gpu:0", "", ""))
                      ).with_(gpus_per_node=0)
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (emptied, cpu_job), PARTS), [])
    a.cycle()
    released = [d.job_id for c in sink.calls for d in c if isinstance(d, Release)]
    assert released == [2]


def test_reservation_lasts_one_grace_and_is_renewed_while_the_job_waits(tmp_path):
    now = 1000.0
    job = pending(1, now, eligible_in=1).with_(node_count=2, gpus_per_node=4)
    plan = Place(1, nodes=("n1", "n2"), start_now=False,
                 allocs=(GroupAlloc("n1", 0, 2), GroupAlloc("n1", 1, 2),
                                                GroupAlloc("n2", 0, 2), GroupAlloc("n2", 1, 2)))
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (job,), PARTS), [plan])
    a.cycle()
    [resv] = [d for d in sink.calls[0] if isinstance(d, Reserve)]
    assert resv.duration_s == 30.0   # the configured grace, not reservation_minutes
    a.cycle()   # same second: not renewed again
    assert not [d for d in sink.calls[-1] if isinstance(d, Reserve)]
    a.source.snap = ClusterSnapshot(now + 11, NODES, (job,), PARTS)
    a.cycle()   # a third of a grace later: extended
    assert [d for d in sink.calls[-1] if isinstance(d, Reserve)]


def test_a_lease_batch_with_one_started_job_is_refused_for_that_job_only():
    runner = ScriptedRunner((1, "", "Job is no longer pending execution for job 12"))
    sink = CliDecisionSink(runner, retries=0, sleep=lambda s: None)
    res = sink.apply([Defer(j, "lease", "", seconds=30.0) for j in (11, 12, 13)])
    assert {r.decision.job_id: r.ok for r in res} == {11: True, 12: False, 13: True}
    assert "job 12" in [r for r in res if not r.ok][0].message
    releases = sink.apply([Release(21, "left-to-slurm", ""), Release(22, "left-to-slurm", "")])
    assert sink.runner.calls[-1] == ["scontrol", "update", "jobid=21,22", "StartTime=now"]
    assert len(releases) == 2


def test_an_explicit_gpu_type_only_counts_groups_of_that_type():
    node = Node("n1", partitions=("gpu",), cpus=8, real_memory_mib=16000,
                gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)),
                used_gpu_indices=frozenset({2}))
    snap = ClusterSnapshot(0, (node,), (), PARTS[:1])
    state = CycleState(snap)
    typed = Job(1, partition="gpu", gpus_per_node=1, gpu_type="s1")
    cands = generate_candidates(typed, state, state.view)
    assert [c.allocs for c in cands] == [((0, 1, 1),)]        # group s1 only
    two = Job(2, partition="gpu", gpus_per_node=2, gpu_type="s1")
    assert not has_candidate(two, state, state.view)        # s1 has one free GPU left
    assert has_candidate(Job(3, partition="gpu", gpus_per_node=2), state, state.view)
    other = Job(4, partition="gpu", gpus_per_node=1, gpu_type="a100")
    assert generate_candidates(other, state, state.view) == []


def test_an_old_config_with_reservation_minutes_still_loads_and_says_it_is_unused(caplog):
    from slurm_marl.daemon.config import parse_config
    cfg = parse_config({"agent": {"reservation_minutes": 60, "grace_s": 30}}, "old.toml")
    assert cfg.agent.grace_s == 30 and not hasattr(cfg.agent, "reservation_minutes")
    assert "reservation_minutes is no longer used" in caplog.text


def test_a_reservation_that_exists_is_extended_not_created_again():
    def answer(args):
        if args[1] == "create":   # what 22.05 answers for a name it already has
            return (1, "", "Error creating the reservation: Requested reservation overlaps "
                           "with another reservation")
        return (0, "", "")
    runner = ScriptedRunner(answer)
    [res] = CliDecisionSink(runner, retries=0, sleep=lambda s: None).apply(
        [Reserve(5, "test", "", name="slurm-marl-5", nodes=("n1", "n2"), duration_s=30)])
    assert res.ok and runner.calls[-1] == ["scontrol", "update", "ReservationName=slurm-marl-5",
                                           "Nodes=n[1-2]", "EndTime=now+30"]


def test_no_reservation_on_nodes_a_job_is_being_started_on(tmp_path):
    """A Slurm reservation blocks every pending job not inside it: reserving n1 for a
    waiting 2-node job while the agent starts another job on n1 left that job pending
    (ReqNodeNotAvail) and the reservation renewed for ever (seen on real Slurm)."""
    from slurm_marl.domain import EndReservation
    now = 1000.0
    first = pending(1, now, eligible_in=1)
    big = pending(2, now, eligible_in=1).with_(node_count=2, gpus_per_node=4)
    start = Place(1, nodes=("n1",), allocs=(GroupAlloc("n1", 0, 2),))
    wait = Place(2, nodes=("n1", "n2"), start_now=False,
                 allocs=tuple(GroupAlloc(n, g, 2) for n in ("n1", "n2") for g in (0, 1)))
    a, sink = agent(tmp_path, ClusterSnapshot(now, NODES, (first, big), PARTS), [start, wait])
    a.store.reservations.add("slurm-marl-2", 2, "n1,n2", now - 5)
    a.cycle()
    writes = sink.calls[0]
    assert not [d for d in writes if isinstance(d, Reserve)]
    assert [d.name for d in writes if isinstance(d, EndReservation)] == ["slurm-marl-2"]


def test_a_job_in_a_users_reservation_is_left_to_slurm_the_agents_own_are_not():
    assert "reservation r1" in reason(resv_name="r1")
    assert reason(resv_name="slurm-marl-42") == ""


def test_nice_is_read_from_json_and_text():
    job, _ = job_from_json({**BASE, "nice": 1000})
    assert job.nice == 1000
    job, _ = job_from_json({**BASE, "nice": None})     # 22.05 prints 0 as null
    assert job.nice == 0
