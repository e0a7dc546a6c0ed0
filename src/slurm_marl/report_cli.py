"""`slurm-marl report`: what the agent would have done on a site's own cluster, from its
accounting history and its Slurm files (the logic is ``sim/report.py``, and for ``--tune``
``train/site_tuning.py``; the printed form is ``report_print.py``, the tuning's part of the
report ``report_tuning.py``). Outside the history, sim and train packages, which it joins
(as ``history_cli``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
    TimeElapsedColumn

from slurm_marl.cli_options import (SlurmMemOpt, SlurmPartitionOpt, SlurmTimeOpt,
                                     WorkersOpt)
from slurm_marl.console import output_console
from slurm_marl.history import fetch as F
from slurm_marl.history.records import FIELDS, HistoryJob, read_history
from slurm_marl.history_cli import _fail, _when, fetch_with_progress, read_file
from slurm_marl.policy.guard import DEFAULT_GUARD
from slurm_marl.policy.profile import (Profile, ProfileError, load_profile,
                                       with_default_guard)
from slurm_marl.report_print import print_report
from slurm_marl.report_tuning import day as _day, recommended_doc, tune as _tune
from slurm_marl.sim import report as R
from slurm_marl.sim.jobs import SimulationError
from slurm_marl.sim.perf import STRENGTHS
from slurm_marl.sim.report_html import render
from slurm_marl.sim.site_config import SiteConfigError, read_site_cluster, slurm_conf_file
from slurm_marl.slurm_integration.runner import SlurmError
from slurm_marl.sweep import BackendError, backend_mapper

LIVE = "sacct"      # --history sacct: read the site's accounting now


def read_any_history(path: Path) -> tuple[list[HistoryJob], int]:
    """A history CSV (``history import``), a saved ``sacct --json`` or ``sacct -P`` file:
    its jobs and the number of rows that could not be read. ``ValueError`` (one line) when
    nothing could."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    header = [c.strip() for c in first.split(",")]
    if set(FIELDS) <= set(header):
        return read_history(path), 0
    got = read_file(path)
    if not got.jobs and got.bad:
        raise ValueError(f"{path}: no job could be read ({len(got.bad)} bad row(s); first: "
                         f"{got.bad[0]})")
    return got.jobs, len(got.bad)


def read_sacct(slurm_conf: Path, start_s: float, end_s: float, tune_from_s: float | None,
               quiet: bool = False) -> tuple[list[HistoryJob], int, float]:
    """``--history sacct``: the jobs sacct lists from ``tune_from_s`` (else from the
    ``site_tuning.HISTORY_SPAN`` periods before the period, what ``--tune`` learns on by
    default and learned-order's predictor may know) to the period's end ``end_s``, read
    through ``history/fetch.py`` with ``slurm_conf``; the rows that could not be read; the
    read's start. ``ValueError`` (one line) when sacct is missing or fails."""
    from slurm_marl.train.site_tuning import HISTORY_SPAN
    since = tune_from_s if tune_from_s is not None else \
        start_s - HISTORY_SPAN * (end_s - start_s)
    try:
        got = fetch_with_progress(F.sacct_runner(slurm_conf_file(slurm_conf)), since, end_s,
                                  quiet=quiet)
    except SlurmError as exc:
        raise ValueError(f"--history {LIVE}: sacct failed (rc {exc.returncode}): "
                         f"{' '.join(exc.message.split()) or 'no message'}") from None
    return got.jobs, len(got.bad), since


