"""The agents' order head (``agent/order_head.py``): features known at decision time, the
checkpoint's part, the learned plugin picking inside ``run_cycle`` and in the simulator."""

import json
import logging
import math
from dataclasses import fields, replace

import numpy as np
import pytest
import torch

from slurm_marl.agent.checkpoint import LearnedCheckpoint, policy_config
from slurm_marl.agent.order_head import (KEEP_ORDER, ORDER_FEATURES, OrderHead,
                                         order_features)
from slurm_marl.domain import Job, JobState, Place
from slurm_marl.models.interference import ModelFileError
from slurm_marl.models.policy import PlacementPolicy
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.plugins import PluginError, validate_plugin
from slurm_marl.sim.engine import Simulator
from slurm_marl.train.order import agents_profile, fitness, share_slower
from train_helpers import tiny_workload

FEATURE = {name: i for i, name in enumerate(ORDER_FEATURES)}


def job(job_id, gpus=1, **kw):
    kw.setdefault("partition", "a")
    kw.setdefault("submit_time_s", 0.0)
    kw.setdefault("queue_since_s", kw["submit_time_s"])
    return Job(job_id=job_id, gpus_per_job=gpus, cpus=1, model_type="lm_bs20", **kw)


def save_with_head(tmp_path, interference, weights, window=4, name="ckpt"):
    torch.manual_seed(0)
    policy = PlacementPolicy(policy_config(interference, ("a", "b"), "multi"))
    head = None if weights is None else OrderHead.shared(("a", "b"), weights, window)
    pt, _ = LearnedCheckpoint(policy, interference, {}, order=head).save(tmp_path / name)
    return pt


def test_the_features_of_a_window():
    now = 7200.0
    w = [job(1, 2, predicted_gpu_s=7200.0, progress_gpu_s=3600.0, attained_gpu_s=5000.0,
             submit_time_s=0.0),
         job(2, 4, predicted_gpu_s=100.0, attained_gpu_s=500.0, submit_time_s=3600.0),
         job(3, 1, submit_time_s=100.0, queue_since_s=3700.0)]
    f = order_features(w, now, free_gpus=8)
    assert f.shape == (3, len(ORDER_FEATURES))
    assert list(f[:, FEATURE["window_position"]]) == [0.0, 1 / 8, 2 / 8]
    # 7,200 predicted, 3,600 done at solo speed (not the 5,000 attained): 1 GPU-h left
    assert f[0, FEATURE["log_predicted_left_gpu_h"]] == pytest.approx(math.log1p(1.0))
    assert f[0, FEATURE["within_prediction"]] == 1.0
    # outlived (500 attained > 100 predicted) and no prediction: nothing left, not within
    assert f[1, FEATURE["within_prediction"]] == f[2, FEATURE["within_prediction"]] == 0.0
    assert f[1, FEATURE["log_predicted_left_gpu_h"]] == 0.0
    assert f[0, FEATURE["log_attained_gpu_h"]] == pytest.approx(math.log1p(5000 / 3600))
    # waits from the queue entry: 2 h, 1 h, 3,500 s
    assert f[:, FEATURE["log_wait_h"]] == pytest.approx(
        [math.log1p(2.0), math.log1p(1.0), math.log1p(3500 / 3600)])
    assert list(f[:, FEATURE["log2_gpus"]]) == [1.0, 2.0, 0.0]
    assert list(f[:, FEATURE["share_of_free"]]) == [0.25, 0.5, 0.125]


def test_the_features_read_nothing_known_only_later():
    """A job's true length, end, and whatever the run after the decision writes: changing
    them changes no feature (``duration_s`` is what only the simulator knows)."""
    w = [job(1, 2, predicted_gpu_s=7200.0, attained_gpu_s=300.0), job(2, 1)]
    base = order_features(w, 5000.0, 8)
    later = [replace(j, duration_s=1e6, end_time_s=9e9, state=JobState.PENDING,
                     start_time_s=None) for j in w]
    assert np.array_equal(order_features(later, 5000.0, 8), base)
    read = {"predicted_gpu_s", "attained_gpu_s", "progress_gpu_s", "queue_since_s",
            "submit_time_s", "gpus_per_job", "gpus_per_node", "node_count"}
    assert {"duration_s", "end_time_s"} <= {f.name for f in fields(Job)} - read


def test_keeping_the_order_always_picks_the_job_reached():
    head = OrderHead.keeping_order(("a",))
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = int(rng.integers(2, 9))
        f = order_features([job(i, int(rng.integers(1, 9)),
                                predicted_gpu_s=float(rng.uniform(0, 1e5)),
                                attained_gpu_s=float(rng.uniform(0, 1e4)))
                            for i in range(k)], float(rng.uniform(0, 1e5)), 16)
        assert head.pick("a", f)[0] == 0
    assert tuple(head.weights["a"]) == KEEP_ORDER


