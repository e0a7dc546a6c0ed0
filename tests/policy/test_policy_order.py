import math
import random

import pytest

from policy_builders import kinds, node, pending, running, snapshot
from slurm_marl.domain import JobState
from slurm_marl.policy.framework import build_policy, run_cycle
from slurm_marl.policy.order.srtf import remaining_gpu_s
from slurm_marl.policy.order.tiresias_gittins import gittins_index
from slurm_marl.policy.order.tiresias_las import (las_service, queue_for_service,
                                                  starvation_deadline_s)
from slurm_marl.policy.profile import load_profile, profile_from_mapping

TH = (3250.0, 7200.0, 18000.0)


def las_profile(**order):
    return profile_from_mapping({"name": "t", "preemption": True, "backfill": True,
                                 "backfill_reserve": False,
                                 "order": {"plugin": "tiresias_las", **order},
                                 "place": {"consolidate": 1.0}})


# -- FIFO -------------------------------------------------------------------------------------

def test_fifo_ties_break_by_submit_then_id_whatever_the_input_order():
    jobs = [pending(7, 1, submit=5), pending(3, 1, submit=5), pending(9, 1, submit=1),
            pending(1, 1, submit=9)]
    prof = load_profile("fifo-consolidate")
    expected = [9, 3, 7, 1]
    for seed in range(5):
        random.Random(seed).shuffle(jobs)
        prios = kinds(run_cycle(snapshot([node("n1", used=range(8))], jobs), prof),
                      "SetPriority")
        assert [p.job_id for p in prios] == expected
        assert [p.priority for p in prios] == [4, 3, 2, 1]
        assert all(p.queue == 0 and p.plugin == "fifo" and p.reason for p in prios)


# -- 2D-LAS -----------------------------------------------------------------------------------

@pytest.mark.parametrize("service, queue", [(0, 0), (3249.9, 0), (3250, 1), (7199, 1),
                                            (7200, 2), (17999, 2), (18000, 3), (1e9, 3)])
def test_queue_demotion_at_the_thresholds(service, queue):
    assert queue_for_service(service, TH, 4) == queue


def test_num_queues_caps_like_tiresias_simulator():
    # Tiresias' simulator declares three limits but has three queues: the last is unused.
    assert queue_for_service(20000, TH[:2], 3) == 2


def test_running_job_is_demoted_and_preempted_by_a_waiting_higher_queue_job():
    prof = las_profile()
    n1 = node("n1", groups=(4,))
    old = running(1, {"n1": (0, 1, 2, 3)}, attained=3300.0, start=0.0)   # queue 1
    new = pending(2, 4, submit=900.0)                                     # queue 0
    decisions = run_cycle(snapshot([n1], [old, new], now=1000.0), prof)
    assert [d.job_id for d in kinds(decisions, "Preempt")] == [1]
    place = kinds(decisions, "Place")
    assert [p.job_id for p in place] == [2] and place[0].start_now
    # Just below the threshold it stays: same queue, running first.
    young = running(1, {"n1": (0, 1, 2, 3)}, attained=3249.0, start=0.0)
    decisions = run_cycle(snapshot([n1], [young, new], now=1000.0), prof)
    assert not kinds(decisions, "Preempt") and not kinds(decisions, "Place")


def test_demotion_time_is_announced():
    policy = build_policy(las_profile())
    job = running(1, {"n1": (0, 1)}, attained=3000.0, start=0.0)
    # 250 GPU-s left to the 3250 limit at 2 GPUs: 125 s.
    assert policy.order.next_change_s(job, 1000.0) == pytest.approx(1125.0)


def test_starvation_promotion_after_starve_limit_times_last_run():
    prof = las_profile(starve_limit=2.0)
    order = build_policy(prof).order
    waiting = pending(5, 1, submit=0.0, attained_gpu_s=8000.0, last_run_s=100.0,
                      queue_since_s=1000.0)
    assert order.classify(waiting, 1199.0)[0] == 2
    assert order.classify(waiting, 1200.0)[0] == 0
    assert las_service(waiting, 1200.0, 2.0) == (0.0, True)
    assert order.next_change_s(waiting, 1100.0) == starvation_deadline_s(1000.0, 100.0, 2.0)
    # Off by default: never promoted.
    assert build_policy(las_profile()).order.classify(waiting, 1e9)[0] == 2
    # Never ran: no promotion needed, stays in queue 0 by service anyway.
    fresh = pending(6, 1, submit=0.0)
    assert order.classify(fresh, 1e6)[0] == 0


