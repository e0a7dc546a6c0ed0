"""Supervised training of the interference (reward) model on co-location samples.

Held-out validation: whole jobs are held out (every sample of a job lands on the same side,
chosen by a seeded hash of its id), so the error is measured on jobs the model never saw.
The naive baseline predicts the mean training speed of the sample's model type (the global
mean for a type absent from training); both errors are mean absolute errors in speed units.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from slurm_marl.models.interference import (EncodedSamples, InterferenceModel, Vocabulary,
                                            encode_samples)


@dataclass
class InterferenceTraining:
    model: InterferenceModel
    metrics: dict


def split_by_job(samples: Sequence[Mapping], val_fraction: float, seed: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, validation); every sample of one job falls on one side."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    keys = sorted({str(s.get("job_id", i)) for i, s in enumerate(samples)})
    rng = random.Random(seed)
    rng.shuffle(keys)
    n_val = max(1, round(len(keys) * val_fraction)) if len(keys) > 1 else 0
    held = set(keys[:n_val])
    val = [i for i, s in enumerate(samples) if str(s.get("job_id", i)) in held]
    train = [i for i, s in enumerate(samples) if str(s.get("job_id", i)) not in held]
    return np.array(train, dtype=np.int64), np.array(val, dtype=np.int64)


def mean_speed_baseline(train_types: Sequence, train_speed: np.ndarray,
                        query_types: Sequence) -> np.ndarray:
    """Predict each query's mean training speed of its model type (else the global mean)."""
    sums: dict = {}
    for m, s in zip(train_types, train_speed):
        acc = sums.setdefault(m, [0.0, 0])
        acc[0] += float(s)
        acc[1] += 1
    overall = float(np.mean(train_speed)) if len(train_speed) else 1.0
    return np.array([sums[m][0] / sums[m][1] if m in sums else overall for m in query_types],
                    dtype=np.float64)


def mae(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(pred, dtype=np.float64)
                                - np.asarray(truth, dtype=np.float64)))) if len(truth) else \
        math.nan


def train_interference(samples: Sequence[Mapping], *, epochs: int = 60, batch_size: int = 256,
                       lr: float = 3e-3, embed_dim: int = 8, hidden: int = 64,
                       val_fraction: float = 0.2, seed: int = 0, min_steps: int = 2000,
                       progress: Callable[[int, int, float], None] | None = None
                       ) -> InterferenceTraining:
    """Fit on the training jobs, keep the epoch with the lowest validation MAE.

    At least ``min_steps`` gradient steps are taken: a small sample set (a few hundred
    observed speeds from one day of the agent's store) is one batch per epoch, and 60 epochs
    of it leave the network near its initial guess, worse than the per-model mean.
    ``progress(epoch, epochs, val_mae)`` is called after every epoch.
    """
    if len(samples) < 10:
        raise ValueError(f"need at least 10 samples to train and validate, got {len(samples)}")
    torch.manual_seed(seed)
    # Neighbours may name families that no sample job had: both go into the vocabulary.
    vocab = Vocabulary.fit([s.get("model_type") for s in samples]
                           + [m for s in samples for ms in (s.get("colocated") or {}).values()
                              for m in ms])
    data = encode_samples(samples, vocab)
    train_rows, val_rows = split_by_job(samples, val_fraction, seed)
    train, val = data.subset(train_rows), data.subset(val_rows)
    model = InterferenceModel.new(vocab, embed_dim, hidden, seed)
    net = model.net.train()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    best_state, best_mae, best_epoch = None, math.inf, 0
    batches = max(1, math.ceil(len(train) / batch_size))
    epochs = max(epochs, math.ceil(min_steps / batches))
    for epoch in range(1, epochs + 1):
        net.train()
        order = torch.randperm(len(train), generator=gen)
        for start in range(0, len(train), batch_size):
            idx = order[start:start + batch_size]
            pred = net(train.job[idx], train.counts[idx], train.shape[idx])
            loss = torch.nn.functional.smooth_l1_loss(pred, train.speed[idx], beta=0.02)
            opt.zero_grad()
            loss.backward()
            opt.step()
        val_mae = _evaluate(net, val)
        if val_mae < best_mae - 1e-7:
            best_mae, best_epoch = val_mae, epoch
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        if progress is not None:
            progress(epoch, epochs, val_mae)
    assert best_state is not None
    net.load_state_dict(best_state)
    net.eval()
    baseline = mean_speed_baseline(train.model_types, train.speed.numpy(), val.model_types)
    metrics = {
        "val_mae": round(best_mae, 5),
        "baseline_val_mae": round(mae(baseline, val.speed.numpy()), 5),
        "train_mae": round(_evaluate(net, train), 5),
        "best_epoch": best_epoch, "epochs": epochs, "steps": epochs * batches,
        "train_samples": len(train), "val_samples": len(val),
        "val_jobs": len({str(j) for j in val.job_ids}),
        "baseline": "mean speed per model type (training split)",
        "seed": seed,
    }
    model.metrics = metrics
    return InterferenceTraining(model, metrics)


@torch.no_grad()
def _evaluate(net, data: EncodedSamples) -> float:
    net.eval()
    if len(data) == 0:
        return math.nan
    pred = net(data.job, data.counts, data.shape)
    return mae(pred.numpy(), data.speed.numpy())
