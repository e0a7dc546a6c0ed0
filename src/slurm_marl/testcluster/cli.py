"""`slurm-marl cluster up|down|status`: the local test cluster (munged, slurmctld, one
slurmd per node, fake GPUs) for tests, the replay and the demo."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

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
