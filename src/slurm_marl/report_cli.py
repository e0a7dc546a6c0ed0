"""`slurm-marl report`: what the agent would have done on a site's own cluster, from its
accounting history and its Slurm files (issue 34; the logic is ``sim/report.py``, and for
``--tune`` ``train/site_tuning.py``). Outside the history, sim and train packages, which it
joins (as ``history_cli``)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
    TimeElapsedColumn
from rich.table import Table

from slurm_marl.console import output_console
from slurm_marl.history import fetch as F
from slurm_marl.history.records import FIELDS, HistoryError, HistoryJob, read_history
from slurm_marl.history_cli import _fail, _when, fetch_with_progress, read_file
from slurm_marl.policy.guard import DEFAULT_GUARD
from slurm_marl.policy.profile import (Profile, ProfileError, load_profile,
                                       with_default_guard)
from slurm_marl.sim import report as R
from slurm_marl.sim.jobs import SimulationError
from slurm_marl.sim.perf import STRENGTHS
from slurm_marl.sim.perjob_tables import pct, print_per_job, ratio, seconds
from slurm_marl.sim.report_html import prior_sentence, render
from slurm_marl.sim.site_config import SiteConfigError, read_site_cluster, slurm_conf_file
from slurm_marl.slurm_integration.runner import SlurmError

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


class BackendError(RuntimeError):
    """A run that failed where --backend ran it (one line; exit 1)."""


BACKENDS = ("inline", "local", "slurm")


def _mapper(backend: str, workers: int, folder: Path, slurm_conf: Path,
            partition: str | None, mem: str, time_min: int):
    """``sim.report.Mapper`` for --backend (None: inline). The slurm backend submits to the
    cluster of the site's own slurm.conf (``SLURM_CONF``)."""
    if backend not in BACKENDS:
        _fail(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}", 2)
    if workers < 1:
        _fail(f"--workers must be at least 1, got {workers}", 2)
    if backend == "inline":
        return None
    from slurm_marl.sweep import CallError, SweepError, map_calls

    conf = slurm_conf_file(slurm_conf) if backend == "slurm" else None

    def mapper(fn, tasks, on_done):
        try:
            got = map_calls(fn, tasks, backend, workers=workers,
                            slurm_folder=folder.resolve(), slurm_conf=conf,
                            partition=partition, time_min=time_min, mem=mem,
                            job_name="slurm-marl-report", on_done=on_done)
        except SweepError as exc:
            raise BackendError(f"--backend {backend}: {exc}") from None
        bad = [(k, r) for k, r in enumerate(got) if isinstance(r, CallError)]
        if bad:
            k, first = bad[0]
            raise BackendError(f"--backend {backend}: {len(bad)} of {len(got)} run(s) "
                               f"failed; the first ({_task_label(tasks[k])}): {first}")
        return got

    return mapper


