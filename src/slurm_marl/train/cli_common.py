"""What the training commands share (``train/cli.py``, ``train/order_cli.py``): the one-line
error (exit 2, or 1 for a run that failed), the progress bar, the strengths option and the trace windows loaded."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)


def fail(message: str, code: int = 2) -> None:
    """One line on stderr, then exit ``code`` (2: bad input; 1: a run that failed)."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


def progress(label: str) -> Progress:
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=Console(stderr=True), transient=True)


def load_cluster_and_jobs(trace: Path, windows: list[str], cluster: str):
    """The simulated cluster and each window's jobs that fit it
    (``workload.cluster_and_windows``); its error in one line, exit 2."""
    from slurm_marl.train.workload import cluster_and_windows
    try:
        return cluster_and_windows(trace, windows, cluster)
    except ValueError as exc:
        fail(str(exc))


def slurm_conf_for(backend: str, given: Path | None) -> Path | None:
    """``--slurm-conf``, else ``$SLURM_CONF`` (None: sbatch's own default); a one-line
    error (exit 2) if the slurm backend is asked for with a file that does not exist."""
    import os
    conf = given or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF")
                     else None)
    if backend == "slurm" and conf is not None and not conf.is_file():
        fail(f"--slurm-conf {conf} does not exist")
    return conf


def strengths(text: str) -> list[str]:
    """``--interference``'s strengths, comma-separated; a one-line error for another."""
    from slurm_marl.sim.perf import STRENGTHS
    out = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in out if s not in STRENGTHS]
    if bad or not out:
        fail(f"--interference must be one or more of {', '.join(STRENGTHS)}, got {text!r}")
    return out
