"""Benchmark: a burst of short GPU jobs on a real local Slurm, with the agent and with Slurm
alone, side by side on the same cluster shape and the same jobs (issue 31, item 2: no GPU
idle while a job that fits waits).

    .venv/bin/python benchmarks/burst.py [--jobs 3000] [--nodes 16] [--min-s 5] [--max-s 25]
        [--slurm-version 24.11] [--modes slurm,agent] [--set eligible_ahead_gpus=64 ...]
        [--seed 1] [--json] [--keep-log DIR]

Every mode gets a fresh cluster (``nodes`` x 2 sockets x 4 GPUs, 8 cores a socket) and the
same jobs, submitted as fast as ``sbatch`` takes them: 1-4 GPUs, ``--time=2``, running
``min-s``..``max-s`` seconds, a share (``--two-node``, 5%) on two nodes. Each job writes its
start and end time (``date``) into its output. Modes: ``slurm`` (Slurm alone: no gate, no
agent), ``agent`` (the project's job_submit.lua gate with a 30 s grace plus `slurm-marl
run`, las-consolidate, 5 s cycles), and ``agent:NAME`` with ``--set`` options for that agent
(``--set NAME.key=value``, e.g. ``--set ahead.eligible_ahead_gpus=64``).

Measured per mode: makespan (first submission to last end), mean and p95 wait (start -
submission), GPUs allocated (mean over samples every 2 s while jobs wait: ``sinfo``
GresUsed), samples with at least 8 GPUs idle while jobs wait, and for an agent its
cycles, Slurm client calls per cycle (its DEBUG log) and writes. Ratios are against the
``slurm`` mode of the same run, and so is each job's completion time (``per_job_vs_slurm``:
the same job, by its place in the burst, in both modes).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slurm_marl.slurm_integration.plugin import render_job_submit_lua
from slurm_marl.testcluster import ClusterSpec, LocalCluster
from slurm_marl.testcluster.versions import label

GRACE_S = 30


def make_jobs(n: int, seed: int, min_s: float, max_s: float, two_node: float
              ) -> list[dict]:
    rng = random.Random(seed)
    return [{"gpus": rng.randint(1, 4), "seconds": round(rng.uniform(min_s, max_s), 1),
             "nodes": 2 if rng.random() < two_node else 1} for _ in range(n)]


def agent_config(cluster: LocalCluster, folder: Path, extra: dict[str, str]) -> Path:
    """The agent's config: 5 s cycles, las-consolidate, ``extra`` ([agent] key = TOML value)
    over those defaults."""
    agent = {"interval_s": "5", "profile": '"las-consolidate"',
             "managed_partitions": '["gpu"]', "grace_s": str(GRACE_S),
             "state_dir": f'"{folder / "state"}"', **extra}
    lines = "\n".join(f"{k} = {v}" for k, v in agent.items())
    path = folder / "agent.toml"
    path.write_text(f"""
[slurm]
slurm_conf = "{cluster.slurm_conf}"
command_timeout_s = 30
[agent]
{lines}
[metrics]
enabled = false
[log]
level = "DEBUG"
""")
    return path


def alloc_gpus(cluster: LocalCluster) -> int:
    """GPUs in use on all nodes: ``sinfo`` GresUsed (``gpu:s0:2(IDX:0-1),gpu:s1:0(...)``;
    AllocTRES lists GPUs only where accounting tracks gres/gpu)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-O", "NodeHost:30,GresUsed:300"],
                         env=cluster.env, capture_output=True, text=True, timeout=30).stdout
    return sum(int(m) for m in re.findall(r"gpu:(?:[^:,()\s]+:)?(\d+)\(IDX", out))


def pending_count(cluster: LocalCluster) -> int:
    out = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%i"], env=cluster.env,
                         capture_output=True, text=True, timeout=30).stdout
    return len(out.split())