def _profiles(text: str, guard: bool = True) -> list[Profile]:
    """The profiles named, as the daemon runs them: with ``guard``, the default Slurm-alone
    guard in front of each one without a ``[guard]`` table (``agent.guard``)."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        _fail("--profiles is empty", 2)
    try:
        return [with_default_guard(load_profile(n)) if guard else load_profile(n)
                for n in names]
    except ProfileError as exc:
        _fail(f"--profiles: {exc}", 2)
        raise  # unreachable


def _strengths(text: str) -> list[str]:
    out = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in out if s not in STRENGTHS]
    if bad or not out:
        _fail(f"--strengths must be one or more of {', '.join(STRENGTHS)} (comma "
              f"separated), got {text!r}", 2)
    return list(dict.fromkeys(out))


BACKENDS = ("inline", "local", "slurm")


def _mapper(backend: str, workers: int, folder: Path, slurm_conf: Path,
            partition: str | None, mem: str, time_min: int):
    """``sim.report.Mapper`` for --backend (None: inline;
    ``sweep.backend_mapper``). The slurm backend submits to the cluster of the site's own
    slurm.conf (``SLURM_CONF``)."""
    try:
        return backend_mapper(
            backend, workers=workers, slurm_folder=folder,
            slurm_conf=slurm_conf_file(slurm_conf) if backend == "slurm" else None,
            partition=partition, mem=mem, time_min=time_min, job_name="slurm-marl-report",
            label=_task_label)
    except ValueError as exc:
        _fail(str(exc), 2)


def _task_label(task) -> str:
    return getattr(task, "label", None) or f"tuning {task[0]}"


def report(
    history: Annotated[str, typer.Option(
        "--history", help="The site's accounting history: a history CSV (`history import`), "
        "a saved `sacct --json`, a saved `sacct -a -X -P` text file, or `sacct` to read the "
        "accounting now (needs --from; a file named sacct: ./sacct).")],
    slurm_conf: Annotated[Path, typer.Option(
        "--slurm-conf", help="The site's slurm.conf (or its folder).")],
    gres_conf: Annotated[Optional[Path], typer.Option(
        "--gres-conf", help="gres.conf (default: the one beside slurm.conf, if any).")]
    = None,
    topology_conf: Annotated[Optional[Path], typer.Option(
        "--topology-conf", help="topology.conf (default: the one beside slurm.conf, if "
        "any).")] = None,
    start: Annotated[Optional[str], typer.Option(
        "--from", help="First submission of the period (YYYY-MM-DD[THH:MM[:SS]], local "
        "time; default: the history's first).")] = None,
    end: Annotated[Optional[str], typer.Option(
        "--to", help="End of the period, excluded (default: after the history's last "
        "submission; with --history sacct: now).")] = None,
    profiles: Annotated[str, typer.Option(
        "--profiles", help="Comma-separated profile names or TOML files to compare with "
        "Slurm alone (fifo-backfill).")] = ",".join(R.DEFAULT_PROFILES),
    strengths: Annotated[str, typer.Option(
        "--strengths", help="Interference strengths of the what-if runs, from "
        + ", ".join(STRENGTHS) + ".")] = ",".join(R.DEFAULT_STRENGTHS),
    seed: Annotated[int, typer.Option("--seed", help="Seed of model types and noise.")] = 0,
    restart_delay: Annotated[float, typer.Option(
        "--restart-delay", help="Seconds of lost work per preemption.")] = 30.0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Also write the report as JSON to this file.")] = None,
    html: Annotated[Optional[Path], typer.Option(
        "--html", help="Also write the report as one self-contained HTML page (tables and "
        "plots, no network needed to open it) to this file.")] = None,
    tune: Annotated[bool, typer.Option(
        "--tune", help="Also learn each partition's 2D-LAS knobs on the earlier history and "
        "keep them only where they beat las-consolidate on the recent part (the period, or "
        "its last third): profile files and the agent.partition_profiles lines.")] = False,
    tune_from: Annotated[Optional[str], typer.Option(
        "--tune-from", help="With --tune: learn from the jobs submitted from this date up "
        "to --from (default: the twice as long span before --from if it holds enough jobs, "
        "else the period's first two thirds).")] = None,
    profiles_out: Annotated[Path, typer.Option(
        "--profiles-out", help="With --tune: folder for the kept partitions' profile "
        "files.")] = Path("tuned-profiles"),
    guard: Annotated[bool, typer.Option(
        "--guard/--no-guard", help="Each profile as the daemon runs it (agent.guard, on by "
        "default): the default Slurm-alone guard in front of a profile without a [guard] "
        "table, the tuned ones too; --no-guard: profiles as written.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
    = False,
    backend: Annotated[str, typer.Option(
        "--backend", help="Where the simulations run: inline (one after the other in this "
        "process), local (--workers processes) or slurm (one Slurm array job on the "
        "cluster of --slurm-conf, --workers tasks at a time; this host's Python and "
        "--slurm-folder must be on a file system the nodes share). Each profile x strength "
        "is one task, and with --tune each partition's search.")] = "inline",
    workers: WorkersOpt = 2,
    slurm_folder: Annotated[Path, typer.Option(
        "--slurm-folder", help="With --backend slurm: submitit's job folder, shared with "
        "the nodes.")] = Path("report-slurm"),
    slurm_partition: SlurmPartitionOpt = None,
    slurm_mem: SlurmMemOpt = "4000M",
    slurm_time: SlurmTimeOpt = 120,
) -> None:
    """What the agent's profiles would have done on this site, for its own jobs: the
    simulator first replays Slurm alone (fifo-backfill) on the history and says how close
    its starts come to the recorded ones (calibration), then runs each profile at each
    interference strength and compares every job with Slurm alone (what-if)."""
    profs = _profiles(profiles, guard)
    strength_list = _strengths(strengths)
    mapper = _mapper(backend, workers, slurm_folder, slurm_conf, slurm_partition, slurm_mem,
                     slurm_time)
    live = history == LIVE
    end, start_s, end_s, tune_from_s = _period(live, start, end, tune_from, tune)
    jobs, bad_rows, history = _read_jobs(history, live, slurm_conf, start_s, end_s,
                                         tune_from_s, as_json)
    site = _read_site(slurm_conf, gres_conf, topology_conf)
    chosen, trace = _simulable(jobs, site.cluster, history, start, end, start_s, end_s)
    prior = R.prior_history(jobs, start_s)
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True,
                  disable=not err.is_terminal) as bar:
        task = bar.add_task("report", total=None)

        def progress(label, done, total):
            bar.update(task, description=label, completed=done, total=total)

        tuning, recommended = None, None
        if tune:
            tuning, recommended = _tune_step(jobs, chosen, site.cluster, start_s, end_s,
                                             tune_from_s, seed, profiles_out, guard,
                                             progress, mapper)
        runs = _run_step(trace, site.cluster, profs, strength_list, seed, restart_delay,
                         prior, recommended, mapper, progress)
    doc = _document(history, bad_rows, start, end, jobs, chosen, trace, runs, slurm_conf,
                    site.cluster, seed, restart_delay, prior, strength_list, guard, tuning)
    _emit(doc, out, html, as_json)


def _period(live: bool, start: str | None, end: str | None, tune_from: str | None,
            tune: bool) -> tuple[str | None, float | None, float | None, float | None]:
    """The period's options checked and read: ``end`` (``now`` for a live read without
    --to) and the seconds of --from, --to and --tune-from (None where not given)."""
    if live and start is None:
        _fail(f"--history {LIVE} needs --from (the first submission of the period)", 2)
    if live and end is None:
        end = "now"
    start_s = _when(start, "--from") if start is not None else None
    end_s = _when(end, "--to") if end is not None else None
    if start_s is not None and end_s is not None and end_s <= start_s:
        _fail("--to must come after --from", 2)
    tune_from_s = _when(tune_from, "--tune-from") if tune_from is not None else None
    if tune_from_s is not None and not tune:
        _fail("--tune-from needs --tune", 2)
    return end, start_s, end_s, tune_from_s


def _read_jobs(history: str, live: bool, slurm_conf: Path, start_s, end_s, tune_from_s,
               quiet: bool) -> tuple[list[HistoryJob], int, str]:
    """The history's jobs, its unreadable rows and the name the report gives the history
    (for a live read, sacct and the span it read)."""
    try:
        if live:
            jobs, bad_rows, since = read_sacct(slurm_conf, start_s, end_s, tune_from_s,
                                               quiet=quiet)
            history = f"{LIVE} {_day(since)} to {_day(end_s)}"
        else:
            jobs, bad_rows = read_any_history(Path(history))
    except ValueError as exc:
        _fail(str(exc), 2)
    return jobs, bad_rows, history


def _read_site(slurm_conf: Path, gres_conf: Path | None, topology_conf: Path | None):
    """The site's cluster from its Slurm files (exit 2 with the reason when unreadable)."""
    try:
        return read_site_cluster(slurm_conf, gres_conf, topology_conf)
    except SiteConfigError as exc:
        _fail(str(exc), 2)


