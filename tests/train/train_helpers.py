"""Tiny workloads and samples for the training tests (imported by name)."""

import random

import torch

from slurm_marl.sim.traces import TraceJob

torch.set_num_threads(1)

TINY_CLUSTER = "2x2x4:name=a+2x2x4:name=b"
MODELS = ("resnet18_bs64", "a3c", "lm_bs20", "resnet50_bs64", "transformer_bs32",
          "cyclegan")


def tiny_workload(n_jobs: int, seed: int, partitions=("a", "b"), mean_gap_s: float = 240.0,
                  max_gpus: int = 4) -> list[TraceJob]:
    """Seeded arrivals with named model types (no shared data needed)."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n_jobs):
        t += rng.expovariate(1.0 / mean_gap_s)
        gpus = rng.choice((1, 1, 1, 1, 2, 4)) if max_gpus >= 4 else 1
        jobs.append(TraceJob(job_id=i, submit_time_s=round(t, 1),
                             duration_s=round(rng.lognormvariate(7.5, 0.8), 1),
                             num_gpus=gpus, model_type=rng.choice(MODELS),
                             partition=partitions[i % len(partitions)]))
    return jobs


def samples_for(cluster, jobs, strength="high", seed=0):
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.sim.engine import Simulator
    sim = Simulator(cluster, jobs, build_policy(load_profile("las-consolidate")),
                    interference=strength, seed=seed, collect_samples=True,
                    min_sample_s=30.0)
    return sim.run().samples
