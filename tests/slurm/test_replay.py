"""A short trace replayed on real Slurm, alone and with the agent: nothing lost, timings sane."""

import json
from pathlib import Path

import pytest

from slurm_marl.replay.plan import plan_replay
from slurm_marl.replay.runner import run_replay
from slurm_marl.sim.traces import TraceJob
from slurmtest import cluster_spec

pytestmark = pytest.mark.slurm

SPEC = cluster_spec(nodes=2, sockets=2, gpus_per_socket=2, nodes_per_leaf=1,
                    sched_interval_s=2)
# 8 GPU-jobs on 8 GPUs plus a 2-node job that must wait: contention, a multi-node job, and
# models the oracle knows; trace seconds, replayed at 50x.
TRACE = [TraceJob(0, 0.0, 300.0, 2, "resnet18_bs16"), TraceJob(1, 10.0, 150.0, 1, "lm_bs20"),
         TraceJob(2, 20.0, 150.0, 1, "vgg19_bs32"), TraceJob(3, 30.0, 200.0, 4, "resnet50_bs64"),
         TraceJob(4, 40.0, 100.0, 8, "transformer_bs32"), TraceJob(5, 50.0, 50.0, 1, "a3c_bs4")]


@pytest.mark.parametrize("mode", ["slurm", "agent"])
def test_replay_completes_every_job(mode, tmp_path, monkeypatch):
    plan = plan_replay(TRACE, SPEC, speedup=50, seed=0)
    assert len(plan.jobs) == 6 and plan.dropped == ()
    # an earlier run's log in the same folder (job ids restart at 1) must not be read
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "1.log").write_text("start 1.0 0\nend 2.0\n")
    monkeypatch.chdir(tmp_path.parent)  # a relative results folder, as the CLI default is
    res = run_replay(plan, SPEC, mode, Path(tmp_path.name), profile="las-consolidate",
                     interference="high", timeout_s=120, sample_min_s=1.0)
    s = res.summary()
    assert s["completed"] == s["jobs"] == 6
    for j in res.jobs:
        assert j.start_s is not None and j.end_s > j.start_s >= j.submit_s - 0.5
        # no job finishes faster than its work allows
        assert (j.end_s - j.start_s) * 50 >= TRACE[j.index].duration_s * 0.9
    assert s["submit_late_max_s"] < 1.0
    assert 0 < s["oracle_mean_speed"] <= 1.0
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["summary"]["completed"] == 6
    if mode == "agent":
        assert "slurm-marl agent starting" in (tmp_path / "daemon.log").read_text()
        # the agent turned the payloads' progress reports into observed-speed samples
        from slurm_marl.daemon.store import Store
        from slurm_marl.colocation import check_sample
        samples = Store(tmp_path / "state" / "state.sqlite").samples.all()
        assert res.speed_samples == len(samples) >= 1
        from slurm_marl.colocation import model_family
        names = {model_family(j.model_type) for j in plan.jobs}
        for sample in samples:
            check_sample(sample, "stored sample")
            assert model_family(sample["model_type"]) in names and 0 < sample["speed"] <= 1.0
            assert sample["duration_s"] >= 1.0


def test_replay_history_from_sacct_trains_the_agent_s_predictor(tmp_path):
    """A site's loop, through real Slurm: a replay with accounting is read back with sacct
    into a history, a predictor is trained on it, and the agent of the next replay orders
    by that predictor's predictions (learned-order)."""
    from dataclasses import replace

    from slurm_marl.daemon.store import Store
    from slurm_marl.history.predictor import train
    from slurm_marl.history.records import read_history, write_history

    plan = plan_replay(TRACE, SPEC, speedup=50, seed=0)
    history = tmp_path / "history.csv"
    alone = res = run_replay(plan, SPEC, "slurm", tmp_path / "alone", interference="none",
                             timeout_s=120, history_out=history)
    assert res.summary()["completed"] == 6
    jobs = read_history(history)
    assert sorted(int(j.job_id) for j in jobs) == sorted(t.job_id for t in res.jobs)
    gpus = {p.name: p.gpus_per_node * p.node_count for p in plan.jobs}
    for j in jobs:
        assert j.state == "COMPLETED" and j.gpus == gpus[j.name]
        assert j.start_s is not None and j.end_s >= j.start_s >= j.submit_s
    # six jobs teach nothing: the same jobs again, a day apart, make the 20 training needs
    more = [replace(j, job_id=f"{j.job_id}{k}", submit_s=j.submit_s - 86400 * k,
                    start_s=j.start_s - 86400 * k, end_s=j.end_s - 86400 * k)
            for k in range(1, 5) for j in jobs]
    write_history(history, more + jobs)
    model, n = train(read_history(history))
    assert n == 30
    model_dir = model.save(tmp_path / "model")
    out = tmp_path / "learned"
    # six jobs are too few for the prediction-skill gate (50 scored): ungated here
    res = run_replay(plan, SPEC, "agent", out, profile="learned-order", interference="none",
                     timeout_s=120, gpu_time_model=model_dir, history=history,
                     prediction_gate=False)
    assert res.summary()["completed"] == 6
    assert "GPU-time predictor: model" in (out / "daemon.log").read_text()
    store = Store(out / "state" / "state.sqlite")
    # every job's order is recorded at least once (written, or planned when Slurm's order
    # already agreed), with the prediction it was ranked by
    orders = store.log.decisions(kind="SetPriority", limit=500)
    store.close()
    assert {d["job_id"] for d in orders} == {t.job_id for t in res.jobs}
    assert any((d["reason"] or "").startswith("predicted ") for d in orders), orders[:5]
    # per job against Slurm alone (issue 33), as replay and the demo report it: from what
    # result.json holds, every job finished in both runs compared, by trace job id
    from slurm_marl.replay.perjob import per_job_report, trace_job_times

    saved = {key: json.loads((folder / "result.json").read_text())["jobs"]
             for key, folder in (("slurm", tmp_path / "alone"), ("agent", out))}
    assert sorted(j["trace_job_id"] for j in saved["agent"]) == [t.job_id for t in TRACE]
    per_job = per_job_report({k: trace_job_times(plan, v) for k, v in saved.items()},
                             "slurm")["runs"]["agent"]
    finished = [{j.index for j in r.jobs if j.end_s is not None} for r in (alone, res)]
    assert per_job["compared_jobs"] == len(finished[0] & finished[1]) == 6
    assert per_job["not_compared"] == 0
    assert sum(g["jobs"] for g in per_job["by_gpus"].values()) == 6
    assert per_job["avg_jct_s"] == round(res.summary()["avg_jct_s"], 2)
    assert per_job["baseline_avg_jct_s"] == round(alone.summary()["avg_jct_s"], 2)
    assert 0 < per_job["worst_ratio"] and per_job["p99_ratio"] <= per_job["worst_ratio"]
