"""Predicted GPU-times in the simulator (``--prediction-error``): their error distribution,
that they are fixed at submission, and an order that reads them."""

import math
import random

import pytest

from slurm_marl.sim.jobs import SimJob
from slurm_marl.sim.predictions import predicted_gpu_s
from slurm_marl.sim.run import simulate
from slurm_marl.sim.traces import TraceJob


def tj(job_id, submit, duration, gpus=1):
    return TraceJob(job_id=job_id, submit_time_s=submit, duration_s=duration, num_gpus=gpus,
                    model_type="resnet50_bs64")


def test_helios_errors_follow_the_stated_distribution():
    rng = random.Random(0)
    trace = [tj(i, 0.0, rng.uniform(10, 1e5), rng.choice([1, 2, 8])) for i in range(20_000)]
    pred = predicted_gpu_s(trace, "helios", seed=3)
    err = [max(pred[t.job_id] / (t.duration_s * t.num_gpus),
               (t.duration_s * t.num_gpus) / pred[t.job_id]) for t in trace]
    for factor, share in ((1.1, 0.1), (1.5, 0.5), (2.0, 0.7), (10.0, 0.9)):
        assert sum(e <= factor for e in err) / len(err) == pytest.approx(share, abs=0.015)
    assert max(err) <= 100.0 + 1e-6
    over = sum(pred[t.job_id] > t.duration_s * t.num_gpus for t in trace) / len(trace)
    assert over == pytest.approx(0.5, abs=0.015)
    # Per job and seed: the same prediction whatever else is in the trace.
    assert predicted_gpu_s(trace[5:6], "helios", seed=3) == {5: pred[5]}
    assert predicted_gpu_s(trace[5:6], "helios", seed=4) != {5: pred[5]}
    assert predicted_gpu_s(trace[:3], "oracle") == {
        t.job_id: t.duration_s * t.num_gpus for t in trace[:3]}
    with pytest.raises(ValueError, match="unknown prediction error"):
        predicted_gpu_s(trace[:1], "psychic")


def test_each_job_carries_its_prediction_into_the_run():
    trace = [tj(1, 0.0, 1000.0), tj(2, 10.0, 50.0), tj(3, 20.0, 10.0)]
    seen = {}
    run = simulate(trace, "1x1x1", "predicted-las", prediction_error="oracle")
    for j in run.outcome.jobs:
        seen[j.job_id] = j.predicted_gpu_s
    assert seen == {1: 1000.0, 2: 50.0, 3: 10.0}
    assert run.summary["predictions"] == "oracle (seed 0)"


def test_predicted_order_runs_the_shortest_predicted_job_first():
    # One GPU; job 1 (long) runs, then 2 and 3 arrive: with exact predictions the short
    # ones preempt it (it has 980+ GPU-s left), shortest first; without predictions it is
    # least attained service.
    trace = [tj(1, 0.0, 1000.0), tj(2, 10.0, 50.0), tj(3, 20.0, 10.0)]
    run = simulate(trace, "1x1x1", "predicted-las", prediction_error="oracle",
                   restart_delay_s=0.0)
    finish = {j.job_id: j.finish_s for j in run.outcome.jobs}
    assert finish[3] < finish[2] < finish[1]
    assert math.isclose(finish[3], 30.0, abs_tol=1.0)
    # without --prediction-error: learned in the run; nothing has finished when jobs 2 and
    # 3 arrive, so no job has a prediction and the order is least attained service
    blind = simulate(trace, "1x1x1", "predicted-las", restart_delay_s=0.0)
    assert blind.summary["predictions"].startswith("learned in the run")
    assert all(j.predicted_gpu_s is None for j in blind.outcome.jobs)
    assert blind.summary["avg_jct_s"] >= run.summary["avg_jct_s"]


def test_learned_predictions_come_from_jobs_finished_before_arrival():
    # job 1 (100 s) finishes at 100; job 2 arrives at 50 (nothing finished: no prediction),
    # job 3 at 400 (after 1 and 2 finished: the median of their GPU-times)
    trace = [tj(1, 0.0, 100.0), tj(2, 50.0, 300.0), tj(3, 400.0, 10.0)]
    run = simulate(trace, "1x1x2", "predicted-las", restart_delay_s=0.0)
    pred = {j.job_id: j.predicted_gpu_s for j in run.outcome.jobs}
    assert pred[1] is None and pred[2] is None
    # the median of 100 and 300 GPU-s, taken in log space
    assert pred[3] == pytest.approx(math.expm1((math.log1p(100) + math.log1p(300)) / 2))


def test_scaled_helios_errors_shrink_in_log_space():
    trace = [tj(i, 0.0, 1000.0) for i in range(500)]
    full = predicted_gpu_s(trace, "helios", seed=1)
    half = predicted_gpu_s(trace, "helios*0.5", seed=1)
    for t in trace:
        assert math.log(half[t.job_id] / 1000.0) == pytest.approx(
            0.5 * math.log(full[t.job_id] / 1000.0))
    for bad in ("helios*0", "helios*1.5", "oracle*0.5", "helios*x"):
        with pytest.raises(ValueError, match="unknown prediction error"):
            predicted_gpu_s(trace[:1], bad)


def test_progress_never_falls_when_a_preemption_adds_a_restart_delay():
    # A job that outlived its prediction must not look short again after a restart: the
    # delay a preemption adds is work owed, not progress lost (subtracting it made two
    # jobs near their predictions preempt each other every restart delay).
    job = SimJob(job_id=1, submit_s=0.0, duration_s=5000.0, num_gpus=2, gpus_per_node=0,
                 node_count=1, model_type=None, partition="p", user="", cpus=2, mem_mib=0)
    job.state, job.work_done_s, job.seg_start_s, job.speed = "running", 1000.0, 0.0, 1.0
    before = job.progress_gpu_s(10.0)
    job.state, job.work_done_s = "pending", 1010.0
    job.extra_work_s += 30.0                       # preempted: a restart delay is owed
    assert job.progress_gpu_s(10.0) == before == 2020.0
