"""`slurm-marl history ...`: a site's accounting history, imported from sacct (and the
GPU-time predictor trained on it). Outside both the history and sim packages, which it joins."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
    TimeElapsedColumn

from slurm_marl.history import fetch as F
from slurm_marl.history import sacct
from slurm_marl.history.records import write_history
from slurm_marl.sim.history_trace import to_trace
from slurm_marl.sim.traces import write_generic
from slurm_marl.slurm_integration.runner import SlurmError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="A site's accounting history (sacct): import it for the simulator "
                       "and the GPU-time predictor.")


def _fail(message: str, code: int = 1) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}",
                                               highlight=False)
    raise typer.Exit(code)


def _when(text: str, what: str) -> float:
    if text == "now":
        return time.time()
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        _fail(f"{what}={text!r}: expected YYYY-MM-DD[THH:MM[:SS]] or 'now'", 2)
        raise  # unreachable


def read_file(path: Path) -> sacct.Import:
    """A saved ``sacct --json`` or ``sacct -P`` (columns ``sacct.TEXT_FIELDS``) file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    if text.lstrip().startswith("{"):
        try:
            return sacct.from_json(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: looks like JSON but is not ({exc})") from None
    return sacct.from_text(text.splitlines())


@app.command("import")
def import_history(
    out: Annotated[Path, typer.Option("--out", help="History CSV to write.")],
    file: Annotated[Optional[Path], typer.Option(
        "--file", help="Read a saved `sacct --json` or `sacct -a -X -P` output (columns: "
        + ",".join(sacct.TEXT_FIELDS) + ") instead of calling sacct.")] = None,
    slurm_conf: Annotated[Optional[Path], typer.Option(
        "--slurm-conf", help="slurm.conf of the cluster to ask (default: $SLURM_CONF).")]
    = None,
    since: Annotated[str, typer.Option("--since", help="First day of history.")]
    = "1970-01-02",
    until: Annotated[str, typer.Option("--until", help="Last moment of history.")] = "now",
    slice_days: Annotated[float, typer.Option("--slice-days",
                                              help="Days of history per sacct call.")] = 7.0,
    trace: Annotated[Optional[Path], typer.Option(
        "--trace", help="Also write the jobs that ran as a simulator trace (generic CSV).")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
    = False,
) -> None:
    """Read finished GPU jobs from Slurm accounting into a history CSV (and a trace).

    Every row sacct gives is accounted for: kept, skipped with a reason (still running, no
    GPUs, ...), or a bad row named on stderr."""
    if file is not None:
        try:
            got = read_file(file)
        except ValueError as exc:
            _fail(str(exc))
    else:
        start, end = _when(since, "--since"), _when(until, "--until")
        if end <= start:
            _fail("--until must come after --since", 2)
        runner = F.sacct_runner(slurm_conf)
        n = len(F.slices(start, end, slice_days * F.DAY_S))
        with Progress(TextColumn("sacct"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True),
                      disable=as_json or n < 2) as bar:
            task = bar.add_task("sacct", total=n)
            try:
                got = F.fetch(runner, start, end, slice_days * F.DAY_S,
                              on_slice=lambda k, _n: bar.update(task, completed=k))
            except SlurmError as exc:
                _fail(f"sacct failed: {exc}")
    jobs = sorted(got.jobs, key=lambda j: (j.submit_s, j.job_id))
    write_history(out, jobs)
    summary = {"history": str(out), **got.summary()}
    if trace is not None:
        tjobs, tskipped = to_trace(jobs)
        write_generic(trace, tjobs)
        summary.update(trace=str(trace), trace_jobs=len(tjobs), trace_skipped=dict(tskipped))
    for line in got.bad[:5]:
        print(f"bad row: {line}", file=sys.stderr)
    if len(got.bad) > 5:
        print(f"... and {len(got.bad) - 5} more bad rows", file=sys.stderr)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    skipped = ", ".join(f"{v} {k}" for k, v in sorted(got.skipped.items())) or "none"
    print(f"{len(jobs)} jobs -> {out} (of {got.rows} rows; skipped: {skipped}; "
          f"bad rows: {len(got.bad)})")
    if trace is not None:
        print(f"{summary['trace_jobs']} jobs -> {trace} (simulator trace)")
