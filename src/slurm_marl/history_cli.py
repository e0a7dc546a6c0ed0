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


def fetch_with_progress(runner, start_s: float, end_s: float, slice_s: float = 7 * F.DAY_S,
                        quiet: bool = False) -> sacct.Import:
    """``fetch.fetch`` with a progress bar on stderr over its sacct calls (none when
    ``quiet`` or one call). Raises ``SlurmError`` as ``fetch`` does."""
    n = len(F.slices(start_s, end_s, slice_s))
    with Progress(TextColumn("sacct"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True),
                  disable=quiet or n < 2) as bar:
        task = bar.add_task("sacct", total=n)
        return F.fetch(runner, start_s, end_s, slice_s,
                       on_slice=lambda k, _n: bar.update(task, completed=k))


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
        try:
            got = fetch_with_progress(F.sacct_runner(slurm_conf), start, end,
                                      slice_days * F.DAY_S, quiet=as_json)
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


def _load_jobs(history: Optional[Path], philly: Optional[Path], vc: Optional[str]):
    from slurm_marl.history.philly import philly_history
    from slurm_marl.history.records import HistoryError, read_history
    if (history is None) == (philly is None):
        _fail("give one of --history (a history CSV) or --philly (the Philly trace)", 2)
    try:
        jobs = read_history(history) if history is not None else philly_history(philly, vc)
    except HistoryError as exc:
        _fail(str(exc), 2)
    if not jobs:
        _fail(f"{history or philly}: no jobs" + (f" of virtual cluster {vc}" if vc else ""), 2)
    return jobs


HistoryOpt = Annotated[Optional[Path], typer.Option(
    "--history", help="History CSV written by `history import`.")]
PhillyOpt = Annotated[Optional[Path], typer.Option(
    "--philly", help="The Philly trace instead (virtual cluster as account; a job counts as "
    "ended at submit + duration).")]
VcOpt = Annotated[Optional[str], typer.Option("--vc", help="Philly: one virtual cluster.")]


@app.command("train")
def train_model(
    out: Annotated[Path, typer.Option("--out", help="Folder for the model (text files).")],
    history: HistoryOpt = None, philly: PhillyOpt = None, vc: VcOpt = None,
    until: Annotated[str, typer.Option(
        "--until", help="Train on jobs ended by then (default: all).")] = "now",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
    = False,
) -> None:
    """Train the GPU-time predictor on the jobs of a history that had ended by --until,
    each described as it was known at its submission."""
    from slurm_marl.history.predictor import train
    from slurm_marl.history.records import ModelError
    jobs = _load_jobs(history, philly, vc)
    cutoff = _when(until, "--until") if until != "now" else float("inf")
    try:
        model, trained_on = train(jobs, cutoff, seed=seed)
    except ModelError as exc:
        _fail(str(exc))
    model.save(out)
    summary = {"model": str(out), "trained_on": trained_on, "jobs_in_history": len(jobs)}
    print(json.dumps(summary, indent=2) if as_json else
          f"model trained on {trained_on} ended jobs -> {out}")


@app.command("evaluate")
def evaluate_model(
    start: Annotated[str, typer.Option("--from", help="First submission scored.")],
    end: Annotated[str, typer.Option("--to", help="End of the scored submissions.")] = "now",
    history: HistoryOpt = None, philly: PhillyOpt = None, vc: VcOpt = None,
    refit_days: Annotated[float, typer.Option(
        "--refit-days", help="Days between refits on the jobs ended so far.")] = 7.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
    = False,
) -> None:
    """Score the predictor as a site would have used it: each job submitted in
    [--from, --to) predicted at its submission by a model refit every --refit-days on the
    jobs ended by then, against the history-median baseline."""
    from slurm_marl.history.evaluate import report
    from slurm_marl.history.predictor import rolling
    jobs = _load_jobs(history, philly, vc)
    a, b = _when(start, "--from"), _when(end, "--to")
    if b <= a:
        _fail("--to must come after --from", 2)
    n_fits = max(1, int((min(b, max(j.submit_s for j in jobs)) - a) / (refit_days * 86400)) + 1)
    with Progress(TextColumn("refits"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), disable=as_json) as bar:
        task = bar.add_task("refits", total=n_fits)
        preds = rolling(jobs, a, b, refit_every_s=refit_days * 86400, seed=seed,
                        on_fit=lambda _n: bar.advance(task))
    rep = report(preds)
    if as_json:
        print(json.dumps(rep, indent=2))
        return
    print(f"{rep['scored']} of {rep['jobs']} jobs scored")
    for part in ("all", "over_1_gpu_hour"):
        for who in ("model", "history_median"):
            s = rep[part][who]
            print(f"{part:>16} {who:>15}: n={s['n']} spearman={s['spearman']} "
                  f"within_2x={s['within_2x']} median_abs_log_error="
                  f"{s['median_abs_log_error']}")
