"""Cost of `slurm-marl report` on a month of a 1,000-GPU site's history (issue 34).

Issue 34's target: a month of a 1,000-GPU site's history (about 30,000 jobs) reported in
under 30 min on one core. The site is built from the Philly trace (the only public trace
shipped); what is measured is the report's cost, not its numbers:

* cluster: 128 nodes x 8 GPUs (2 sockets x 4 GPUs, 64 CPUs, 512 GiB) = 1,024 GPUs, written
  as slurm.conf + gres.conf. The ``--own`` Philly virtual clusters (vc) with the most
  GPU-time in the history get a partition each (``vc_<id>``), the others share one
  partition ``other``;
  nodes are shared out by GPU-time (at least enough nodes for the vc's largest job).
* history: the ``--jobs`` jobs submitted from ``--from`` on (the period) and every Philly
  job submitted before it (the month before: Philly starts in earnest on 2017-09-24), so
  learned-order has a prior and ``--tune`` learns on the history before ``--from``.
  Philly has no users, names, QOS, time limits nor start times: user = account = the vc,
  name and QOS empty, no time limit, nodes = ceil(GPUs / 8); a job's recorded start is
  its submit + ``START_DELAY_S`` (a stated rule, not a queue: the calibration numbers are
  meaningless here, only the cost counts), its end start + duration.
* runs: each report in its own process pinned to one core (``taskset -c 0``, one thread
  for OpenMP / BLAS), ``nice -n 19``; wall time, CPU time and peak RSS from ``wait4``.
  ``default``: the default profiles and strengths; ``tune``: the same with ``--tune``.

    .venv/bin/python benchmarks/report_cost.py --jobs 30000 --json
    .venv/bin/python benchmarks/report_cost.py --jobs 5000 --runs default --cprofile

``--cprofile`` runs the first run under ``python -m cProfile`` instead (slower; its time
is not the cost) and prints the functions with the most cumulative time.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from slurm_marl.shared_data import data_file  # noqa: E402 (after the thread setting)

TRACE = str(data_file("traces/philly.csv"))
NODES, SOCKETS, GPUS_PER_SOCKET, CPUS, MEM_MIB = 128, 2, 4, 64, 512 * 1024
GPUS_PER_NODE = SOCKETS * GPUS_PER_SOCKET
START_DELAY_S = 60.0
TARGET_S = 30 * 60.0
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}


def philly_rows(path: str) -> list[tuple[float, float, int, str]]:
    """(submit Unix s, duration s, GPUs, vc) of each Philly job, by submission."""
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            submit = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S") \
                .replace(tzinfo=timezone.utc).timestamp()
            out.append((submit, max(1.0, float(row["duration"])), int(row["num_gpus"]),
                        row["cluster"]))
    out.sort(key=lambda r: r[0])
    return out


def partitions(rows, own: int) -> dict[str, tuple[list[str], int]]:
    """Partition -> (its vcs, its nodes): the ``own`` vcs with the most GPU-time alone,
    the rest in ``other``; nodes by GPU-time share, at least the largest job's."""
    gpu_time, largest = Counter(), Counter()
    for _, dur, gpus, vc in rows:
        gpu_time[vc] += dur * gpus
        largest[vc] = max(largest[vc], gpus)
    top = [vc for vc, _ in gpu_time.most_common(own)]
    groups = {f"vc_{vc}": [vc] for vc in top}   # a name starting with a letter
    groups["other"] = [vc for vc in gpu_time if vc not in top]
    total = sum(gpu_time.values())
    need = {p: max(1, math.ceil(max(largest[v] for v in vcs) / GPUS_PER_NODE))
            for p, vcs in groups.items()}
    share = {p: sum(gpu_time[v] for v in vcs) / total for p, vcs in groups.items()}
    nodes = {p: max(need[p], round(share[p] * NODES)) for p in groups}
    while sum(nodes.values()) != NODES:        # fix rounding on the largest partition
        big = max(nodes, key=lambda p: nodes[p] - need[p])
        nodes[big] += 1 if sum(nodes.values()) < NODES else -1
    return {p: (groups[p], nodes[p]) for p in groups}


