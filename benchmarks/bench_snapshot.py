"""Benchmark: time to take a snapshot of the local Slurm cluster as the pending queue grows,
and the number of Slurm client calls per snapshot (must not grow with the number of jobs).

    .venv/bin/python benchmarks/bench_snapshot.py [--jobs 1000] [--repeats 5]

Jobs are submitted with plain sbatch and a far begin time so they stay pending.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

from slurm_marl.slurm_integration.runner import SlurmRunner
from slurm_marl.slurm_integration.source import CliClusterSource
from slurm_marl.testcluster import ClusterSpec, LocalCluster


def submit(cluster: LocalCluster, count: int) -> None:
    for i in range(count):
        gres = ("--gres=gpu:1", "--gres=gpu:2", "--gres=gpu:4", "--gpus=3")[i % 4]
        subprocess.run(["sbatch", "--parsable", "--begin=now+3600", gres, "-J", f"b{i}",
                        f"--chdir={cluster.root}/out", "--output=/dev/null",
                        "--wrap", "sleep 1"], env=cluster.env, check=True,
                       capture_output=True, timeout=30)


def measure(source: CliClusterSource, runner: SlurmRunner, repeats: int) -> dict:
    times, calls = [], []
    for _ in range(repeats):
        before = runner.calls
        t0 = time.perf_counter()
        snap = source.snapshot()
        times.append(time.perf_counter() - t0)
        calls.append(runner.calls - before)
    return {"pending": len(snap.pending), "median_s": statistics.median(times),
            "min_s": min(times), "calls_per_snapshot": max(calls)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    steps = sorted({s for s in (10, 100, args.jobs) if s <= args.jobs})
    rows = []
    with LocalCluster(spec=ClusterSpec(nodes=4)) as cluster:
        runner = SlurmRunner(cluster.slurm_conf)
        source = CliClusterSource(runner)
        submitted = 0
        for target in steps:
            t0 = time.perf_counter()
            submit(cluster, target - submitted)
            submit_s = time.perf_counter() - t0
            submitted = target
            row = measure(source, runner, args.repeats)
            row["submit_s_per_job"] = submit_s / max(1, target - (rows[-1]["pending"] if rows
                                                                   else 0))
            rows.append(row)
    base = rows[0]["median_s"]
    for r in rows:
        r["time_ratio_vs_smallest"] = r["median_s"] / base
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'pending':>8} {'median s':>9} {'min s':>7} {'calls':>6} {'ratio':>6}")
        for r in rows:
            print(f"{r['pending']:>8} {r['median_s']:>9.3f} {r['min_s']:>7.3f} "
                  f"{r['calls_per_snapshot']:>6} {r['time_ratio_vs_smallest']:>6.1f}")


if __name__ == "__main__":
    main()
