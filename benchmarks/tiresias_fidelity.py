"""This simulator against Tiresias' own on the reference Philly windows, side by side.

For every window and cluster of src/slurm_marl/data/public/reference/tiresias_windows.md
and every schedule (fifo, dlas-gpu, shortest-gpu), runs the matching profile
(slurm_marl.sim.fidelity) and prints Tiresias' average JCT, ours, the ratio, how many jobs end
within 1% (or 1 s) of Tiresias' time, and preemptions. With ``--variants`` it also runs dlas-gpu with the
``running_first`` in-queue order (this project's order before it reproduced Tiresias').

    python benchmarks/tiresias_fidelity.py [--variants] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", action="store_true",
                    help="also dlas-gpu with in_queue = running_first")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from slurm_marl.sim.fidelity import SCHEDULES, WINDOWS, compare, profile_for

    rows = []
    for window, cluster in WINDOWS:
        for schedule in SCHEDULES:
            runs = [("", None)]
            if args.variants and schedule == "dlas-gpu":
                runs.append((" running_first",
                             profile_for(schedule, in_queue="running_first")))
            for label, profile in runs:
                t0 = time.perf_counter()
                c = compare(window, cluster, schedule, profile)
                row = dict(c.as_dict(), variant=label.strip() or "tiresias",
                           wall_s=round(time.perf_counter() - t0, 2))
                rows.append(row)
                print(f"  {window} {cluster} {schedule}{label}: ratio {c.ratio:.4f} "
                      f"({row['wall_s']} s)", file=sys.stderr, flush=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print("| window | cluster | schedule | Tiresias | ours | ratio | jobs within 1% "
          "| preemptions (Tiresias / ours) |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        name = r["schedule"] + ("" if r["variant"] == "tiresias" else f" ({r['variant']})")
        print(f"| {r['window']} | {r['cluster']} | {name} | {r['reference_avg_jct_s']:,.1f} "
              f"| {r['ours_avg_jct_s']:,.1f} | {r['ratio']:.4f} | {r['close_jct_share']:.1%} "
              f"| {r['reference_preemptions']:,} / {r['ours_preemptions']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