def test_the_checkpoint_keeps_the_head_and_refuses_a_bad_one(tmp_path, tiny_interference):
    pt = save_with_head(tmp_path, tiny_interference, [0.5, -1, 0, 0, 0, 0, 0], window=3)
    ck = LearnedCheckpoint.load(pt)
    assert ck.order.window == 3
    assert list(ck.order.weights["b"]) == [0.5, -1, 0, 0, 0, 0, 0]
    assert LearnedCheckpoint.load(save_with_head(tmp_path, tiny_interference, None,
                                                 name="plain")).order is None
    meta_path = pt.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["order"]["features"] = ["something_else"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="order head made for other features"):
        LearnedCheckpoint.load(pt)
    meta["order"]["features"] = list(ORDER_FEATURES)
    meta["order"]["agents"] = ["a", "zz"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="weights for agent 'zz' missing"):
        LearnedCheckpoint.load(pt)


def test_order_window_is_validated():
    with pytest.raises(PluginError, match="order_window must be >= 0"):
        validate_plugin("place", "learned", {"order_window": -1})
    with pytest.raises(PluginError):
        validate_plugin("place", "learned", {"order_window": 2.5})


def snapshot(cluster, jobs, time_s=4000.0):
    from slurm_marl.domain import ClusterSnapshot
    return ClusterSnapshot(time_s=time_s, nodes=cluster.nodes, jobs=tuple(jobs),
                           partitions=cluster.partitions, switches=cluster.switches)


def starts(decisions):
    return [d for d in decisions if isinstance(d, Place) and d.start_now]


def test_the_agents_pick_which_job_starts_and_say_why(tiny_cluster, tiny_interference,
                                                      tmp_path, caplog):
    """Partition a's free GPUs taken by one job: the older job waits for the picked one.
    Weights preferring the fewer GPUs start the later 1-GPU job ahead of the 4-GPU one."""
    cap = sum(len(g.gpu_indices) for n in tiny_cluster.nodes if "a" in n.partitions
              for g in n.gpu_groups)
    jobs = [job(1, cap, submit_time_s=0.0), job(2, 1, submit_time_s=10.0)]
    fewer = save_with_head(tmp_path, tiny_interference, [0, 0, 0, 0, 0, -1, 0], name="fewer")
    picking = build_policy(agents_profile(fewer, 4, base="las-consolidate"))
    got = starts(picking.run_cycle(snapshot(tiny_cluster, jobs)))
    assert [d.job_id for d in got][:1] == [2]
    assert "picked ahead of job 1 (learned: agent a scores it" in got[0].reason
    # window 0 (or 1): the order plugin's order, the big job first
    plain = build_policy(agents_profile(fewer, 0, base="las-consolidate"))
    assert [d.job_id for d in starts(plain.run_cycle(snapshot(tiny_cluster, jobs)))][:1] == [1]
    # a checkpoint without a head: the order stands, and the log says why
    none = save_with_head(tmp_path, tiny_interference, None, name="none")
    with caplog.at_level(logging.WARNING):
        policy = build_policy(agents_profile(none, 4, base="las-consolidate"))
    assert "has no order head; the order plugin's order stands" in caplog.text
    assert [d.job_id for d in starts(policy.run_cycle(snapshot(tiny_cluster, jobs)))][:1] \
        == [1]


class Recorder:
    def __init__(self, policy):
        self._policy = policy
        self.cycles = []

    def run_cycle(self, snap, *args, **kw):
        out = self._policy.run_cycle(snap, *args, **kw)
        self.cycles.append((snap, out))
        return out

    def __getattr__(self, name):
        return getattr(self._policy, name)


