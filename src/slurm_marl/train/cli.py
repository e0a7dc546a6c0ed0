"""`slurm-marl train interference|marl|order|thresholds` and `slurm-marl evaluate`.

Training code lives here and in the modules beside it (``train marl``: ``marl_cli.py``;
``train order``: ``order_cli.py``;
what the commands share: ``cli_common.py``); the daemon never imports them (it loads a
``state_dict`` through ``agent/learned.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from slurm_marl.console import output_console
from slurm_marl.train.cli_tables import (mark_vs_best_heuristic, print_evaluation,
                                         print_metrics, print_thresholds)
from slurm_marl.train.cli_common import fail as _fail
from slurm_marl.train.cli_common import load_cluster_and_jobs
from slurm_marl.train.cli_common import progress as _progress
from slurm_marl.train.cli_common import strengths as _strength
from slurm_marl.train.marl_cli import marl
from slurm_marl.train.order_cli import order

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Train the interference (reward) model, the placement agents and "
                       "2D-LAS knobs.")

app.command("marl")(marl)
app.command("order")(order)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _threads() -> None:
    import torch
    torch.set_num_threads(1)


def store_samples(path: Path) -> list[dict]:
    """Observed speed samples the agent recorded (``agent.progress_dir``), validated in the
    interference model's format; ``path`` is a state store or the ``state_dir`` holding one."""
    import sqlite3

    from slurm_marl.daemon.store import Store, StoreError
    from slurm_marl.colocation import SampleError, check_sample

    db = path / "state.sqlite" if path.is_dir() else path
    try:
        store = Store.open_readonly(db)
        raw = store.samples.all()
        store.close()
    except (StoreError, ValueError, sqlite3.Error) as exc:
        raise SampleError(str(exc)) from None
    out = []
    for i, s in enumerate(raw):
        s = check_sample(s, f"{db}: speed sample {i + 1}")
        # Slurm job ids restart from 1 on another cluster: keep them apart from other files'
        out.append({**s, "job_id": f"{db}:{s.get('job_id')}"})
    return out


