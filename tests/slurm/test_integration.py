"""The Slurm integration layer against real slurmctld / slurmd daemons on loopback."""

from __future__ import annotations

import time


import pytest

from slurm_marl.domain import (EndReservation, GroupAlloc, JobState, Place, Preempt, Release,
                               Reserve, SetPriority)
from slurm_marl.slurm_integration.marker import parse_marker
from slurm_marl.slurm_integration.ports import WriteStatus
from slurm_marl.slurm_integration.runner import SlurmUnavailable

pytestmark = pytest.mark.slurm


def test_snapshot_lists_jobs_nodes_partitions_switches(clean):
    c = clean
    running = c.sbatch("--gres=gpu:2", "-J", "two", gated=False)
    multi = c.sbatch("--gres=gpu:s1:1", "-N", "2", "-J", "multi", gated=False)
    pending = c.sbatch("--gpus=3", "-J", "later")
    c.wait_state(running, "RUNNING")
    c.wait_state(multi, "RUNNING")
    snap = c.source.snapshot()

    assert [n.name for n in snap.nodes] == ["n1", "n2", "n3", "n4"]
    assert {n.leaf_switch for n in snap.nodes} == {"leaf1", "leaf2"}
    assert {s.name for s in snap.switches} == {"leaf1", "leaf2", "spine"}
    assert snap.partition("gpu").default and snap.partition("gpu").nodes == snap.partition(
        "gpu").nodes
    n1 = snap.node("n1")
    assert [(g.name, g.gpu_indices, g.socket) for g in n1.gpu_groups] == [
        ("s0", (0, 1), 0), ("s1", (2, 3), 1)]

    job = snap.job(running)
    assert job.state is JobState.RUNNING and job.gpus_per_node == 2 and job.num_gpus == 2
    assert job.partition == "gpu" and job.name == "two"
    (node, idx), = job.gpu_alloc
    assert len(idx) == 2 and node in job.nodes
    # The node's used indices agree with what the job holds.
    assert set(idx) <= snap.node(node).used_gpu_indices

    m = snap.job(multi)
    assert m.node_count == 2 and m.gpu_type == "s1" and m.num_gpus == 2
    assert len(m.gpu_alloc) == 2
    assert all(i == (2,) or i == (3,) for _, i in m.gpu_alloc)  # s1 is IDX 2-3

    p = snap.job(pending)
    assert p.is_pending and p.gpus_per_job == 3 and p.num_gpus == 3 and p.gpu_alloc == ()
    assert p.pending_reason == "BeginTime"


def test_place_pins_job_to_node_and_starts_it(clean):
    c = clean
    job = c.sbatch("--gres=gpu:1", "-J", "pin")
    results = c.sink.apply([Place(job, plugin="test", nodes=("n4",),
                                  allocs=(GroupAlloc("n4", 0, 1),))], c.source.snapshot())
    assert [r.status for r in results] == [WriteStatus.OK], results
    ran = c.wait_state(job, "RUNNING")
    assert ran.nodes == ("n4",)
    # the first pin marks the job with its own request: no nodes of the user's
    assert parse_marker(ran.admin_comment).user_gave_no_nodes


def test_nodes_only_placement_marks_the_job_and_says_why(clean):
    """A job spanning both GPU groups of a node is pinned by node only; the marker (with
    the user's own node list, none here) is written in the same update."""
    c = clean
    job = c.sbatch("--gres=gpu:4", "-J", "two-groups")
    results = c.sink.apply([Place(job, plugin="test", nodes=("n3",),
                                  allocs=(GroupAlloc("n3", 0, 2), GroupAlloc("n3", 1, 2)))],
                           c.source.snapshot())
    assert results[0].ok and "nodes only" in results[0].message, results
    ran = c.wait_state(job, "RUNNING")
    assert ran.nodes == ("n3",)
    marker = parse_marker(ran.admin_comment)
    assert marker.tres_per_node == "gres:gpu:4" and marker.user_gave_no_nodes


def test_gpu_group_pin_overrides_slurms_own_choice(clean):
    """On an idle node Slurm alone gives an untyped 2-GPU job socket 0 (IDX 0-1); the agent
    chose group 1 and the job must run on IDX 2-3, with its original request remembered."""
    c = clean
    job = c.sbatch("--gres=gpu:2", "-J", "group")
    snap = c.source.snapshot()
    results = c.sink.apply([Place(job, plugin="test", nodes=("n3",),
                                  allocs=(GroupAlloc("n3", 1, 2),))], snap)
    assert all(r.status is WriteStatus.OK for r in results), results
    ran = c.wait_state(job, "RUNNING")
    assert ran.gpu_alloc == (("n3", (2, 3)),)
    assert ran.gpu_type == "s1"
    assert parse_marker(ran.admin_comment).tres_per_node == "gres:gpu:2"
    # Control: the same request left to Slurm lands on socket 0.
    other = c.sbatch("--gres=gpu:2", "-w", "n4", "-J", "control", gated=False)
    assert c.wait_state(other, "RUNNING").gpu_alloc == (("n4", (0, 1)),)


