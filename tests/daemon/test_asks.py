"""What users and admins ask of Slurm after submission, as the agent reads it: begin times
it did not write (kept), priorities it did not write (kept in the order, never rewritten),
jobs moved out of management (their gate delay released), requests no placement could hold
(left to Slurm). Hand-built inputs; tests/slurm/test_differential_asks.py runs the same on
real Slurm, with and without the agent."""

from __future__ import annotations

from agent_builders import GATED, NODES, PARTS, agent, pending

from slurm_marl.daemon.placeable import Placeability, idle_state, why_never_placed
from slurm_marl.daemon.priorities import asked_priorities
from slurm_marl.daemon.write_memory import WriteMemory
from slurm_marl.domain import ClusterSnapshot, Defer, Job, Release, SetPriority
from slurm_marl.slurm_integration.admission import Admission, AdmissionRules
from slurm_marl.slurm_integration.marker import parse_marker
from slurm_marl.slurm_integration.ports import WriteResult, WriteStatus

NOW = 1000.0
RULES = AdmissionRules(grace_s=30, interval_s=1)


def test_the_gates_and_the_agents_own_begins_are_its_to_decide_any_other_is_kept():
    adm = Admission(RULES)
    marker = parse_marker(GATED)
    gate = pending(1, NOW)                          # submit + 30: the gate's
    assert adm.begin_asked(gate, marker, None, NOW) is None
    # a user moved it to 40 s from now: kept, whatever the horizon
    later = pending(2, NOW, eligible_in=40)
    assert adm.begin_asked(later, marker, None, NOW) == NOW + 40
    # ... unless that time is one of the agent's own leases
    assert adm.begin_asked(later, marker, (NOW + 39, NOW + 40.5), NOW) is None
    # an unmarked job (moved into the partition, or older than the gate): any future
    # begin is its user's
    unmarked = pending(3, NOW, admin_comment="")
    assert adm.begin_asked(unmarked, None, None, NOW) == NOW + 20
    # eligible now: nothing to keep
    assert adm.begin_asked(pending(4, NOW, eligible_in=0), marker, None, NOW) is None


def test_a_job_waiting_for_a_begin_its_user_set_is_left_alone_and_explained(tmp_path):
    job = pending(1, NOW, eligible_in=40)
    a, sink = agent(tmp_path, ClusterSnapshot(NOW, NODES, (job,), PARTS),
                    [SetPriority(1, "las", "q0", 1, 0)])
    a.cycle()
    assert not sink.calls or not [d for c in sink.calls for d in c if d.job_id == 1]
    rows = a.store.log.decisions(job_id=1)
    assert rows and "begin time its user" in rows[0]["reason"], rows


def test_a_marked_job_moved_to_an_unmanaged_partition_has_the_gates_delay_released():
    adm = Admission(RULES)
    moved = pending(1, NOW, partition="cpu")
    own_lease = pending(2, NOW, eligible_in=28, partition="cpu")
    users = pending(3, NOW, eligible_in=40, partition="cpu")
    out = adm.admit(ClusterSnapshot(NOW, NODES, (moved, own_lease, users), PARTS), ["gpu"],
                    {}, (), {2: (NOW + 27.5, NOW + 28.2)})
    released = {d.job_id for d in out.released if isinstance(d, Release)}
    assert released == {1, 2}


def test_leases_and_priorities_written_are_remembered_and_taken_back():
    mem = WriteMemory(1.0)
    snap = ClusterSnapshot(NOW, NODES, (pending(1, NOW), pending(2, NOW)), PARTS)
    written = mem.remember([
        WriteResult(Defer(1, "lease", "", seconds=30.0), WriteStatus.OK, "", ()),
        WriteResult(SetPriority(2, "las", "", 5000, 0), WriteStatus.OK, "", ()),
        WriteResult(SetPriority(1, "las", "", 7000, 0), WriteStatus.REFUSED, "no", ())],
        snap, NOW + 0.4)
    assert mem.begins == {1: (NOW + 30, NOW + 30.4)} and mem.priorities == {2: 5000}
    again = WriteMemory(1.0)
    again.take_back({(j, k): v for j, k, v in written.marks})
    assert again.priorities == {2: 5000}
    assert again.begins[1] == (NOW + 30, NOW + 30)   # whole seconds in the store