def test_promoted_job_keeps_queue_zero_while_its_new_run_is_short():
    order = build_policy(las_profile(starve_limit=2.0)).order
    # Waited 300 s (>= 2 x 100) before starting again at t=1300; total service is high.
    job = running(5, {"n1": (0,)}, attained=9000.0, start=1300.0, last_run_s=100.0,
                  queue_since_s=1000.0)
    assert order.classify(job, 1400.0)[0] == 0
    assert order.classify(job, 1300.0 + 3250.0)[0] == 1
    # Had it not waited long enough, its total service places it.
    impatient = running(5, {"n1": (0,)}, attained=9000.0, start=1150.0, last_run_s=100.0,
                        queue_since_s=1000.0)
    assert order.classify(impatient, 1400.0)[0] == 2


def test_promoted_waiting_job_preempts_lower_queue_running_job():
    prof = las_profile(starve_limit=1.0)
    n1 = node("n1", groups=(2,))
    hog = running(1, {"n1": (0, 1)}, attained=20000.0, start=0.0)
    starved = pending(2, 2, submit=0.0, attained_gpu_s=19000.0, last_run_s=50.0,
                      queue_since_s=900.0)
    assert not kinds(run_cycle(snapshot([n1], [hog, starved], now=940.0), prof), "Preempt")
    decisions = run_cycle(snapshot([n1], [hog, starved], now=950.0), prof)
    assert [d.job_id for d in kinds(decisions, "Preempt")] == [1]
    assert [d.job_id for d in kinds(decisions, "Place")] == [2]


def test_same_queue_waiting_job_does_not_preempt_running_job():
    prof = las_profile()
    n1 = node("n1", groups=(4,))
    later_started = running(9, {"n1": (0, 1, 2, 3)}, submit=50.0, attained=100.0, start=60.0)
    earlier_waiting = pending(1, 4, submit=0.0)
    decisions = run_cycle(snapshot([n1], [later_started, earlier_waiting]), prof)
    assert not kinds(decisions, "Preempt")


# -- Tiresias' in-queue order (lists kept across cycles) --------------------------------------

def test_job_demoted_while_running_ranks_behind_jobs_waiting_in_its_new_queue():
    # Tiresias appends a demoted job to the tail of its new queue: a job already waiting
    # there takes its GPUs at once. The older running-first order keeps it running.
    n1 = node("n1", groups=(4,))
    waiting = pending(2, 4, submit=0.0, attained_gpu_s=4000.0, last_run_s=1000.0,
                      queue_since_s=100.0)                                  # queue 1
    for in_queue, preempted in (("tiresias", [1]), ("running_first", [])):
        policy = build_policy(las_profile(in_queue=in_queue))
        before = running(1, {"n1": (0, 1, 2, 3)}, submit=10.0, attained=3200.0, start=0.0)
        decisions = policy.run_cycle(snapshot([n1], [before, waiting], now=800.0))
        assert not kinds(decisions, "Preempt")                 # still queue 0, above
        after = running(1, {"n1": (0, 1, 2, 3)}, submit=10.0, attained=3600.0, start=0.0)
        decisions = policy.run_cycle(snapshot([n1], [after, waiting], now=900.0))
        assert [d.job_id for d in kinds(decisions, "Preempt")] == preempted, in_queue
        if preempted:
            assert [d.job_id for d in kinds(decisions, "Place")] == [2]


def _demote(policy, nodes, jobs_at):
    """Run one cycle per (time, jobs) step; returns the last cycle's priorities."""
    decisions = []
    for now, jobs in jobs_at:
        decisions = policy.run_cycle(snapshot(nodes, jobs, now=now))
    return [d.job_id for d in kinds(decisions, "SetPriority")]


def test_waiting_jobs_keep_the_order_they_entered_their_queue_not_submit_order():
    # A (submitted first) is demoted after B; both then wait in queue 1: B ranks first.
    n1 = node("n1", groups=(4,))
    hog = running(9, {"n1": (0, 1, 2, 3)}, submit=2000.0, attained=10.0, start=1390.0)
    steps = [
        (1000.0, [running(1, {"n1": (0,)}, submit=0.0, attained=3000.0, start=0.0),
                  running(2, {"n1": (1,)}, submit=50.0, attained=3200.0, start=0.0)]),
        (1100.0, [running(1, {"n1": (0,)}, submit=0.0, attained=3100.0, start=0.0),
                  running(2, {"n1": (1,)}, submit=50.0, attained=3300.0, start=0.0)]),
        (1300.0, [running(1, {"n1": (0,)}, submit=0.0, attained=3300.0, start=0.0),
                  running(2, {"n1": (1,)}, submit=50.0, attained=3500.0, start=0.0)]),
        (1400.0, [pending(1, 1, submit=0.0, attained_gpu_s=3300.0, last_run_s=1300.0,
                          queue_since_s=1390.0),
                  pending(2, 1, submit=50.0, attained_gpu_s=3500.0, last_run_s=1300.0,
                          queue_since_s=1390.0), hog]),
    ]
    assert _demote(build_policy(las_profile()), [n1], steps) == [2, 1]
    assert _demote(build_policy(las_profile(in_queue="running_first")), [n1], steps) == [1, 2]