def test_a_job_name_with_a_newline_is_re_pinned_and_read_back_exactly(clean):
    """`scontrol show -o` splits such a job; the read-back (squeue -O with only the request
    fields) does not, and a name spoofing request fields is ignored. Then a second pin to
    the other group moves the request back across fields: 2 GPUs, never 4."""
    c = clean
    job = c.sbatch("--gres=gpu:2", "-J", "evil\nTresPerJob=gres:gpu:s0:4 x")
    snap = c.source.snapshot()
    assert c.sink.read_request(job) == {"gpus_per_node": 2, "gpus_per_job": 0,
                                        "gpu_type": None}
    first = c.sink.apply([Place(job, plugin="test", nodes=("n2",), start_now=False,
                                allocs=(GroupAlloc("n2", 1, 2),))], snap)
    assert all(r.status is WriteStatus.OK for r in first), first
    assert c.sink.read_request(job) == {"gpus_per_node": 0, "gpus_per_job": 2,
                                        "gpu_type": "s1"}
    again = c.sink.apply([Place(job, plugin="test", nodes=("n2",),
                                allocs=(GroupAlloc("n2", 0, 2),))], c.source.snapshot())
    assert all(r.status is WriteStatus.OK for r in again), again
    ran = c.wait_state(job, "RUNNING")
    assert ran.gpu_alloc == (("n2", (0, 1)),) and ran.gpu_type == "s0"


def test_an_explicit_gpu_type_is_never_re_pinned(clean):
    c = clean
    job = c.sbatch("--gres=gpu:s1:1", "-J", "typed")
    results = c.sink.apply([Place(job, plugin="test", nodes=("n1",),
                                  allocs=(GroupAlloc("n1", 0, 1),))], c.source.snapshot())
    assert results[0].ok and "explicit GPU type gpu:s1 kept" in results[0].message, results
    ran = c.wait_state(job, "RUNNING")
    assert ran.nodes == ("n1",) and set(ran.gpu_alloc[0][1]) <= {2, 3}


def test_priority_decision_reorders_two_pending_jobs(clean):
    c = clean
    blocker = c.sbatch("--gres=gpu:4", "-N", "4", "-J", "blocker", gated=False)
    c.wait_state(blocker, "RUNNING")
    first = c.sbatch("--gres=gpu:4", "-N", "4", "-J", "first", gated=False)
    second = c.sbatch("--gres=gpu:4", "-N", "4", "-J", "second", gated=False)
    snap = c.source.snapshot()
    assert snap.job(first).priority > snap.job(second).priority  # Slurm's own FIFO
    results = c.sink.apply([SetPriority(first, priority=100, queue=1),
                            SetPriority(second, priority=200, queue=0)], snap)
    assert all(r.ok for r in results), results
    snap = c.source.snapshot()
    assert (snap.job(first).priority, snap.job(second).priority) == (100, 200)
    c.run("scancel", str(blocker))
    c.wait_state(second, "RUNNING", timeout_s=30)
    assert c.job(first).is_pending


def test_reservation_holds_nodes_then_its_job_starts_outside_it(clean):
    """The reservation keeps other jobs off the chosen nodes; the job is never put into it
    (Slurm kills a job running inside a reservation once the reservation ends: measured,
    TIMEOUT ~25 s after `EndTime=now`). The agent ends it and starts the job at once."""
    c = clean
    job = c.sbatch("--gres=gpu:4", "-N", "2", "-J", "resv")
    results = c.sink.apply([Reserve(job, plugin="test", name="slurm-marl-test",
                                    nodes=("n3", "n4"), duration_s=120)], c.source.snapshot())
    assert all(r.ok for r in results), results
    assert c.reservation_active("slurm-marl-test") and c.job(job).reservation is None
    other = c.sbatch("--gres=gpu:1", "-w", "n3", "-J", "kept-off", gated=False)
    time.sleep(3)
    assert c.job(other).is_pending            # the reservation holds n3
    c.run("scancel", str(other))
    res = c.sink.apply([EndReservation(job, name="slurm-marl-test"),
                        Place(job, plugin="test", nodes=("n3", "n4"),
                              allocs=(GroupAlloc("n3", 0, 2), GroupAlloc("n3", 1, 2),
                                      GroupAlloc("n4", 0, 2), GroupAlloc("n4", 1, 2)))],
                       c.source.snapshot())
    assert all(r.ok for r in res), [(r.message, r.commands) for r in res]
    ran = c.wait_state(job, "RUNNING")
    assert set(ran.nodes) == {"n3", "n4"} and ran.reservation is None
    assert not c.reservation_active("slurm-marl-test")


