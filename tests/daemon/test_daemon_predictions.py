"""The daemon's GPU-time predictions: a trained model and the site's history give each GPU
job one prediction when first seen; ended jobs teach the history; the agent hands the
predictions to the order (``predicted_las`` explains with them)."""

from __future__ import annotations

import math

import pytest
from agent_builders import NODES, PARTS
from history_builders import history

from fakes import FakeClusterSource, FakeDecisionSink
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.predictions import DaemonPredictor
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, Job, JobState, SetPriority
from slurm_marl.history.predictor import GpuTimeModel, replay
from slurm_marl.history.records import HistoryError, ModelError, write_history
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A model trained on a small site history, and that history as a CSV."""
    folder = tmp_path_factory.mktemp("site")
    jobs = history(21, n=300)
    rows, labels = [], []
    replay(jobs, lambda j, row, _now: (rows.append(row), labels.append(math.log1p(j.gpu_time_s))))
    GpuTimeModel.fit(rows, labels, rounds=30).save(folder / "model")
    write_history(folder / "history.csv", jobs)
    now = max(j.end_s for j in jobs) + 10
    return folder, now


def job(jid, user, name, now, state=JobState.PENDING, gpus=1):
    return Job(jid, name=name, user=user, partition="gpu", gpus_per_node=gpus,
               submit_time_s=now - 5, state=state)


def test_each_gpu_job_is_predicted_once_from_its_history(site):
    folder, now = site
    p = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=None)
    snap = ClusterSnapshot(now, NODES, (job(1, "ann", "resnet-x", now),
                                        job(2, "cy", "gpt", now),
                                        Job(3, partition="gpu", submit_time_s=now)), PARTS)
    got = {j.job_id: j.predicted_gpu_s for j in p.annotate(snap).jobs}
    assert got[3] is None                        # no GPU: not the order's business
    # the history made cy's gpt jobs ~40,000 GPU-s and ann's ~600: so it predicts
    assert got[2] > 10 * got[1] > 0
    # a later job of ann's ends very long: job 1 keeps its prediction, a new job sees it
    p.run_ended(50, 1, now - 500_000, now, "COMPLETED")   # a job never seen: ignored
    p._subs[51] = p._subs[1]
    p.run_ended(51, 8, now - 100_000, now, "COMPLETED")
    again = {j.job_id: j.predicted_gpu_s for j in
             p.annotate(ClusterSnapshot(now + 1, NODES, snap.jobs + (job(4, "ann", "resnet-y",
                                                                         now + 1),), PARTS)).jobs}
    assert again[1] == got[1] and again[4] > got[1]


def test_requeued_runs_add_up_and_vanished_jobs_are_forgotten(site):
    folder, now = site
    p = DaemonPredictor(folder / "model", None, now)
    p.annotate(ClusterSnapshot(now, NODES, (job(1, "bob", "bert", now),
                                            job(2, "bob", "bert", now)), PARTS))
    p.run_ended(1, 2, now, now + 100, "REQUEUED")
    assert 1 in p.predicted and p._gpu_s[1] == 200
    p.run_ended(1, 2, now + 200, now + 300, "COMPLETED")
    assert 1 not in p.predicted and 1 not in p._gpu_s
    p.annotate(ClusterSnapshot(now + 400, NODES, (), PARTS))    # job 2 cancelled pending
    assert p.predicted == {} and p._subs == {}


def test_unreadable_model_or_history_is_a_one_line_error(site, tmp_path):
    folder, now = site
    with pytest.raises(ModelError, match="gpu_time_model.json"):
        DaemonPredictor(tmp_path, None, now)
    (tmp_path / "h.csv").write_text("x,y\n")
    with pytest.raises(HistoryError, match="not a history file"):
        DaemonPredictor(folder / "model", tmp_path / "h.csv", now)


def test_the_agent_orders_with_the_predictions(site, tmp_path):
    folder, now = site
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1,
                                  "grace_s": 30, "shadow": True,
                                  "gpu_time_model": str(folder / "model"),
                                  "history": str(folder / "history.csv")}})
    snap = ClusterSnapshot(now, NODES, (job(1, "cy", "gpt", now), job(2, "ann", "resnet", now)),
                           PARTS)
    policy = build_policy(load_profile("predicted-las"))
    agent = Agent(cfg, FakeClusterSource(snap), FakeDecisionSink(),
                  Store(tmp_path / "s.sqlite"), policy,
                  predictor=DaemonPredictor(folder / "model", folder / "history.csv", now,
                                            gate=None))
    report = agent.cycle()
    assert report.error is None
    prios = sorted((d for d in report.decisions if isinstance(d, SetPriority)),
                   key=lambda d: -d.priority)
    assert [d.job_id for d in prios] == [2, 1]     # ann's short job first, then cy's long one
    assert "predicted" in prios[0].reason and "GPU-s" in prios[0].reason


def test_account_and_qos_from_squeue_reach_the_features():
    from slurm_marl.daemon.predictions import submission
    from slurm_marl.slurm_integration.parse import job_from_json
    raw = {"job_id": 5, "name": "bert-3", "user_name": "ann", "account": "ml",
           "qos": "high", "partition": "gpu", "job_state": "PENDING",
           "tres_per_node": "gres:gpu:2", "submit_time": 100, "time_limit": 60}
    job, problems = job_from_json(raw)
    assert problems == [] and (job.account, job.qos) == ("ml", "high")
    sub = submission(job)
    assert (sub.user, sub.account, sub.qos, sub.gpus, sub.time_limit_s) == \
        ("ann", "ml", "high", 2, 3600.0)


def test_a_failing_predictor_costs_the_cycle_its_predictions_not_the_cycle(site, tmp_path):
    folder, now = site

    class Broken(DaemonPredictor):
        def annotate(self, snap):
            raise ValueError("a strange job")

    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1,
                                  "grace_s": 30, "shadow": True}})
    snap = ClusterSnapshot(now, NODES, (job(1, "cy", "gpt", now), job(2, "ann", "resnet", now)),
                           PARTS)
    agent = Agent(cfg, FakeClusterSource(snap), FakeDecisionSink(),
                  Store(tmp_path / "s.sqlite"), build_policy(load_profile("predicted-las")),
                  predictor=Broken(folder / "model", None, now))
    report = agent.cycle()
    assert report.error is None
    prios = [d for d in report.decisions if isinstance(d, SetPriority)]
    assert len(prios) == 2 and all("no prediction" in d.reason for d in prios)


def test_the_daemon_gates_predictions_with_the_simulator_s_skill_gate(site, tmp_path):
    """Until the partition's predictions have ordered enough ended jobs right, its jobs
    carry no prediction and say why (in the agent's reasons too); once the gate closes
    again, jobs already seen lose theirs too. The verdicts are those of
    ``history.skill.SkillGate`` fed the same predictions and outcomes."""
    from slurm_marl.history.skill import GateParams, SkillGate
    folder, now = site
    params = GateParams(window=10, min_scored=2, threshold=0.6)
    p = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=params)
    twin = SkillGate(params)
    first = (job(1, "ann", "resnet-x", now), job(2, "cy", "gpt", now))
    got = {j.job_id: j for j in p.annotate(ClusterSnapshot(now, NODES, first, PARTS)).jobs}
    for k in (1, 2):
        twin.record(k, "gpu", p.predicted[k])
        assert got[k].predicted_gpu_s is None
        assert got[k].prediction_withheld == twin.withheld("gpu") == \
            "predictions withheld in partition gpu: 0 finished jobs scored (< 2)"
    # the agent explains the withheld prediction
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1,
                                  "grace_s": 30, "shadow": True}})
    agent = Agent(cfg, FakeClusterSource(ClusterSnapshot(now, NODES, first, PARTS)),
                  FakeDecisionSink(), Store(tmp_path / "s.sqlite"),
                  build_policy(load_profile("learned-order")),
                  predictor=DaemonPredictor(folder / "model", None, now, gate=params))
    prios = [d for d in agent.cycle().decisions if isinstance(d, SetPriority)]
    assert len(prios) == 2 and all("predictions withheld in partition gpu: 0 finished jobs"
                                   in d.reason for d in prios)
    # both end in the order predicted (ann's short, cy's long): concordance 1 on 2 jobs
    p.run_ended(1, 1, now, now + 600, "COMPLETED")
    p.run_ended(2, 1, now, now + 40_000, "COMPLETED")
    twin.finished(1, 600.0)
    twin.finished(2, 40_000.0)
    assert p.gate.skill("gpu") == twin.skill("gpu") == (1.0, 2)
    waiting = (job(3, "ann", "resnet-y", now + 1), job(5, "cy", "gpt", now + 1))
    again = {j.job_id: j for j in
             p.annotate(ClusterSnapshot(now + 1, NODES, waiting, PARTS)).jobs}
    for k in (3, 5):
        twin.record(k, "gpu", p.predicted[k])
        assert again[k].predicted_gpu_s == p.predicted[k] > 0
        assert again[k].prediction_withheld == "" == twin.withheld("gpu")
    # ann's job 3 ends far longer than cy's gpt: the gate closes, for job 5 still waiting
    p.run_ended(3, 8, now + 1, now + 100_000, "COMPLETED")
    twin.finished(3, 8 * 99_999.0)
    later = p.annotate(ClusterSnapshot(now + 2, NODES, (waiting[1], job(4, "cy", "gpt", now + 2)),
                                       PARTS)).jobs
    assert [j.predicted_gpu_s for j in later] == [None, None]
    assert {j.prediction_withheld for j in later} == {twin.withheld("gpu")}
    assert twin.withheld("gpu").startswith("predictions withheld in partition gpu: concordance")
    assert twin.withheld("gpu").endswith("on the last 3 finished jobs (< 0.6)")