def write_site(folder: Path, parts: dict[str, tuple[list[str], int]]) -> Path:
    lines = ["# benchmarks/report_cost.py: 128 nodes x 8 GPUs, Philly vcs as partitions",
             "ClusterName=philly1k", "SelectType=select/cons_tres", "GresTypes=gpu",
             f"NodeName=DEFAULT Sockets={SOCKETS} CoresPerSocket={CPUS // SOCKETS} "
             f"ThreadsPerCore=1 RealMemory={MEM_MIB} Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN",
             f"NodeName=g[001-{NODES:03d}]"]
    first = 1
    for k, (name, (_, n)) in enumerate(parts.items()):
        nodes = f"g[{first:03d}-{first + n - 1:03d}]"
        lines.append(f"PartitionName={name} Nodes={nodes} "
                     f"{'Default=YES ' if k == 0 else ''}MaxTime=INFINITE State=UP")
        first += n
    (folder / "slurm.conf").write_text("\n".join(lines) + "\n", encoding="utf-8")
    half = CPUS // SOCKETS
    gres = [f"NodeName=g[001-{NODES:03d}] Name=gpu File=/dev/nvidia[0-3] Cores=0-{half - 1}",
            f"NodeName=g[001-{NODES:03d}] Name=gpu File=/dev/nvidia[4-7] "
            f"Cores={half}-{CPUS - 1}"]
    (folder / "gres.conf").write_text("\n".join(gres) + "\n", encoding="utf-8")
    return folder / "slurm.conf"


