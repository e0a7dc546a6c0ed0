"""Average JCT of scheduling profiles on a contended Philly window, across interference.

Defaults: virtual cluster 6c71a0, its first 1,000 jobs (sorted by submit time), on 8 nodes
x 8 GPUs (two GPU groups of 4, two leaf switches of 4 nodes), interference none/low/medium/
high. Prints a markdown table (and JSON with --json). Exits 0.

    python benchmarks/philly_table.py [--window vc=6c71a0,rows=0:1000] [--cluster 8x2x4:leaf=4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

PROFILES = ["fifo-consolidate", "las-consolidate", "las-skew", "las-lif", "srtf-consolidate"]
LABELS = {"fifo-consolidate": "fifo + consolidate",
          "las-consolidate": "tiresias_las + consolidate",
          "las-skew": "tiresias_las + tiresias_skew",
          "las-lif": "tiresias_las + least_interference",
          "srtf-consolidate": "srtf + consolidate (clairvoyant)"}
STRENGTHS = ["none", "low", "medium", "high"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", default="vc=6c71a0,rows=0:1000")
    ap.add_argument("--cluster", default="8x2x4:leaf=4")
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--interference", default=",".join(STRENGTHS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from slurm_marl.shared_data import data_file
    from slurm_marl.sim.run import simulate
    from slurm_marl.sim.traces import load_trace

    jobs = load_trace(data_file("traces/philly.csv"), args.window)
    profiles = args.profiles.split(",")
    strengths = args.interference.split(",")
    results = []
    for strength in strengths:
        for profile in profiles:
            t0 = time.perf_counter()
            run = simulate(jobs, args.cluster, profile, interference=strength,
                           seed=args.seed)
            results.append({"profile": profile, "interference": strength,
                            "wall_s": round(time.perf_counter() - t0, 2),
                            "estimator_samples": run.estimator_samples, **run.summary})
            print(f"  {profile:<18} {strength:<6} avg JCT {run.summary['avg_jct_s']:>10,.0f} s"
                  f"  ({results[-1]['wall_s']:.1f} s)", file=sys.stderr)

    def cell(profile, strength, key="avg_jct_s"):
        r = next(x for x in results if x["profile"] == profile
                 and x["interference"] == strength)
        return r[key]

    span_d = (jobs[-1].submit_time_s - jobs[0].submit_time_s) / 86400
    print(f"Philly {args.window} ({len(jobs)} jobs over {span_d:.1f} days) on "
          f"{args.cluster}, seed {args.seed}: average JCT (s)\n")
    print("| profile | " + " | ".join(strengths) + " |")
    print("|---|" + "---:|" * len(strengths))
    for p in profiles:
        print(f"| {LABELS.get(p, p)} | "
              + " | ".join(f"{cell(p, s):,.0f}" for s in strengths) + " |")
    print("\nMedian JCT (s) / p95 JCT (s) / average queueing delay (s) / preemptions:\n")
    print("| profile | strength | median | p95 | queue delay | preemptions | mean speed |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for s in strengths:
        for p in profiles:
            print(f"| {LABELS.get(p, p)} | {s} | {cell(p, s, 'median_jct_s'):,.0f} | "
                  f"{cell(p, s, 'p95_jct_s'):,.0f} | {cell(p, s, 'avg_queue_delay_s'):,.0f} | "
                  f"{cell(p, s, 'preemptions')} | {cell(p, s, 'mean_speed'):.3f} |")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
