"""``slurm-marl train order``: the agents' order head, searched on simulated JCT
(``train/order.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from slurm_marl.cli_options import (SlurmConfOpt, SlurmFolderOpt, SlurmMemOpt,
                                     SlurmPartitionOpt, SlurmTimeOpt, WorkersOpt)
from slurm_marl.train.cli_common import (fail, load_cluster_and_jobs, progress,
                                         slurm_conf_for, strengths)

WINDOW_HELP = "A Philly window, e.g. vc=6c71a0,rows=0:800 (repeat)."


def order(
    checkpoint: Annotated[Path, typer.Option(
        "--checkpoint", help="The agents' checkpoint (NAME.pt); its placement is kept.")],
    trace: Annotated[Path, typer.Option("--trace", help="Trace CSV (Philly).")],
    window: Annotated[list[str], typer.Option("--window", help=WINDOW_HELP)],
    out: Annotated[Path, typer.Option(
        "--out", help="The checkpoint written: OUT.pt/.json, with OUT.history.json.")],
    cluster: Annotated[str, typer.Option("--cluster", help="The checkpoint's cluster, "
                                                           "e.g. 4x2x2:name=gpu")],
    interference: Annotated[str, typer.Option(
        "--interference", help="Strengths, comma-separated.")] = "high",
    predictions: Annotated[str, typer.Option(
        "--predictions", help="learned (in the run) and/or a quality (helios), "
                              "comma-separated.")] = "learned,helios",
    order_window: Annotated[int, typer.Option("--order-window", min=2)] = 4,
    population: Annotated[int, typer.Option("--population", min=2)] = 8,
    iterations: Annotated[int, typer.Option("--iterations", min=1)] = 5,
    elite: Annotated[int, typer.Option("--elite", min=1)] = 3,
    sigma: Annotated[float, typer.Option("--sigma", min=0.0)] = 0.5,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    backend: Annotated[str, typer.Option(
        "--backend", help="Where the simulations run: inline (one after the other in this "
        "process), local (--workers processes) or slurm (each batch one Slurm array job, "
        "--workers tasks at a time; this host's Python, the trace and --out's folder must "
        "be on a file system the nodes share). A batch: the two baselines, then each "
        "iteration's candidates x tasks.")] = "local",
    workers: WorkersOpt = 1,
    slurm_folder: SlurmFolderOpt = None,
    slurm_conf: SlurmConfOpt = None,
    slurm_partition: SlurmPartitionOpt = None,
    slurm_mem: SlurmMemOpt = "4000M",
    slurm_time: SlurmTimeOpt = 120,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Search the agents' order head by CEM from the order plugin's order (the warm start)
    on average JCT, not making more jobs lose against fifo-backfill than the warm start."""
    from slurm_marl.agent.checkpoint import LearnedCheckpoint
    from slurm_marl.models.interference import ModelFileError
    from slurm_marl.prediction_error import DISTRIBUTIONS
    from slurm_marl.sweep import BackendError, backend_mapper
    from slurm_marl.train.order import Search, Task, train_order

    kinds = [p.strip() for p in predictions.split(",") if p.strip()]
    if not kinds or any(p != "learned" and p not in DISTRIBUTIONS for p in kinds):
        fail(f"--predictions must be one or more of learned, {', '.join(DISTRIBUTIONS)}")
    if elite > population:
        fail("--elite must be at most --population")
    levels = strengths(interference)
    conf = slurm_conf_for(backend, slurm_conf)
    try:
        mapper = backend_mapper(
            backend, workers=workers, slurm_folder=slurm_folder or Path(f"{out}.slurm"),
            slurm_conf=conf, partition=slurm_partition, mem=slurm_mem, time_min=slurm_time,
            job_name="slurm-marl-train-order", label=_run_label)
    except ValueError as exc:
        fail(str(exc))
    sim_cluster, _ = load_cluster_and_jobs(trace, window, cluster)
    try:
        ckpt = LearnedCheckpoint.load(checkpoint)
    except ModelFileError as exc:
        fail(str(exc))
    if not set(ckpt.config.agents) & {p.name for p in sim_cluster.partitions}:
        fail(f"cluster {cluster!r} has none of the checkpoint's partitions "
             f"{list(ckpt.config.agents)}")
    tasks = [Task(w, s, p) for w in window for s in levels for p in kinds]
    with progress("order head") as bar:
        task = bar.add_task("runs", total=None, status="")
        try:
            history = train_order(
                checkpoint, trace, tasks, cluster, out, order_window=order_window,
                search=Search(population, iterations, elite, sigma, seed=seed),
                mapper=mapper,
                progress=lambda n, total, label: bar.update(task, completed=n, total=total,
                                                            status=escape(label)))
        except BackendError as exc:
            fail(str(exc), 1)
    if as_json:
        print(json.dumps(history, indent=2))
        return
    print(f"order head: fitness {history['best_fitness']:.4f} (warm start "
          f"{history['warm_start_fitness']:.4f}; mean over {len(tasks)} tasks of avg JCT "
          f"against the warm start, plus extra jobs losing against fifo-backfill)")
    for it, row in enumerate(history["iterations"], 1):
        print(f"  iteration {it}: best {min(row['fitness']):.4f}, "
              f"best so far {row['best_fitness']:.4f}")
    print(f"weights ({', '.join(history['features'])}): "
          + ", ".join(f"{w:.3f}" for w in history["best_weights"]))
    print(f"written: {out}.pt, {out}.json, {out}.history.json")


def _run_label(args: tuple) -> str:
    """One simulation of ``train/order.simulate_task``, named in a failure's line."""
    _trace, _cluster, task, what, order_window, _seed = args
    who = what if order_window is None else f"{Path(what).name}, window {order_window}"
    return f"{who} on {task.window} at {task.strength}, {task.predictions} predictions"
