"""`slurm-marl snapshot`: what the agent reads of a Slurm cluster, as a table or JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from slurm_marl.console import output_console
from slurm_marl.domain import ClusterSnapshot

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
