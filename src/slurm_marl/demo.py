"""`slurm-marl demo`: the README's main command.

A short window of the real Microsoft Philly trace is replayed twice on a fresh local Slurm
cluster (8 nodes x 2 sockets x 4 fake GPUs under two leaf switches), submitted with plain
sbatch: once with Slurm alone, once with the slurm-marl agent deciding order (Tiresias
2D-LAS) and placement (nodes and GPU group). Emulated interference (the simulator's
performance model applied to what Slurm actually placed) makes placement matter. It prints
both runs' JCT next to the simulator's prediction, a few of the agent's decisions with their
reasons, and writes a JCT CDF plot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

DEMO_WINDOW = "vc=6214e9,rows=8870:8950"


def _show_decisions(store_path: Path, console: Console, limit: int = 8) -> None:
    from slurm_marl.daemon.cli import describe_decision, format_time
    from slurm_marl.daemon.store import Store

    if not store_path.exists():
        return
    rows = [r for r in Store(store_path).decisions(limit=400)
            if r["kind"] in ("Place", "Preempt", "Reserve")][:limit]
    table = Table(title="Some of the agent's decisions (slurm-marl decisions / explain)")
    for col in ("time", "job", "decision", "plugin", "reason", "Slurm"):
        table.add_column(col)
    for r in rows:
        table.add_row(format_time(r["time_s"]), str(r["job_id"]), describe_decision(r),
                      r["plugin"] or "", r["reason"] or "", r["status"])
    console.print(table)


def demo(window: str = typer.Option(DEMO_WINDOW, help="Philly window (vc=, rows=A:B)"),
         speedup: float = typer.Option(180.0, min=1.0, help="time compression factor"),
         profile: str = typer.Option("las-consolidate", help="the agent's policy profile"),
         interference: str = typer.Option("medium", help="none, low, medium, high"),
         out: Path = typer.Option(Path("out/demo"), help="results folder"),
         json_output: bool = typer.Option(False, "--json")) -> None:
    """Replay a short Philly window on a real local Slurm cluster: Slurm alone vs the agent."""
    from slurm_marl.replay.cli import compare_replay, render
    from slurm_marl.shared_data import DataNotFound, data_file

    console = Console(stderr=json_output)
    try:
        trace = data_file("traces/philly.csv")
    except DataNotFound as exc:
        console.print(f"[red]trace not found:[/] {exc}")
        raise typer.Exit(2) from None
    report = compare_replay(trace, window, speedup, nodes=8, gpus_per_socket=4,
                            profile=profile, interference=interference, out=out, seed=0,
                            console=console, timeout_s=900)
    if json_output:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    render(report, console)
    _show_decisions(out / "agent" / "state" / "state.sqlite", console)
    console.print(f"JCT CDF plot: {out / 'jct_cdf.png'}; per-job results: "
                  f"{out}/slurm/result.json, {out}/agent/result.json")
    console.print(f"explain one: slurm-marl explain JOBID --store "
                  f"{out / 'agent' / 'state' / 'state.sqlite'}")
