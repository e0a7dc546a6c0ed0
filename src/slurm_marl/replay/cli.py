"""`slurm-marl replay`: one trace window on real Slurm, twice (Slurm alone, then the agent),
next to the simulator's prediction for the same window."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from slurm_marl.console import output_console
from slurm_marl.testcluster.versions import OPTION_HELP as VERSION_HELP

DEFAULT_WINDOW = "vc=6214e9,rows=8750:8950"
SLURM_KEY = "slurm"             # the Slurm-alone run every other run is compared with
NOISE_KEY = "slurm-noise"       # the second Slurm-alone run: the noise floor
NOISE_LABEL = "Slurm alone, 2nd run (noise floor)"
NOISE_HELP = ("Run Slurm alone a second time on the same plan, last, and compare it with "
              "the first per job: the noise floor of real Slurm. Each agent run's jobs "
              "> 1.5x and beyond the noise floor's worst ratio are listed.")


def _stop_cleanly_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the local cluster's daemons are stopped, not leaked."""
    import signal
    import threading

    def _raise(signum, _frame):
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


def _fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


@dataclass(frozen=True)
class ReplayRun:
    """One run of a comparison: Slurm alone (``mode`` "slurm"; the simulator stands it in
    with ``fifo-backfill``) or the agent with ``profile`` and, for orders that read
    predictions, its GPU-time model and history; ``guard``: the daemon's ``agent.guard``
    (the default Slurm-alone guard where the profile has none)."""

    key: str
    label: str
    mode: str = "agent"
    profile: str = "fifo-backfill"
    gpu_time_model: Path | None = None
    history: Path | None = None
    guard: bool = True

    def sim_profile(self):
        """The profile the simulator predicts this run with: the agent's as the daemon
        runs it (with the default guard where ``guard``), ``fifo-backfill`` for Slurm
        alone."""
        from slurm_marl.policy.profile import load_profile, with_default_guard

        if self.mode != "agent":
            return load_profile("fifo-backfill")
        profile = load_profile(self.profile)
        return with_default_guard(profile) if self.guard else profile


def default_runs(modes: tuple[str, ...], profile: str, gpu_time_model: Path | None = None,
                 history: Path | None = None, guard: bool = True) -> list[ReplayRun]:
    runs = {"slurm": ReplayRun("slurm", "Slurm alone", "slurm"),
            "agent": ReplayRun("agent", f"agent ({profile}{'' if guard else ', no guard'})",
                               "agent", profile, gpu_time_model, history, guard)}
    return [runs[m] for m in modes]