@app.command("interference")
def interference(
    out: Annotated[Path, typer.Option("--out", help="Folder for interference.pt and "
                                      "interference.json.")],
    samples: Annotated[Optional[Path], typer.Option(
        "--samples", help="Co-location samples: JSONL (or CSV) from `slurm-marl simulate "
        "--samples`.")] = None,
    from_store: Annotated[Optional[list[Path]], typer.Option(
        "--from-store", help="The agent's state store (state.sqlite or its state_dir): the "
        "speeds it observed from jobs' progress reports (agent.progress_dir). Repeatable; "
        "combines with --samples.")] = None,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Passes over the samples "
                                        "(more if --min-steps needs them).")] = 60,
    min_steps: Annotated[int, typer.Option("--min-steps", min=0, help="Gradient steps at "
                                           "least (small sample sets need many passes).")
                         ] = 2000,
    val_fraction: Annotated[float, typer.Option("--val-fraction", min=0.01, max=0.9,
                                                help="Share of jobs held out.")] = 0.2,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Fit the interference model; report held-out MAE against a mean-per-model baseline."""
    _threads()
    from slurm_marl.colocation import SampleError, read_samples
    from slurm_marl.train.interference import train_interference

    if samples is None and not from_store:
        _fail("give --samples FILE and/or --from-store STATE (the agent's state.sqlite)")
    rows: list[dict] = []
    sources: list[str] = []
    try:
        if samples is not None:
            rows.extend(read_samples(samples))
            sources.append(str(samples))
        for path in from_store or []:
            got = store_samples(path)
            if not got:
                _fail(f"{path}: no observed speed samples (is agent.progress_dir set, and do "
                      "jobs write progress reports there?)")
            rows.extend(got)
            sources.append(f"store:{path}")
    except SampleError as exc:
        _fail(str(exc))
    if len(rows) < 10:
        _fail(f"{', '.join(sources)}: {len(rows)} samples; need at least 10 to train and "
              "validate")
    with _progress("interference model") as bar:
        task = bar.add_task("train", total=epochs, status="")
        result = train_interference(
            rows, epochs=epochs, val_fraction=val_fraction, seed=seed, min_steps=min_steps,
            progress=lambda e, n, m: bar.update(task, completed=e, total=n,
                                                status=f"val MAE {m:.4f}"))
    result.model.metrics["samples_file"] = " + ".join(sources)
    pt, meta = result.model.save(out)
    doc = {"weights": str(pt), "metadata": str(meta), **result.model.metrics}
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    print_metrics(f"interference model ({len(rows)} samples)", doc,
                  ("val_mae", "baseline_val_mae", "train_mae", "best_epoch", "train_samples",
                   "val_samples", "val_jobs"))
    output_console().print(f"wrote {pt} and {meta}")


@app.command("thresholds")
def thresholds(
    trace: Annotated[Path, typer.Option("--trace", help="Philly trace CSV.")],
    vc: Annotated[str, typer.Option("--vc", help="Virtual cluster whose past to learn from.")],
    before_row: Annotated[int, typer.Option(
        "--before-row", min=0, help="Learn only from the VC's rows before this one (the first "
        "row of the window you will run).")],
    out: Annotated[Path, typer.Option("--out", help="Profile TOML to write (for `slurm-marl "
                                      "simulate --profile`).")],
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster spec.")] =
        "4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b",
    interference: Annotated[str, typer.Option(
        "--interference", help="Simulated interference strength.")] = "none",
    exclude: Annotated[Optional[list[str]], typer.Option(
        "--exclude", help="A window never to train on, e.g. vc=6214e9,rows=10000:10800 "
        "(repeatable).")] = None,
    train_windows: Annotated[int, typer.Option("--train-windows", min=1)] = 2,
    validation_windows: Annotated[int, typer.Option(
        "--validation-windows", min=0, help="More recent windows the learned knobs must win "
        "on by --min-gain, else the fixed knobs are kept (0: no guard).")] = 1,
    min_gain: Annotated[float, typer.Option(
        "--min-gain", min=0.0, max=0.5, help="Least JCT gain on the validation windows.")] = 0.02,
    train_rows: Annotated[int, typer.Option("--train-rows", min=2)] = 500,
    min_load: Annotated[float, typer.Option(
        "--min-load", min=0.0, help="Prefer training windows at least this busy.")] = 0.9,
    population: Annotated[int, typer.Option("--population", min=2)] = 8,
    iterations: Annotated[int, typer.Option("--iterations", min=1)] = 4,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    name: Annotated[str, typer.Option("--name", help="Profile name.")] =
        "las-learned-thresholds",
    bound: Annotated[bool, typer.Option(
        "--bound/--no-bound", help="Search (and validate) subject to the per-job bound "
        "against fifo-backfill on the same windows: at most 2% of jobs > 1.1x slower, none "
        "> 2x, p99 <= 1.5; less violation first, then average JCT. --no-bound: average "
        "JCT only (the bound is still measured and reported).")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Learn 2D-LAS knobs (queues, thresholds, starve limit, preemption) by CEM policy
    search in the simulator on a virtual cluster's past, subject to the per-job bound
    against fifo-backfill; write a tiresias_las profile."""
    from slurm_marl.sim.cluster import ClusterSpecError, parse_cluster
    from slurm_marl.sim.traces import TraceError, Window
    from slurm_marl.train.thresholds import (CemConfig, cem_search, guard, history_windows,
                                             simulator_evaluator, split_history)

    strength = _strength(interference)
    if len(strength) != 1:
        _fail("train thresholds takes one --interference strength")
    wanted = train_windows + validation_windows
    try:
        sim_cluster = parse_cluster(cluster)
        for w in exclude or []:
            Window.parse(w)
        found = history_windows(str(trace), vc, before_row, sim_cluster, rows=train_rows,
                                count=wanted, min_load=min_load, exclude=exclude or [])
    except (TraceError, ClusterSpecError, OSError) as exc:
        _fail(str(exc))
    # most recent first: the nearest past validates, the windows before it train
    checks, windows = split_history(found, validation_windows)
    if not windows:
        _fail(f"{trace}: virtual cluster {vc!r} has {len(found)} windows of {train_rows} rows "
              f"before row {before_row} outside --exclude; {validation_windows} validation "
              f"window(s) and at least one to train on are needed"
              + (" (--validation-windows 0 skips the guard)" if validation_windows else ""))
    cfg = CemConfig(population=population, iterations=iterations, seed=seed)
    with _progress("CEM over 2D-LAS knobs") as bar:
        task = bar.add_task("search", total=population * iterations, status="")
        result = cem_search(
            simulator_evaluator(windows, sim_cluster, strength[0]), cfg,
            progress=lambda d, n, b: bar.update(task, completed=d, total=n,
                                                status=f"best reward {b:.4f}"),
            bound=bound)
    verdict = guard(result, checks, sim_cluster, strength[0], min_gain, bound)
    knobs = verdict.kept if verdict else result.best.knobs
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(knobs.to_toml(name), encoding="utf-8")
    doc = {"profile": str(out), "learned": knobs.as_dict(), "description": knobs.describe(),
           "train_windows": [{"window": w.window, "load": round(w.load, 3)} for w in windows],
           "validation": verdict.as_dict() if verdict else None,
           "interference": strength[0], **result.as_dict()}
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    print_thresholds(vc, before_row, windows, result, verdict, min_gain)
    output_console().print(f"wrote {out}: {escape(knobs.describe())}")