def _simulable(jobs: list[HistoryJob], cluster, history: str, start, end, start_s, end_s):
    """The jobs submitted in the period and their trace; exit 2 when there is nothing to
    simulate, saying why."""
    chosen = R.in_period(jobs, start_s, end_s)
    if not chosen:
        _fail(f"{history}: no job submitted in the period ({start or 'start'} to "
              f"{end or 'end'}; the history holds {len(jobs)} job(s))", 2)
    trace = R.site_trace(chosen, cluster)
    if not trace.trace:
        left = ", ".join(f"{n} {why}" for why, n in trace.left_out.items())
        _fail(f"{history}: none of the {len(chosen)} job(s) of the period can be simulated "
              f"({left})", 2)
    return chosen, trace


def _tune_step(jobs, chosen, cluster, start_s, end_s, tune_from_s, seed: int,
               profiles_out: Path, guard: bool, progress, mapper):
    """``--tune`` run inside the progress bar, its failures turned into exit codes; with
    ``guard``, the recommended profiles as the daemon runs the written ones (behind its
    default guard)."""
    period = (start_s if start_s is not None else min(j.submit_s for j in chosen),
              end_s if end_s is not None else max(j.submit_s for j in chosen) + 1)
    try:
        tuning, recommended = _tune(
            jobs, cluster, period, start_s is not None, tune_from_s, seed, profiles_out,
            lambda part, done, total: progress(f"tuning {part}", done, total), mapper)
    except BackendError as exc:
        _fail(str(exc), 1)
    except (SimulationError, ValueError) as exc:
        _fail(str(exc), 2)
    except OSError as exc:
        _fail(f"--profiles-out {profiles_out}: cannot write ({exc.strerror or exc})", 2)
    if guard:       # the daemon runs the written profiles with its default guard
        recommended = {part: with_default_guard(p) for part, p in recommended.items()}
    return tuning, recommended


