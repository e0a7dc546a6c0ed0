"""What each simulation of `slurm-marl report` costs on its own, as `--backend slurm` runs it.

With `--backend slurm` every profile x strength of the report is one task of one Slurm
array job (``sim.report.report_tasks``, ``sweep.map_calls``), run in a fresh process on a
node: the report's wall time is then about its dearest task's, not the sum. This script
runs those same tasks, each in a fresh spawned process as an array task would (nothing
cached from another task: las-lif and learned-order fit their own pilot), ``--workers`` at a
time (one core each: no more workers than cores), and prints each task's CPU and wall time.

    .venv/bin/python benchmarks/report_cost.py --jobs 30000 --runs "" --keep /tmp/site30k
    .venv/bin/python benchmarks/report_tasks.py --site /tmp/site30k --json

``--site``: a folder ``report_cost.py --keep`` wrote (slurm.conf, gres.conf, history.csv);
``--from`` / ``--to``: the period (default: as report_cost.py's 30,000 jobs).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}
os.environ.update(ONE_THREAD)
os.environ["TZ"] = "UTC"
time.tzset()


def timed_task(task) -> dict:
    """Run one report task in this (fresh) process; its CPU and wall time."""
    from slurm_marl.sim.report import run_task
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run = run_task(task)
    return {"task": task.label, "cpu_s": round(time.process_time() - cpu0, 1),
            "wall_s": round(time.perf_counter() - wall0, 1),
            "cycles": run.outcome.cycles, "jobs": len(run.outcome.jobs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, required=True,
                    help="folder with slurm.conf and history.csv (report_cost.py --keep)")
    ap.add_argument("--from", dest="start", default="2017-10-16T00:00:00")
    ap.add_argument("--to", dest="end", default="2017-11-10T12:00:03")
    ap.add_argument("--workers", type=int, default=2, help="tasks at a time (one per core)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from slurm_marl.report_cli import _when, read_any_history
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.sim import report as R
    from slurm_marl.sim.site_config import read_site_cluster

    jobs, _ = read_any_history(args.site / "history.csv")
    site = read_site_cluster(args.site / "slurm.conf")
    start_s, end_s = _when(args.start, "--from"), _when(args.end, "--to")
    trace = R.site_trace(R.in_period(jobs, start_s, end_s), site.cluster)
    tasks = R.report_tasks(trace, site.cluster, [load_profile(p) for p in R.DEFAULT_PROFILES],
                           R.DEFAULT_STRENGTHS, prior=R.prior_history(jobs, start_s))
    print(f"{len(trace.trace)} jobs, {len(tasks)} tasks, {args.workers} at a time",
          file=sys.stderr, flush=True)
    if args.workers > len(os.sched_getaffinity(0)):
        ap.error(f"--workers {args.workers}: more than this process's "
                 f"{len(os.sched_getaffinity(0))} core(s)")
    got = []
    wall0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        futures = [pool.submit(timed_task, t) for t in tasks]
        for f in as_completed(futures):
            row = f.result()
            got.append(row)
            print(f"  {row['task']}: CPU {row['cpu_s']:.0f} s, wall {row['wall_s']:.0f} s",
                  file=sys.stderr, flush=True)
    order = {t.label: k for k, t in enumerate(tasks)}
    got.sort(key=lambda r: order[r["task"]])
    summary = {"jobs": len(trace.trace), "tasks": got,
               "cpu_sum_s": round(sum(r["cpu_s"] for r in got), 1),
               "cpu_max_s": max(r["cpu_s"] for r in got),
               "dearest": max(got, key=lambda r: r["cpu_s"])["task"],
               "wall_s": round(time.perf_counter() - wall0, 1), "workers": args.workers}
    print(f"sum {summary['cpu_sum_s']:.0f} s CPU; dearest task {summary['dearest']} "
          f"{summary['cpu_max_s']:.0f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
