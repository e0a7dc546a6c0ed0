"""Cost of predicting and ordering a large pending queue in one daemon cycle (issue 16).

A model trained on the Philly trace (as `slurm-marl history train --philly` does) and a
site history of 20,000 jobs; then one cycle sees N pending GPU jobs for the first time:
the daemon predicts them all (features + one LightGBM call) and ``predicted_las`` ranks
them. A second cycle with the same jobs costs only the ranking (predictions are kept).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prediction_cost.py --pending 5000

Target: predicting and ordering 5,000 pending jobs under 100 ms on one core.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from slurm_marl.shared_data import data_file  # noqa: E402 (after the thread setting)

TRACE = str(data_file("traces/philly.csv"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from slurm_marl.daemon.predictions import DaemonPredictor
    from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, Node, Partition
    from slurm_marl.history.philly import philly_history
    from slurm_marl.history.predictor import GpuTimeModel, replay
    from slurm_marl.history.records import write_history
    from slurm_marl.policy.order.predicted_las import PredictedLas

    jobs = philly_history(args.trace)[:20000]
    rows, labels = [], []
    replay(jobs, lambda j, r, _n: (rows.append(r), labels.append(math.log1p(j.gpu_time_s))))
    tmp = Path(tempfile.mkdtemp(prefix="pred-cost-"))
    GpuTimeModel.fit(rows, labels).save(tmp / "model")
    write_history(tmp / "history.csv", jobs)
    now = max(j.end_s for j in jobs) + 60
    rng = random.Random(0)
    vcs = sorted({j.account for j in jobs})
    pending = tuple(Job(k, name=f"job{k}", user=rng.choice(vcs), partition="gpu",
                        gpus_per_node=rng.choice([1, 1, 1, 2, 4, 8]),
                        submit_time_s=now - rng.uniform(0, 3600))
                    for k in range(1, args.pending + 1))
    nodes = (Node("n1", partitions=("gpu",), gpu_groups=(GpuGroup(0, (0, 1, 2, 3)),)),)
    snap = ClusterSnapshot(now, nodes, pending, (Partition("gpu", ("n1",), True),))
    order = PredictedLas(bucket_factor=2.0, starve_after_s=0.0, rule="in_las_queues")

    first, again, rank = [], [], []
    for _ in range(args.repeat):
        pred = DaemonPredictor(tmp / "model", tmp / "history.csv", now)
        t0 = time.perf_counter()
        annotated = pred.annotate(snap)
        ranked = sorted(annotated.jobs, key=lambda j: order.classify(j, now))
        first.append(time.perf_counter() - t0)
        t1 = time.perf_counter()
        annotated = pred.annotate(snap)
        sorted(annotated.jobs, key=lambda j: order.classify(j, now))
        again.append(time.perf_counter() - t1)
        t2 = time.perf_counter()
        sorted(annotated.jobs, key=lambda j: order.classify(j, now))
        rank.append(time.perf_counter() - t2)
        assert len(ranked) == args.pending
    med = statistics.median
    print(f"{args.pending} pending, history {len(jobs)} jobs, model on {len(rows)} rows; "
          f"median of {args.repeat}:")
    print(f"  first sight (predict all + rank): {med(first) * 1000:.1f} ms")
    print(f"  next cycle (predictions kept + rank): {med(again) * 1000:.1f} ms")
    print(f"  rank only: {med(rank) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
