"""`slurm-marl simulate` and `slurm-marl compare`: run traces through scheduling profiles."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
    TimeElapsedColumn
from rich.table import Table

from slurm_marl.console import output_console
from slurm_marl.policy.profile import Profile, ProfileError, load_profile, with_default_guard
from slurm_marl.sim.cluster import ClusterSpecError, SimCluster, parse_cluster
from slurm_marl.sim.jobs import SimulationError
from slurm_marl.sim.metrics import jcts, plot_jct_cdf, plot_ratio_cdf, write_jobs_csv, \
    write_samples
from slurm_marl.sim.perjob import FLOOR_S, job_ratios, job_times, per_job_comparison
from slurm_marl.sim.perjob_tables import print_per_job
from slurm_marl.sim.perf import STRENGTHS
from slurm_marl.sim.run import SimRun
from slurm_marl.sim.run import simulate as run_simulation
from slurm_marl.sim.traces import TraceError, load_trace

TraceOpt = Annotated[Path, typer.Option("--trace", help="Trace CSV: Philly, Tiresias or "
                                        "generic format (detected from the header).")]
WindowOpt = Annotated[Optional[str], typer.Option(
    "--window", help="Part of the trace: vc=6c71a0,rows=0:1000,from=2017-10-01,to=...")]
ClusterOpt = Annotated[str, typer.Option(
    "--cluster", help="NODESxSOCKETSxGPUS[:leaf=N][:share=K][+...], a TOML file, or a site's "
                      "slurm.conf (gres.conf and topology.conf read from beside it).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for model types and noise.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
RestartOpt = Annotated[float, typer.Option("--restart-delay",
                                           help="Seconds of lost work per preemption.")]
DropOpt = Annotated[bool, typer.Option(
    "--drop-oversized", help="Leave out jobs larger than their partition (counted in the "
    "summary's dropped_oversized) instead of stopping with an error.")]
PredOpt = Annotated[Optional[str], typer.Option(
    "--prediction-error", help="Give every job a predicted GPU-time: 'helios' (the truth "
    "perturbed to Helios' measured estimator error, an assumption) or 'oracle' (the truth). "
    "Orders such as predicted_las read it; without it they get predictions learned in the "
    "run from the jobs that finished before each submission (LightGBM).")]
PredSeedOpt = Annotated[int, typer.Option("--prediction-seed",
                                          help="Seed of the prediction errors.")]
GuardOpt = Annotated[bool, typer.Option(
    "--guard", help="Each profile as the daemon runs it: the default Slurm-alone guard in "
    "front of a profile without a guard table of its own (agent.guard; `run`, `replay` and "
    "`report` apply it so). Default: the profiles as written (Tiresias' own policy stays "
    "exact).")]
SkipOpt = Annotated[bool, typer.Option(
    "--skip-bad-rows", help="Skip bad trace rows (their count and the first few go to "
    "stderr) instead of stopping with an error.")]
BaselineOpt = Annotated[str, typer.Option(
    "--baseline", help="Also run this profile on the same inputs and compare every job's "
    "JCT with its JCT there (JCT / max(baseline JCT, 600 s); key per_job). Default: "
    "fifo-backfill, what a site runs without the agent; 'none' skips it.")]


def _cell(value, key: str) -> str:
    if value is None:
        return "-"
    if key == "gpu_utilisation":
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:,.0f}"
    return str(value)


def _fail(message: str) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}",
                                               highlight=False)
    raise typer.Exit(2)


def _strengths(text: str) -> list[str]:
    out = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in out if s not in STRENGTHS]
    if bad or not out:
        _fail(f"--interference must be one or more of {', '.join(STRENGTHS)} "
              f"(comma separated), got {text!r}")
    return out


def _progress(label: str) -> Progress:
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


def _warn(message: str) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[yellow]warning:[/yellow] {escape(message)}",
                                               highlight=False)


def _run(trace_jobs, cluster, profile, strength, seed, restart_delay, samples, label,
         drop_oversized=False, prediction_error=None, prediction_seed=0, source=None):
    with _progress(label) as bar:
        task = bar.add_task(label, total=len(trace_jobs))
        return run_simulation(trace_jobs, cluster, profile, interference=strength, seed=seed,
                              restart_delay_s=restart_delay, collect_samples=samples,
                              drop_oversized=drop_oversized,
                              progress=lambda done, total: bar.update(task, completed=done),
                              prediction_error=prediction_error,
                              prediction_seed=prediction_seed, trace_source=source)


def _load(trace: Path, window: str | None, cluster: str, skip_bad_rows: bool = False):
    try:
        sim_cluster = parse_cluster(cluster)
        jobs = load_trace(trace, window, skip_bad_rows=skip_bad_rows, on_skip=_warn)
    except (TraceError, ClusterSpecError, OSError) as exc:
        _fail(str(exc))
    for note in sim_cluster.not_modelled:
        _warn(f"cluster: {note}")
    if not jobs:
        _fail(f"no jobs in {trace} for window {window!r}")
    return jobs, sim_cluster


def _baseline(name: str):
    """The baseline profile, or None for ``none``."""
    if name.strip().lower() == "none":
        return None
    try:
        return load_profile(name.strip())
    except ProfileError as exc:
        _fail(f"--baseline: {exc}")


def _note_dropped(summary: dict, cluster: str) -> None:
    if summary.get("dropped_oversized"):
        _warn(f"dropped {summary['dropped_oversized']} job(s) larger than their partition "
              f"of {cluster} (--drop-oversized)")


def simulate(
    trace: TraceOpt,
    window: WindowOpt = None,
    cluster: ClusterOpt = "8x2x4",
    profile: Annotated[str, typer.Option("--profile", help="Built-in profile name or TOML "
                                         "file.")] = "las-consolidate",
    interference: Annotated[str, typer.Option(
        "--interference", help="none | low | medium | high")] = "none",
    seed: SeedOpt = 0,
    restart_delay: RestartOpt = 30.0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Folder for summary.json, jobs.csv, jct_cdf.png (and samples).")] = None,
    samples: Annotated[bool, typer.Option(
        "--samples", help="Also write co-location samples (samples.jsonl) to --out.")] = False,
    drop_oversized: DropOpt = False,
    skip_bad_rows: SkipOpt = False,
    prediction_error: PredOpt = None,
    prediction_seed: PredSeedOpt = 0,
    baseline: BaselineOpt = "fifo-backfill",
    guard: GuardOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a trace under one scheduling profile and print its metrics (and each job's
    JCT against a baseline profile's, --baseline)."""
    strength = _strengths(interference)
    if len(strength) != 1:
        _fail("simulate takes one --interference strength (compare takes several)")
    base_prof = _baseline(baseline)
    jobs, sim_cluster = _load(trace, window, cluster, skip_bad_rows)
    try:
        prof = load_profile(profile)
        prof = with_default_guard(prof) if guard else prof
        run = _run(jobs, sim_cluster, prof, strength[0], seed, restart_delay,
                   samples and out is not None, f"{prof.name} ({strength[0]})",
                   drop_oversized, prediction_error, prediction_seed, (trace, window))
        base_run = run if base_prof is None or base_prof == prof else _run(
            jobs, sim_cluster, base_prof, strength[0], seed, restart_delay, False,
            f"{base_prof.name} ({strength[0]}, baseline)", drop_oversized,
            prediction_error, prediction_seed, (trace, window))
    except (ProfileError, SimulationError, ValueError) as exc:
        _fail(str(exc))
    _note_dropped(run.summary, cluster)
    per_job = None if base_prof is None else per_job_comparison(
        run.outcome.jobs, base_run.outcome.jobs, baseline=base_prof.name)
    result = {"profile": prof.name, "trace": str(trace), "window": window,
              "cluster": cluster, "interference": strength[0], "seed": seed,
              "restart_delay_s": restart_delay, **run.summary,
              "baseline": None if base_prof is None else base_prof.name, "per_job": per_job}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
        write_jobs_csv(out / "jobs.csv", run.outcome.jobs)
        plot_jct_cdf(out / "jct_cdf.png", {prof.name: jcts(run.outcome.jobs)},
                     f"{trace.name} {window or ''} on {cluster}, {strength[0]}")
        if samples:
            write_samples(out / "samples.jsonl", run.outcome.samples)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title=f"{prof.name} on {cluster} ({strength[0]} interference)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in run.summary.items():
        table.add_row(key, "-" if value is None else f"{value:,}" if isinstance(
            value, (int, float)) else str(value))
    output_console().print(table)
    if per_job is not None:
        print_per_job([((prof.name, strength[0]), per_job)], base_prof.name)
    if out is not None:
        output_console().print(f"wrote {out}/summary.json, jobs.csv, jct_cdf.png"
                        + (", samples.jsonl" if samples else ""))