def test_a_reservation_that_runs_out_does_not_hold_its_job(clean):
    """Fail-open: if the agent dies, its reservation expires without being ended. Slurm's
    default then holds the pending job (RESV_DEL_HOLD, priority 0) until an admin acts; the
    agent's reservations carry NO_HOLD_JOBS_AFTER_END, so the job just runs."""
    c = clean
    blocker = c.sbatch("--gres=gpu:4", "-w", "n4", "-J", "blocker", gated=False)
    c.wait_state(blocker, "RUNNING")
    job = c.sbatch("--gres=gpu:4", "-N", "2", "-J", "resv-expire")
    c.run("scontrol", "create", "reservation", "ReservationName=slurm-marl-expire",
          "Nodes=n3,n4", "Users=root", "StartTime=now", "Duration=2",
          "Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER_END")
    # an older agent put its job into the reservation; this one never does
    c.run("scontrol", "update", f"jobid={job}", "Reservation=slurm-marl-expire",
          "StartTime=now")
    # the agent is gone: nobody ends the reservation; it runs out on its own
    c.run("scontrol", "update", "ReservationName=slurm-marl-expire", "EndTime=now+2")
    c.wait_for(lambda: not c.reservation_active("slurm-marl-expire"), 20, "reservation gone")

    def settled():
        out = c.run("squeue", "-h", "-j", str(job), "-o", "%T|%r|%v|%Q").stdout.strip()
        fields = out.split("|")
        return out if fields[0] != "PENDING" or fields[2] in ("", "(null)") else None

    raw = c.wait_for(settled, 30, "Slurm to act on the job of the expired reservation")
    # out of the reservation and free to run (elsewhere, if n4 is still busy), not held
    assert raw.split("|")[0] in ("PENDING", "RUNNING"), raw
    assert raw.split("|")[2] in ("", "(null)") and raw.split("|")[3] != "0", raw
    c.run("scancel", str(blocker))
    ran = c.wait_state(job, "RUNNING", timeout_s=30)
    assert len(ran.nodes) == 2


def test_requeue_decision_puts_running_job_back_to_pending(clean):
    c = clean
    job = c.sbatch("--gres=gpu:1", "-J", "preempt-me", gated=False)
    c.wait_state(job, "RUNNING")
    results = c.sink.apply([Preempt(job, plugin="test", reason="demoted to queue 2")],
                           c.source.snapshot())
    assert results[0].ok, results
    back = c.wait_state(job, "PENDING", timeout_s=30)
    assert back.restart_count == 1 and back.job_id == job


def test_vanished_job_is_a_result_not_an_exception(clean):
    c = clean
    results = c.sink.apply([SetPriority(999999, priority=5), Release(999998),
                            Preempt(999997)], None)
    assert [r.status for r in results] == [WriteStatus.VANISHED] * 3
    assert all("Invalid job id" in r.message for r in results)


def test_refused_update_reports_slurms_message(clean):
    c = clean
    job = c.sbatch("--gres=gpu:1", "--hold", "-J", "held", gated=False)
    results = c.sink.apply([SetPriority(job, priority=77)], c.source.snapshot())
    assert results[0].status is WriteStatus.REFUSED
    assert "held" in results[0].message.lower()
    # The next write to another job still works.
    other = c.sbatch("--gres=gpu:1", "-J", "fine")
    assert c.sink.apply([SetPriority(other, priority=78)])[0].ok


def test_drained_node_is_unavailable_in_snapshot(clean):
    c = clean
    c.run("scontrol", "update", "nodename=n2", "state=drain", "reason=slurm-marl-test")
    try:
        snap = c.source.snapshot()
        n2 = snap.node("n2")
        assert not n2.available and "DRAIN" in n2.state and n2.reason == "slurm-marl-test"
        assert all(snap.node(n).available for n in ("n1", "n3", "n4"))
        # A pin to the drained node is accepted by Slurm but the job does not start there.
        job = c.sbatch("--gres=gpu:1", "-J", "drained")
        assert c.sink.apply([Place(job, nodes=("n2",), allocs=(GroupAlloc("n2", 0, 1),))],
                            snap)[0].ok
        assert c.job(job).is_pending
    finally:
        c.run("scontrol", "update", "nodename=n2", "state=resume")


def test_controller_stop_gives_clear_error_and_recovers(clean):
    c = clean
    job = c.sbatch("--gres=gpu:1", "-J", "survivor")
    c.local.stop_daemon("slurmctld")
    try:
        with pytest.raises(SlurmUnavailable) as err:
            c.source.snapshot()
        assert "slurm controller" in str(err.value).lower() or "timed out" in str(err.value)
        res = c.sink.apply([SetPriority(job, priority=9)])
        assert res[0].status is WriteStatus.UNAVAILABLE
    finally:
        c.local.start_slurmctld()
    snap = c.wait_for(lambda: _try_snapshot(c), 30, "snapshot after restart")
    assert snap.job(job) is not None and snap.job(job).is_pending  # state survived
    assert c.sink.apply([SetPriority(job, priority=9)], snap)[0].ok


def _try_snapshot(c):
    try:
        return c.source.snapshot()
    except SlurmUnavailable:
        return None