def test_the_agents_picks_use_nothing_from_the_future(tiny_cluster, tiny_interference,
                                                      tmp_path):
    """Two runs whose traces agree up to a time T and differ after it (later arrivals
    changed, jobs not ended by T made longer): every decision before T is the same, and
    the agents picked jobs ahead of their order before T."""
    pt = save_with_head(tmp_path, tiny_interference, [0.1, 0, 0, 0.3, 0.5, -1, 0.5])
    trace = tiny_workload(80, seed=3, mean_gap_s=60.0)
    first = Recorder(build_policy(agents_profile(pt, 4, base="las-consolidate")))
    Simulator(tiny_cluster, trace, first, seed=1).run()
    picked = [snap.time_s for snap, out in first.cycles
              if any("picked ahead" in d.reason for d in starts(out))]
    assert len(picked) >= 2
    # T: the first arrival after the second cycle with a pick
    cut = min(t.submit_time_s for t in trace if t.submit_time_s > picked[1])
    at_cut = [snap for snap, _ in first.cycles if snap.time_s <= cut][-1]
    unfinished = {j.job_id for j in at_cut.jobs}
    changed = [replace(t, duration_s=t.duration_s * 3) if t.job_id in unfinished else
               replace(t, num_gpus=1, duration_s=t.duration_s * 0.5)
               if t.submit_time_s > cut else t for t in trace]
    second = Recorder(build_policy(agents_profile(pt, 4, base="las-consolidate")))
    Simulator(tiny_cluster, changed, second, seed=1).run()
    before = [(snap.time_s, out) for snap, out in first.cycles if snap.time_s < cut]
    again = [(snap.time_s, out) for snap, out in second.cycles if snap.time_s < cut]
    assert before == again
    assert sum(any("picked ahead" in d.reason for d in starts(out)) for _, out in before) >= 2


def test_the_fitness_of_a_candidate():
    slurm = {"jct": {1: 1000.0, 2: 1000.0, 3: 100.0}}
    start = {"avg_jct_s": 100.0, "jct": {1: 1000.0, 2: 1000.0, 3: 100.0}}
    # faster on average, but job 1 now 1.5x slower than under fifo: one share in three
    mine = {"avg_jct_s": 90.0, "jct": {1: 1500.0, 2: 900.0, 3: 100.0}}
    assert share_slower(mine["jct"], slurm["jct"]) == pytest.approx(1 / 3)
    # job 3: 700 s over max(100, 600 s floor): not slower
    assert share_slower({3: 650.0}, slurm["jct"]) == 0.0
    assert fitness([mine], [start], [slurm]) == pytest.approx(0.9 + 1 / 3)
    assert fitness([start], [start], [slurm]) == 1.0


PHILLY = "src/slurm_marl/data/public/traces/philly.csv"


def test_train_order_through_the_cli(tmp_path):
    """A tiny search end to end: the written checkpoint has a head whose fitness is no worse
    than the warm start's (the warm start is candidate 0), and bad input is one line, exit 2."""
    from pathlib import Path

    from typer.testing import CliRunner

    from slurm_marl.agent.checkpoint import shipped_checkpoint
    from slurm_marl.train.cli import app

    root = Path(__file__).resolve().parents[2]
    runner = CliRunner()
    base = ["order", "--checkpoint", str(shipped_checkpoint()), "--trace", str(root / PHILLY),
            "--window", "vc=6c71a0,rows=0:60", "--cluster", "4x2x2:name=gpu",
            "--out", str(tmp_path / "head")]
    tiny = ["--predictions", "helios", "--population", "2", "--iterations", "1",
            "--elite", "1", "--json"]
    result = runner.invoke(app, base + tiny + ["--backend", "inline"])
    assert result.exit_code == 0, result.output
    history = json.loads(result.output[result.output.index("{"):])
    # the same search in two worker processes (``sweep.backend_mapper``): the same history
    local = runner.invoke(app, [a if a != str(tmp_path / "head") else str(tmp_path / "local")
                                for a in base] + tiny + ["--backend", "local", "--workers", "2"])
    assert local.exit_code == 0, local.output
    assert json.loads(local.output[local.output.index("{"):]) == history
    assert not list(tmp_path.glob("*.cem-*"))       # the candidates' folder is removed
    assert history["warm_start_fitness"] == 1.0
    assert history["iterations"][0]["fitness"][0] == 1.0    # the warm start rerun: exact
    assert history["best_fitness"] <= 1.0
    ck = LearnedCheckpoint.load(tmp_path / "head.pt")
    assert ck.order.window == 4 and ck.order.training["method"] == "cem"
    assert list(ck.order.weights["gpu"]) == pytest.approx(history["best_weights"])
    for bad, says in ((["--interference", "loud"], "--interference must be"),
                      (["--predictions", "psychic"], "--predictions must be"),
                      (["--population", "2", "--elite", "3"], "--elite must be at most"),
                      (["--backend", "cloud"], "--backend must be one of"),
                      (["--cluster", "4x2x2:name=other"], "none of the checkpoint's")):
        args = base + bad if bad[0] != "--cluster" else \
            [a if a != "4x2x2:name=gpu" else bad[1] for a in base]
        out = runner.invoke(app, args)
        assert out.exit_code == 2 and says in out.output, out.output