def _run_step(trace, cluster, profs, strength_list, seed, restart_delay, prior,
              recommended, mapper, progress):
    """The calibration and what-if runs, their failures turned into exit codes."""
    try:
        return R.run_all(trace, cluster, profs, strength_list, seed=seed,
                         restart_delay_s=restart_delay, prior=prior,
                         recommended=recommended, mapper=mapper, progress=progress)
    except BackendError as exc:
        _fail(str(exc), 1)
    except (SimulationError, ValueError) as exc:
        _fail(str(exc), 2)


def _document(history, bad_rows, start, end, jobs, chosen, trace, runs, slurm_conf,
              cluster, seed, restart_delay, prior, strength_list, guard, tuning) -> dict:
    """The report as the dict ``--json`` prints (and ``--out`` and ``--html`` write)."""
    left_out = dict(trace.left_out)
    if runs.calibration.outcome.dropped:
        left_out["larger than their partition as modelled"] = runs.calibration.outcome.dropped
    doc = {
        "history": str(history), "bad_rows": bad_rows,
        "period": {"from": start, "to": end,
                   "first_submit": _day(min(j.submit_s for j in chosen)),
                   "last_submit": _day(max(j.submit_s for j in chosen))},
        "jobs": {"in_history": len(jobs), "in_period": len(chosen),
                 "simulated": len(trace.trace) - runs.calibration.outcome.dropped,
                 "left_out": left_out},
        "cluster": {"slurm_conf": str(slurm_conf), **R.cluster_doc(cluster)},
        "simulator_not_modelled": list(R.SIMULATOR_NOT_MODELLED),
        "seed": seed, "restart_delay_s": restart_delay,
        "prior_history": {"ended_before": start, "jobs": len(prior)},
        "calibration": R.calibration(runs.calibration, trace),
        "what_if": {"baseline": R.BASELINE, "strengths": strength_list,
                    "guard": dict(DEFAULT_GUARD) if guard else None,
                    "results": R.what_if(runs, trace)},
        "waits_by": {field: R.waits_by(runs, trace, field) for field in ("user", "account")},
        "tuning": tuning,
    }
    if tuning is not None:
        tuning["recommended"] = {**recommended_doc(doc["what_if"]["results"]),
                                 "learned_in_period": tuning.pop("learned_in_period")}
    return doc


def _emit(doc: dict, out: Path | None, html: Path | None, as_json: bool) -> None:
    """The files asked for written, then the report printed: JSON, or tables and the
    files' names."""
    text = json.dumps(doc, indent=2)
    written = [(out, "--out", lambda: text + "\n"), (html, "--html", lambda: render(doc))]
    for path, option, content in written:
        if path is not None:
            try:
                path.write_text(content(), encoding="utf-8")
            except OSError as exc:
                _fail(f"{option} {path}: cannot write ({exc.strerror or exc})", 2)
    if as_json:
        print(text)
        return
    print_report(doc)
    for path, _, _ in written:
        if path is not None:
            output_console().print(f"wrote {escape(str(path))}", highlight=False)

if __name__ == "__main__":  # pragma: no cover
    app = typer.Typer()
    app.command()(report)
    app(sys.argv[1:])
