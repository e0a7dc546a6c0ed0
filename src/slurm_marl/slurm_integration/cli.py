"""`slurm-marl cluster up|down|status` (the local test cluster) and `slurm-marl snapshot`."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from slurm_marl.console import output_console
from slurm_marl.domain import ClusterSnapshot
from slurm_marl.testcluster.versions import OPTION_HELP as VERSION_HELP

app = typer.Typer(no_args_is_help=True, help="A real local Slurm cluster on this host "
                  "(munged, slurmctld, one slurmd per node, fake GPUs) for tests and demos.")

DEFAULT_ROOT = Path(os.environ.get("SLURM_MARL_CLUSTER_ROOT", "/tmp/slurm-marl-cluster"))
RootOpt = Annotated[Path, typer.Option("--root", help="folder holding the cluster's files")]


@app.command("up")
def up(root: RootOpt = DEFAULT_ROOT,
       nodes: int = typer.Option(4, min=1, max=64),
       sockets: int = typer.Option(2, min=1, max=8),
       cores_per_socket: int = typer.Option(4, min=1, max=64),
       gpus_per_socket: int = typer.Option(2, min=0, max=16),
       nodes_per_leaf: int = typer.Option(2, min=1),
       slurm_version: Optional[str] = typer.Option(
           None, "--slurm-version",
           help=VERSION_HELP + "; the root must be under /tmp"),
       json_output: bool = typer.Option(False, "--json")) -> None:
    """Start a local cluster (installs Debian's Slurm and munge first if missing)."""
    from slurm_marl.testcluster import ClusterSpec, HarnessError, LocalCluster
    from slurm_marl.testcluster.versions import requested

    if (root / "cluster.json").exists() and LocalCluster.attach(root).pids():
        typer.echo(f"a cluster is already running under {root}; `slurm-marl cluster down "
                   f"--root {root}` first", err=True)
        raise typer.Exit(1)
    try:
        spec = ClusterSpec(nodes=nodes, sockets=sockets, cores_per_socket=cores_per_socket,
                           gpus_per_socket=gpus_per_socket, nodes_per_leaf=nodes_per_leaf,
                           slurm_version=requested(slurm_version))
        cluster = LocalCluster(spec=spec, root=root).up()
    except HarnessError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    status = cluster.status()
    if json_output:
        typer.echo(json.dumps(status, indent=2))
    else:
        typer.echo(f"cluster up: {len(status['nodes'])} nodes under {root}")
        typer.echo(f"export SLURM_CONF={cluster.slurm_conf}")
        if cluster.bin_dir is not None:
            typer.echo(f"export PATH={cluster.bin_dir}:$PATH  # Slurm "
                       f"{spec.slurm_version}'s clients")


@app.command("down")
def down(root: RootOpt = DEFAULT_ROOT,
         keep_files: bool = typer.Option(False, help="keep the folder (logs, state)")) -> None:
    """Stop the local cluster's daemons (by PID) and remove its folder."""
    from slurm_marl.testcluster import HarnessError, LocalCluster

    try:
        cluster = LocalCluster.attach(root)
    except HarnessError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    cluster.down(remove=not keep_files)
    typer.echo(f"cluster under {root} stopped")


@app.command("status")
def status(root: RootOpt = DEFAULT_ROOT,
           json_output: bool = typer.Option(False, "--json")) -> None:
    """Daemons alive and node states of the local cluster."""
    from slurm_marl.testcluster import HarnessError, LocalCluster

    try:
        info = LocalCluster.attach(root).status()
    except HarnessError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    if json_output:
        typer.echo(json.dumps(info, indent=2))
        return
    typer.echo(f"root: {info['root']}\nSLURM_CONF={info['slurm_conf']}")
    for label, pid in info["daemons"].items():
        typer.echo(f"  {label:<12} pid {pid}")
    for node, state in info["nodes"].items():
        typer.echo(f"  {node:<12} {state}")


def snapshot_to_json(snap: ClusterSnapshot) -> dict:
    def clean(obj):
        if isinstance(obj, frozenset):
            return sorted(obj)
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [clean(v) for v in obj]
        if hasattr(obj, "value") and not isinstance(obj, (int, float, str)):
            return obj.value
        return obj

    return {"time_s": snap.time_s,
            "nodes": [clean(asdict(n)) for n in snap.nodes],
            "jobs": [clean(asdict(j)) for j in snap.jobs],
            "partitions": [clean(asdict(p)) for p in snap.partitions],
            "switches": [clean(asdict(s)) for s in snap.switches]}


def render_snapshot(snap: ClusterSnapshot, console: Console) -> None:
    nodes = Table(title="Nodes", show_lines=False)
    for col in ("node", "state", "leaf", "partitions", "GPU groups (free/total)", "CPUs free",
                "mem free MiB"):
        nodes.add_column(col)
    for n in snap.nodes:
        groups = "  ".join(f"{g.name or g.index}:{len(n.free_in_group(g))}/{g.gpu_count}"
                           for g in n.gpu_groups)
        nodes.add_row(n.name, n.state.lower(), n.leaf_switch or "-", ",".join(n.partitions),
                      groups or "-", f"{n.free_cpus}/{n.cpus}",
                      f"{n.free_memory_mib}/{n.real_memory_mib}")
    console.print(nodes)
    jobs = Table(title="Jobs")
    for col in ("job", "name", "user", "partition", "state", "GPUs", "nodes", "GPU indices",
                "priority", "reason"):
        jobs.add_column(col)
    for j in sorted(snap.jobs, key=lambda j: j.job_id):
        if j.state.value not in ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED"):
            continue
        gpus = f"{j.gpus_per_node}/node x{j.node_count}" if j.gpus_per_node else \
            (f"{j.gpus_per_job} total" if j.gpus_per_job else "0")
        if j.gpu_type:
            gpus += f" ({j.gpu_type})"
        idx = " ".join(f"{n}:{','.join(map(str, i))}" for n, i in j.gpu_alloc) or "-"
        jobs.add_row(str(j.job_id), j.name, j.user, j.partition, j.state.value.lower(), gpus,
                     ",".join(j.nodes) or "-", idx, str(j.priority),
                     j.pending_reason if j.is_pending else "")
    console.print(jobs)
    if snap.switches:
        console.print("Switches: " + "; ".join(
            f"{s.name} -> {','.join(s.nodes or s.switches)}" for s in snap.switches))


def snapshot(slurm_conf: Annotated[Optional[Path], typer.Option(
                 help="slurm.conf (default: $SLURM_CONF)")] = None,
             json_output: bool = typer.Option(False, "--json")) -> None:
    """Print the cluster as the agent sees it (nodes, GPU groups, jobs, switches)."""
    from slurm_marl.slurm_integration.runner import SlurmError, SlurmRunner
    from slurm_marl.slurm_integration.source import CliClusterSource

    try:
        snap = CliClusterSource(SlurmRunner(slurm_conf)).snapshot()
    except SlurmError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if json_output:
        json.dump(snapshot_to_json(snap), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_snapshot(snap, output_console())