def _task_label(task) -> str:
    return getattr(task, "label", None) or f"tuning {task[0]}"


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(timespec="seconds")


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
    workers: Annotated[int, typer.Option(
        "--workers", help="Processes (local) or array tasks at a time (slurm).")] = 2,
    slurm_folder: Annotated[Path, typer.Option(
        "--slurm-folder", help="With --backend slurm: submitit's job folder, shared with "
        "the nodes.")] = Path("report-slurm"),
    slurm_partition: Annotated[Optional[str], typer.Option(
        "--slurm-partition", help="With --backend slurm: the array's partition (default: "
        "the cluster's default).")] = None,
    slurm_mem: Annotated[str, typer.Option(
        "--slurm-mem", help="With --backend slurm: memory per task (sbatch --mem).")]
    = "4000M",
    slurm_time: Annotated[int, typer.Option(
        "--slurm-time", help="With --backend slurm: time limit per task, minutes.")] = 120,
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
    try:
        if live:
            jobs, bad_rows, since = read_sacct(slurm_conf, start_s, end_s, tune_from_s,
                                               quiet=as_json)
            history = f"{LIVE} {_day(since)} to {_day(end_s)}"
        else:
            jobs, bad_rows = read_any_history(Path(history))
    except ValueError as exc:
        _fail(str(exc), 2)
    try:
        site = read_site_cluster(slurm_conf, gres_conf, topology_conf)
    except SiteConfigError as exc:
        _fail(str(exc), 2)
    chosen = R.in_period(jobs, start_s, end_s)
    if not chosen:
        _fail(f"{history}: no job submitted in the period ({start or 'start'} to "
              f"{end or 'end'}; the history holds {len(jobs)} job(s))", 2)
    trace = R.site_trace(chosen, site.cluster)
    if not trace.trace:
        left = ", ".join(f"{n} {why}" for why, n in trace.left_out.items())
        _fail(f"{history}: none of the {len(chosen)} job(s) of the period can be simulated "
              f"({left})", 2)
    prior = R.prior_history(jobs, start_s)
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True,
                  disable=not err.is_terminal) as bar:
        task = bar.add_task("report", total=None)
        tuning, recommended = None, None
        if tune:
            period = (start_s if start_s is not None else min(j.submit_s for j in chosen),
                      end_s if end_s is not None else max(j.submit_s for j in chosen) + 1)
            try:
                tuning, recommended = _tune(
                    jobs, site.cluster, period, start_s is not None, tune_from_s, seed,
                    profiles_out, lambda part, done, total: bar.update(
                        task, description=f"tuning {part}", completed=done, total=total),
                    mapper)
            except BackendError as exc:
                _fail(str(exc), 1)
            except (SimulationError, ValueError) as exc:
                _fail(str(exc), 2)
            except OSError as exc:
                _fail(f"--profiles-out {profiles_out}: cannot write ({exc.strerror or exc})", 2)
            if guard:       # the daemon runs the written profiles with its default guard
                recommended = {part: with_default_guard(p) for part, p in recommended.items()}
        try:
            runs = R.run_all(trace, site.cluster, profs, strength_list, seed=seed,
                             restart_delay_s=restart_delay, prior=prior,
                             recommended=recommended, mapper=mapper,
                             progress=lambda label, done, total: bar.update(
                                 task, description=label, completed=done, total=total))
        except BackendError as exc:
            _fail(str(exc), 1)
        except (SimulationError, ValueError) as exc:
            _fail(str(exc), 2)
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
        "cluster": {"slurm_conf": str(slurm_conf), **R.cluster_doc(site.cluster)},
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
    _print(doc)
    for path, _, _ in written:
        if path is not None:
            output_console().print(f"wrote {escape(str(path))}", highlight=False)


def _tune(jobs: list[HistoryJob], cluster, period: tuple[float, float], from_given: bool,
          tune_from_s: float | None, seed: int, folder: Path, progress, mapper=None
          ) -> tuple[dict, dict[str, Profile]]:
    """``--tune``: each partition's knobs learned and guarded (``train/site_tuning.py``),
    the kept ones written to ``folder``; the report's ``tuning`` dict and the recommended
    profile of each partition (``site_tuning.recommended_profiles``)."""
    from slurm_marl.train import site_tuning as T
    from slurm_marl.train.thresholds import CemConfig

    split = T.tune_split(jobs, cluster, *period, from_given, tune_from_s)
    cfg = CemConfig(seed=seed)
    got = T.tune(split, cluster, cfg, progress=progress, mapper=mapper)
    files = T.write_profiles(got, folder)
    doc = _tuning_doc(split, cfg, got, files, folder)
    # the what-if's recommended rows run on the whole period: in-sample where it learned
    doc["learned_in_period"] = split.learn_to_s > period[0]
    return doc, T.recommended_profiles(got)


def _tuning_doc(split, cfg, got, files: dict, folder: Path) -> dict:
    from slurm_marl.train import site_tuning as T

    return {
        "split": split.how,
        "learn": {"from": _day(split.learn_from_s), "to": _day(split.learn_to_s),
                  "jobs": len(split.learn.trace)},
        "evaluate": {"from": _day(split.evaluate_from_s), "to": _day(split.evaluate_to_s),
                     "jobs": len(split.evaluate.trace)},
        "interference": T.INTERFERENCE, "start": T.START_PROFILE, "min_gain": T.MIN_GAIN,
        "min_jobs": T.MIN_TUNE_JOBS,
        "search": {"population": cfg.population, "iterations": cfg.iterations,
                   "seed": cfg.seed},
        "partitions": [{**t.as_dict(), "profile_file": str(files[t.partition])
                        if t.partition in files else None} for t in got],
        "profiles_out": str(folder),
        "config_lines": T.config_lines(files),
    }