def replay_spec(nodes: int, gpus_per_socket: int, slurm_version: str | None = None):
    from slurm_marl.testcluster import ClusterSpec

    return ClusterSpec(nodes=nodes, sockets=2, cores_per_socket=max(4, 2 * gpus_per_socket),
                       gpus_per_socket=gpus_per_socket, nodes_per_leaf=max(1, nodes // 2),
                       memory_mib=64000, sched_interval_s=2, slurm_version=slurm_version)


def run_with_bar(label: str, total: int, console: Console, fn):
    """``fn(progress)`` under a progress bar named ``label``."""
    with Progress(TextColumn(f"[bold]{escape(label)}[/] {{task.description}}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("submitted", total=total)

        def progress(what, done, total, task=task):
            bar.update(task, description=what, completed=done, total=total)

        return fn(progress)


def compare_replay(trace: Path, window: str, speedup: float, nodes: int, gpus_per_socket: int,
                   runs: list[ReplayRun], interference: str, out: Path, seed: int,
                   console: Console | None = None, timeout_s: float = 3600.0,
                   interference_model: Path | None = None,
                   slurm_version: str | None = None, noise_floor: bool = False) -> dict:
    """Run the window once per run (``default_runs`` for Slurm alone vs one profile) on a
    fresh cluster each, plus the simulator's prediction of each. With a Slurm-alone run
    (key ``slurm``), every other run's jobs are compared with their own JCT there
    (``per_job``, ``replay/perjob.py``); ``noise_floor``: Slurm alone runs once more, last,
    on the same plan, and its comparison is the noise floor."""
    from slurm_marl.replay.perjob import per_job_report, ratio_series, trace_job_times
    from slurm_marl.replay.plan import plan_replay, sim_cluster_spec
    from slurm_marl.replay.runner import run_replay
    from slurm_marl.sim.metrics import plot_jct_cdf, plot_ratio_cdf
    from slurm_marl.sim.run import simulate
    from slurm_marl.sim.traces import load_trace
    from slurm_marl.testcluster.versions import label

    console = console or Console(stderr=True)
    if noise_floor:
        if not any(r.key == SLURM_KEY for r in runs):
            raise ValueError("the noise floor is a second Slurm-alone run compared with the "
                             "first: it needs a Slurm-alone run")
        runs = [*runs, ReplayRun(NOISE_KEY, NOISE_LABEL, "slurm")]
    _stop_cleanly_on_sigterm()
    spec = replay_spec(nodes, gpus_per_socket, slurm_version)
    trace_jobs = load_trace(trace, window)
    plan = plan_replay(trace_jobs, spec, speedup, seed)
    console.print(f"replay: {len(plan.jobs)} jobs of {trace.name} {escape(f'[{window}]')} "
                  f"({len(plan.dropped)} too large dropped), speedup {speedup:g}x, "
                  f"cluster {nodes} nodes x 2 sockets x {gpus_per_socket} GPUs, "
                  f"interference {interference}, Slurm {label(spec.slurm_version)}")
    results, series, times = {}, {}, {}
    for run in runs:
        res = run_with_bar(run.label, len(plan.jobs), console, lambda progress, run=run:
                           run_replay(plan, spec, run.mode, out / run.key, profile=run.profile,
                                      interference=interference, progress=progress,
                                      timeout_s=timeout_s,
                                      interference_model=interference_model,
                                      gpu_time_model=run.gpu_time_model,
                                      history=run.history, guard=run.guard))
        results[run.key] = res.summary()
        series[run.label] = res.jct_trace_s()
        times[run.key] = trace_job_times(plan, res.jobs)
    cluster = sim_cluster_spec(spec)
    # The simulator predicts with what the agent has: the given model, else (like a daemon
    # whose profile names no model) the neutral estimator, not a pilot run's fitted one.
    from slurm_marl.policy.interference import NeutralEstimator
    estimator = NeutralEstimator()
    if interference_model is not None:
        from slurm_marl.models.interference import InterferenceModel
        estimator = InterferenceModel.load(interference_model)
    predicted, slurm_alone = {}, None
    for run in runs:
        if run.mode == "slurm" and slurm_alone is not None:
            predicted[run.key] = slurm_alone    # the simulator is deterministic
            continue
        # orders that read predictions learn them in the simulated run, from the window's
        # own history before it where the trace has one (sim.run.simulate)
        sim = simulate(list(plan.sim_trace), cluster, run.sim_profile(),
                       interference=interference, seed=seed,
                       estimator=estimator if run.mode == "agent" else None,
                       trace_source=(trace, window))
        predicted[run.key] = sim.summary
        if run.mode == "slurm":
            slurm_alone = sim.summary
    report = {"slurm_version": label(spec.slurm_version), "trace": str(trace), "window": window,
              "speedup": speedup, "jobs": len(plan.jobs),
              "dropped": list(plan.dropped), "cluster": cluster, "interference": interference,
              "interference_model": str(interference_model) if interference_model else None,
              "runs": {r.key: r.label for r in runs},
              "measured": results, "simulated": predicted}
    if SLURM_KEY in results:
        m_s, p_s = results[SLURM_KEY]["avg_jct_s"], predicted[SLURM_KEY].get("avg_jct_s")
        report["ratios_to_slurm"] = {
            key: {"measured": results[key]["avg_jct_s"] / m_s if m_s else None,
                  "simulated": predicted[key].get("avg_jct_s") / p_s if p_s else None}
            for key in results if key != SLURM_KEY}
        if "agent" in results:
            report["measured_ratio"] = report["ratios_to_slurm"]["agent"]["measured"]
            report["simulated_ratio"] = report["ratios_to_slurm"]["agent"]["simulated"]
    labels = {r.key: r.label for r in runs}
    report["per_job"] = None
    out.mkdir(parents=True, exist_ok=True)
    ratio_plot = out / "jct_ratio_cdf.png"
    ratio_plot.unlink(missing_ok=True)    # an earlier replay's, if this one draws none
    if SLURM_KEY in times:
        report["per_job"] = per_job_report(times, SLURM_KEY,
                                           NOISE_KEY if noise_floor else None, labels)
        ratios = ratio_series(times, SLURM_KEY, labels)
        if ratios:
            plot_ratio_cdf(ratio_plot, ratios,
                           f"Per job on real Slurm, {trace.name} [{window}]\nagainst "
                           f"{labels[SLURM_KEY]}",
                           f"JCT / max(JCT under {labels[SLURM_KEY]}, "
                           f"{report['per_job']['floor_s']:g} s), trace seconds")
    plot_jct_cdf(out / "jct_cdf.png", series, f"JCT on real Slurm, {trace.name} [{window}]")
    (out / "replay.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def render(report: dict, console: Console) -> None:
    table = Table(title=f"Replay of {report['jobs']} jobs ({report['window']}) on Slurm "
                        f"{report.get('slurm_version', '22.05')}, JCT in trace seconds")
    for col in ("run", "completed", "avg JCT", "p95 JCT", "avg queueing", "makespan",
                "preemptions", "sim avg JCT"):
        table.add_column(col, justify="right")
    labels = report.get("runs") or {}
    for key, res in report["measured"].items():
        sim = report["simulated"].get(key, {})
        table.add_row(escape(labels.get(key, key)),
                      f"{res['completed']}/{res['jobs']}", _fmt(res["avg_jct_s"]),
                      _fmt(res["p95_jct_s"]), _fmt(res["avg_queue_s"]), _fmt(res["makespan_s"]),
                      str(res["preemptions"]), _fmt(sim.get("avg_jct_s")))
    console.print(table)
    for key, ratio in (report.get("ratios_to_slurm") or {}).items():
        if ratio["measured"] is not None and ratio["simulated"] is not None:
            console.print(f"{escape(labels.get(key, key))} / Slurm alone avg JCT: measured "
                          f"{ratio['measured']:.2f}, simulator predicts "
                          f"{ratio['simulated']:.2f}")
    late = [r["submit_late_max_s"] for r in report["measured"].values()]
    console.print(f"submissions late by at most {max(late):.2f} s wall")
    if report.get("per_job"):
        render_per_job(report["per_job"], labels, console)


def render_per_job(per_job: dict, labels: dict, console: Console, listed: int = 10) -> None:
    """The report's ``per_job`` for people: the tables (``sim/perjob_tables.py``), the noise
    floor and, per run, its jobs beyond it (the ``listed`` worst named)."""
    from slurm_marl.sim.perjob_tables import pct, print_per_job, ratio, worst_job

    noise = per_job["noise_floor"]
    rows = [((labels.get(key, key),), p) for key, p in per_job["runs"].items()]
    if noise is not None:
        rows.append(((labels.get(per_job["noise_run"], NOISE_LABEL),), noise))
    if not rows:
        return
    print_per_job(rows, per_job["baseline_label"], columns=("run",), console=console,
                  users=False, note="JCT in trace seconds, #job ids the trace's")
    if noise is None:
        console.print("no noise floor: Slurm alone ran once (--noise-floor runs it twice)")
        return
    console.print(f"noise floor (Slurm alone against itself, {noise['compared_jobs']} jobs): "
                  f"{pct(noise['jobs_slower_1_1x'], noise['share_slower_1_1x'])} > 1.1x, "
                  f"{pct(noise['jobs_slower_2x'], noise['share_slower_2x'])} > 2x, "
                  f"p99 {ratio(noise['p99_ratio'])}, worst {ratio(noise['worst_ratio'])} "
                  f"({worst_job(noise['worst_job'])})")
    for key, p in per_job["runs"].items():
        beyond = p["beyond_noise_floor"]
        name = escape(labels.get(key, key))
        if beyond is None:
            console.print(f"{name}: no job compared in the noise-floor run, so none is "
                          "judged beyond it")
            continue
        line = (f"{name}: {beyond['jobs']} job{'s' if beyond['jobs'] != 1 else ''} "
                f"> {beyond['min_ratio']:g}x and beyond the noise floor "
                f"(worst {beyond['noise_worst_ratio']:.2f}x)")
        shown = beyond["job_list"][:listed]
        if shown:
            line += ": " + ", ".join(
                f"#{j['job_id']} {j['ratio']:.2f}x ({j['num_gpus']} GPU"
                f"{'s' if j['num_gpus'] != 1 else ''}, {j['baseline_jct_s']:,.0f} -> "
                f"{j['jct_s']:,.0f} s)" for j in shown)
            if beyond["jobs"] > len(shown):
                line += f", and {beyond['jobs'] - len(shown)} more (replay.json)"
        console.print(line)


def replay(trace: Annotated[Optional[Path], typer.Option(
               help="trace CSV (default: the Philly trace shipped in the package)")] = None,
           window: str = typer.Option(DEFAULT_WINDOW, help="trace window (vc=, rows=A:B)"),
           speedup: float = typer.Option(60.0, min=1.0, help="time compression factor"),
           nodes: int = typer.Option(8, min=2, max=32),
           gpus_per_socket: int = typer.Option(4, min=1, max=8),
           profile: str = typer.Option("las-consolidate", help="the agent's policy profile"),
           interference: str = typer.Option("medium", help="none, low, medium, high"),
           out: Path = typer.Option(Path("out/replay"), help="results folder"),
           seed: int = typer.Option(0),
           mode: str = typer.Option("both", help="both, slurm or agent"),
           interference_model: Annotated[Optional[Path], typer.Option(
               help="interference model (`slurm-marl train interference`) for the profile's "
                    "least_interference placement, e.g. one refreshed with --from-store")
           ] = None,
           gpu_time_model: Annotated[Optional[Path], typer.Option(
               help="the agent's GPU-time predictor (`slurm-marl history train`), for "
                    "profiles that order by predictions (learned-order)")] = None,
           history: Annotated[Optional[Path], typer.Option(
               help="the history CSV the predictor continues from (`slurm-marl history "
                    "import`)")] = None,
           slurm_version: Optional[str] = typer.Option(
               None, "--slurm-version",
               help=VERSION_HELP),
           noise_floor: bool = typer.Option(False, "--noise-floor/--no-noise-floor",
                                            help=NOISE_HELP + " Costs one more run."),
           guard: bool = typer.Option(True, "--guard/--no-guard",
                                      help="the daemon's agent.guard: the default Slurm-alone "
                                      "guard where the profile has none (--no-guard: the "
                                      "profile as written)"),
           json_output: bool = typer.Option(False, "--json")) -> None:
    """Replay a trace window on a fresh local Slurm cluster: Slurm alone vs the agent, and
    every job against its own JCT with Slurm alone."""
    from slurm_marl.shared_data import data_file

    trace = trace or data_file("traces/philly.csv")
    console = output_console(stderr=json_output)
    if mode not in ("both", "slurm", "agent"):
        console.print(f"[red]error:[/] --mode is both, slurm or agent, got {escape(mode)!r}")
        raise typer.Exit(2)
    modes = ("slurm", "agent") if mode == "both" else (mode,)
    if noise_floor and "slurm" not in modes:
        console.print("[red]error:[/] --noise-floor compares a second Slurm-alone run with "
                      "the first: it needs --mode both or slurm")
        raise typer.Exit(2)
    for what, path in (("interference model", interference_model),
                       ("GPU-time model", gpu_time_model), ("history", history)):
        if path is not None and not path.exists():
            console.print(f"[red]error:[/] {what} {path} does not exist")
            raise typer.Exit(2)
    from slurm_marl.testcluster import HarnessError
    from slurm_marl.testcluster.versions import requested

    try:
        version = requested(slurm_version)
    except HarnessError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    report = compare_replay(trace, window, speedup, nodes, gpus_per_socket,
                            default_runs(modes, profile, gpu_time_model, history, guard),
                            interference, out, seed, console,
                            interference_model=interference_model, slurm_version=version,
                            noise_floor=noise_floor)
    if json_output:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(report, console)
        plots = "JCT CDF plot" + (" and per-job ratio CDF plot" if report["per_job"] else "")
        console.print(f"results and {plots} in {out}/")
