"""`slurm-marl demo`: the README's main command.

Brings up a real local Slurm cluster, submits the first jobs of the Tiresias sample trace
with plain sbatch (their GPU counts, nothing else), takes the agent's snapshot, shows it, and
tears the cluster down.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.console import Console


def shared_data_dir() -> Path:
    """``$SLURM_MARL_DATA``, else ``../shared/data`` beside the checkout."""
    env = os.environ.get("SLURM_MARL_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return Path("../shared/data").resolve()


def _trace_jobs(limit: int) -> list[tuple[str, int]]:
    path = shared_data_dir() / "traces" / "tiresias_60_job.csv"
    if not path.exists():
        raise FileNotFoundError(f"trace not found: {path} (set SLURM_MARL_DATA)")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [(f"{r['model_name']}-{r['job_id']}", int(r["num_gpu"])) for r in rows[:limit]]


def demo(jobs: int = typer.Option(8, min=1, max=60, help="jobs to take from the trace"),
         keep: bool = typer.Option(False, help="leave the cluster running"),
         json_output: bool = typer.Option(False, "--json")) -> None:
    """Start a local Slurm cluster, submit trace jobs with sbatch, show the agent's view."""
    from slurm_marl.slurm_integration.cli import render_snapshot, snapshot_to_json
    from slurm_marl.slurm_integration.harness import ClusterSpec, LocalCluster
    from slurm_marl.slurm_integration.runner import SlurmRunner
    from slurm_marl.slurm_integration.source import CliClusterSource

    console = Console(stderr=json_output)
    spec = ClusterSpec(nodes=4, sockets=2, cores_per_socket=4, gpus_per_socket=2,
                       nodes_per_leaf=2)
    started = time.monotonic()
    cluster = LocalCluster(spec=spec).up()
    console.print(f"[bold]local Slurm cluster up[/] in {time.monotonic() - started:.1f} s: "
                  f"{spec.nodes} nodes x {spec.sockets} sockets x {spec.gpus_per_socket} GPUs, "
                  f"SLURM_CONF={cluster.slurm_conf}")
    try:
        per_node = spec.gpus_per_node
        for name, gpus in _trace_jobs(jobs):
            nodes = max(1, -(-gpus // per_node))
            args = ["sbatch", "--parsable", "-J", name, f"--chdir={cluster.root}/out",
                    f"--output={cluster.root}/out/%j.out", "-N", str(nodes),
                    f"--gres=gpu:{min(gpus, per_node)}", "--wrap", "sleep 120"]
            proc = subprocess.run(args, env=cluster.env, capture_output=True, text=True,
                                  timeout=30)
            if proc.returncode != 0:
                console.print(f"[red]sbatch {name} failed:[/] {proc.stderr.strip()}")
            else:
                console.print(f"submitted {name}: {gpus} GPU(s) -> job {proc.stdout.strip()}")
        runner = SlurmRunner(cluster.slurm_conf)
        source = CliClusterSource(runner)
        deadline = time.monotonic() + 15  # slurmctld's next scheduling pass starts what fits
        snap = source.snapshot()
        while not snap.running and time.monotonic() < deadline:
            time.sleep(0.5)
            snap = source.snapshot()
        if json_output:
            json.dump(snapshot_to_json(snap), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            render_snapshot(snap, console)
            console.print(f"snapshot: {len(snap.pending)} pending, {len(snap.running)} "
                          f"running, 4 Slurm client calls per snapshot "
                          f"({runner.calls} in all)")
    finally:
        if keep:
            console.print(f"cluster left running: slurm-marl cluster down --root {cluster.root}")
        else:
            cluster.down()
            console.print("cluster stopped")