def test_after_a_pass_waiting_jobs_move_behind_running_ones_of_their_queue():
    # Entry order W (waiting), R (demoted later, running); once R runs and W still waits,
    # the next pass ranks R first: W cannot preempt it.
    order = build_policy(las_profile()).order
    w = pending(1, 4, submit=0.0, attained_gpu_s=4000.0, last_run_s=900.0, queue_since_s=900.0)
    order.begin_cycle([w, running(2, {"n1": (0, 1, 2, 3)}, submit=5.0, attained=3000.0,
                                  start=500.0)], 950.0)
    r = running(2, {"n1": (0, 1, 2, 3)}, submit=5.0, attained=3300.0, start=500.0)
    order.begin_cycle([w, r], 1000.0)    # R demoted: tail of queue 1, behind W
    assert order.classify(w, 1000.0)[1] < order.classify(r, 1000.0)[1]
    order.begin_cycle([w, r], 1010.0)    # the pass kept R running and W waiting
    assert order.classify(r, 1010.0)[1] < order.classify(w, 1010.0)[1]


def test_a_preempted_job_heads_the_waiting_jobs_of_its_queue():
    # Tiresias' after-pass move keeps list order: a running job that was preempted was
    # ahead of every waiting job of its queue, so it stays ahead of them.
    order = build_policy(las_profile()).order
    w = pending(1, 2, submit=0.0)
    r = running(2, {"n1": (0, 1)}, submit=50.0, attained=100.0, start=60.0)
    order.begin_cycle([w, r], 100.0)
    assert order.classify(r, 100.0)[1] < order.classify(w, 100.0)[1]
    preempted = pending(2, 2, submit=50.0, attained_gpu_s=180.0, last_run_s=40.0,
                        queue_since_s=100.0)
    order.begin_cycle([w, preempted], 110.0)
    assert order.classify(preempted, 110.0)[1] < order.classify(w, 110.0)[1]


def test_lists_follow_a_restart_views_and_a_new_run():
    order = build_policy(las_profile()).order
    order.lists.prune_slack = 0      # forget ended jobs at once (normally in batches)
    # A restarted daemon knows nothing: running jobs first, then by submit time.
    late_running = running(5, {"n1": (0,)}, submit=90.0, attained=10.0, start=95.0)
    early_waiting = pending(6, 1, submit=10.0)
    order.begin_cycle([early_waiting, late_running], 100.0)
    assert order.classify(late_running, 100.0)[1] < order.classify(early_waiting, 100.0)[1]
    # A view of another partition does not forget this one's jobs.
    other = pending(7, 1, submit=0.0, partition="other")
    order.begin_cycle([other], 101.0)
    assert set(order.lists.entries) == {5, 6, 7}
    # Job 6 ended: the next view of its partition drops it.
    order.begin_cycle([late_running], 102.0)
    assert set(order.lists.entries) == {5, 7}
    # The clock going back means a new run (simulator, training episode): start empty.
    order.begin_cycle([early_waiting], 0.0)
    assert set(order.lists.entries) == {6}


def test_explain_says_how_and_when_a_job_entered_its_queue():
    order = build_policy(las_profile()).order
    job = running(1, {"n1": (0, 1)}, attained=3000.0, start=0.0)
    order.begin_cycle([job], 1500.0)
    moved = running(1, {"n1": (0, 1)}, attained=3400.0, start=0.0)
    order.begin_cycle([moved], 1700.0)   # crossed 3250 GPU-s at 1625 s
    assert order.describe(moved, 1700.0, 1) == \
        "queue 1: 3400 GPU-s attained, entered 75 s ago by demotion"


@pytest.mark.parametrize("params, message", [
    ({"in_queue": "lifo"}, "in_queue must be one of"),
    ({"in_queue": "tiresias", "running_first": False}, "running_first applies"),
])
def test_in_queue_parameters_are_checked(params, message):
    with pytest.raises(ValueError, match=message):
        build_policy(las_profile(**params))


def test_running_first_alone_keeps_profiles_written_before_in_queue():
    assert build_policy(las_profile(running_first=True)).order.in_queue == "running_first"
    assert build_policy(las_profile()).order.in_queue == "tiresias"


def test_lowest_ranked_running_jobs_are_the_victims():
    prof = las_profile()
    n1 = node("n1", groups=(2, 2))
    q1 = running(1, {"n1": (0, 1)}, attained=4000.0)        # queue 1
    q2 = running(2, {"n1": (2, 3)}, attained=8000.0)        # queue 2: lower, goes first
    decisions = run_cycle(snapshot([n1], [q1, q2, pending(3, 2, submit=10.0)]), prof)
    assert [d.job_id for d in kinds(decisions, "Preempt")] == [2]
    assert kinds(decisions, "Place")[0].allocs[0].group == 1