def test_a_priority_someone_else_set_is_marked_and_never_rewritten(tmp_path):
    own = {1: 5000, 2: 4000}
    snap = ClusterSnapshot(NOW, NODES, (pending(1, NOW, priority=5000),
                                        pending(2, NOW, priority=6000),
                                        pending(3, NOW, priority=10)), PARTS)
    marked = asked_priorities(snap, ["gpu"], [], own)
    assert [j.job_id for j in marked.pending if j.priority_asked] == [2]
    assert asked_priorities(snap, ["gpu"], ["gpu"], own) is snap   # SiteFactor: Slurm's
    a, sink = agent(tmp_path, snap, [SetPriority(2, "las", "q0", 3, 0),
                                     SetPriority(1, "las", "q0", 2, 0),
                                     SetPriority(3, "las", "q0", 1, 0)])
    a.store.written.mark([(1, "priority", "5000"), (2, "priority", "4000")], NOW - 1)
    a.cycle()
    written = {d.job_id for c in sink.calls for d in c if isinstance(d, SetPriority)}
    assert 2 not in written and 3 in written      # 3: Slurm's own value, made the agent's


def test_per_job_gpus_with_more_tasks_than_a_node_has_cpus_are_left_to_slurm():
    spread = Job(7, partition="gpu", gpus_per_job=2, cpus=10, submit_time_s=NOW - 10,
                 eligible_time_s=NOW + 20, admin_comment=GATED)
    fits = Job(8, partition="gpu", gpus_per_job=2, cpus=6, submit_time_s=NOW - 10,
               eligible_time_s=NOW + 20, admin_comment=GATED)
    snap = ClusterSnapshot(NOW, NODES, (spread, fits), PARTS)
    state = idle_state(ClusterSnapshot(NOW, NODES, (), PARTS))
    why = why_never_placed(spread, state, "gpu")
    assert "10 CPUs" in why and "largest node has 8 CPUs" in why
    assert why_never_placed(fits, state, "gpu") == ""
    marked = Placeability().mark(snap, ["gpu"])
    assert marked.job(7).left_to_slurm == why and not marked.job(8).left_to_slurm
    # and the agent releases the gate's delay at once
    out = Admission(RULES).admit(marked, ["gpu"], {}, ())
    assert [d.job_id for d in out.released] == [7]
    assert [j.job_id for j in out.views["gpu"].pending] == [8]


def test_a_gate_that_does_not_match_is_in_every_cycles_warning(tmp_path):
    from slurm_marl.daemon.config import parse_config
    from slurm_marl.daemon.wiring import gate_warning
    from slurm_marl.slurm_integration.plugin import render_job_submit_lua

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    (tmp_path / "job_submit.lua").write_text(
        render_job_submit_lua(["gpu", "old"], 30, [], slurm_version="22.05.8"))
    cfg = parse_config({"slurm": {"slurm_conf": str(conf)},
                        "agent": {"state_dir": str(tmp_path), "grace_s": 30}})
    why = gate_warning(cfg)
    assert why and "it gates partitions gpu, old" in why and str(conf.parent) in why
    a, _ = agent(tmp_path, ClusterSnapshot(NOW, NODES, (pending(1, NOW),), PARTS),
                 [SetPriority(1, "las", "q0", 1, 0)])
    a.gate_warning = why
    assert why in (a.cycle().warning or "")


def test_a_users_nice_outlives_the_agents_priority_write():
    """Slurm sets a job's nice to 0 when its priority is set (measured on 22.05): the
    agent keeps the nice the job had when it first wrote its priority."""
    mem = WriteMemory(1.0)
    niced = pending(1, NOW, nice=1000)
    snap = ClusterSnapshot(NOW, NODES, (niced,), PARTS)
    written = mem.remember([WriteResult(SetPriority(1, "las", "", 5000, 0), WriteStatus.OK,
                                        "", ())], snap)
    assert (1, "nice", "1000") in written.marks
    after = ClusterSnapshot(NOW + 1, NODES, (pending(1, NOW, priority=5000, nice=0),), PARTS)
    kept = asked_priorities(after, ["gpu"], [], mem.priorities, mem.nices)
    assert kept.job(1).nice == 1000 and not kept.job(1).priority_asked
    # an admin's Nice= later is read as it is
    renice = ClusterSnapshot(NOW + 2, NODES, (pending(1, NOW, priority=5000, nice=50),), PARTS)
    assert asked_priorities(renice, ["gpu"], [], mem.priorities, mem.nices).job(1).nice == 50
