"""The prediction-skill gate (``history/skill.py``): concordance and gain on hand-built values, the
gate opening and closing as defined, no look-ahead through the simulator (what the policy
sees of the predictions at a time reads only outcomes known by then), and the order
saying why a prediction is withheld. The daemon's use of the same gate is tested in
``test_daemon_predictions.py``."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_marl.domain import Job, JobState
from slurm_marl.history.skill import (Concordance, Gain, GateParams, SkillGate,
                                      mean_completion)
from slurm_marl.policy.order.predicted_las import PredictedLas


def brute_concordance(items, weighted):
    agree = pairs = 0.0
    for (p, t), (q, u) in itertools.combinations(items, 2):
        if t == u:
            continue
        w = abs(math.log1p(t) - math.log1p(u)) if weighted else 1.0
        pairs += w
        agree += w / 2 if p == q else w * ((p < q) == (t < u))
    return agree / pairs if pairs else None


def test_concordance_on_hand_built_values():
    c = Concordance(10, weighted=False)
    assert c.value is None
    for p, t in [(1, 10), (2, 20), (3, 30)]:
        c.add(p, t)
    assert c.value == 1.0
    c = Concordance(10, weighted=False)
    for p, t in [(3, 10), (2, 20), (1, 30)]:
        c.add(p, t)
    assert c.value == 0.0
    c = Concordance(10, weighted=False)
    for p, t in [(5, 10), (5, 20), (1, 20)]:   # a tie in prediction is half; in truth, no pair
        c.add(p, t)
    # pairs (5,10)-(5,20): tie = 1/2; (5,10)-(1,20): wrong; (5,20)-(1,20): not counted
    assert c.value == pytest.approx(0.25)


def test_weighted_concordance_counts_far_apart_pairs_more():
    # two close jobs swapped (e^1 - 1 and e^1.5 - 1: weight 0.5), the far one right
    # (weights 3.5 and 3): 6.5 of 7
    t = [math.expm1(x) for x in (1.0, 1.5, 4.5)]
    c = Concordance(10)
    for p, truth in [(2.0, t[0]), (1.0, t[1]), (9.0, t[2])]:
        c.add(p, truth)
    assert c.value == pytest.approx(6.5 / 7)
    plain = Concordance(10, weighted=False)
    for p, truth in [(2.0, t[0]), (1.0, t[1]), (9.0, t[2])]:
        plain.add(p, truth)
    assert plain.value == pytest.approx(2 / 3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=30),
       st.integers(2, 8), st.booleans())
def test_concordance_over_a_sliding_window_matches_counting_every_pair(items, window,
                                                                        weighted):
    c = Concordance(window, weighted)
    for k, (p, t) in enumerate(items):
        c.add(float(p), float(t))
        assert c.count == min(k + 1, window)
        want = brute_concordance(items[max(0, k + 1 - window):k + 1], weighted)
        assert c.value == (None if want is None else pytest.approx(want))


def test_the_gate_opens_after_enough_skill_and_closes_without_it():
    gate = SkillGate(GateParams(window=4, min_scored=3, threshold=0.6, weighted=False))
    # nothing scored yet: withheld, and says why
    assert gate.withheld("a") == "predictions withheld in partition a: 0 finished jobs scored (< 3)"
    for jid, pred in [(1, 100.0), (2, 200.0), (3, 300.0), (4, 250.0)]:
        gate.record(jid, "a", pred)
    gate.record(9, "a", None)                                # nothing to score
    for jid, truth in [(1, 10.0), (2, 20.0), (9, 5.0)]:
        gate.finished(jid, truth)
    assert gate.skill("a") == (1.0, 2)
    assert gate.withheld("a").endswith("2 finished jobs scored (< 3)")
    gate.finished(3, 30.0)
    assert gate.skill("a") == (1.0, 3)
    assert gate.withheld("a") == ""                          # 3 scored, concordance 1
    assert gate.withheld("b") != ""                          # another partition: its own
    # job 4, recorded while the gate was closed and scored all the same, is the longest:
    # ordered wrong against job 3 only -> 5 of 6 pairs right (open)
    gate.finished(4, 1000.0)
    assert gate.skill("a") == (pytest.approx(5 / 6), 4) and gate.withheld("a") == ""
    # job 5 (predicted longest) is the shortest; the window drops job 1: 2 of 6 right ->
    # closed
    gate.record(5, "a", 5e3)
    gate.finished(5, 1.0)
    value, n = gate.skill("a")
    assert n == 4 and value == pytest.approx(2 / 6)
    assert gate.withheld("a") == ("predictions withheld in partition a: concordance 0.33 on "
                                  "the last 4 finished jobs (< 0.6)")
    # scoring an unknown, forgotten or already scored job is a no-op
    gate.record(8, "a", 70.0)
    gate.forget(8)
    for jid in (8, 42, 5):
        gate.finished(jid, 5.0)
    assert gate.skill("a") == (pytest.approx(2 / 6), 4)


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="min_scored"):
        GateParams(window=10, min_scored=11)
    with pytest.raises(ValueError, match="threshold"):
        GateParams(threshold=1.5)
    with pytest.raises(ValueError, match="threshold"):
        GateParams(threshold=-0.1)                           # concordance: in [0, 1]
    assert GateParams(threshold=-0.1, measure="gain").threshold == -0.1
    with pytest.raises(ValueError, match="threshold"):
        GateParams(threshold=1.5, measure="gain")
    with pytest.raises(ValueError, match="measure"):
        GateParams(measure="tau")
    assert GateParams(measure="log-gain").measure == "log-gain"


def gain_of(jobs):
    """Gain of (prediction, truth) pairs given in arrival order, added in reverse (the
    order jobs finish in does not matter, only their arrival)."""
    g = Gain(10)
    for arrival, (p, t) in reversed(list(enumerate(jobs))):
        g.add(p, t, arrival)
    return g.value


def test_gain_on_hand_built_values():
    # mean completion on one server: sizes 3, 1, 2 in that order end at 3, 4, 6
    assert mean_completion([3.0, 1.0, 2.0]) == pytest.approx(13 / 3)
    assert mean_completion([]) == 0.0
    # truths 3, 1, 2 in arrival order: FIFO 13/3, the true order (1, 2, 3) 10/3
    truths = [3.0, 1.0, 2.0]
    assert gain_of(list(zip([30, 10, 20], truths))) == pytest.approx(1.0)  # right order
    assert gain_of(list(zip([5, 5, 5], truths))) == pytest.approx(0.0)     # constant: FIFO
    # predicted order job 2 (1), job 1 (3), job 3 (2): ends 1, 4, 6 = 11/3 -> 2/3 of the gain
    assert gain_of(list(zip([2, 1, 3], truths))) == pytest.approx(2 / 3)
    # predicted order job 3 (2), job 1 (3), job 2 (1): ends 2, 5, 6 = 13/3 -> nothing gained
    assert gain_of(list(zip([2, 3, 1], truths))) == pytest.approx(0.0)
    # longest first: 3, 2, 1 ends 3, 5, 6 = 14/3 -> worse than FIFO by a third of the gain
    assert gain_of(list(zip([1, 3, 2], truths))) == pytest.approx(-1 / 3)
    # a tie in prediction keeps arrival order: jobs 1 and 2 tied ahead of job 3 = FIFO
    assert gain_of(list(zip([1, 1, 2], truths))) == pytest.approx(0.0)
    # nothing to gain (alike jobs, or arrivals already shortest first): undefined
    assert gain_of([(1, 4.0), (9, 4.0), (3, 4.0)]) is None
    assert gain_of([(9, 1.0), (1, 2.0), (5, 3.0)]) is None
    assert Gain(10).value is None


def test_log_gain_takes_sizes_on_a_log_scale():
    # GPU-s e^3 - 1, e - 1, e^2 - 1 in arrival order: on the log scale sizes 3, 1, 2, where
    # predictions 2, 1, 3 capture 2/3 of the gain (as above)
    truths = [math.expm1(x) for x in (3.0, 1.0, 2.0)]
    log_gain = Gain(10, log_sizes=True)
    raw = Gain(10)
    for arrival, (p, t) in enumerate(zip([2, 1, 3], truths)):
        log_gain.add(p, t, arrival)
        raw.add(p, t, arrival)
    assert log_gain.value == pytest.approx(2 / 3)
    # on GPU-s: FIFO ends a, a + b, a + b + c; the best b, b + c, a + b + c; predicted
    # b, a + b, a + b + c: gain (a - b) / (2a - b - c), 0.58, not 2/3
    a, b, c = truths
    assert raw.value == pytest.approx((a - b) / (2 * a - b - c)) and raw.value < 0.6
    gate = SkillGate(GateParams(window=3, min_scored=3, threshold=0.6, measure="log-gain"))
    for jid, (p, t) in enumerate(zip([2, 1, 3], truths)):
        gate.record(jid, "a", p)
    for jid, t in enumerate(truths):
        gate.finished(jid, t)
    assert gate.skill("a") == (pytest.approx(2 / 3), 3) and gate.withheld("a") == ""


def brute_gain(jobs):
    """``jobs``: (arrival, prediction, truth). The best order is found among every
    permutation, not assumed to be shortest first."""
    by_arrival = sorted(jobs)
    fifo = mean_completion([t for _, _, t in by_arrival])
    best = min(mean_completion([t for _, _, t in perm])
               for perm in itertools.permutations(by_arrival))
    pred = mean_completion([t for _, _, t in sorted(by_arrival, key=lambda j: (j[1], j[0]))])
    return None if fifo - best <= 1e-9 * max(fifo, 1.0) else (fifo - pred) / (fifo - best)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 20)), max_size=12),
       st.integers(2, 5))
def test_gain_over_a_sliding_window_matches_trying_every_order(items, window):
    g = Gain(window)
    for k, (p, t) in enumerate(items):
        g.add(float(p), float(t), arrival=k)
        assert g.count == min(k + 1, window)
        jobs = [(a, float(p), float(t)) for a, (p, t) in enumerate(items)]
        want = brute_gain(jobs[max(0, k + 1 - window):k + 1])
        assert g.value == (None if want is None else pytest.approx(want))


def test_gain_gate_uses_arrival_order_and_says_why():
    gate = SkillGate(GateParams(window=3, min_scored=3, threshold=0.5, measure="gain"))
    # arrival (record) order 1, 2, 3 with truths 3, 1, 2; they finish in another order
    for jid, pred in [(1, 30.0), (2, 10.0), (3, 20.0)]:
        gate.record(jid, "a", pred)
    for jid, truth in [(2, 1.0), (3, 2.0)]:
        gate.finished(jid, truth)
    assert gate.withheld("a").endswith("2 finished jobs scored (< 3)")
    gate.finished(1, 3.0)
    assert gate.skill("a") == (pytest.approx(1.0), 3) and gate.withheld("a") == ""
    # job 4 (truth 1) arrives last, predicted the longest; job 2, the first to finish,
    # leaves the window. Truths in arrival order 3, 2, 1: FIFO ends 3, 5, 6 (14/3), the
    # best 1, 3, 6 (10/3), predicted (jobs 3, 1, 4) 2, 5, 6 (13/3): gain 1/4 -> closed
    gate.record(4, "a", 99.0)
    gate.finished(4, 1.0)
    value, n = gate.skill("a")
    assert n == 3 and value == pytest.approx(0.25)
    assert gate.withheld("a") == ("predictions withheld in partition a: gain 0.25 on the "
                                  "last 3 finished jobs (< 0.5)")


GAIN_PARAMS = GateParams(window=20, min_scored=5, threshold=0.5, measure="gain")


def sim_snapshots_moved(predictor_cls, params: GateParams | None = None
                        ) -> tuple[int, set[str], int]:
    """Run a small simulation, keeping what each job showed of its prediction in every
    snapshot the policy saw. For a few times T, lengthen every job that finishes after T
    (so none finishes earlier) and run again: in how many of them a snapshot before T
    showed a prediction or reason differently; the reasons seen; how many jobs showed a
    prediction in one snapshot and none in another."""
    from dataclasses import replace

    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.engine import Simulator
    from slurm_marl.sim.traces import TraceJob

    rng = random.Random(3)
    trace, t = [], 0.0
    for k in range(80):
        t += rng.expovariate(1 / 200)
        trace.append(TraceJob(k, t, rng.lognormvariate(6, 1.2), rng.choice([1, 1, 2, 4])))
    # half the predictions informative, half not: the gate opens and closes (14 flips)
    preds = {j.job_id: j.duration_s * j.num_gpus * rng.lognormvariate(0, 1.0)
             if rng.random() < 0.5 else rng.lognormvariate(7, 1.5) for j in trace}
    params = params or GateParams(window=20, min_scored=5, threshold=0.6)

    def run(jobs):
        policy = build_policy(load_profile("learned-order"))
        seen = []
        cycle = policy.run_cycle

        def recording(snap, partitions=None):
            seen.append((snap.time_s, {j.job_id: (j.predicted_gpu_s, j.prediction_withheld)
                                       for j in snap.jobs}))
            return cycle(snap, partitions)

        policy.run_cycle = recording
        sim = Simulator(parse_cluster("1x2x4"), jobs, policy,
                        predictor=predictor_cls(preds, SkillGate(params)))
        sim.run()
        return seen, {j.job_id: j.finish_s for j in sim.jobs}

    seen, finish = run(trace)
    moved = 0
    for cut in (trace[k].submit_time_s for k in range(5, 80, 5)):
        changed = [replace(j, duration_s=j.duration_s * (20 if j.job_id % 2 else 1.5))
                   if finish[j.job_id] > cut else j for j in trace]
        again, _ = run(changed)
        before = [s for s in seen if s[0] <= cut]
        moved += before != [s for s in again if s[0] <= cut]
    reasons = {why for _, jobs in seen for _, why in jobs.values()}
    shown = {}
    for _, jobs in seen:
        for jid, (value, _) in jobs.items():
            shown.setdefault(jid, set()).add(value is None)
    return moved, reasons, sum(len(v) == 2 for v in shown.values())


@pytest.mark.parametrize("params", [None, GAIN_PARAMS], ids=["concordance", "gain"])
def test_no_look_ahead_through_the_simulator(params):
    """What every snapshot shows of the predictions up to a time T stays the same when the
    durations of the jobs that finish after T are rewritten (the schedule after T
    changes); the gate both opened and closed, for jobs already waiting too."""
    from slurm_marl.sim.predictions import FixedPredictor
    moved, reasons, flipped = sim_snapshots_moved(FixedPredictor, params)
    assert "" in reasons and any(reasons - {""})      # the gate both gave and withheld
    assert flipped > 0                                 # per partition: waiting jobs too
    assert moved == 0


@pytest.mark.parametrize("params", [None, GAIN_PARAMS], ids=["concordance", "gain"])
def test_the_simulator_check_catches_outcomes_known_at_arrival(params):
    """The check above fails for a predictor that scores a job when it arrives."""
    from slurm_marl.sim.predictions import FixedPredictor

    class Early(FixedPredictor):
        def arrived(self, job, now):
            out = super().arrived(job, now)
            super().finished(job, now)
            return out

        def finished(self, job, now):
            pass

    assert sim_snapshots_moved(Early, params)[0] > 0


def test_the_order_says_why_a_prediction_was_withheld():
    order = PredictedLas(2.0, 0.0, "in_las_queues")
    why = ("predictions withheld in partition a: concordance 0.41 on the last 400 finished "
           "jobs (< 0.85)")
    job = Job(1, partition="a", gpus_per_node=1, state=JobState.PENDING, prediction_withheld=why)
    queue, _ = order.classify(job, 0.0)
    assert order.describe(job, 0.0, queue) == f"{why}: ranked by 0 GPU-s attained"
    plain = Job(2, partition="a", gpus_per_node=1, state=JobState.PENDING)
    assert order.describe(plain, 0.0, queue) == "no prediction: ranked by 0 GPU-s attained"
