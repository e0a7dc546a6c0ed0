"""Benchmark: the memory (and time) of one snapshot of a large cluster, read through the
daemon's own ``CliClusterSource`` from Slurm's JSON answers (issue 17: 5,000 pending and
10,000 running jobs, 10,000 nodes).

    .venv/bin/python benchmarks/bench_snapshot_memory.py [--pending 5000] [--running 10000]
        [--nodes 10000] [--versions 22.05,24.11,26.05] [--cores-per-socket 32] [--json]

The answers are built from the real answers of Slurm 22.05, 24.11 and 26.05 recorded in
tests/data/slurm (each recorded pending and running job and each node repeated with new ids
and names, pretty-printed as Slurm prints them), with each running job's core map widened to
``--cores-per-socket`` cores per socket, as on a 64-core GPU server. A stand-in ``squeue`` /
``sinfo`` / ``scontrol`` (this script, run with ``--serve``) prints them from files, so the
agent's runner, parser and source run unchanged; only slurmctld is not asked.

Each reading runs in a fresh Python process, which reports its resident memory after its
imports, its peak (``ru_maxrss``) and what it holds once the snapshot is taken: the growth
to the peak is what the snapshot costs.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "slurm"
CLIENTS = ("squeue", "sinfo", "scontrol")


# ---------------------------------------------------------------------------------------
# the stand-in Slurm clients


def serve(argv: list[str]) -> int:
    """Print the recorded answer for a client call (``sys.argv[0]`` names the client)."""
    folder = Path(os.environ["BENCH_SLURM_ANSWERS"])
    client = Path(argv[0]).name
    if client == "squeue":
        name = "squeue.json"
    elif client == "sinfo":
        name = "sinfo.json"
    elif argv[1:3] == ["show", "partition"]:
        name = "partition.txt"
    elif argv[1:3] == ["show", "topology"]:
        name = "topology.txt"
    elif argv[1:3] == ["show", "node"]:
        name = "nodes.json"
    else:
        print(f"bench stand-in: no answer for {argv!r}", file=sys.stderr)
        return 1
    with open(folder / name, "rb") as f:
        shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
    return 0


def widen_cores(value, cores: int):
    """Every core map under ``value`` widened to ``cores`` entries (22.05: a dict keyed by
    core index; later versions: a list of {index, status})."""
    if isinstance(value, dict):
        for key, sub in value.items():
            if key == "cores" and isinstance(sub, dict) and sub:
                first = next(iter(sub.values()))
                value[key] = {str(i): sub.get(str(i), first if i == 0 else "unallocated")
                              for i in range(cores)}
            elif key == "cores" and isinstance(sub, list) and sub and isinstance(sub[0], dict):
                value[key] = [{"index": i, "status": ["ALLOCATED" if i == 0 else "UNALLOCATED"]}
                              for i in range(cores)]
            else:
                widen_cores(sub, cores)
    elif isinstance(value, list):
        for sub in value:
            widen_cores(sub, cores)
    return value


def set_number(record: dict, key: str, value: int) -> None:
    """Set a number field in either layout (plain, or 24.11's {set, infinite, number})."""
    old = record.get(key)
    record[key] = dict(old, number=value) if isinstance(old, dict) else value


def write_answers(version: str, folder: Path, *, pending: int, running: int, nodes: int,
                  cores: int) -> dict:
    rec = RECORDED / f"v{version}"
    squeue = json.loads((rec / "squeue_all.json").read_text())
    states = {"PENDING": [], "RUNNING": []}
    for job in squeue["jobs"]:
        state = job["job_state"]
        state = state[0] if isinstance(state, list) and len(state) == 1 else state
        if isinstance(state, str) and state in states:
            states[state].append(job)
    templates = {s: [widen_cores(copy.deepcopy(j), cores) for j in js]
                 for s, js in states.items()}
    jobs = []
    for state, count in (("RUNNING", running), ("PENDING", pending)):
        pool = templates[state]
        for i in range(count):
            job = dict(pool[i % len(pool)])
            set_number(job, "job_id", 100_000 + len(jobs))
            set_number(job, "array_job_id", 0)
            jobs.append(job)
    squeue["jobs"] = jobs
    squeue_text = json.dumps(squeue, indent=2)
    (folder / "squeue.json").write_text(squeue_text)

    width = len(str(nodes))
    names = [f"n{i:0{width}d}" for i in range(1, nodes + 1)]
    node_file = "sinfo.json" if version == "22.05" else "scontrol_show_node.json"
    answer = json.loads((rec / node_file).read_text())
    template = answer["nodes"][0]
    answer["nodes"] = [dict(template, name=n, hostname=n, address=n) for n in names]
    node_text = json.dumps(answer, indent=2)
    if version == "22.05":
        (folder / "sinfo.json").write_text(node_text)
    else:   # later versions' sinfo --json only tells the version; nodes come from scontrol
        sinfo = json.loads((rec / "sinfo.json").read_text())
        (folder / "sinfo.json").write_text(json.dumps(sinfo, indent=2))
        (folder / "nodes.json").write_text(node_text)
    part = (rec / "scontrol_show_partition.txt").read_text()
    part = part.replace("Nodes=n[1-4]", f"Nodes=n[{names[0][1:]}-{names[-1][1:]}]")
    (folder / "partition.txt").write_text(part)
    leaves = [f"SwitchName=leaf{k // 40 + 1} Level=0 LinkSpeed=1 Nodes="
              f"n[{names[k][1:]}-{names[min(k + 39, nodes - 1)][1:]}]"
              for k in range(0, nodes, 40)]
    (folder / "topology.txt").write_text("\n".join(leaves) + "\n")
    return {"squeue_mib": len(squeue_text) / 2**20,
            "kib_per_job": len(squeue_text) / 1024 / max(1, len(jobs)),
            "nodes_json_mib": len(node_text) / 2**20}


# ---------------------------------------------------------------------------------------
# one reading, in a fresh process


def reset_peak() -> None:
    """Linux: reset this process's peak resident size (VmHWM) to its current size."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(bin_dir: str, answers: str) -> None:
    import psutil

    from slurm_marl.slurm_integration.runner import SlurmRunner
    from slurm_marl.slurm_integration.source import CliClusterSource

    proc = psutil.Process()
    reset_peak()
    base_rss = proc.memory_info().rss
    runner = SlurmRunner("/dev/null", bin_dir=bin_dir,
                         extra_env={"BENCH_SLURM_ANSWERS": answers}, timeout_s=600)
    t0 = time.perf_counter()
    snap = CliClusterSource(runner).snapshot()
    took = time.perf_counter() - t0
    peak = peak_rss()
    held = proc.memory_info().rss
    print(json.dumps({
        "jobs": len(snap.jobs), "pending": len(snap.pending), "running": len(snap.running),
        "nodes": len(snap.nodes), "seconds": took,
        "rss_after_imports_mib": base_rss / 2**20,
        "peak_growth_mib": (peak - base_rss) / 2**20,
        "held_growth_mib": (held - base_rss) / 2**20}))


def measure(src: Path, bin_dir: Path, answers: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", str(bin_dir), str(answers)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    if Path(sys.argv[0]).name in CLIENTS:
        sys.exit(serve(sys.argv))
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--running", type=int, default=10000)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--cores-per-socket", type=int, default=32)
    ap.add_argument("--versions", default="22.05,24.11,26.05")
    ap.add_argument("--src", action="append", default=None,
                    help="the source tree(s) to measure, alternately (default: this one's)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    srcs = [Path(s).resolve() for s in (args.src or [ROOT / "src"])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = Path(tmp) / "bin"
        bin_dir.mkdir()
        script = bin_dir / "stand_in.py"
        script.write_text(f"#!{sys.executable}\n" + Path(__file__).read_text())
        script.chmod(0o755)
        for client in CLIENTS:
            (bin_dir / client).symlink_to(script)
        for version in args.versions.split(","):
            answers = Path(tmp) / version
            answers.mkdir()
            sizes = write_answers(version, answers, pending=args.pending,
                                  running=args.running, nodes=args.nodes,
                                  cores=args.cores_per_socket)
            for rnd in range(args.rounds):
                for src in srcs:
                    row = {"version": version, "src": str(src), "round": rnd, **sizes,
                           **measure(src, bin_dir, answers)}
                    rows.append(row)
                    if not args.json:
                        print(f"{version} {src}: {row['jobs']} jobs ({row['pending']} "
                              f"pending), {row['nodes']} nodes; squeue {row['squeue_mib']:.0f}"
                              f" MiB ({row['kib_per_job']:.1f} KiB/job); peak +"
                              f"{row['peak_growth_mib']:.0f} MiB, held +"
                              f"{row['held_growth_mib']:.0f} MiB, {row['seconds']:.2f} s",
                              flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
