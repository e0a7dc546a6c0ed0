"""Simulator speed on the whole Philly trace (82,247 jobs), fifo and 2D-LAS with consolidate.

Each profile runs in a fresh process so its peak memory (ru_maxrss) is its own. Prints one
line per profile and a JSON summary; exits 0. Target: under 120 s per profile on one core.

    python benchmarks/bench_sim.py [--cluster 128x2x4:leaf=16] [--profiles a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

DEFAULT_CLUSTER = "128x2x4:leaf=16"
DEFAULT_PROFILES = "fifo-consolidate,las-consolidate"
TARGET_S = 120.0


def one(profile: str, cluster: str) -> dict:
    from slurm_marl.shared_data import data_file
    from slurm_marl.sim.run import simulate
    from slurm_marl.sim.traces import load_trace

    t0 = time.perf_counter()
    jobs = load_trace(data_file("traces/philly.csv"))
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    run = simulate(jobs, cluster, profile)
    sim_s = time.perf_counter() - t1
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"profile": profile, "cluster": cluster, "jobs": len(jobs),
            "load_s": round(load_s, 2), "wall_s": round(sim_s, 2),
            "jobs_per_s": round(len(jobs) / sim_s, 1), "peak_rss_mib": round(peak_mib, 1),
            "cycles": run.summary["cycles"], "finished": run.summary["finished"],
            "avg_jct_s": run.summary["avg_jct_s"], "preemptions": run.summary["preemptions"],
            "gpu_utilisation": run.summary["gpu_utilisation"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default=DEFAULT_CLUSTER)
    ap.add_argument("--profiles", default=DEFAULT_PROFILES)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.cluster)))
        return 0
    results = []
    for profile in args.profiles.split(","):
        proc = subprocess.run([sys.executable, __file__, "--one", profile,
                               "--cluster", args.cluster],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            print(f"{profile}: failed (exit {proc.returncode})")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        verdict = "ok" if r["wall_s"] < TARGET_S else f"over the {TARGET_S:.0f} s target"
        print(f"{r['profile']:<18} {r['jobs']} jobs on {r['cluster']}: "
              f"{r['wall_s']:.1f} s ({r['jobs_per_s']:.0f} jobs/s), "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB, {r['cycles']} cycles, "
              f"trace load {r['load_s']:.1f} s - {verdict}")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
