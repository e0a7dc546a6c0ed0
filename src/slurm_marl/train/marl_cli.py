"""`slurm-marl train marl`: the placement agents (PPO), trained here or, with ``--backend
local | slurm``, in another process or as one Slurm job (``train/marl_job.py`` is the run;
``sweep.backend_mapper`` hands it over, as the site report and `train order` do)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from slurm_marl.cli_options import (SlurmConfOpt, SlurmFolderOpt, SlurmMemOpt,
                                     SlurmPartitionOpt, SlurmTimeOpt)
from slurm_marl.colocation import POOR_VS_IDEAL
from slurm_marl.console import output_console
from slurm_marl.train.cli_common import fail, progress, slurm_conf_for
from slurm_marl.train.cli_common import strengths as _strength
from slurm_marl.train.cli_tables import print_metrics

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
POLL_S = 2.0      # how often the progress bar reads a job's train_log.csv


def marl(
    reward_model: Annotated[Path, typer.Option(
        "--reward-model", help="Interference model from `train interference` (its .pt or "
        "its folder).")],
    trace: Annotated[Path, typer.Option("--trace", help="Trace CSV (Philly, Tiresias, "
                                        "generic).")],
    window: Annotated[list[str], typer.Option(
        "--window", help="Training window(s), e.g. vc=6c71a0,rows=0:3000 (repeatable).")],
    out: Annotated[Path, typer.Option("--out", help="Run folder: policy.pt/json, "
                                      "train_log.csv, training_curve.png, train_state.*")],
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster spec, e.g. "
                                         "4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b")] =
        "4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b",
    interference: Annotated[str, typer.Option(
        "--interference", help="Simulated interference strength.")] = "high",
    mode: Annotated[str, typer.Option("--mode", help="multi: one agent per partition; "
                                      "single: one agent for the cluster.")] = "multi",
    jobs_per_episode: Annotated[int, typer.Option("--jobs-per-episode", min=1)] = 150,
    updates: Annotated[int, typer.Option("--updates", min=1)] = 50,
    episodes_per_update: Annotated[int, typer.Option("--episodes-per-update", min=1)] = 4,
    defer_cost: Annotated[float, typer.Option("--defer-cost", min=0.0)] = 0.05,
    speed_threshold: Annotated[float, typer.Option(
        "--speed-threshold", min=0.0, max=1.0,
        help="A placement earns predicted speed - this x ideal speed - imposed slowdown.")]
        = POOR_VS_IDEAL,
    eval_window: Annotated[Optional[str], typer.Option(
        "--eval-window", help="Validation window for the greedy policy's JCT.")] = None,
    eval_every: Annotated[int, typer.Option("--eval-every", min=0)] = 0,
    lr: Annotated[float, typer.Option("--lr")] = 1e-3,
    gamma: Annotated[float, typer.Option("--gamma", min=0.0, max=1.0,
                                         help="Discount per decision of an agent.")] = 0.8,
    ent_coef: Annotated[float, typer.Option("--ent-coef")] = 0.01,
    eps_start: Annotated[float, typer.Option("--eps-start")] = 0.3,
    replay: Annotated[int, typer.Option("--replay", min=0,
                                        help="Past rollouts kept in the FIFO replay.")] = 2,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    imitate_updates: Annotated[int, typer.Option(
        "--imitate-updates", min=0,
        help="Warm start: the first N updates clone --teacher (DAgger), then PPO.")] = 0,
    teacher: Annotated[str, typer.Option(
        "--teacher", help="Profile whose placement (waits included) the warm start clones; "
        "its estimator is the --reward-model.")] = "las-lif",
    bc_coef: Annotated[float, typer.Option(
        "--bc-coef", min=0.0,
        help="Weight of the teacher cross-entropy in PPO's loss, fading to 0.")] = 0.0,
    max_defer_s: Annotated[float, typer.Option(
        "--max-defer-s", min=0.0,
        help="How long the agents may keep a job deferred while placements exist "
             "(0: no bound, like las-lif); stored in the checkpoint.")] = 0.0,
    clock_step_s: Annotated[float, typer.Option(
        "--clock-step-s", min=0.0, help="The agents read the clock in steps of this many "
        "seconds (0: exact), so placements are reused until the next; stored.")] = 0.0,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out.")] =
        False,
    backend: Annotated[str, typer.Option(
        "--backend", help="Where the training runs: inline (in this process, the "
        "default), local (one other process) or slurm (one Slurm job on the cluster of "
        "--slurm-conf; this host's Python, the inputs and --out must be on a file system "
        "the nodes share). The training is the same on each.")] = "inline",
    slurm_conf: SlurmConfOpt = None,
    slurm_folder: SlurmFolderOpt = None,
    slurm_partition: SlurmPartitionOpt = None,
    slurm_mem: SlurmMemOpt = "8000M",
    slurm_time: SlurmTimeOpt = 1440,
    as_json: JsonOpt = False,
) -> None:
    """Train the placement agents (PPO, Harmony-style reward and exploration)."""
    from slurm_marl.train.marl_job import MarlRun, check
    from slurm_marl.train.ppo import PPOConfig

    strength = _strength(interference)
    if len(strength) != 1:
        fail("train marl takes one --interference strength")
    ppo = PPOConfig(updates=updates, episodes_per_update=episodes_per_update, lr=lr,
                    gamma=gamma, ent_coef=ent_coef, eps_start=eps_start, replay=replay,
                    seed=seed, imitate_updates=imitate_updates, bc_coef=bc_coef,
                    eval_every=eval_every)
    run = MarlRun(
        reward_model=reward_model, trace=trace, windows=tuple(window), out=out,
        cluster=cluster, interference=strength[0], ppo=ppo, mode=mode,
        jobs_per_episode=jobs_per_episode, defer_cost=defer_cost,
        speed_threshold=speed_threshold, eval_window=eval_window, teacher=teacher,
        max_defer_s=max_defer_s, clock_step_s=clock_step_s, resume=resume).absolute()
    try:
        loaded = check(run)
    except ValueError as exc:
        fail(str(exc))
    with progress(f"{mode}-agent PPO") as bar:
        task = bar.add_task("train", total=updates, status="")
        if backend == "inline":
            doc = _inline(run, loaded, lambda s, row: bar.update(
                task, completed=s.update, status=f"reward/step {row['step_reward']:+.3f} "
                                                 f"eval JCT {row['eval_avg_jct_s'] or '-'}"))
        else:
            doc = _elsewhere(run, backend, slurm_conf, slurm_folder, slurm_partition,
                             slurm_mem, slurm_time, lambda done, status: bar.update(
                                 task, completed=done, status=status))
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    print_metrics(f"{mode}-agent training ({out})", doc,
                  ("updates", "env_steps", "episodes", "wall_s", "best_eval_avg_jct_s"))
    output_console().print(f"wrote {out}/policy.pt, policy.json, train_log.csv, "
                           f"training_curve.png")


def _inline(run, loaded: tuple, on_update) -> dict:
    """The run in this process, on the inputs the command has checked (loaded once)."""
    from slurm_marl.train.marl_job import run_marl
    try:
        return run_marl(run, on_update, loaded)
    except ValueError as exc:
        fail(str(exc))


def _elsewhere(run, backend: str, slurm_conf: Path | None, slurm_folder: Path | None,
               partition: str | None, mem: str, time_min: int, on_progress) -> dict:
    """The run on ``backend`` (one call of ``run_marl``), the bar following the run's
    ``train_log.csv`` (one row per update) while it trains."""
    from slurm_marl.sweep import BackendError, backend_mapper
    from slurm_marl.train.marl_job import run_marl

    conf = slurm_conf_for(backend, slurm_conf)
    try:
        mapper = backend_mapper(backend, workers=1,
                                slurm_folder=slurm_folder or run.out / "slurm",
                                slurm_conf=conf, partition=partition, mem=mem,
                                time_min=time_min, job_name="slurm-marl-train-marl",
                                label=lambda r: f"training into {r.out}")
    except ValueError as exc:
        fail(str(exc))
    got: dict = {}

    def go() -> None:
        try:
            got["doc"] = mapper(run_marl, [run])[0]
        except BackendError as exc:
            got["error"] = str(exc)
    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    log, started = run.out / "train_log.csv", time.time()
    while worker.is_alive():
        worker.join(POLL_S)
        rows = _log_rows(log, None if run.resume else started)
        on_progress(rows, f"{backend}: {rows} update(s) logged" if rows else
                    f"{backend}: waiting for the run to start")
    if "error" in got:
        fail(got["error"], 1)
    return got["doc"]


def _log_rows(log: Path, since: float | None = None) -> int:
    """Updates logged so far (rows of ``train_log.csv`` after its header); 0 before it, or
    while the log is an earlier run's (written before ``since``)."""
    try:
        if since is not None and log.stat().st_mtime < since:
            return 0
        with open(log, encoding="utf-8") as fh:
            return max(0, sum(1 for _ in fh) - 1)
    except OSError:
        return 0