def history(rows, vc_part: dict[str, str]):
    from slurm_marl.history.records import HistoryJob
    out = []
    for k, (submit, dur, gpus, vc) in enumerate(rows, 1):
        start = submit + START_DELAY_S
        out.append(HistoryJob(
            job_id=str(k), name="", user=vc, account=vc, partition=vc_part[vc], qos="",
            gpus=gpus, nodes=max(1, math.ceil(gpus / GPUS_PER_NODE)), time_limit_s=None,
            submit_s=submit, start_s=start, end_s=start + dur, state="COMPLETED"))
    return out


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def run_one(name: str, argv: list[str], out: Path, cprofile: Path | None) -> dict:
    py = [sys.executable] + (["-m", "cProfile", "-o", str(cprofile)] if cprofile else [])
    cmd = ["taskset", "-c", "0", "nice", "-n", "19", *py, "-m", "slurm_marl.report_cli",
           *argv, "--json", "--out", str(out)]
    env = {**os.environ, **ONE_THREAD, "TZ": "UTC"}
    print(f"[{name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    got = {"run": name, "rc": rc, "wall_s": round(wall, 1),
           "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
           "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "cprofile": bool(cprofile)}
    if rc != 0:
        got["error"] = out.with_suffix(".log").read_text()[-2000:]
        return got
    doc = json.loads(out.read_text())
    got["jobs"] = doc["jobs"]
    got["prior_jobs"] = doc["prior_history"]["jobs"]
    got["runs"] = 1 + len({(r["profile"], r["interference"])
                           for r in doc["what_if"]["results"]}
                          - {("fifo-backfill", "none")})
    if doc["tuning"]:
        t = doc["tuning"]
        got["tuning"] = {"split": t["split"], "learn_jobs": t["learn"]["jobs"],
                         "evaluate_jobs": t["evaluate"]["jobs"],
                         "tuned": [p["partition"] for p in t["partitions"] if p["tuned"]],
                         "kept": [p["partition"] for p in t["partitions"] if p["kept"]]}
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--from", dest="start", default="2017-10-16",
                    help="first submission of the period (UTC date)")
    ap.add_argument("--jobs", type=int, default=30000, help="jobs in the period")
    ap.add_argument("--own", type=int, default=4, help="vcs with a partition of their own")
    ap.add_argument("--runs", default="default,tune", help="default, tune (comma separated)")
    ap.add_argument("--cprofile", action="store_true",
                    help="profile the first run (cProfile) and print its top functions")
    ap.add_argument("--keep", type=Path, help="folder to keep the site, history and JSON in")
    ap.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    args = ap.parse_args(argv)

    from slurm_marl.history.records import write_history
    from slurm_marl.sim.site_config import read_site_cluster

    rows = philly_rows(args.trace)
    start_s = datetime.fromisoformat(args.start).replace(tzinfo=timezone.utc).timestamp()
    first = next(k for k, r in enumerate(rows) if r[0] >= start_s)
    period = rows[first:first + args.jobs]
    end_s = rows[first + args.jobs][0] if first + args.jobs < len(rows) else period[-1][0] + 1
    period = [r for r in period if r[0] < end_s]        # ties with the next job: all out
    used = rows[:first] + period
    parts = partitions(used, args.own)
    vc_part = {vc: p for p, (vcs, _) in parts.items() for vc in vcs}
    folder = args.keep or Path(tempfile.mkdtemp(prefix="report-cost-"))
    folder.mkdir(parents=True, exist_ok=True)
    conf = write_site(folder, parts)
    site = read_site_cluster(conf)
    hist = folder / "history.csv"
    write_history(hist, history(used, vc_part))
    offered = sum(d * g for s, d, g, _ in period) / (NODES * GPUS_PER_NODE
                                                     * (end_s - start_s))
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=Path(__file__).parent).stdout.strip()
    setup = {"commit": head, "trace": args.trace, "from": iso(start_s), "to": iso(end_s),
             "period_jobs": len(period), "jobs_before": first, "history_jobs": len(used),
             "history_from": iso(rows[0][0]), "offered_load": round(offered, 3),
             "start_delay_s": START_DELAY_S,
             "partitions": {p: {"nodes": n, "gpus": n * GPUS_PER_NODE, "vcs": len(vcs)}
                            for p, (vcs, n) in parts.items()},
             "not_modelled": list(site.not_modelled), "folder": str(folder)}
    print(f"site: {', '.join(f'{p} {n} nodes' for p, (_, n) in parts.items())}; "
          f"not modelled: {site.not_modelled or 'none'}", file=sys.stderr)
    print(f"period {setup['from']} to {setup['to']}: {len(period)} jobs (offered load "
          f"{offered:.2f} of 1,024 GPUs); {first} jobs before it", file=sys.stderr)
    base = ["--history", str(hist), "--slurm-conf", str(conf), "--from", setup["from"],
            "--to", setup["to"]]
    results = []
    for k, name in enumerate(n.strip() for n in args.runs.split(",") if n.strip()):
        extra = ["--tune", "--profiles-out", str(folder / "tuned")] if name == "tune" else []
        prof = folder / f"{name}.prof" if args.cprofile and k == 0 else None
        got = run_one(name, base + extra, folder / f"{name}.json", prof)
        results.append(got)
        print(f"[{name}] rc {got['rc']}: wall {got['wall_s']:.1f} s, CPU {got['cpu_s']:.1f} s, "
              f"peak RSS {got['peak_rss_mib']:.0f} MiB"
              + (f"; jobs {got['jobs']['simulated']} simulated x {got['runs']} runs"
                 if got["rc"] == 0 else f"\n{got['error']}"), file=sys.stderr, flush=True)
        if prof is not None and prof.exists():
            stats = pstats.Stats(str(prof))
            stats.sort_stats("cumulative").print_stats(25)
    summary = {"setup": setup, "target_s": TARGET_S, "results": results}
    if args.json:
        print(json.dumps(summary, indent=2))
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
