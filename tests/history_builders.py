"""A made-up accounting history whose GPU-times depend on user, name and GPUs: the
predictor's and the daemon's prediction tests build on it."""

import random

from slurm_marl.history.records import HistoryJob


def history(seed: int, n: int = 120) -> list[HistoryJob]:
    """Jobs of a few users and names whose GPU-times depend on user, name and GPUs."""
    rng = random.Random(seed)
    jobs, t = [], 1_700_000_000.0
    for k in range(n):
        t += rng.expovariate(1 / 600)
        user = rng.choice(["ann", "bob", "cy"])
        name = rng.choice(["resnet-a", "bert_b", "gpt"])
        gpus = rng.choice([1, 2, 4, 8])
        base = {"ann": 600, "bob": 3600, "cy": 20000}[user] * (2 if name == "gpt" else 1)
        ran = base * rng.lognormvariate(0, 0.5)
        start = t + rng.uniform(0, 3000)
        jobs.append(HistoryJob(job_id=str(k), name=name, user=user, account=f"acct-{user}",
                               partition="gpu", qos="normal", gpus=gpus, nodes=1,
                               time_limit_s=rng.choice([None, 3600.0, 86400.0]), submit_s=t,
                               start_s=start, end_s=start + ran, state="COMPLETED"))
    return jobs
