"""Interference estimators: predicted speed of a job given what it would share.

The protocol is one method, ``predict_speed(job, colocated_by_level) -> float`` (1.0 = as
fast as alone). ``colocated_by_level`` maps a co-location level (``colocation.LEVELS``:
``group``, ``node``, ``leaf``; ``gpu`` where GPUs are shared) to the model types found there,
and ``span`` to the candidate's own spread (``colocation.span_tags``).

The default estimator is fitted from samples the simulator (or the daemon's history)
emits; it never sees the simulator's ground-truth parameters. It is a log-linear model per
job model family: log(speed) = bias[span] + sum over levels and co-located families of
count x weight, fitted by ridge-regularised least squares, so with one neighbour it is the
(geometric) mean observed slowdown per (model, level, neighbour model). GPU sharing counts as
the group level.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from slurm_marl.colocation import (GPU, GROUP, LEVELS, SPAN, SampleError, model_family,
                                   read_samples, span_tags)
from slurm_marl.domain import Job

log = logging.getLogger(__name__)


@runtime_checkable
class InterferenceEstimator(Protocol):
    def predict_speed(self, job: Job, colocated_by_level: Mapping[str, tuple[str, ...]]
                      ) -> float: ...


class NeutralEstimator:
    """Predicts no interference: a least-interference policy without history degrades to
    its other plugins' preferences (and says so once in the log)."""

    warned = False

    def predict_speed(self, job: Job, colocated_by_level) -> float:
        if not NeutralEstimator.warned:
            log.warning("least_interference: no interference history given, predicting "
                        "no interference (fit an estimator from simulator samples)")
            NeutralEstimator.warned = True
        return 1.0


def sample_features(sample: Mapping) -> tuple[str, dict[str, float]]:
    """(job family, sparse features) of one emitted sample; GPU sharing folds into group."""
    family = model_family(sample.get("model_type"))
    coloc = sample.get("colocated") or {}
    feats: dict[str, float] = {}
    for level, models in coloc.items():
        lvl = GROUP if level == GPU else level
        if lvl not in LEVELS:
            continue
        for m in models:
            key = f"{lvl}:{model_family(m)}"
            feats[key] = feats.get(key, 0.0) + 1.0
    for tag in span_tags(int(sample.get("groups", 1)), int(sample.get("nodes", 1)),
                         int(sample.get("leaves", 1))):
        feats[f"{SPAN}:{tag}"] = 1.0
    return family, feats


def _query_features(colocated_by_level: Mapping[str, tuple[str, ...]]) -> dict[str, float]:
    feats: dict[str, float] = {}
    for level, models in colocated_by_level.items():
        if level == SPAN:
            for tag in models:
                feats[f"{SPAN}:{tag}"] = 1.0
            continue
        lvl = GROUP if level == GPU else level
        for m in models:
            key = f"{lvl}:{model_family(m)}"
            feats[key] = feats.get(key, 0.0) + 1.0
    return feats


class FittedEstimator:
    """Log-linear speed model per job family, plus a pooled model for unseen families."""

    def __init__(self, weights: Mapping[str, Mapping[str, float]],
                 bias: Mapping[str, float], n_samples: int) -> None:
        self.weights = {f: dict(w) for f, w in weights.items()}
        self.bias = dict(bias)
        self.n_samples = n_samples
        self._memo: dict = {}

    @classmethod
    def fit(cls, samples: Iterable[Mapping], ridge: float = 1.0,
            min_duration_s: float = 0.0) -> "FittedEstimator":
        rows: list[tuple[str, dict[str, float], float, float]] = []
        for s in samples:
            speed = float(s["speed"])
            if not (speed > 0 and math.isfinite(speed)):
                continue
            weight = float(s.get("duration_s", 1.0))
            if weight < min_duration_s:
                continue
            family, feats = sample_features(s)
            rows.append((family, feats, math.log(speed), max(weight, 1e-3)))
        if not rows:
            raise SampleError("no usable interference samples to fit from")
        weights: dict[str, dict[str, float]] = {}
        bias: dict[str, float] = {}
        groups: dict[str, list] = {"*": rows}
        for r in rows:
            groups.setdefault(r[0], []).append(r)
        for family, subset in groups.items():
            names = sorted({k for _, f, _, _ in subset for k in f})
            col = {k: i for i, k in enumerate(names)}
            x = np.zeros((len(subset), len(names) + 1))
            y = np.empty(len(subset))
            w = np.empty(len(subset))
            for i, (_, feats, target, weight) in enumerate(subset):
                x[i, -1] = 1.0
                for k, v in feats.items():
                    x[i, col[k]] = v
                y[i] = target
                w[i] = weight
            sw = np.sqrt(w / w.mean())
            xw, yw = x * sw[:, None], y * sw
            reg = ridge * np.eye(len(names) + 1)
            reg[-1, -1] = 1e-6
            theta = np.linalg.solve(xw.T @ xw + reg, xw.T @ yw)
            weights[family] = {k: float(theta[col[k]]) for k in names}
            bias[family] = float(theta[-1])
        return cls(weights, bias, len(rows))

    @classmethod
    def from_file(cls, path: str | Path, **kw) -> "FittedEstimator":
        return cls.fit(read_samples(path), **kw)

    def predict_speed(self, job: Job, colocated_by_level) -> float:
        family = model_family(job.model_type)
        key = (family, tuple(sorted((k, tuple(v)) for k, v in colocated_by_level.items())))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        model = family if family in self.weights else "*"
        weights = self.weights[model]
        pooled = self.weights["*"]
        log_speed = 0.0  # relative to running alone: the bias is shared by all placements
        for k, v in _query_features(colocated_by_level).items():
            log_speed += v * weights.get(k, pooled.get(k, 0.0))
        speed = float(min(1.0, math.exp(log_speed)))
        if len(self._memo) > 100_000:
            self._memo.clear()
        self._memo[key] = speed
        return speed