def per_job(jct: dict[int, float], base: dict[int, float]) -> dict:
    """Each job's completion time against the same job's with Slurm alone: the share that
    finished later (at all, and by more than 10% and 30 s), the median ratio, and the worst
    job (its ratio and the seconds it lost)."""
    common = sorted(set(jct) & set(base))
    if not common:
        return {}
    ratios = {k: jct[k] / base[k] for k in common if base[k] > 0}
    worst = max(common, key=lambda k: jct[k] - base[k])
    later = [k for k in common if jct[k] > base[k]]
    return {"jobs": len(common),
            "slower_share": round(len(later) / len(common), 3),
            "slower_10pct_and_30s_share": round(sum(
                1 for k in later if jct[k] > 1.1 * base[k] and jct[k] - base[k] > 30)
                / len(common), 3),
            "ratio_median": round(statistics.median(ratios.values()), 3),
            "ratio_max": round(max(ratios.values()), 2),
            "worst_job": {"k": worst, "jct_s": jct[worst], "slurm_jct_s": base[worst],
                          "later_s": round(jct[worst] - base[worst], 1)}}


def run_mode(mode: str, jobs: list[dict], args, settings: dict[str, str]) -> dict:
    spec = ClusterSpec(nodes=args.nodes, sockets=2, cores_per_socket=8, gpus_per_socket=4,
                       nodes_per_leaf=4, memory_mib=64000, slurm_version=args.slurm_version,
                       sched_interval_s=5)
    folder = Path(tempfile.mkdtemp(prefix=f"burst-{mode.replace(':', '-')}-"))
    agent = mode.startswith("agent")
    if agent:
        lua = folder / "job_submit.lua"
        lua.write_text(render_job_submit_lua(["gpu"], GRACE_S, [],
                                             slurm_version=label(spec.slurm_version)))
        spec = ClusterSpec(**{**spec.__dict__, "job_submit_lua": str(lua)})
    cluster = LocalCluster(spec=spec).up()
    daemon = None
    try:
        out_dir = Path(cluster.root) / "out"
        out_dir.mkdir(exist_ok=True)
        if agent:
            cfg = agent_config(cluster, folder, settings)
            log = (folder / "agent.log").open("w")
            daemon = subprocess.Popen([sys.executable, "-m", "slurm_marl.cli", "run",
                                       "--config", str(cfg)], env=cluster.env,
                                      stdout=log, stderr=subprocess.STDOUT)
            time.sleep(8)   # its first cycle
        total_gpus = args.nodes * 8
        samples: list[tuple[float, int, int]] = []
        done = threading.Event()

        def sample() -> None:
            while not done.wait(2.0):
                try:
                    samples.append((time.time(), alloc_gpus(cluster), pending_count(cluster)))
                except (subprocess.SubprocessError, OSError):
                    pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        submitted: dict[int, float] = {}
        index: dict[int, int] = {}         # Slurm's job id -> k, the job's place in ``jobs``
        t0 = time.time()
        for k, job in enumerate(jobs):
            wrap = (f"echo S $(date +%s.%N); sleep {job['seconds']}; "
                    "echo E $(date +%s.%N)")
            proc = subprocess.run(
                ["sbatch", "--parsable", "-p", "gpu", f"--chdir={out_dir}",
                 f"--output={out_dir}/%j.out", f"-N{job['nodes']}",
                 f"--gres=gpu:{job['gpus']}", "--time=2", "-J", f"b{k}", "--wrap", wrap],
                env=cluster.env, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                raise SystemExit(f"sbatch failed: {proc.stderr.strip()}")
            job_id = int(proc.stdout.strip().split(";")[0])
            submitted[job_id] = time.time()
            index[job_id] = k
        submit_s = time.time() - t0
        deadline = time.time() + args.timeout_s
        while time.time() < deadline:
            out = subprocess.run(["squeue", "-h", "-o", "%i"], env=cluster.env,
                                 capture_output=True, text=True, timeout=30).stdout
            if not out.split():
                break
            time.sleep(2.0)
        else:
            raise SystemExit(f"{mode}: jobs still queued after {args.timeout_s} s")
        done.set()
        starts, ends = {}, {}
        for job_id in submitted:
            path = out_dir / f"{job_id}.out"
            text = path.read_text() if path.exists() else ""
            for kind, stamp in re.findall(r"^([SE]) (\d+\.\d+)$", text, re.M):
                (starts if kind == "S" else ends)[job_id] = float(stamp)
        # A job without its end line (one of 3,000 once, Slurm alone on 24.11: the run was
        # lost because this raised) is reported with what its output file says, and left
        # out of the measures; the per-job comparison leaves it out of both modes.
        missing = sorted(set(submitted) - set(ends) - set(starts)) + sorted(
            j for j in submitted if j in starts and j not in ends)
        lost = [{"job_id": j, "k": index[j], "started": j in starts,
                 "output": ((out_dir / f"{j}.out").read_text(errors="replace")[-300:]
                            if (out_dir / f"{j}.out").exists() else None)}
                for j in missing]
        if lost:
            print(f"{mode}: {len(lost)} job(s) without an end time, left out: "
                  f"{json.dumps(lost[:5])}", file=sys.stderr, flush=True)
        if len(lost) > max(1, len(submitted) // 100):
            raise SystemExit(f"{mode}: {len(lost)} jobs have no end time")
        for j in missing:
            submitted.pop(j)
        waits = sorted(starts[j] - submitted[j] for j in submitted)
        waiting = [(a, p) for _, a, p in samples if p > 0]
        result = {
            "mode": mode, "slurm": label(spec.slurm_version), "jobs": len(jobs),
            "gpus": total_gpus, "submit_s": round(submit_s, 1),
            "makespan_s": round(max(ends.values()) - t0, 1),
            "wait_mean_s": round(statistics.fmean(waits), 1),
            "wait_p95_s": round(waits[int(0.95 * (len(waits) - 1))], 1),
            "gpus_alloc_mean": round(statistics.fmean(a for a, _ in waiting), 1)
            if waiting else None,
            "samples_8_idle": f"{sum(1 for a, _ in waiting if total_gpus - a >= 8)} of "
                              f"{len(waiting)}",
            "jobs_without_end": lost,
        }
        # each job's completion time (submission to end), by its place in the burst: the
        # same k is the same job (GPUs, length, nodes) in every mode
        result["jct_by_job"] = {index[j]: round(ends[j] - submitted[j], 2) for j in submitted}
        if agent:
            daemon.terminate()
            daemon.wait(timeout=120)
            text = (folder / "agent.log").read_text()
            cycles = re.findall(r"cycle (\d+): ([\d.]+) s, (\d+) decisions, (\d+) written",
                                text)
            calls = [len(re.findall(r"runner: .* -> rc", chunk))
                     for chunk in re.split(r"daemon: cycle \d+:", text)[1:-1]]
            result.update({
                "settings": settings, "cycles": len(cycles),
                "cycle_s_mean": round(statistics.fmean(float(c[1]) for c in cycles), 3)
                if cycles else None,
                "calls_per_cycle_mean": round(statistics.fmean(calls), 1) if calls else None,
                "written": sum(int(c[3]) for c in cycles)})
        return result
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
        if agent and args.keep_log and (folder / "agent.log").exists():
            keep = Path(args.keep_log)
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{mode.replace(':', '-')}.log").write_bytes(
                (folder / "agent.log").read_bytes())
        cluster.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--min-s", type=float, default=5.0)
    ap.add_argument("--max-s", type=float, default=25.0)
    ap.add_argument("--two-node", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slurm-version", default=None)
    ap.add_argument("--modes", default="slurm,agent")
    ap.add_argument("--set", action="append", default=[], metavar="NAME.KEY=VALUE")
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-log", default=None, metavar="DIR",
                    help="copy each agent's DEBUG log (every Slurm call with its time) "
                         "into DIR as MODE.log")
    args = ap.parse_args()
    jobs = make_jobs(args.jobs, args.seed, args.min_s, args.max_s, args.two_node)
    settings: dict[str, dict[str, str]] = {}
    for item in args.set:
        name_key, _, value = item.partition("=")
        name, _, key = name_key.rpartition(".")
        settings.setdefault(name, {})[key] = value
    results = []
    for mode in args.modes.split(","):
        name = mode.partition(":")[2]
        res = run_mode(mode, jobs, args, settings.get(name, {}))
        results.append(res)
        print(json.dumps({k: v for k, v in res.items() if k != "jct_by_job"}),
              file=sys.stderr, flush=True)
    base = next((r for r in results if r["mode"] == "slurm"), None)
    if base:
        for r in results:
            for key in ("makespan_s", "wait_mean_s", "gpus_alloc_mean"):
                if r.get(key) is not None and base.get(key):
                    r[f"{key}_vs_slurm"] = round(r[key] / base[key], 3)
            if r is not base:
                r["per_job_vs_slurm"] = per_job(r["jct_by_job"], base["jct_by_job"])
    for r in results:
        r.pop("jct_by_job")
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    for r in results:
        print(" ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
