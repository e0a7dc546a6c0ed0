"""A training run's directory: what ``train/ppo.py``'s ``train`` writes and resumes from.

- ``policy.pt``/``policy.json``: the checkpoint (``LearnedCheckpoint``, with the PPO config,
  counters and ``extra`` in its training metadata);
- ``train_state.pt`` (optimiser state, torch RNG) and ``train_state.json`` (counters,
  history, config, Python and environment RNG states): with the checkpoint, what ``resume``
  restores, so a run continues where it stopped;
- ``best.pt``: the checkpoint with the best validation average JCT so far;
- ``train_log.csv``: one row per update; ``training_curve.png``: drawn from it at the end.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from slurm_marl.agent.checkpoint import LearnedCheckpoint
from slurm_marl.models.interference import InterferenceModel
from slurm_marl.models.policy import PlacementPolicy
from slurm_marl.train.env import PlacementEnv

CSV_COLUMNS = ["update", "env_steps", "episodes", "wall_s", "epsilon", "episode_reward",
               "step_reward", "defer_rate", "train_avg_jct_s", "policy_loss", "value_loss",
               "entropy", "approx_kl", "clipfrac", "phase", "teacher_agreement",
               "imitation_loss", "eval_avg_jct_s"]


@dataclass
class TrainState:
    update: int = 0
    env_steps: int = 0
    episodes: int = 0
    wall_s: float = 0.0
    best_eval_jct_s: float | None = None
    history: list = field(default_factory=list)


def env_extra(env: PlacementEnv) -> dict:
    """The environment settings inference needs, stored in every checkpoint."""
    return {"max_defer_s": env.observer.max_defer_s,
            "defer_only_below": env.observer.defer_only_below,
            "clock_step_s": env.observer.clock_step_s,
            "defer_cost": env.defer_cost, "speed_threshold": env.speed_threshold}


def update_row(state: TrainState, eps: float, stats: list[dict], rewards: list[float],
               losses: dict, imitating: bool) -> dict:
    """The ``train_log.csv`` row of the update ``state`` has just counted (no evaluation
    yet). ``stats``: the rollout's per-episode stats; ``rewards``: its rewards."""
    jcts = [s["avg_jct_s"] for s in stats if s["avg_jct_s"] is not None]
    labelled = sum(s["labelled"] for s in stats)
    return {"update": state.update, "env_steps": state.env_steps,
            "episodes": state.episodes, "wall_s": round(state.wall_s, 2),
            "epsilon": round(eps, 4),
            "episode_reward": round(float(np.mean([s["reward"] for s in stats])), 5),
            "step_reward": round(float(np.mean(rewards)) if rewards else 0.0, 5),
            "defer_rate": round(sum(s["defers"] for s in stats)
                                / max(1, sum(s["steps"] for s in stats)), 4),
            "train_avg_jct_s": round(float(np.mean(jcts)), 1) if jcts else "",
            **{k: round(v, 5) for k, v in losses.items()},
            "phase": "imitate" if imitating else "ppo",
            "teacher_agreement": (round(sum(s["agree"] for s in stats) / labelled, 4)
                                  if labelled else ""),
            "eval_avg_jct_s": ""}