# -- 2D-Gittins -------------------------------------------------------------------------------

def _prefix(sizes):
    out = [0.0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


def brute_gittins(sizes, a, delta):
    alive = [s for s in sizes if s > a]
    if not alive:
        return 0.0
    p = sum(1 for s in alive if s - a <= delta) / len(alive)
    e = sum(min(s - a, delta) for s in alive) / len(alive)
    return p / e


def test_gittins_index_matches_its_definition():
    rng = random.Random(3)
    sizes = sorted(rng.uniform(1, 20000) for _ in range(300))
    prefix = _prefix(sizes)
    for a in (0, 10, 999, 3250, 7000, 15000, 19999):
        assert gittins_index(sizes, prefix, a, 3250) == pytest.approx(
            brute_gittins(sizes, a, 3250), rel=1e-9)


def test_gittins_index_zero_past_every_known_size():
    sizes = [10.0, 20.0]
    assert gittins_index(sizes, _prefix(sizes), 20.0, 5.0) == 0.0


def test_gittins_index_rises_for_equal_sizes():
    # All jobs need 1000 GPU-s: the more a job has run, the closer it is to done.
    sizes = [1000.0] * 50
    prefix = _prefix(sizes)
    values = [gittins_index(sizes, prefix, a, 300) for a in range(0, 1000, 50)]
    assert all(b >= a for a, b in zip(values, values[1:]))
    assert values[-1] > values[0]


def test_gittins_index_falls_for_heavy_tailed_sizes():
    # Pareto sizes (decreasing hazard rate): the longer a job has run, the longer it will
    # probably run, so its index falls (this is why 2D-Gittins behaves like LAS here).
    n, alpha = 4000, 1.2
    sizes = sorted(100.0 / (1 - (i + 0.5) / n) ** (1 / alpha) for i in range(n))
    prefix = _prefix(sizes)
    values = [gittins_index(sizes, prefix, a, 500) for a in (100, 500, 1000, 5000, 20000)]
    assert all(b < a for a, b in zip(values, values[1:]))


def test_gittins_orders_waiting_jobs_by_index_within_a_queue():
    prof = profile_from_mapping({
        "name": "g", "preemption": True, "backfill": True, "backfill_reserve": False,
        "order": {"plugin": "tiresias_gittins", "gpu_time_samples": [1000.0] * 10,
                  "delta_gpu_s": 300},
        "place": {"consolidate": 1.0}})
    n1 = node("n1", groups=(1,))
    blocker = running(9, {"n1": (0,)}, attained=100.0)
    a = pending(1, 1, submit=0.0, attained_gpu_s=0.0)
    b = pending(2, 1, submit=5.0, attained_gpu_s=900.0)   # closer to done: higher index
    prios = kinds(run_cycle(snapshot([n1], [blocker, a, b]), prof), "SetPriority")
    assert [p.job_id for p in prios] == [2, 1]


# -- SRTF -------------------------------------------------------------------------------------

def test_srtf_remaining_and_preemption_of_the_longer_job():
    assert remaining_gpu_s(100.0, 2, 50.0) == 150.0
    assert math.isinf(remaining_gpu_s(None, 1, 0.0))
    prof = load_profile("srtf-consolidate")
    n1 = node("n1", groups=(1,))
    long_job = running(1, {"n1": (0,)}, attained=10.0, duration_s=1000.0)
    short = pending(2, 1, submit=5.0, duration_s=50.0)
    decisions = run_cycle(snapshot([n1], [long_job, short]), prof)
    assert [d.job_id for d in kinds(decisions, "Preempt")] == [1]
    assert [d.job_id for d in kinds(decisions, "Place")] == [2]


def test_cycle_is_deterministic_and_pure():
    prof = load_profile("las-consolidate")
    nodes = [node("n1", used=(0,)), node("n2", used=(4, 5)), node("n3", leaf="leaf2")]
    jobs = [pending(i, g, submit=float(i % 3)) for i, g in
            enumerate([1, 2, 4, 8, 1, 3, 16, 1], start=1)]
    snap = snapshot(nodes, jobs)
    first = run_cycle(snap, prof)
    assert run_cycle(snap, prof) == first
    shuffled = list(jobs)
    random.Random(1).shuffle(shuffled)
    assert run_cycle(snapshot(nodes, shuffled), prof) == first
    assert snap.jobs == tuple(jobs)  # the snapshot is untouched
    assert all(j.state is JobState.PENDING for j in snap.jobs)
