"""Decisions to Slurm writes (``daemon/writes.py``) on hand-built snapshots: what is written,
what is not, and in which order."""

from slurm_marl.daemon.config import AgentSection
from slurm_marl.daemon.writes import place_key, plan_writes
from slurm_marl.domain import (ClusterSnapshot, Defer, EndReservation, GroupAlloc, Job,
                               JobState, Place, Preempt, Reserve)

NOW = 1000.0
CFG = AgentSection(grace_s=30, interval_s=5.0)


def job(job_id, state=JobState.PENDING, eligible=None):
    return Job(job_id=job_id, state=state, gpus_per_job=1, submit_time_s=0.0,
               eligible_time_s=eligible)


def place(job_id, nodes=("n1",), start_now=True):
    return Place(job_id=job_id, plugin="consolidate", nodes=tuple(nodes),
                 allocs=tuple(GroupAlloc(n, 0, 1) for n in nodes), start_now=start_now)


def plan(jobs, decisions, *, written=None, reservations=None, inflight=(), renewed=None):
    snap = ClusterSnapshot(time_s=NOW, jobs=tuple(jobs))
    return plan_writes(snap, decisions, [], CFG, written=written or {},
                       reservations=reservations or {}, inflight_nodes=set(inflight),
                       resv_renewed=renewed or {})


def test_a_start_ends_its_own_reservation_first():
    d = place(1, ("n1", "n2"))
    out, advice = plan([job(1)], [d], reservations={"slurm-marl-1": {"job_id": 1,
                                                                     "nodes": "n1,n2"}})
    assert [type(w) for w in out] == [EndReservation, Place] and advice == []
    assert out[0].name == "slurm-marl-1" and out[1] is d


def test_a_start_written_before_is_not_written_again_unless_the_job_is_gated():
    d = place(1)
    written = {(1, "place"): place_key(d)}
    assert plan([job(1)], [d], written=written)[0] == []
    out, _ = plan([job(1, eligible=NOW + 60)], [d], written=written)
    assert out == [d]


def test_a_waiting_multi_node_job_gets_a_reservation_lasting_one_grace():
    d = place(2, ("n1", "n2"), start_now=False)
    out, advice = plan([job(2)], [d])
    [resv] = [w for w in out if isinstance(w, Reserve)]
    assert resv.nodes == ("n1", "n2") and resv.duration_s == CFG.grace_s
    assert resv.name == "slurm-marl-2" and advice == [d]
    # Renewed only once a third of the grace has passed, or when its nodes change.
    fresh = {"slurm-marl-2": {"job_id": 2, "nodes": "n1,n2"}}
    out, _ = plan([job(2)], [d], reservations=fresh, renewed={"slurm-marl-2": NOW - 5})
    assert not any(isinstance(w, Reserve) for w in out)
    out, _ = plan([job(2)], [d], reservations=fresh, renewed={"slurm-marl-2": NOW - 11})
    assert any(isinstance(w, Reserve) for w in out)


def test_no_reservation_on_nodes_another_job_is_starting_on():
    waiting = place(2, ("n1", "n2"), start_now=False)
    resv = {"slurm-marl-2": {"job_id": 2, "nodes": "n1,n2"}}
    out, _ = plan([job(2), job(3)], [place(3, ("n2",)), waiting], reservations=resv)
    assert [type(w) for w in out] == [Place, EndReservation]
    out, _ = plan([job(2)], [waiting], inflight={"n1"})
    assert not any(isinstance(w, Reserve) for w in out)


def test_the_lease_renews_decided_waiting_jobs_only():
    out, _ = plan([job(4, eligible=NOW + 8), job(5, eligible=NOW + 600), job(6, eligible=NOW)],
                  [place(4, start_now=False), place(5, start_now=False)])
    assert [(type(w), w.job_id) for w in out] == [(Defer, 4)]
    assert out[0].seconds == CFG.grace_s


def test_preemption_of_running_jobs_only_and_stale_reservations_end():
    running = job(7, state=JobState.RUNNING)
    resv = {"slurm-marl-7": {"job_id": 7, "nodes": "n1"},
            "slurm-marl-9": {"job_id": 9, "nodes": "n2"}}
    out, _ = plan([running, job(8, eligible=NOW + 600)], [Preempt(7), Preempt(8)],
                  reservations=resv)
    assert [(type(w), w.job_id) for w in out] == [(Preempt, 7), (EndReservation, 7),
                                                  (EndReservation, 9)]