def evaluate(
    checkpoint: Annotated[list[Path], typer.Option(
        "--checkpoint", help="Learned checkpoint(s) (.pt); repeat to compare several.")],
    trace: Annotated[Path, typer.Option("--trace", help="Trace CSV.")],
    window: Annotated[str, typer.Option("--window", help="Held-out window, e.g. "
                                        "vc=6c71a0,rows=5000:6000.")],
    cluster: Annotated[str, typer.Option("--cluster")] =
        "4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b",
    interference: Annotated[str, typer.Option(
        "--interference", help="One or more of none,low,medium,high.")] = "high",
    baselines: Annotated[str, typer.Option(
        "--baselines", help="Comma-separated heuristic profiles.")] =
        "las-consolidate,las-lif,las-skew",
    allow_defer: Annotated[bool, typer.Option("--allow-defer/--no-defer")] = True,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write evaluate.json here.")]
        = None,
    as_json: JsonOpt = False,
) -> None:
    """Run learned placement and the heuristics on a held-out window; print the JCT table."""
    _threads()
    strengths = _strength(interference)
    sim_cluster, (jobs,) = load_cluster_and_jobs(trace, [window], cluster)
    profiles = _checkpoint_profiles(checkpoint, allow_defer) + _baseline_profiles(baselines)
    results = _run_profiles(jobs, sim_cluster, profiles, strengths, seed)
    mark_vs_best_heuristic(results, strengths,
                           [p.name for p in profiles[:len(checkpoint)]])
    doc = {"trace": str(trace), "window": window, "cluster": cluster, "seed": seed,
           "jobs": len(jobs), "checkpoints": [str(c) for c in checkpoint],
           "results": results}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "evaluate.json").write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    print_evaluation(f"{trace.name} {window} on {cluster}: average JCT (s)", profiles,
                     strengths, results)


def _checkpoint_profiles(checkpoint: list[Path], allow_defer: bool) -> list:
    """A learned profile per checkpoint, named after its folder and file so that several
    runs' ``best`` stay apart in the table."""
    from slurm_marl.train.evaluate import learned_profile
    profiles = []
    for path in checkpoint:
        if not Path(path).with_suffix(".pt").is_file():
            _fail(f"checkpoint {path} does not exist")
        folder = Path(path).resolve().parent.name
        name = f"las-learned[{folder + '/' if folder else ''}{Path(path).stem}]"
        profiles.append(learned_profile(path, allow_defer=allow_defer, name=name))
    return profiles


def _baseline_profiles(baselines: str) -> list:
    from slurm_marl.policy.profile import ProfileError, load_profile
    try:
        return [load_profile(p.strip()) for p in baselines.split(",") if p.strip()]
    except ProfileError as exc:
        _fail(str(exc))


def _run_profiles(jobs, sim_cluster, profiles: list, strengths: list[str],
                  seed: int) -> list[dict]:
    """Every profile at every interference strength, one result row each."""
    from slurm_marl.policy.profile import ProfileError
    from slurm_marl.train.evaluate import run_policies
    results: list[dict] = []
    with _progress("evaluate") as bar:
        task = bar.add_task("runs", total=len(profiles) * len(strengths), status="")
        try:
            for s in strengths:
                results += run_policies(jobs, sim_cluster, profiles, s, seed,
                                        on_done=lambda name, row: bar.update(
                                            task, advance=1, status=escape(name)))
        except ProfileError as exc:   # a plugin's model or samples file unreadable
            _fail(str(exc))
    return results
