"""`slurm-marl sweep run SPEC.toml`: an evaluation sweep in local processes or as one Slurm
array job, gathered into DIR/results.json, DIR/table.md and DIR/ratios.png."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
    TimeElapsedColumn

from slurm_marl.sweep.report import PLOT, RESULTS, TABLE, write_report
from slurm_marl.sweep.run import BACKENDS, SweepError, run_sweep
from slurm_marl.sweep.spec import SweepSpecError, load_sweep

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Evaluation sweeps (windows x strengths x seeds x profiles) in local "
                       "processes or as one Slurm array job (submitit).")


@app.callback()
def _group() -> None:
    """Evaluation sweeps (a group even with one command: `slurm-marl sweep run ...`)."""


def _fail(message: str, code: int = 2) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}",
                                               highlight=False)
    raise typer.Exit(code)


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("simulations"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                    disable=quiet)


@app.command("run")
def run(
    spec: Annotated[Path, typer.Argument(help="Sweep TOML file (see slurm_marl/sweep/spec.py).")],
    backend: Annotated[str, typer.Option("--backend", help="local | slurm")] = "local",
    workers: Annotated[int, typer.Option(
        "--workers", help="Processes (local) or array tasks at a time (slurm).")] = 2,
    out: Annotated[Path, typer.Option("--out", help="Folder for results.json, table.md, "
                                      "ratios.png.")] = Path("sweep-out"),
    slurm_folder: Annotated[Optional[Path], typer.Option(
        "--slurm-folder", help="submitit's job folder, readable on the nodes "
                               "(default: OUT/slurm).")] = None,
    slurm_conf: Annotated[Optional[Path], typer.Option(
        "--slurm-conf", help="slurm.conf for sbatch/squeue (default: $SLURM_CONF).")] = None,
    partition: Annotated[Optional[str], typer.Option(
        "--partition", help="Slurm partition (default: the cluster's default).")] = None,
    time_min: Annotated[int, typer.Option("--time", help="Slurm time limit per cell, "
                                          "minutes.")] = 60,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (rows and table); "
                                          "no progress bar.")] = False,
) -> None:
    """Run every cell of a sweep and write its table and plot; exit 1 if a cell failed."""
    if backend not in BACKENDS:
        _fail(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if workers < 1:
        _fail(f"--workers must be at least 1, got {workers}")
    if slurm_conf is not None and not slurm_conf.is_file():
        _fail(f"--slurm-conf {slurm_conf} does not exist")
    try:
        sweep = load_sweep(spec)
    except SweepSpecError as exc:
        _fail(str(exc))
    with _progress(as_json) as bar:
        task = bar.add_task("simulations", total=len(sweep.cells))
        try:
            rows = run_sweep(sweep.cells, backend, workers=workers,
                             slurm_folder=(slurm_folder or out / "slurm").resolve(),
                             slurm_conf=slurm_conf or os.environ.get("SLURM_CONF"),
                             partition=partition, time_min=time_min,
                             on_done=lambda row, done, total: bar.update(task, completed=done))
        except SweepError as exc:
            _fail(str(exc), 1)
    table = write_report(rows, sweep.baseline, out)
    failed = [r for r in rows if r.get("error")]
    if as_json:
        typer.echo(json.dumps({"spec": str(spec), "backend": backend, "out": str(out),
                               "failed": len(failed), "table": table, "rows": rows}, indent=2))
    else:
        _print_summary(out, rows, failed)
    if failed:
        raise typer.Exit(1)


def _print_summary(out: Path, rows: list[dict], failed: list[dict]) -> None:
    console = Console(soft_wrap=True)
    console.print((out / TABLE).read_text(), markup=False, highlight=False)
    console.print(f"{len(rows)} simulations, {len(failed)} failed; wrote {out / RESULTS}, "
                  f"{out / TABLE}, {out / PLOT}", markup=False, highlight=False)
    for row in failed[:5]:
        console.print(f"failed {row['key']}: {row['error']}", markup=False, highlight=False)


if __name__ == "__main__":
    app()