def test_priority_writes_are_the_policy_decisions_with_only_their_priority_changed():
    """Each write is its decision with the planned priority (reason, queue and plugin kept:
    ``explain`` shows them), for pending jobs only, highest first; SiteFactor writes are
    marked so. Checked field by field against ``dataclasses.replace``."""
    from dataclasses import replace

    from slurm_marl.daemon.writes import priority_writes, site_factor_writes
    from slurm_marl.domain import SetPriority

    jobs = [job(1), job(2), job(3, state=JobState.RUNNING), job(4)]
    jobs[1] = jobs[1].with_(priority=7)
    snap = ClusterSnapshot(time_s=NOW, jobs=tuple(jobs))
    order = [SetPriority(job_id=j, plugin="tiresias_las", reason=f"queue {q}", priority=p,
                         queue=q)
             for j, p, q in ((4, 1, 1), (1, 4, 0), (2, 3, 0), (3, 2, 0), (99, 5, 0))]
    out = priority_writes(snap, order, priority_base=1000)
    by_job = {d.job_id: d for d in order}
    assert [d.job_id for d in out] == [1, 2, 4]
    assert [d.priority for d in out] == sorted((d.priority for d in out), reverse=True)
    for d in out:
        assert d == replace(by_job[d.job_id], priority=d.priority)
        assert hash(d) == hash(replace(by_job[d.job_id], priority=d.priority))
    factors = site_factor_writes(snap, order, 1_000_000, {})
    assert [d.job_id for d in factors] == [1, 2, 4]
    for d in factors:
        assert d == replace(by_job[d.job_id], priority=d.priority, site_factor=True)


def _queue(jobs_submits, order_ids, left_submits, left_priority=4_294_901_000):
    """Pending jobs (id, submit) decided in ``order_ids`` (first = runs first), and jobs
    left to Slurm (id, submit) with Slurm's own priority/basic-like values."""
    from slurm_marl.domain import SetPriority

    mine = [Job(job_id=i, state=JobState.PENDING, gpus_per_job=4, submit_time_s=t,
                eligible_time_s=NOW + 20, priority=0) for i, t in jobs_submits]
    left = [Job(job_id=i, state=JobState.PENDING, gpus_per_job=4, submit_time_s=t,
                eligible_time_s=NOW, priority=left_priority - k,
                left_to_slurm="a job array")
            for k, (i, t) in enumerate(left_submits)]
    snap = ClusterSnapshot(time_s=NOW, jobs=tuple(mine + left))
    order = [SetPriority(job_id=j, plugin="tiresias_las", reason="queue 0",
                         priority=len(order_ids) - r, queue=0)
             for r, j in enumerate(order_ids)]
    return snap, order, left


def test_jobs_submitted_before_a_job_left_to_slurm_are_made_eligible_above_it():
    """Jobs 1-3 wait (leased); array job 10 came after 1 and 2: those two (and any job the
    policy ranks between them) get priorities above the array's and are released, so
    Slurm starts them first; job 3, submitted after the array, stays leased and below."""
    from slurm_marl.daemon.writes import ordered_writes, queue_head

    snap, order, left = _queue([(1, 10.0), (2, 20.0), (3, 40.0)], [1, 2, 3], [(10, 30.0)])
    ranked = [(d, snap.job(d.job_id)) for d in order]
    assert queue_head(ranked, left) == (2, left[0].priority)
    writes, head = ordered_writes(snap, order, 1_000_000, left)
    assert head == [1, 2]
    prio = {w.job_id: w.priority for w in writes}
    assert prio[1] > prio[2] > left[0].priority > prio[3] > 1_000_000
    # the policy's order puts job 3 between 1 and 2: it is released too, in that order
    snap, order, left = _queue([(1, 10.0), (2, 20.0), (3, 40.0)], [1, 3, 2], [(10, 30.0)])
    writes, head = ordered_writes(snap, order, 1_000_000, left)
    assert head == [1, 3, 2]
    prio = {w.job_id: w.priority for w in writes}
    assert prio[1] > prio[3] > prio[2] > left[0].priority
    # released through plan_writes: StartTime=now (Release), no lease renewal
    from slurm_marl.domain import Release
    out, _ = plan_writes(snap, [*order], writes, CFG, written={}, reservations={},
                         inflight_nodes=set(), resv_renewed={}, eligible=set(head))
    assert sorted(w.job_id for w in out if isinstance(w, Release)) == [1, 2, 3]
    assert not any(isinstance(w, Defer) for w in out)


def test_no_left_job_or_only_earlier_ones_change_nothing():
    from slurm_marl.daemon.writes import ordered_writes, priority_writes

    for left_submits in ([], [(10, 5.0)]):   # none, or one submitted before every job
        snap, order, left = _queue([(1, 10.0), (2, 20.0)], [2, 1], left_submits)
        writes, head = ordered_writes(snap, order, 1_000_000, left)
        assert head == []
        assert writes == priority_writes(snap, order, 1_000_000)
        assert all(w.priority < 4_000_000_000 for w in writes)
        out, _ = plan_writes(snap, order, writes, CFG, written={}, reservations={},
                             inflight_nodes=set(), resv_renewed={}, eligible=set(head))
        assert {type(w).__name__ for w in out} == {"SetPriority"}  # leased: begin 20 s off


def test_a_head_already_above_the_left_jobs_is_not_rewritten():
    from slurm_marl.daemon.writes import ordered_writes

    snap, order, left = _queue([(1, 10.0), (2, 20.0)], [1, 2], [(10, 30.0)],
                               left_priority=500)
    snap = ClusterSnapshot(time_s=NOW, jobs=tuple(
        j.with_(priority={1: 3_000_000, 2: 2_000_000}.get(j.job_id, j.priority))
        for j in snap.jobs))
    writes, head = ordered_writes(snap, order, 1_000_000, left)
    assert head == [1, 2] and writes == []