def recommended_doc(results: list[dict]) -> dict:
    """The recommendation's profiles per partition and what the what-if predicts for it
    at each strength, against Slurm alone (its ``RECOMMENDED`` rows)."""
    mine = [r for r in results if r["profiles_by_partition"] is not None]
    base = {r["interference"]: r["all"]["avg_jct_s"] for r in results
            if r["profile"] == R.BASELINE}

    def versus(r: dict) -> float | None:
        b = base.get(r["interference"])
        return None if not b or r["all"]["avg_jct_s"] is None else \
            round(r["all"]["avg_jct_s"] / b, 4)

    return {"profiles_by_partition": mine[0]["profiles_by_partition"] if mine else None,
            "predicted": {r["interference"]: {
                "avg_jct_s": r["all"]["avg_jct_s"], "p95_jct_s": r["all"]["p95_jct_s"],
                "avg_wait_s": r["all"]["avg_wait_s"],
                f"{R.BASELINE}_avg_jct_s": base.get(r["interference"]),
                "avg_jct_ratio": versus(r),
                "share_slower_1_1x": (r["per_job"] or {}).get("share_slower_1_1x"),
                "worst_ratio": (r["per_job"] or {}).get("worst_ratio")} for r in mine}}


def recommended_lines(rec: dict) -> list[str]:
    """The recommendation in words: its profile per partition, and its predicted average
    JCT at each strength against Slurm alone's."""
    if not rec["profiles_by_partition"]:
        return []
    parts = ", ".join(f"{k}: {v}" for k, v in rec["profiles_by_partition"].items())
    out = [f"recommended ({parts}); the what-if's '{R.RECOMMENDED}' rows predict:"]
    if rec.get("learned_in_period"):
        out.append("  (optimistic: the knobs were learned on the period's first two thirds, "
                   "part of the jobs these rows run)")
    for strength, p in rec["predicted"].items():
        slower = "-" if p["share_slower_1_1x"] is None else f"{p['share_slower_1_1x']:.1%}"
        out.append(f"  {strength} interference: avg JCT {seconds(p['avg_jct_s'])} s, "
                   f"{ratio(p['avg_jct_ratio'])}x {R.BASELINE}'s "
                   f"{seconds(p[R.BASELINE + '_avg_jct_s'])} s; {slower} of jobs > 1.1x "
                   f"slower, worst {ratio(p['worst_ratio'])}")
    return out


