"""Benchmark: the agent's cycle against a real slurmctld managing a 10,000-node cluster with
5,000 pending and 10,000 running jobs (issue 17), on Slurm 22.05 (the host's) or a newer
Slurm from its Debian chroot.

    .venv/bin/python benchmarks/bench_real_slurm.py [--nodes 10000] [--running 10000]
        [--pending 5000] [--slurm-version 24.11] [--cycles 3] [--profile las-consolidate]
        [--workers 2] [--json]

The cluster is the harness's (``testcluster``) with one real slurmd: every other node is a
stand-in (``ClusterSpec.slurmd_nodes``) that the first node's slurmd answers pings for, so
slurmctld holds and reports 10,000 real nodes (2 sockets x 32 cores, 8 GPUs typed per
socket, 40 nodes per leaf switch). Running jobs are allocations without a process
(``salloc --no-shell``), spread over the nodes so that each node's first GPU group (4 of its
8 GPUs) is busy; pending jobs (``sbatch``) ask for room no node has (see
``pending_requests``), so Slurm keeps them waiting for resources and starts none of them.
That is a saturated cluster as far as its big jobs are concerned: every one of them is
waiting, and the agent ranks them all and looks for room for each.

Measured, in this process after the cluster is filled (peak memory reset first):
- each Slurm client call the agent's snapshot makes, alone: seconds and bytes of answer;
- the daemon's own cycle (``Agent.cycle``, shadow mode: every step but the writes),
  first (everything new) and then the next ones, with the snapshot read timed apart, once
  with a full read every cycle (``slurm.full_read_s = 0``) and once reading only what
  changed (``full_read_s`` > 0; 24.11 on: its first cycle is a full read), side by
  side on the same cluster; with ``--compare-batched`` a third run reads changes with the
  changed jobs always in one call (as before changed jobs were read one per call). ``--churn N``: before each cycle N running jobs end and N new
  ones start and N are submitted, as on a busy cluster;
- the process's peak resident memory growth over the cycles.
Building the cluster takes minutes (one salloc/sbatch per job, ``--workers`` at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import torch

from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.slurm_integration import changes as C
from slurm_marl.slurm_integration import source as S
from slurm_marl.slurm_integration.runner import SlurmRunner
from slurm_marl.slurm_integration.sink import CliDecisionSink
from slurm_marl.slurm_integration.source import CliClusterSource
from slurm_marl.testcluster.harness import ClusterSpec, LocalCluster

from bench_snapshot_memory import peak_rss, reset_peak   # same folder: run as a script

GPUS_PER_NODE = 8


def running_requests(nodes: list[str], count: int) -> list[list[str]]:
    """``count`` allocations without a process, round-robin over ``nodes``, filling each
    node's first GPU group (socket 0's 4 GPUs: one job of 4, two of 2 or four of 1), so
    half the cluster's GPUs are busy."""
    per_node = -(-count // len(nodes))
    size = max(1, (GPUS_PER_NODE // 2) // per_node)
    return [["salloc", "--no-shell", "-J", f"run{i}", "-w", nodes[i % len(nodes)],
             f"--gres=gpu:s0:{size}", "-c", "4", "--mem=8000", "-t", "7-0"]
            for i in range(count)]


def pending_requests(count: int) -> list[list[str]]:
    """``count`` batch jobs that no node has room for: 6 or 8 GPUs on one node, or GPUs of
    the busy first group (3 on one node, 4 on each of 2 nodes). A stand-in node, never
    registered, offers Slurm no GPUs of both types to one job, so the jobs of 6 or 8 can
    only ever run on the first node (whose first group is busy too)."""
    shapes = [("1", "gpu:6"), ("1", "gpu:s0:3"), ("2", "gpu:s0:4"), ("1", "gpu:8")]
    out = []
    for i in range(count):
        nodes, gres = shapes[i % len(shapes)]
        out.append(["sbatch", "-J", f"wait{i}", "-N", nodes, "--ntasks-per-node=1",
                    f"--gres={gres}", "-c", "8", "--mem=16000", "-t", "1-0",
                    "--wrap", "true", "-o", "/dev/null"])
    return out


def submit_all(argvs: list[list[str]], env: dict, workers: int, what: str) -> float:
    from rich.console import Console
    from rich.progress import Progress
    failures: list[str] = []

    def one(argv: list[str]) -> None:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            failures.append(f"{' '.join(argv[:4])}: {proc.stderr.strip()[-200:]}")

    t0 = time.perf_counter()
    # the bars on stderr: with --json, stdout is the JSON alone
    with ThreadPoolExecutor(max_workers=workers) as pool, \
            Progress(console=Console(stderr=True)) as bar:
        task = bar.add_task(what, total=len(argvs))
        for _ in pool.map(one, argvs):
            bar.update(task, advance=1)
            if len(failures) > 10:
                raise SystemExit(f"{what}: too many failures, e.g. {failures[0]}")
    if failures:
        print(f"{what}: {len(failures)} failed, e.g. {failures[0]}", file=sys.stderr)
    return time.perf_counter() - t0


def job_counts(env: dict) -> dict[str, int]:
    out = subprocess.run(["squeue", "-h", "-o", "%T"], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return {s: out.count(s) for s in set(out)}


class TimedSource:
    """The daemon's source, its snapshot reads timed."""

    def __init__(self, source: CliClusterSource) -> None:
        self.source = source
        self.seconds: list[float] = []

    def snapshot(self):
        t0 = time.perf_counter()
        snap = self.source.snapshot()
        self.seconds.append(time.perf_counter() - t0)
        return snap

    def __getattr__(self, name):
        return getattr(self.source, name)


class RecordingRunner(SlurmRunner):
    """The agent's runner, noting each client call's arguments."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.seen: list[list[str]] = []

    def run(self, args, *a, **kw):
        self.seen.append(list(args))
        return super().run(args, *a, **kw)

    def run_json_streamed(self, args, *a, **kw):
        self.seen.append(list(args))
        return super().run_json_streamed(args, *a, **kw)


# For comparison with the agent's calls: pending and running jobs' JSON apart, and the same
# jobs and nodes as Slurm's plain text, a few fields each (what a reader that only looked
# for changes could ask for).
TEXT_CALLS = (["squeue", "--json", "--states=PENDING"], ["squeue", "--json", "--states=RUNNING"],
              ["squeue", "-h", "-o", "%i %T %P %b %N"], ["sinfo", "-h", "-N", "-o", "%N %T %G"],
              C.JOB_ROWS, C.NODE_STATES)


def client_calls(slurm_conf: str, env: dict, ctld_pid: int) -> list[dict]:
    """Each client call of one snapshot, alone, then the text calls: its wall time, the
    client's own CPU time (the rest of the wall time is mostly slurmctld's) and slurmctld's
    CPU time over the call, and the size of its answer."""
    runner = RecordingRunner(slurm_conf, timeout_s=600)
    CliClusterSource(runner).snapshot()
    ctld = psutil.Process(ctld_pid)
    calls = []
    for argv in runner.seen + [list(a) for a in TEXT_CALLS]:
        before = os.times()
        ctld_before = sum(ctld.cpu_times()[:2])
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True)
        wall = time.perf_counter() - t0
        after = os.times()
        calls.append({"argv": " ".join(argv), "rc": proc.returncode, "seconds": wall,
                      "client_cpu_s": (after.children_user - before.children_user
                                       + after.children_system - before.children_system),
                      "slurmctld_cpu_s": sum(ctld.cpu_times()[:2]) - ctld_before,
                      "mib": len(proc.stdout) / 2**20})
    return calls


class Churn:
    """Before each cycle: ``count`` running jobs end (scancel), as many start on the nodes
    they left (salloc) and as many are submitted (sbatch), the changes of a busy cluster.
    The nodes are first put in a reservation of their own, so that no waiting job takes
    them meanwhile (a stand-in node cannot run a batch job)."""

    def __init__(self, env: dict, count: int, workers: int) -> None:
        self.env, self.count, self.workers = env, count, workers
        self.round = 0

    def _run(self, *argv: str) -> str:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              check=True).stdout

    def __call__(self) -> None:
        if not self.count:
            return
        self.round += 1
        rows = [ln.split() for ln in self._run("squeue", "-h", "-t", "R", "-o",
                                               "%A %N").splitlines() if ln.strip()]
        chosen = [(jid, node) for jid, node in rows if node != "n1"][:self.count]
        nodes = [node for _, node in chosen]
        name = f"churn{self.round}"
        self._run("scontrol", "create", "reservation", f"ReservationName={name}",
                  f"Nodes={','.join(nodes)}", "Users=root", "StartTime=now",
                  "Duration=7-0", "Flags=IGNORE_JOBS")
        self._run("scancel", *[jid for jid, _ in chosen])
        starts = [argv + [f"--reservation={name}"]
                  for argv in running_requests(nodes, len(nodes))]
        submit_all(starts, self.env, self.workers, "churn: new running jobs")
        pending = pending_requests(self.count)
        for argv in pending:
            argv[argv.index("-J") + 1] += f"-c{self.round}"
        submit_all(pending, self.env, self.workers, "churn: new pending jobs")


def run_cycles(cluster: LocalCluster, args, full_read_s: float, churn: Churn,
               batched: bool = False) -> dict:
    """The daemon's cycles with one source setting (``batched``: changed jobs read in one
    call, whatever their number); shadow mode."""
    single = S.LISTED_PER_SINGLE_READ
    if batched:
        S.LISTED_PER_SINGLE_READ = 10**12
    try:
        return _run_cycles(cluster, args, full_read_s, churn) | {"batched": batched}
    finally:
        S.LISTED_PER_SINGLE_READ = single


def _run_cycles(cluster: LocalCluster, args, full_read_s: float, churn: Churn) -> dict:
    proc = psutil.Process()
    runner = SlurmRunner(str(cluster.slurm_conf), timeout_s=600)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config({"agent": {"shadow": True, "managed_partitions": ["gpu"],
                                      "profile": args.profile, "state_dir": tmp},
                            "slurm": {"slurm_conf": str(cluster.slurm_conf),
                                      "full_read_s": full_read_s}})
        source = TimedSource(CliClusterSource(runner, static_ttl_s=60.0,
                                              full_read_s=full_read_s))
        agent = Agent(cfg, source, CliDecisionSink(runner, on_write=source.invalidate),
                      Store(Path(tmp) / "s.sqlite"), build_policy(load_profile(args.profile)))
        reset_peak()
        base = proc.memory_info().rss
        times, reports, reads = [], [], []
        for i in range(args.cycles):
            if i:
                churn()
            t0 = time.perf_counter()
            if args.cprofile and i == args.cycles - 1:
                import cProfile
                with cProfile.Profile() as prof:
                    report = agent.cycle()
                prof.dump_stats(f"{args.cprofile}.{full_read_s:.0f}")
            else:
                report = agent.cycle()
            times.append(time.perf_counter() - t0)
            reports.append(report)
            reads.append(dict(source.last_read))
            if report.error is not None:
                raise SystemExit(f"cycle failed: {report.error}")
        peak = peak_rss()
    last = reports[-1]
    return {"full_read_s": full_read_s, "cycle_s": times, "snapshot_s": source.seconds,
            "decide_s": [t - s for t, s in zip(times, source.seconds)], "reads": reads,
            "pending_seen": last.pending, "running_seen": last.running,
            "decisions_first_cycle": len(reports[0].decisions),
            "rss_before_mib": base / 2**20, "peak_growth_mib": (peak - base) / 2**20}


def measure(cluster: LocalCluster, args) -> dict:
    env = cluster.env
    os.environ.update(env)  # the chroot's client wrappers first on PATH, SLURM_CONF
    calls = client_calls(str(cluster.slurm_conf), env, cluster.pids()["slurmctld"])
    churn = Churn(env, args.churn, args.workers)
    runs = [run_cycles(cluster, args, 0.0, churn)]
    if args.compare_batched:     # before the run it compares with: later runs see more churn
        runs.append(run_cycles(cluster, args, 3600.0, churn, batched=True))
    runs.append(run_cycles(cluster, args, 3600.0, churn))
    return {"client_calls": calls, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--running", type=int, default=10000)
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--slurm-version", default=None, help="24.11 or 26.05 (default: host's)")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--churn", type=int, default=20,
                    help="running jobs ended and started, and jobs submitted, per cycle")
    ap.add_argument("--profile", default="las-consolidate")
    ap.add_argument("--workers", type=int, default=2, help="client calls at once while filling")
    ap.add_argument("--compare-batched", action="store_true",
                    help="also read changes with the changed jobs always in one call")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cprofile", default="", help="write cProfile stats of the last cycle "
                    "of each run to PATH.<full_read_s>")
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = ClusterSpec(nodes=args.nodes, sockets=2, cores_per_socket=32,
                       gpus_per_socket=GPUS_PER_NODE // 2, nodes_per_leaf=40,
                       memory_mib=512_000, slurmd_nodes=1, slurm_version=args.slurm_version,
                       sched_interval_s=30)
    t0 = time.perf_counter()
    cluster = LocalCluster(spec=spec).up(timeout_s=600)
    try:
        up_s = time.perf_counter() - t0
        names = spec.node_names
        fill_running_s = submit_all(running_requests(names, args.running), cluster.env,
                                    args.workers, "running jobs (salloc --no-shell)")
        fill_pending_s = submit_all(pending_requests(args.pending), cluster.env,
                                    args.workers, "pending jobs (sbatch)")
        counts = job_counts(cluster.env)
        version = subprocess.run(["scontrol", "--version"], env=cluster.env,
                                 capture_output=True, text=True).stdout.strip()
        result = {"slurm": version, "nodes": args.nodes, "gpus": args.nodes * GPUS_PER_NODE,
                  "jobs_in_slurm": counts, "profile": args.profile, "cluster_up_s": up_s,
                  "fill_running_s": fill_running_s, "fill_pending_s": fill_pending_s,
                  **measure(cluster, args)}
    finally:
        cluster.down()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['slurm']}: {args.nodes} nodes ({result['gpus']} GPUs), jobs in Slurm "
          f"{counts}; cluster up in {up_s:.0f} s, filled in "
          f"{fill_running_s + fill_pending_s:.0f} s")
    for c in result["client_calls"]:
        print(f"  {c['argv']}: {c['seconds']:.2f} s (client CPU {c['client_cpu_s']:.2f} s, "
              f"slurmctld CPU {c['slurmctld_cpu_s']:.2f} s), {c['mib']:.1f} MiB "
              f"(rc {c['rc']})")
    for run in result["runs"]:
        print(f"  full_read_s = {run['full_read_s']:.0f}"
              f"{', changed jobs in one call' if run['batched'] else ''}: agent saw {run['pending_seen']} "
              f"pending, {run['running_seen']} running; {run['decisions_first_cycle']} "
              "decisions in the first cycle")
        for i, (t, s, r) in enumerate(zip(run["cycle_s"], run["snapshot_s"], run["reads"])):
            read = r.get("mode", "?") + ("" if r.get("mode") != "changes" else
                                         f", {r['jobs_read']} jobs / {r['nodes_read']} nodes")
            print(f"    cycle {i + 1}: {t:.2f} s (snapshot {s:.2f} s: {read}; deciding "
                  f"{t - s:.2f} s)")
        print(f"    peak memory growth over the cycles: +{run['peak_growth_mib']:.0f} MiB "
              f"(from {run['rss_before_mib']:.0f} MiB)")


if __name__ == "__main__":
    main()