def compare(
    trace: TraceOpt,
    profiles: Annotated[str, typer.Option(
        "--profiles", help="Comma-separated profile names or TOML files.")] =
        "fifo-consolidate,las-consolidate",
    window: WindowOpt = None,
    cluster: ClusterOpt = "8x2x4",
    interference: Annotated[str, typer.Option(
        "--interference", help="One or more of none,low,medium,high.")] = "none",
    seed: SeedOpt = 0,
    restart_delay: RestartOpt = 30.0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Folder for compare.json and one JCT CDF plot per strength "
        "(default: the plots go to the current folder).")] = None,
    drop_oversized: DropOpt = False,
    skip_bad_rows: SkipOpt = False,
    prediction_error: PredOpt = None,
    prediction_seed: PredSeedOpt = 0,
    baseline: BaselineOpt = "fifo-backfill",
    guard: GuardOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run several profiles on one trace (and strengths), compare their metrics and plot
    their JCT CDFs together (and, against a baseline profile, each job's JCT ratio)."""
    strengths = _strengths(interference)
    base_prof = _baseline(baseline)
    jobs, sim_cluster = _load(trace, window, cluster, skip_bad_rows)
    inputs = _Inputs(jobs, sim_cluster, seed, restart_delay, drop_oversized, prediction_error,
                     prediction_seed, (trace, window))
    profs = _profiles(profiles)
    if guard:
        profs = [with_default_guard(p) for p in profs]
    # the baseline runs once per strength: as one of --profiles, or after them
    base_at = next((i for i, p in enumerate(profs) if p == base_prof), None)
    extra = [base_prof] if base_prof is not None and base_at is None else []
    found = _Comparison(strengths)
    for strength in strengths:
        times = _compare_at(strength, profs, extra, base_at, inputs, found, cluster)
        if base_prof is not None:
            _against_baseline(strength, profs, base_at, base_prof, times, found)
    doc = {"trace": str(trace), "window": window, "cluster": cluster, "seed": seed,
           "restart_delay_s": restart_delay, "results": found.results,
           "baseline": None if base_prof is None else base_prof.name}
    if base_prof is not None:
        doc["baseline_results"] = found.baseline_results
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(json.dumps(doc, indent=2) + "\n")
    plots = _compare_plots(found, out if out is not None else Path("."),
                           f"{trace.name} {window or ''} on {cluster}", base_prof)
    output_console(stderr=as_json).print("wrote " + ", ".join(str(p) for p in plots)
                                  + (f" and {out}/compare.json" if out is not None else ""))
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    _print_comparison(found, profs, extra,
                      f"{trace.name} {window or ''} on {cluster}: average JCT (s)")
    compared = [((r["profile"], r["interference"]), r["per_job"]) for r in found.results
                if r.get("per_job") is not None]
    if compared:
        print_per_job(compared, base_prof.name)


@dataclass(frozen=True)
class _Inputs:
    """What every run of ``compare`` shares: the trace, the cluster and the run options."""

    jobs: list
    cluster: SimCluster
    seed: int
    restart_delay: float
    drop_oversized: bool
    prediction_error: str | None
    prediction_seed: int
    source: tuple

    def run(self, prof: Profile, strength: str, label: str) -> SimRun:
        """Simulate ``prof`` at ``strength``; an error ends the command naming the profile."""
        try:
            return _run(self.jobs, self.cluster, prof, strength, self.seed,
                        self.restart_delay, False, label, self.drop_oversized,
                        self.prediction_error, self.prediction_seed, self.source)
        except (SimulationError, ValueError) as exc:
            _fail(f"{prof.name}: {exc}")


@dataclass
class _Comparison:
    """What ``compare`` found: an entry per profile x strength (``results``) and per run of
    the baseline (``baseline_results``); per strength, each profile's JCTs and its per-job
    JCT ratios against the baseline (what the plots draw)."""

    strengths: list[str]
    results: list[dict] = field(default_factory=list)
    baseline_results: list[dict] = field(default_factory=list)
    cdfs: dict[str, dict[str, list[float]]] = field(init=False)
    ratio_cdfs: dict[str, dict[str, list[float]]] = field(init=False)

    def __post_init__(self) -> None:
        self.cdfs = {s: {} for s in self.strengths}
        self.ratio_cdfs = {s: {} for s in self.strengths}


def _profiles(names: str) -> list[Profile]:
    """``--profiles``, loaded; an error or an empty list ends the command."""
    try:
        profs = [load_profile(p.strip()) for p in names.split(",") if p.strip()]
    except ProfileError as exc:
        _fail(str(exc))
    if not profs:
        _fail("--profiles is empty")
    return profs


def _compare_at(strength: str, profs: list[Profile], extra: list[Profile],
                base_at: int | None, inputs: _Inputs, found: _Comparison,
                cluster: str) -> list[dict]:
    """Run every profile (then the baseline, where it is not one of them) at ``strength``
    into ``found``; each run's per-job times, in that order."""
    times = []
    for k, prof in enumerate(profs + extra):
        label = f"{prof.name} ({strength}{', baseline' if k >= len(profs) else ''})"
        run = inputs.run(prof, strength, label)
        if not found.results and k == 0:
            _note_dropped(run.summary, cluster)
        entry = {"profile": prof.name, "interference": strength, **run.summary}
        if k < len(profs):
            found.results.append(entry)
            found.cdfs[strength][prof.name] = jcts(run.outcome.jobs)
        if k == base_at or k >= len(profs):
            found.baseline_results.append(dict(entry))
        times.append(job_times(run.outcome.jobs))
    return times


def _against_baseline(strength: str, profs: list[Profile], base_at: int | None,
                      base_prof: Profile, times: list[dict], found: _Comparison) -> None:
    """Each job's JCT against the baseline's, for every profile run at ``strength`` (the
    last ``len(profs)`` results); None for the baseline itself."""
    base_times = times[len(profs) if base_at is None else base_at]
    for k, entry in enumerate(found.results[-len(profs):]):
        if k == base_at:
            entry["per_job"] = None
            continue
        entry["per_job"] = per_job_comparison(times[k], base_times, baseline=base_prof.name)
        found.ratio_cdfs[strength][profs[k].name] = list(
            job_ratios(times[k], base_times).values())


def _compare_plots(found: _Comparison, plot_dir: Path, title: str,
                   base_prof: Profile | None) -> list[Path]:
    """A JCT CDF per strength, and a per-job JCT ratio CDF where runs were compared."""
    plots = []
    for strength, series in found.cdfs.items():
        plots.append(plot_dir / f"jct_cdf_{strength}.png")
        plot_jct_cdf(plots[-1], series, f"{title}, {strength}")
        if found.ratio_cdfs[strength]:
            plots.append(plot_dir / f"jct_ratio_cdf_{strength}.png")
            plot_ratio_cdf(plots[-1], found.ratio_cdfs[strength],
                           f"{title}, {strength}\nper job against {base_prof.name}",
                           f"JCT / max(JCT under {base_prof.name}, {FLOOR_S:g} s)")
    return plots


def _print_comparison(found: _Comparison, profs: list[Profile], extra: list[Profile],
                      title: str) -> None:
    """The average JCT of each profile at each strength, then the details of each run."""
    table = Table(title=title)
    table.add_column("profile")
    for s in found.strengths:
        table.add_column(s, justify="right")
    shown = [(p.name, p.name, found.results) for p in profs] + [
        (p.name, f"{p.name} (baseline)", found.baseline_results) for p in extra]
    for name, row_title, rows in shown:
        row = [row_title]
        for s in found.strengths:
            r = next(x for x in rows if x["profile"] == name and x["interference"] == s)
            row.append(f"{r['avg_jct_s']:,.0f}" if r["avg_jct_s"] is not None else "-")
        table.add_row(*row)
    output_console().print(table)
    detail = Table(title="details (seconds)")
    columns = (("profile", "profile"), ("interference", "strength"), ("avg_jct_s", "avg JCT"),
               ("median_jct_s", "median"), ("p95_jct_s", "p95"),
               ("avg_queue_delay_s", "queue delay"), ("longest_wait_s", "longest wait"),
               ("gpu_utilisation", "util"), ("preemptions", "preempt"))
    for key, col_title in columns:
        detail.add_column(col_title, justify="left" if key in ("profile", "interference")
                          else "right")
    for r in found.results + (found.baseline_results if extra else []):
        detail.add_row(*[_cell(r[key], key) for key, _ in columns])
    output_console().print(detail)


if __name__ == "__main__":  # pragma: no cover
    app = typer.Typer()
    app.command()(simulate)
    app.command()(compare)
    app(sys.argv[1:])
