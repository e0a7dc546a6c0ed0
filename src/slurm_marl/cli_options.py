"""Command-line options of the commands that run their work on a ``--backend`` (the site
report, `train order`, `train marl`: ``sweep.backend_mapper``), declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

WorkersOpt = Annotated[int, typer.Option(
    "--workers", min=1, help="Processes (local) or array tasks at a time (slurm).")]
SlurmConfOpt = Annotated[Optional[Path], typer.Option(
    "--slurm-conf", help="With --backend slurm: slurm.conf for sbatch/squeue (default: "
    "$SLURM_CONF).")]
SlurmFolderOpt = Annotated[Optional[Path], typer.Option(
    "--slurm-folder", help="With --backend slurm: submitit's job folder, on a file system "
    "the nodes share (default: beside --out).")]
SlurmPartitionOpt = Annotated[Optional[str], typer.Option(
    "--slurm-partition", help="With --backend slurm: the partition to submit to (default: "
    "the cluster's default).")]
SlurmMemOpt = Annotated[str, typer.Option(
    "--slurm-mem", help="With --backend slurm: memory per task (sbatch --mem).")]
SlurmTimeOpt = Annotated[int, typer.Option(
    "--slurm-time", min=1, help="With --backend slurm: time limit per task, minutes.")]
