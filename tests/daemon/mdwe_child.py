"""Run what the agent runs with torch and LightGBM under MemoryDenyWriteExecute.

Run as a child process by ``test_systemd_hardening.py``. It first refuses itself W+X memory
with ``prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)`` (Linux 6.3 on; the same refusal as
systemd's ``MemoryDenyWriteExecute=yes``), checks the refusal holds, then imports torch and
LightGBM and runs the daemon's uses of them: the learned placement (``las-learned``, the
shipped checkpoint, ``torch.load(weights_only=True)``) deciding a cycle on the demo cluster,
``las-learned``, ``las-lif`` and ``learned-order`` (the interference model) in the
simulator, and the GPU-time predictor (LightGBM) trained, saved, loaded and predicting.
Exit 0 and ``OK`` on the last line when all of it worked; 77 when the kernel lacks
PR_SET_MDWE; anything else is a failure (a traceback says where).
"""

from __future__ import annotations

import ctypes
import logging
import math
import mmap
import os
import sys
import tempfile
from pathlib import Path

PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1


def refuse_write_execute() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        print(f"no PR_SET_MDWE: {os.strerror(ctypes.get_errno())}")
        sys.exit(77)
    try:
        mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError:
        return
    raise SystemExit("PR_SET_MDWE is set but a W+X mapping was still given")


def learned_cycle() -> None:
    from slurm_marl.domain import ClusterSnapshot, Job, Place
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.sim.cluster import parse_cluster

    cluster = parse_cluster("4x2x2:name=gpu")   # the shipped checkpoint's cluster
    jobs = tuple(Job(job_id=k, partition="gpu", gpus_per_job=g, cpus=1, model_type="lm_bs20",
                     submit_time_s=0.0, queue_since_s=0.0) for k, g in ((1, 1), (2, 2), (3, 4)))
    snap = ClusterSnapshot(time_s=100.0, nodes=cluster.nodes, jobs=jobs,
                           partitions=cluster.partitions, switches=cluster.switches)
    policy = build_policy(load_profile("las-learned"))
    got = [d for d in policy.run_cycle(snap) if isinstance(d, Place)]
    assert got and all(d.plugin == "learned" for d in got), got


def simulations() -> None:
    from slurm_marl.sim.run import simulate

    trace = Path(__file__).parents[2] / "src/slurm_marl/data/public/traces/tiresias_60_job.csv"
    for profile in ("las-learned", "las-lif", "learned-order"):
        run = simulate(trace, "4x2x2:name=gpu", profile, interference="medium")
        assert run.summary["finished"] == 60, (profile, run.summary)


def gpu_time_predictor() -> None:
    import random

    from slurm_marl.history.predictor import GpuTimeModel, replay
    from slurm_marl.history.records import HistoryJob

    rng = random.Random(0)
    jobs, t = [], 1_700_000_000.0
    for k in range(200):
        t += rng.expovariate(1 / 600)
        user, name = rng.choice(["ann", "bob", "cy"]), rng.choice(["resnet-a", "gpt"])
        ran = {"ann": 600, "bob": 3600, "cy": 20000}[user] * rng.lognormvariate(0, 0.5)
        jobs.append(HistoryJob(job_id=str(k), name=name, user=user, account="a",
                               partition="gpu", qos="normal", gpus=rng.choice([1, 2, 4]),
                               nodes=1, time_limit_s=None, submit_s=t, start_s=t + 10,
                               end_s=t + 10 + ran, state="COMPLETED"))
    rows, labels = [], []
    replay(jobs, lambda j, row, now: (rows.append(row), labels.append(math.log1p(j.gpu_time_s))))
    model = GpuTimeModel.fit(rows[:150], labels[:150], rounds=50)
    with tempfile.TemporaryDirectory() as tmp:
        loaded = GpuTimeModel.load(model.save(tmp))
    assert all(math.isfinite(v) for v in loaded.predict_gpu_s(rows[150:]))


def main() -> None:
    refuse_write_execute()
    logging.basicConfig(level=logging.WARNING)
    import lightgbm  # noqa: F401
    import torch
    with torch.no_grad():
        assert torch.nn.Linear(64, 32)(torch.randn(128, 64)).relu().isfinite().all()
        assert torch.nn.GRU(16, 32)(torch.randn(5, 3, 16))[0].isfinite().all()
    learned_cycle()
    simulations()
    gpu_time_predictor()
    print("OK")


if __name__ == "__main__":
    main()
