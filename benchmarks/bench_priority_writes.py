"""Benchmark: Slurm client calls and cycle time of the agent at N pending jobs on REAL Slurm,
priorities written by rank (every job whose rank moved; the rule before) vs by
``plan_priorities`` (only jobs out of order), side by side in one run.

    .venv/bin/python benchmarks/bench_priority_writes.py [--pending 3000] [--arrivals 20]
        [--cycles 3] [--json]

A local cluster (4 nodes x 4 fake GPUs) is kept full by one running job; ``--pending`` GPU
jobs are submitted with plain sbatch and wait for resources. The agent (las-consolidate,
active mode, its real sink and ``scontrol``) runs one cycle to write its initial order, then
``--cycles`` cycles, each after ``--arrivals`` new submissions; the two rules run one after
the other on the same cluster and queue. Reported per steady cycle: ``scontrol`` calls by
kind, and the cycle's wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.progress import track

from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.slurm_integration.runner import SlurmRunner
from slurm_marl.slurm_integration.sink import CliDecisionSink
from slurm_marl.slurm_integration.source import CliClusterSource
from slurm_marl.slurm_integration.vocabulary import MAX_PRIORITY
from slurm_marl.testcluster import ClusterSpec, LocalCluster


class CountingRunner(SlurmRunner):
    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.log: list[list[str]] = []

    def run(self, args, timeout_s=None):
        self.log.append(list(args))
        return super().run(args, timeout_s)


class RankRuleAgent(Agent):
    """The rule before: priority = base + (pending - rank), written wherever it moved."""

    def _priority_writes(self, snap, order):
        out = []
        for d in order:
            job = snap.job(d.job_id)
            prio = min(MAX_PRIORITY, self.config.agent.priority_base + max(1, d.priority))
            if job is not None and job.is_pending and job.priority != prio:
                out.append(replace(d, priority=prio))
        return out


def kinds(calls: list[list[str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in calls:
        key = " ".join(c[:2]) if c[0] == "scontrol" else c[0]
        if c[:2] == ["scontrol", "update"] and any(a.startswith("Priority=") for a in c):
            key = "scontrol update Priority"
        out[key] = out.get(key, 0) + 1
    return out


def submit(local: LocalCluster, n: int, label: str) -> None:
    for _ in track(range(n), description=f"sbatch x{n} ({label})", transient=True):
        subprocess.run(["sbatch", "--parsable", "--gres=gpu:1", f"--chdir={local.root}/out",
                        "-o", "/dev/null", "--wrap", "sleep 600"], env=local.env, check=True,
                       capture_output=True)


def run_rule(local: LocalCluster, agent_cls, tmp: Path, args, label: str) -> list[dict]:
    runner = CountingRunner(local.slurm_conf, timeout_s=60)
    cfg = parse_config({"slurm": {"slurm_conf": str(local.slurm_conf)},
                        "agent": {"managed_partitions": ["gpu"], "grace_s": 600,
                                  "profile": "las-consolidate",
                                  "state_dir": str(tmp / label)}})
    agent = agent_cls(cfg, CliClusterSource(runner, static_ttl_s=60.0),
                      CliDecisionSink(runner, retries=0), Store(cfg.store_path),
                      build_policy(load_profile("las-consolidate")))
    rows = []
    for cycle in range(args.cycles + 1):
        if cycle:
            submit(local, args.arrivals, label)
        runner.log.clear()
        t0 = time.perf_counter()
        report = agent.cycle()
        rows.append({"rule": label, "cycle": cycle, "steady": cycle > 0,
                     "pending": report.pending, "seconds": time.perf_counter() - t0,
                     "calls": len(runner.log), "by_kind": kinds(runner.log),
                     "error": report.error})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=3000)
    ap.add_argument("--arrivals", type=int, default=20)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    spec = ClusterSpec(nodes=4, sockets=2, cores_per_socket=4, gpus_per_socket=2,
                       sched_interval_s=60)
    with LocalCluster(spec=spec) as local, tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["sbatch", "-N", "4", "--gres=gpu:4", "-o", "/dev/null",
                        f"--chdir={local.root}/out", "--wrap", "sleep 3600"], env=local.env,
                       check=True, capture_output=True)
        submit(local, args.pending, "queue")
        rows = []
        for label, cls in (("by rank (before)", RankRuleAgent),
                           ("plan_priorities (after)", Agent)):
            rows += run_rule(local, cls, Path(tmp), args, label)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(f"{r['rule']:>24} cycle {r['cycle']} pending {r['pending']:>5}: "
              f"{r['calls']:>5} client calls, {r['seconds']:6.2f} s  {r['by_kind']}"
              + (f"  ERROR {r['error']}" if r["error"] else ""))
    for label in ("by rank (before)", "plan_priorities (after)"):
        steady = [r for r in rows if r["rule"] == label and r["steady"]]
        print(f"{label:>24} steady cycles: median {statistics.median(r['calls'] for r in steady)}"
              f" calls, {statistics.median(r['seconds'] for r in steady):.2f} s")


if __name__ == "__main__":
    main()
