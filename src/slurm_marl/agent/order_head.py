"""The agents' order head: which of a queue's waiting jobs that can start now starts first.

The framework offers a window of jobs (``policy.plugins.Picker``): the job its walk reached,
in the order plugin's order, and the next jobs of the same partition and 2D-LAS queue that
can start on free GPUs now, none protected by the Slurm-alone guard. The partition's agent
scores each job from what was known at decision time (``ORDER_FEATURES``) with its own
linear weights, and the highest score starts first (ties: the earlier in the order plugin's
order); the agent then places it as it places any job. So the agents decide which job
starts next and where, one claim at a time; the order plugin's order is what weights
``[-1, 0, ..., 0]`` give (the job reached always wins), the warm start the trainer begins
from (``train/order.py``).

Features, per job of the window (none reads the job's true length or end):

* ``window_position``: its place in the window (0 for the job reached) / 8;
* ``log_predicted_left_gpu_h``: log1p of its predicted GPU-time not yet done (hours; 0 when
  it has no prediction or has outlived it), the prediction made at submission and passed
  by the skill gate (``Job.predicted_gpu_s``);
* ``within_prediction``: 1 when that prediction is still ahead of its work done;
* ``log_attained_gpu_h``: log1p of its attained service (hours);
* ``log_wait_h``: log1p of how long it has waited in its queue (hours), on the agents'
  clock (``clock_step_s``: the last whole step);
* ``log2_gpus``;
* ``share_of_free``: its GPUs over the free GPUs of its partition now.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from slurm_marl.domain import Job
from slurm_marl.placement_shapes import job_shape
from slurm_marl.policy.order.predicted_las import work_done

ORDER_FEATURES = ("window_position", "log_predicted_left_gpu_h", "within_prediction",
                  "log_attained_gpu_h", "log_wait_h", "log2_gpus", "share_of_free")
# The order plugin's order: the job reached (position 0) always has the highest score.
KEEP_ORDER = (-1.0,) + (0.0,) * (len(ORDER_FEATURES) - 1)
DEFAULT_WINDOW = 4
POSITION_SCALE = 8.0


def partition_free_gpus(job: Job, state) -> int:
    """The free GPUs of the nodes the job's partition has (its allowed nodes)."""
    free = state.free
    return sum(sum(free[n]) for n in state.allowed_nodes(job))


def order_features(window: Sequence[Job], now_s: float, free_gpus: int) -> np.ndarray:
    """``[len(window), len(ORDER_FEATURES)]`` (module docstring); ``now_s`` is the agents'
    clock, ``free_gpus`` the free GPUs of the window's partition."""
    out = np.zeros((len(window), len(ORDER_FEATURES)), dtype=np.float32)
    for i, job in enumerate(window):
        done = work_done(job.attained_gpu_s, job.progress_gpu_s)
        predicted = job.predicted_gpu_s
        within = predicted is not None and done < predicted
        left = predicted - done if within else 0.0
        since = job.queue_since_s if job.queue_since_s is not None else job.submit_time_s
        gpus = job_shape(job)[0]
        out[i] = (i / POSITION_SCALE, math.log1p(left / 3600.0), float(within),
                  math.log1p(max(0.0, job.attained_gpu_s) / 3600.0),
                  math.log1p(max(0.0, now_s - since) / 3600.0),
                  math.log2(max(1, gpus)), gpus / free_gpus if free_gpus > 0 else 1.0)
    return out


@dataclass
class OrderHead:
    """Per agent, linear weights over ``ORDER_FEATURES``; ``window``: how many jobs the
    framework offers at once (``Picker.pick_window``)."""

    weights: Mapping[str, np.ndarray]
    window: int = DEFAULT_WINDOW
    training: Mapping | None = None

    @classmethod
    def keeping_order(cls, agents: Sequence[str], window: int = DEFAULT_WINDOW) -> "OrderHead":
        """The warm start: every agent keeps the order plugin's order."""
        return cls({a: np.array(KEEP_ORDER, dtype=np.float32) for a in agents}, window, {})

    @classmethod
    def shared(cls, agents: Sequence[str], weights: Sequence[float], window: int,
               training: Mapping | None = None) -> "OrderHead":
        """The same weights for every agent (what ``train/order.py`` searches)."""
        w = np.asarray(weights, dtype=np.float32)
        if w.shape != (len(ORDER_FEATURES),):
            raise ValueError(f"order head: {len(ORDER_FEATURES)} weights expected, "
                             f"got {w.shape}")
        return cls({a: w.copy() for a in agents}, window, dict(training or {}))

    def pick(self, agent: str, feats: np.ndarray) -> tuple[int, np.ndarray]:
        """(the index of the highest score, first on ties; the scores)."""
        scores = feats @ self.weights[agent]
        return int(np.argmax(scores)), scores

    def has(self, agent: str) -> bool:
        return agent in self.weights

    # -- the checkpoint's part ------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {f"order.{a}": torch.from_numpy(np.asarray(w, dtype=np.float32).copy())
                for a, w in self.weights.items()}

    def metadata(self) -> dict:
        return {"features": list(ORDER_FEATURES), "window": int(self.window),
                "agents": sorted(self.weights), "training": dict(self.training or {})}

    @classmethod
    def from_parts(cls, meta: Mapping, state: Mapping[str, torch.Tensor], source: str
                   ) -> "OrderHead":
        """The head from a checkpoint's ``order`` metadata and ``order.*`` tensors;
        ``ValueError`` (one line) when they were made for other features."""
        feats = tuple(meta.get("features", ()))
        if feats != ORDER_FEATURES:
            raise ValueError(f"{source}: order head made for other features {list(feats)} "
                             f"(this version reads {list(ORDER_FEATURES)})")
        window = meta.get("window", DEFAULT_WINDOW)
        if not isinstance(window, int) or window < 0:
            raise ValueError(f"{source}: order head window must be an integer >= 0")
        weights = {}
        for agent in meta.get("agents", ()):
            t = state.get(f"order.{agent}")
            if t is None or tuple(t.shape) != (len(ORDER_FEATURES),):
                raise ValueError(f"{source}: order head weights for agent {agent!r} "
                                 f"missing or of the wrong shape")
            weights[agent] = t.detach().cpu().numpy().astype(np.float32)
        return cls(weights, window, dict(meta.get("training", {})))