def _print(doc: dict) -> None:
    console = output_console()
    jobs, period = doc["jobs"], doc["period"]
    left = ", ".join(f"{n} {why}" for why, n in jobs["left_out"].items()) or "none"
    console.print(f"{escape(doc['history'])}: {jobs['in_period']} of {jobs['in_history']} "
                  f"jobs submitted {period['first_submit']} to {period['last_submit']}; "
                  f"{jobs['simulated']} simulated, left out: {escape(left)}"
                  + (f"; {doc['bad_rows']} bad row(s) not read" if doc["bad_rows"] else ""),
                  highlight=False)
    parts = ", ".join(f"{p['name']} ({p['nodes']} nodes, {p['gpus']} GPUs)"
                      for p in doc["cluster"]["partitions"])
    console.print(f"cluster of {escape(doc['cluster']['slurm_conf'])}: {escape(parts)}",
                  highlight=False)
    console.print("not modelled:", highlight=False)
    for note in doc["cluster"]["not_modelled"] + doc["simulator_not_modelled"]:
        console.print(f"  - {escape(note)}", highlight=False)
    cal = doc["calibration"]
    table = Table(title=f"calibration: {cal['profile']} (Slurm alone, {cal['interference']} "
                        f"interference) against sacct; start error = |simulated start - "
                        f"recorded start|, within {cal['tolerance']}")
    for title in ("partition", "jobs", "recorded mean wait", "simulated mean wait",
                  "ratio", "median start error", "p90 start error", "within tolerance"):
        table.add_column(title, justify="left" if title == "partition" else "right")
    parts = list(cal["by_partition"].items()) if len(cal["by_partition"]) > 1 else []
    for name, g in [("all", cal["all"]), *parts]:
        table.add_row(escape(name), str(g["jobs"]), seconds(g["recorded_mean_wait_s"]),
                      seconds(g["simulated_mean_wait_s"]), ratio(g["wait_ratio"]),
                      seconds(g["median_start_error_s"]), seconds(g["p90_start_error_s"]),
                      "-" if g["share_within_tolerance"] is None
                      else f"{g['share_within_tolerance']:.1%}")
    console.print(table)
    results = doc["what_if"]["results"]
    table = Table(title=f"what-if (seconds; wait = first start - submit), per job against "
                        f"{doc['what_if']['baseline']} at the same strength")
    for title in ("profile", "strength", "partition", "jobs", "avg JCT", "p95 JCT",
                  "avg wait", "p95 wait", ">1.1x", ">2x", "p99", "worst"):
        table.add_column(title, justify="left" if title in ("profile", "strength",
                                                            "partition") else "right")
    for r in results:
        parts = list(r["by_partition"].items()) if len(r["by_partition"]) > 1 else []
        for name, g in [("all", {**r["all"], "per_job": r["per_job"]}), *parts]:
            p = g["per_job"]
            table.add_row(escape(r["profile"]), r["interference"], escape(name),
                          str(g["jobs"]), seconds(g["avg_jct_s"]), seconds(g["p95_jct_s"]),
                          seconds(g["avg_wait_s"]), seconds(g["p95_wait_s"]),
                          "-" if p is None else pct(p["jobs_slower_1_1x"],
                                                    p["share_slower_1_1x"]),
                          "-" if p is None else pct(p["jobs_slower_2x"], p["share_slower_2x"]),
                          "-" if p is None else ratio(p["p99_ratio"]),
                          "-" if p is None else ratio(p["worst_ratio"]))
    console.print(table)
    for r in results:
        if r["predictions"]:
            console.print(f"{escape(r['profile'])} ({r['interference']}): predictions "
                          f"{escape(r['predictions'])}", highlight=False)
    if any(r["prediction_prior_jobs"] is not None for r in results):
        console.print(escape(prior_sentence(doc["prior_history"])), highlight=False)
    compared = [((r["profile"], r["interference"]), r["per_job"]) for r in results
                if r["per_job"] is not None]
    if compared:
        print_per_job(compared, doc["what_if"]["baseline"], console=console)
    if doc["tuning"] is not None:
        _print_tuning(doc["tuning"], console)


def _print_tuning(tuning: dict, console) -> None:
    table = Table(title=f"tuned profiles: 2D-LAS knobs learned {tuning['learn']['from']} to "
                        f"{tuning['learn']['to']}, kept only where they beat "
                        f"{tuning['start']} {tuning['evaluate']['from']} to "
                        f"{tuning['evaluate']['to']} ({tuning['split']}); avg JCT (s) on "
                        f"the evaluation part")
    for title in ("partition", "jobs learn/eval", "learned knobs", "learned",
                  tuning["start"], "fifo-backfill", "profile", "why"):
        table.add_column(title, justify="right" if title in (
            "jobs learn/eval", "learned", tuning["start"], "fifo-backfill") else "left")
    for t in tuning["partitions"]:
        jct = t["evaluate_avg_jct_s"] or {}
        table.add_row(escape(t["partition"]), f"{t['learn_jobs']}/{t['evaluate_jobs']}",
                      "-" if t["learned"] is None else escape(t["learned"]["description"]),
                      seconds(jct.get("learned")), seconds(jct.get(tuning["start"])),
                      seconds(jct.get("fifo-backfill")),
                      escape(t["profile_file"] or "none written: agent.profile"),
                      escape(t["reason"]))
    console.print(table)
    for line in recommended_lines(tuning["recommended"]):
        console.print(escape(line), highlight=False)
    if tuning["config_lines"]:
        console.print("paste into the daemon's config (the partitions must be in "
                      "agent.managed_partitions):", highlight=False)
        for line in tuning["config_lines"]:
            console.print(f"  {escape(line)}", highlight=False)
    else:
        console.print("no learned knobs kept: every partition keeps agent.profile",
                      highlight=False)


if __name__ == "__main__":  # pragma: no cover
    app = typer.Typer()
    app.command()(report)
    app(sys.argv[1:])
