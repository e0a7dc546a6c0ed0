"""Benchmark: what reading the clock in steps (the learned plugin's ``clock_step_s``) does to
the learned agents' JCT, in the simulator, against the exact clock, per job.

    .venv/bin/python benchmarks/learned_clock_step.py [--steps 0,60,300] [--workers 2]
        [--strengths high,medium] [--seeds 0,1,2] [--checkpoint PT --cluster SPEC] [--json]

The shipped demo checkpoint on its cluster (``4x2x2:name=gpu``), ``las-learned`` (Tiresias'
2D-LAS, the agents placing), on six Philly windows none of which the checkpoint trained on
(docs/learning.md lists its training windows), chosen before any run. For each window and
strength (and simulator seed: model types and speed noise): the average JCT at each step as a ratio to the exact clock's (step 0), and per job
against the exact clock (a job's ratio is its JCT over max(its exact-clock JCT, 600 s)): the
share more than 1.1x slower and the worst. Steps change which waits the agents read, so
differences are the agents deciding otherwise, not noise: the simulator is deterministic.
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

WINDOWS = ("vc=6c71a0,rows=8000:8400", "vc=6c71a0,rows=5600:6000", "vc=6214e9,rows=5600:6000",
           "vc=6214e9,rows=8000:8400", "vc=b436b2,rows=0:400", "vc=ee9e8c,rows=0:400")
TRACE = Path(__file__).resolve().parents[1] / "src/slurm_marl/data/public/traces/philly.csv"


def run_one(args: tuple) -> dict:
    checkpoint, cluster, window, strength, step, seed = args
    import torch
    torch.set_num_threads(1)
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.perjob import job_times
    from slurm_marl.sim.run import simulate
    from slurm_marl.train.evaluate import learned_profile
    from slurm_marl.train.workload import load_workload

    sim_cluster = parse_cluster(cluster)
    jobs = load_workload(TRACE, window, sim_cluster)
    prof = learned_profile(checkpoint)
    params = dict(prof.place_params["learned"], clock_step_s=float(step))
    prof = replace(prof, place_params=MappingProxyType({"learned": MappingProxyType(params)}))
    run = simulate(jobs, sim_cluster, prof, interference=strength, seed=seed,
                   drop_oversized=True)
    jct = {t.job_id: t.jct_s for t in job_times(run.outcome.jobs) if t.jct_s is not None}
    return {"window": window, "strength": strength, "step": step, "seed": seed,
            "avg_jct_s": run.summary["avg_jct_s"], "jct": jct}


def main() -> None:
    from slurm_marl.agent.checkpoint import shipped_checkpoint

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="0,60,300")
    ap.add_argument("--strengths", default="high,medium")
    ap.add_argument("--checkpoint", default=str(shipped_checkpoint()))
    ap.add_argument("--cluster", default="4x2x2:name=gpu")
    ap.add_argument("--seeds", default="0",
                    help="simulator seeds (model types and noise): each a run of its own")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    steps = [float(s) for s in a.steps.split(",")]
    if steps[0] != 0:
        ap.error("--steps starts with 0 (the exact clock, the reference)")
    seeds = [int(x) for x in a.seeds.split(",")]
    tasks = [(a.checkpoint, a.cluster, w, s, step, seed) for w in WINDOWS
             for s in a.strengths.split(",") for seed in seeds for step in steps]
    with ProcessPoolExecutor(a.workers) as pool:
        runs = list(pool.map(run_one, tasks))
    by = {(r["window"], r["strength"], r["step"], r["seed"]): r for r in runs}
    rows = []
    for w in WINDOWS:
        for s in a.strengths.split(","):
            for seed, step in ((seed, step) for seed in seeds for step in steps[1:]):
                ref, r = by[(w, s, 0.0, seed)], by[(w, s, step, seed)]
                ratios = [r["jct"][j] / max(t, 600.0) for j, t in ref["jct"].items()
                          if j in r["jct"]]
                rows.append({"window": w, "strength": s, "seed": seed, "step_s": step,
                             "avg_vs_exact": r["avg_jct_s"] / ref["avg_jct_s"],
                             "jobs": len(ratios),
                             "share_over_1_1": sum(x > 1.1 for x in ratios) / len(ratios),
                             "worst": max(ratios)})
    summary = {str(step): statistics.fmean(x["avg_vs_exact"] for x in rows
                                           if x["step_s"] == step) for step in steps[1:]}
    if a.json:
        print(json.dumps({"rows": rows, "mean_avg_vs_exact": summary}, indent=2))
        return
    print(f"{'window':<26} {'strength':<8} {'seed':>4} {'step':>5} {'avg/exact':>9} "
          f"{'>1.1x':>6} {'worst':>6}")
    for x in rows:
        print(f"{x['window']:<26} {x['strength']:<8} {x['seed']:>4} {x['step_s']:>5.0f} "
              f"{x['avg_vs_exact']:>9.4f} {x['share_over_1_1']:>6.1%} {x['worst']:>6.2f}")
    for step, m in summary.items():
        print(f"mean avg/exact at step {float(step):.0f} s: {m:.4f}")


if __name__ == "__main__":
    main()