class RunDir:
    """The files of one run in ``out`` (created if missing)."""

    def __init__(self, out: Path, cfg, interference: InterferenceModel, extra: dict) -> None:
        self.out = out
        self.cfg = cfg
        self.interference = interference
        self.extra = extra
        self.csv_path = out / "train_log.csv"
        self.checkpoint = out / "policy.pt"
        out.mkdir(parents=True, exist_ok=True)

    # -- resume -------------------------------------------------------------------------------
    def load_policy(self, agents: tuple[str, ...], mode: str) -> PlacementPolicy:
        """The saved policy (in training mode); refuses another set of agents or mode."""
        if not (self.out / "train_state.json").is_file():
            raise FileNotFoundError(f"nothing to resume in {self.out} (no train_state.json)")
        ckpt = LearnedCheckpoint.load(self.checkpoint)
        if ckpt.config.agents != agents or ckpt.config.mode != mode:
            raise ValueError(f"{self.out}: the saved run has agents {ckpt.config.agents} "
                             f"({ckpt.config.mode}); this run has {agents} ({mode})")
        return ckpt.policy.train()

    def restore(self, optimizer, gen: torch.Generator, rng: random.Random,
                env: PlacementEnv) -> TrainState:
        """Optimiser and RNG states as saved; returns the saved counters."""
        saved = torch.load(self.out / "train_state.pt", weights_only=True)
        optimizer.load_state_dict(saved["optimizer"])
        gen.set_state(saved["torch_rng"])
        doc = json.loads((self.out / "train_state.json").read_text(encoding="utf-8"))
        state = TrainState(**doc["state"])
        rng.setstate(_rng_from_json(doc["python_rng"]))
        env._rng.setstate(_rng_from_json(doc["env_rng"]))
        return state

    def open_log(self, resume: bool) -> None:
        """A fresh ``train_log.csv`` (header only) unless resuming one."""
        if not resume and self.csv_path.exists():
            self.csv_path.unlink()
        if not self.csv_path.exists():
            with open(self.csv_path, "w", newline="", encoding="utf-8") as fh:
                csv.writer(fh).writerow(CSV_COLUMNS)

    # -- writing ------------------------------------------------------------------------------
    def _training(self, state: TrainState, **more) -> dict:
        return {"ppo": asdict(self.cfg), "env_steps": state.env_steps, "update": state.update,
                "wall_s": round(state.wall_s, 1), **more, **self.extra}

    def save(self, state: TrainState, policy: PlacementPolicy, optimizer,
             gen: torch.Generator, rng: random.Random, env: PlacementEnv) -> None:
        """Checkpoint plus everything ``restore`` needs."""
        LearnedCheckpoint(policy, self.interference, self._training(state)).save(
            self.checkpoint)
        torch.save({"optimizer": optimizer.state_dict(), "torch_rng": gen.get_state()},
                   self.out / "train_state.pt")
        doc = {"state": asdict(state), "config": asdict(self.cfg), "extra": self.extra,
               "python_rng": _rng_to_json(rng.getstate()),
               "env_rng": _rng_to_json(env._rng.getstate())}
        tmp = self.out / "train_state.json.tmp"
        tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
        tmp.replace(self.out / "train_state.json")

    def record_eval(self, state: TrainState, policy: PlacementPolicy, jct: float,
                    row: dict) -> None:
        """Log a validation average JCT; a new best is kept in ``state`` and ``best.pt``."""
        row["eval_avg_jct_s"] = round(jct, 1)
        if state.best_eval_jct_s is None or jct < state.best_eval_jct_s:
            state.best_eval_jct_s = jct
            LearnedCheckpoint(policy, self.interference, self._training(
                state, eval_avg_jct_s=round(jct, 1))).save(self.out / "best.pt")

    def append(self, row: dict) -> None:
        with open(self.csv_path, "a", newline="", encoding="utf-8") as fh:
            csv.DictWriter(fh, CSV_COLUMNS).writerow(row)

    def finish(self, title: str) -> None:
        write_curve(self.csv_path, self.out / "training_curve.png", title)


def _rng_to_json(state) -> list:
    return [state[0], list(state[1]), state[2]]


def _rng_from_json(doc) -> tuple:
    return (doc[0], tuple(doc[1]), doc[2])


def write_curve(csv_path: Path, png_path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(csv_path, encoding="utf-8")))
    if not rows:
        return
    steps = [int(r["env_steps"]) for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    axes[0].plot(steps, [float(r["step_reward"]) for r in rows])
    axes[0].set_xlabel("environment steps")
    axes[0].set_ylabel("mean reward per decision")
    axes[0].grid(alpha=0.3)
    ev = [(s, float(r["eval_avg_jct_s"])) for s, r in zip(steps, rows) if r["eval_avg_jct_s"]]
    tr = [(s, float(r["train_avg_jct_s"])) for s, r in zip(steps, rows) if r["train_avg_jct_s"]]
    if ev:   # one fixed validation window: comparable across updates
        axes[1].plot(*zip(*ev), marker="o", label="validation window (greedy)")
    elif tr:  # training episodes differ in workload: only a rough trend
        axes[1].plot(*zip(*tr), alpha=0.6, label="training episodes (sampled)")
        axes[1].set_yscale("log")
    axes[1].set_xlabel("environment steps")
    axes[1].set_ylabel("average JCT (s)")
    axes[1].grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
