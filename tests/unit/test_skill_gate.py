"""The prediction-skill gate (``history/skill.py``): concordance on hand-built values, the
gate opening and closing as defined, no look-ahead (a job's verdict reads only outcomes
known at its submission, checked on the gate alone and through the simulator), and the
daemon and the order using the same gate."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_marl.domain import Job, JobState
from slurm_marl.history.skill import Concordance, GateParams, SkillGate
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
    assert gate.submitted(1, "a", 100.0) == (
        None, "predictions withheld in partition a: 0 finished jobs scored (< 3)")
    assert gate.submitted(2, "a", 200.0)[0] is None
    assert gate.submitted(3, "a", 300.0)[0] is None
    assert gate.submitted(9, "a", None) == (None, "")        # no prediction: nothing to say
    for jid, truth in [(1, 10.0), (2, 20.0)]:
        gate.finished(jid, truth)
    assert gate.submitted(4, "a", 250.0)[0] is None          # 2 scored (< 3)
    gate.finished(3, 30.0)
    assert gate.skill("a") == (1.0, 3)
    assert gate.submitted(5, "a", 5e3) == (5e3, "")          # 3 scored, concordance 1
    assert gate.submitted(6, "b", 70.0)[0] is None           # another partition: its own
    # job 4, withheld but scored all the same, is the longest: ordered wrong against job
    # 3 only -> 5 of 6 pairs right (open)
    gate.finished(4, 1000.0)
    assert gate.skill("a") == (pytest.approx(5 / 6), 4)
    assert gate.submitted(7, "a", 70.0)[0] == 70.0
    # job 5 (predicted longest) is the shortest; the window drops job 1: 2 of 6 right ->
    # closed
    gate.finished(5, 1.0)
    value, n = gate.skill("a")
    assert n == 4 and value == pytest.approx(2 / 6)
    assert gate.submitted(8, "a", 70.0) == (
        None, "predictions withheld in partition a: concordance 0.33 on the last 4 finished "
              "jobs (< 0.6)")
    # judged once: job 7 keeps its prediction; scoring an unknown or forgotten job is a no-op
    gate.forget(8)
    gate.finished(8, 5.0)
    gate.finished(42, 5.0)
    assert gate.skill("a")[1] == 4
    assert (gate.given, gate.withheld_count) == (2, 6)


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="min_scored"):
        GateParams(window=10, min_scored=11)
    with pytest.raises(ValueError, match="threshold"):
        GateParams(threshold=1.5)


def random_jobs(seed: int, n: int = 60):
    """(job id, submit, end, predicted, truth), predictions half informative."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for k in range(n):
        t += rng.expovariate(1 / 50)
        truth = rng.lognormvariate(5, 1.5)
        pred = truth * rng.lognormvariate(0, 1) if rng.random() < 0.5 else rng.lognormvariate(5, 1.5)
        out.append((k, t, t + truth, pred, truth))
    return out


def replay_gate(jobs, params):
    """Verdicts at submission, finishes before submissions at the same time."""
    gate = SkillGate(params)
    events = sorted([(end, 0, k) for k, _, end, _, _ in jobs] +
                    [(sub, 1, k) for k, sub, _, _, _ in jobs])
    by_id = {j[0]: j for j in jobs}
    got = {}
    for _, kind, k in events:
        _, _, _, pred, truth = by_id[k]
        if kind == 0:
            gate.finished(k, truth)
        else:
            got[k] = gate.submitted(k, "a", pred)
    return got


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 59))
def test_no_look_ahead_outcomes_after_a_submission_do_not_change_its_verdict(seed, k):
    params = GateParams(window=15, min_scored=5, threshold=0.55)
    jobs = random_jobs(seed)
    got = replay_gate(jobs, params)
    target = jobs[k]
    # rewrite the truth and prediction of every job that ends after the target's submission
    # (its own included), and when they end (still after the submission)
    rng = random.Random(seed + 1)
    changed = [(j, s, e + rng.uniform(0, 500), rng.lognormvariate(5, 2), rng.lognormvariate(5, 2))
               if e > target[1] and j != k else (j, s, e, p, t) for j, s, e, p, t in jobs]
    j, s, e, p, t = changed[k]
    changed[k] = (j, s, e + 100, p, t * 7)
    again = replay_gate(changed, params)
    assert again[k] == got[k]


def sim_verdicts_moved(predictor_cls) -> tuple[int, set[str]]:
    """Run a small simulation; for a few jobs, rewrite the durations of every job that
    finishes after its arrival (longer only, so none of them finishes before it) and run
    again: how many of those jobs' (prediction, reason) moved, and the reasons seen in the
    first run."""
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
    preds = {j.job_id: j.duration_s * j.num_gpus * rng.lognormvariate(0, 0.7) for j in trace}
    params = GateParams(window=20, min_scored=5, threshold=0.6)

    def run(jobs):
        sim = Simulator(parse_cluster("1x2x4"), jobs, build_policy(load_profile("learned-order")),
                        predictor=predictor_cls(preds, SkillGate(params)))
        sim.run()
        return {j.job_id: (j.predicted_gpu_s, j.prediction_withheld, j.finish_s)
                for j in sim.jobs}

    got = run(trace)
    moved = 0
    for k in range(5, 80, 5):
        arrival = trace[k].submit_time_s
        changed = [replace(j, duration_s=j.duration_s * (20 if j.job_id % 2 else 1.5))
                   if got[j.job_id][2] > arrival else j for j in trace]
        moved += run(changed)[k][:2] != got[k][:2]
    return moved, {v[1] for v in got.values()}


def test_no_look_ahead_through_the_simulator():
    """A job's prediction and verdict in a simulation stay the same when the durations of
    the jobs that finish after its arrival are rewritten (the schedule after it changes)."""
    from slurm_marl.sim.predictions import FixedPredictor
    moved, reasons = sim_verdicts_moved(FixedPredictor)
    assert "" in reasons and any(reasons - {""})      # the gate both gave and withheld
    assert moved == 0


def test_the_simulator_check_catches_outcomes_known_at_arrival():
    """The check above fails for a predictor that scores a job when it arrives."""
    from slurm_marl.sim.predictions import FixedPredictor

    class Early(FixedPredictor):
        def arrived(self, job, now):
            out = super().arrived(job, now)
            super().finished(job, now)
            return out

        def finished(self, job, now):
            pass

    assert sim_verdicts_moved(Early)[0] > 0


def test_the_order_says_why_a_prediction_was_withheld():
    order = PredictedLas(2.0, 0.0, "in_las_queues")
    why = "predictions withheld in partition a: concordance 0.41 on the last 200 finished jobs (< 0.6)"
    job = Job(1, partition="a", gpus_per_node=1, state=JobState.PENDING, prediction_withheld=why)
    queue, _ = order.classify(job, 0.0)
    assert order.describe(job, 0.0, queue) == f"{why}: ranked by 0 GPU-s attained"
    plain = Job(2, partition="a", gpus_per_node=1, state=JobState.PENDING)
    assert order.describe(plain, 0.0, queue) == "no prediction: ranked by 0 GPU-s attained"
