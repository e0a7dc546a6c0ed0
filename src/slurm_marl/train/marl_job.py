"""One training run of the placement agents (`slurm-marl train marl`) as a plain function of
its settings, so the command runs it here or hands it to a backend (``--backend local |
slurm``: ``sweep.backend_mapper``; on Slurm one plain job), where it runs the same.

``MarlRun`` holds the command's options as given (paths made absolute); ``run_marl`` loads
the reward model, the trace windows and the teacher, trains (``train/ppo.py``) into
``MarlRun.out`` and returns the command's summary. Bad input raises ``ValueError`` with one
line; the command checks it before submitting (``check``), so a job fails only on what
changed in between.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_marl.train.ppo import PPOConfig


@dataclass(frozen=True)
class MarlRun:
    """`train marl`'s settings (see its options): the environment's and the run's, and
    PPO's (``ppo``; its ``eval_every`` counts only with an ``eval_window``)."""

    reward_model: Path
    trace: Path
    windows: tuple[str, ...]
    out: Path
    cluster: str
    interference: str
    ppo: PPOConfig
    mode: str = "multi"
    jobs_per_episode: int = 150
    defer_cost: float = 0.05
    speed_threshold: float = 0.8
    eval_window: str | None = None
    teacher: str = "las-lif"
    max_defer_s: float = 0.0
    clock_step_s: float = 0.0
    resume: bool = False

    def absolute(self) -> "MarlRun":
        """The same run with its paths absolute (a Slurm job starts in another folder),
        the teacher's too where it names a profile file."""
        teacher = Path(self.teacher)
        return replace(self, reward_model=Path(self.reward_model).resolve(),
                       trace=Path(self.trace).resolve(), out=Path(self.out).resolve(),
                       teacher=str(teacher.resolve()) if teacher.is_file() else self.teacher)


def check(run: MarlRun):
    """The run's inputs, loaded: (reward model, teacher profile, cluster, training windows,
    validation window's jobs or None). Raises ``ValueError`` (one line) on bad input."""
    from slurm_marl.models.interference import InterferenceModel, ModelFileError
    from slurm_marl.policy.profile import ProfileError, load_profile
    from slurm_marl.train.workload import cluster_and_windows

    if run.mode not in ("multi", "single"):
        raise ValueError(f"--mode must be multi or single, got {run.mode!r}")
    if run.ppo.imitate_updates >= run.ppo.updates:
        raise ValueError(f"--imitate-updates ({run.ppo.imitate_updates}) must be fewer "
                         f"than --updates ({run.ppo.updates})")
    try:
        teacher = load_profile(run.teacher)
    except ProfileError as exc:
        raise ValueError(f"--teacher: {exc}") from None
    try:
        model = InterferenceModel.load(run.reward_model)
    except ModelFileError as exc:
        raise ValueError(str(exc)) from None
    cluster, windows = cluster_and_windows(run.trace, list(run.windows), run.cluster)
    val = (cluster_and_windows(run.trace, [run.eval_window], run.cluster)[1][0]
           if run.eval_window else None)
    return model, teacher, cluster, windows, val


def run_marl(run: MarlRun, progress: Callable | None = None, loaded: tuple | None = None
             ) -> dict:
    """Train (module docstring); ``progress(state, row)`` after each update; ``loaded``:
    ``check(run)``'s inputs where the caller has them (None: loaded here, as in a job).
    Returns the command's summary (``out``, updates, env steps, episodes, wall seconds,
    best validation JCT, the last log row)."""
    import torch
    torch.set_num_threads(1)
    from slurm_marl.train.env import PlacementEnv
    from slurm_marl.train.evaluate import avg_jct
    from slurm_marl.train.ppo import train
    from slurm_marl.train.workload import episodes

    model, teacher, cluster, windows, val_jobs = loaded or check(run)
    eps = [e for jobs in windows for e in episodes(jobs, run.jobs_per_episode)]

    def validate(ckpt) -> float:
        return avg_jct(val_jobs, cluster, ckpt, run.interference, run.ppo.seed)
    evaluate = validate if val_jobs is not None else None
    env = PlacementEnv(cluster, eps, model, mode=run.mode, strength=run.interference,
                       defer_cost=run.defer_cost, speed_threshold=run.speed_threshold,
                       seed=run.ppo.seed, teacher=teacher, max_defer_s=run.max_defer_s,
                       clock_step_s=run.clock_step_s)
    cfg = replace(run.ppo, eval_every=run.ppo.eval_every if run.eval_window else 0)
    extra = {"trace": str(run.trace), "windows": list(run.windows), "cluster": run.cluster,
             "interference": run.interference, "mode": run.mode,
             "jobs_per_episode": run.jobs_per_episode, "defer_cost": run.defer_cost,
             "eval_window": run.eval_window,
             "teacher": run.teacher if run.ppo.imitate_updates or run.ppo.bc_coef else None,
             "reward_model": str(run.reward_model)}
    try:
        state, _ = train(env, model, cfg, Path(run.out), resume=run.resume,
                         evaluate=evaluate, extra=extra, progress=progress)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    finally:
        env.close()
    return {"out": str(run.out), "updates": state.update, "env_steps": state.env_steps,
            "episodes": state.episodes, "wall_s": round(state.wall_s, 1),
            "best_eval_avg_jct_s": state.best_eval_jct_s,
            "last": state.history[-1] if state.history else None}
