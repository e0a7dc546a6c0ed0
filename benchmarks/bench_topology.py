"""Topology benchmark: graph build, featurise and one-node incremental update.

Synthetic clusters of 2,000 and 10,000 nodes: 8 GPUs in 2 GPU groups per node (one per
socket), 40 nodes per leaf switch, 25 leaves per spine; about half the GPUs busy, 10% of the
free nodes in 2-node jobs. One torch thread. Targets (2,000 nodes): build < 1 s,
featurise < 100 ms, incremental update < 5 ms.

Run: ``python benchmarks/bench_topology.py [--repeat N] [--sizes 2000,10000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from slurm_marl.domain import Job, JobState  # noqa: E402
from slurm_marl.agent.features import Featuriser  # noqa: E402
from slurm_marl.topology.graph import build_topology_graph  # noqa: E402
from slurm_marl.topology.synthetic import synthetic_snapshot  # noqa: E402

TARGETS_2000 = {"build_s": 1.0, "featurise_s": 0.100, "update_s": 0.005}


def _timed(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def _changed_snapshots(snapshot):
    """Two snapshots that differ at one node: a fresh 2-GPU job there, or not."""
    node = next(n for n in snapshot.nodes if not n.used_gpu_indices)
    job = Job(job_id=10 ** 9, state=JobState.RUNNING, nodes=(node.name,), gpus_per_node=2,
              gpu_alloc=((node.name, (0, 1)),))
    busy_node = replace(node, used_gpu_indices=frozenset({0, 1}), alloc_cpus=8)
    nodes = tuple(busy_node if n.name == node.name else n for n in snapshot.nodes)
    changed = replace(snapshot, nodes=nodes, jobs=(*snapshot.jobs, job))
    return node.name, snapshot, changed


def run(n_nodes: int, repeat: int) -> dict[str, float]:
    snapshot = synthetic_snapshot(n_nodes, nodes_per_leaf=40, leaves_per_spine=25)
    build_med, build_min = _timed(lambda: build_topology_graph(snapshot=snapshot), repeat)
    graph = build_topology_graph(snapshot=snapshot)
    index_med, _ = _timed(lambda: Featuriser(graph), repeat)
    featuriser = Featuriser(graph)
    feat_med, feat_min = _timed(lambda: featuriser.featurise(snapshot), repeat)

    name, before, after = _changed_snapshots(snapshot)
    featuriser.featurise(before)
    flip = [after, before]
    updates = []
    for i in range(max(50, repeat * 10)):
        start = time.perf_counter()
        featuriser.update_node(flip[i % 2], name)
        updates.append(time.perf_counter() - start)
    check = featuriser.update_node(after, name)
    full = Featuriser(graph).featurise(after)
    same = all(torch.equal(check.x[level], full.x[level]) for level in full.x)
    return {"nodes": n_nodes,
            "gpus": sum(1 for _, a in graph.nodes(data=True) if a["kind"] == "gpu"),
            "graph_nodes": graph.number_of_nodes(), "graph_edges": graph.number_of_edges(),
            "jobs": len(snapshot.jobs), "build_s": build_med, "build_min_s": build_min,
            "index_s": index_med, "featurise_s": feat_med, "featurise_min_s": feat_min,
            "update_s": statistics.median(updates), "update_min_s": min(updates),
            "update_equals_full": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="2000,10000")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, cpus {os.cpu_count()}")
    print(f"{'nodes':>6} {'GPUs':>6} {'jobs':>6} {'build s':>9} {'index s':>9} "
          f"{'featurise ms':>13} {'update ms':>10} {'upd==full':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        r = run(size, args.repeat)
        print(f"{r['nodes']:>6} {r['gpus']:>6} {r['jobs']:>6} {r['build_s']:>9.3f} "
              f"{r['index_s']:>9.3f} {r['featurise_s'] * 1e3:>13.1f} "
              f"{r['update_s'] * 1e3:>10.3f} {str(r['update_equals_full']):>9}")
        if size == 2000:
            verdict = ", ".join(f"{k} {'OK' if r[k] < v else 'OVER'} (< {v:g} s)"
                                for k, v in TARGETS_2000.items())
            print(f"       targets at 2,000 nodes: {verdict}")
    print("(median of repeats; update = one node re-featurised in place, its leaf and spine "
          "re-aggregated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
