"""Cost curves of one agent cycle (issue 17): cycle time against cluster size and against
queue length, with the growth rate (the slope of log time against log size).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cost_curves.py --out docs/img/cost_curves.png

Each point is the median of ``--cycles`` shadow-mode cycles of ``bench_daemon``'s setup
(half the GPUs busy, las-consolidate by default): nodes 500-10,000 at 1,000 pending, and
pending 100-5,000 at 2,000 nodes. Prints a table and the fitted exponents; writes the plot
and, with ``--json``, the points.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

NODES = (500, 1000, 2000, 5000, 10000)
PENDING = (100, 500, 1000, 2000, 5000)


def cycle_time(nodes: int, pending: int, cycles: int, profile: str) -> float:
    from bench_daemon import FixedSource, pending_jobs

    from slurm_marl.daemon.config import parse_config
    from slurm_marl.daemon.service import Agent
    from slurm_marl.daemon.store import Store
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.topology.synthetic import synthetic_snapshot

    base = synthetic_snapshot(nodes, busy_fraction=0.5, seed=0)
    now = time.time()
    parts = [p.name for p in base.partitions]
    snap = replace(base, time_s=now, jobs=base.jobs + tuple(pending_jobs(pending, parts, now)))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config({"agent": {"shadow": True, "managed_partitions": parts,
                                      "profile": profile, "state_dir": tmp}})
        agent = Agent(cfg, FixedSource(snap), sink=None, store=Store(Path(tmp) / "s.sqlite"),
                      policy=build_policy(load_profile(profile)))
        agent.cycle()                       # the first cycle writes every record: not timed
        times = []
        for _ in range(cycles):
            t0 = time.perf_counter()
            report = agent.cycle()
            times.append(time.perf_counter() - t0)
            assert report.error is None, report.error
    return statistics.median(times)


def slope(xs, ys) -> float:
    """Least-squares slope of log y against log x: time grows as size ** slope."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--profile", default="las-consolidate")
    ap.add_argument("--out", type=Path, default=Path("docs/img/cost_curves.png"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    by_nodes = [(n, cycle_time(n, 1000, args.cycles, args.profile)) for n in NODES]
    for n, t in by_nodes:
        print(f"nodes {n:>6} (1,000 pending): {t:.3f} s", flush=True)
    by_pending = [(p, cycle_time(2000, p, args.cycles, args.profile)) for p in PENDING]
    for p, t in by_pending:
        print(f"pending {p:>5} (2,000 nodes): {t:.3f} s", flush=True)
    k_nodes = slope(*zip(*by_nodes))
    k_pending = slope(*zip(*by_pending))
    print(f"growth: time ~ nodes^{k_nodes:.2f} (1,000 pending), "
          f"pending^{k_pending:.2f} (2,000 nodes)")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, points, label, k in ((axes[0], by_nodes, "nodes (1,000 pending)", k_nodes),
                                 (axes[1], by_pending, "pending jobs (2,000 nodes)", k_pending)):
        xs, ys = zip(*points)
        ax.loglog(xs, ys, "o-", label=f"{args.profile}: slope {k:.2f}")
        ax.set_xlabel(label)
        ax.set_ylabel("cycle time (s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("One agent cycle (shadow mode, half the GPUs busy), median of "
                 f"{args.cycles}")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"plot: {args.out}")
    if args.json:
        args.json.write_text(json.dumps({"by_nodes": by_nodes, "by_pending": by_pending,
                                         "slope_nodes": k_nodes,
                                         "slope_pending": k_pending}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
