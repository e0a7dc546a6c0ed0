"""A job's total GPU-time predicted from what is known at submission (LightGBM).

The model predicts ``log1p(GPU-seconds)`` from the features of ``history.features``
(categories as LightGBM categorical features, numbers as they are). It is boosted from the
history-median baseline (LightGBM's ``init_score``) with an L1 objective: it learns
corrections to the median of similar past jobs, and with nothing to learn it stays that
median. (On Philly, a model fit from scratch, L2 or L1, ranked worse than the baseline on
held-out weeks: the counts and categories let it learn the past's calendar.) It is saved as
LightGBM's own text model plus a JSON file of the category vocabularies: no pickle, and
loading reads text only. One thread, deterministic, seeded: the same history gives the
same model.

``rolling`` replays a history in time order and predicts each job at its submission
from a model trained only on jobs that had ended by the last refit (refit every
``refit_every_s``), with features from jobs that had ended by its submission: what a
site's daemon would have predicted then.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import lightgbm as lgb
import numpy as np

from slurm_marl.history.features import CATEGORIES, FEATURES, FeatureState, Submission, \
    history_median
from slurm_marl.history.records import HistoryJob, ModelError

MODEL_FILE = "gpu_time_model.txt"
META_FILE = "gpu_time_model.json"
FORMAT = 1
PARAMS = {"objective": "regression_l1", "learning_rate": 0.05, "num_leaves": 31,
          "min_data_in_leaf": 20, "feature_fraction": 0.9, "bagging_fraction": 0.9,
          "bagging_freq": 1, "lambda_l2": 1.0, "num_threads": 1, "deterministic": True,
          "force_row_wise": True, "verbosity": -1, "max_cat_to_onehot": 8,
          "cat_smooth": 10.0}


@dataclass
class GpuTimeModel:
    booster: lgb.Booster
    vocab: dict[str, list[str]]      # category column -> values seen in training
    fallback_log: float = 0.0        # the baseline for a job with no history at all

    @classmethod
    def fit(cls, rows: Sequence[dict], log_gpu_s: Sequence[float], seed: int = 0,
            rounds: int = 200) -> "GpuTimeModel":
        if len(rows) != len(log_gpu_s) or not rows:
            raise ValueError("fit needs as many labels as rows, at least one")
        vocab = {c: sorted({str(r[c]) for r in rows}) for c in CATEGORIES}
        model = cls(booster=None, vocab=vocab,  # type: ignore[arg-type]
                    fallback_log=float(np.median(np.asarray(log_gpu_s, dtype=float))))
        data = lgb.Dataset(model.matrix(rows), label=np.asarray(log_gpu_s, dtype=float),
                           init_score=model.baseline(rows),
                           feature_name=list(FEATURES),
                           categorical_feature=list(range(len(CATEGORIES))),
                           free_raw_data=True)
        model.booster = lgb.train({**PARAMS, "seed": seed}, data, num_boost_round=rounds)
        return model

    def matrix(self, rows: Sequence[dict]) -> np.ndarray:
        """Rows as LightGBM's input: category codes (NaN for a value not seen in
        training), then numbers, in ``FEATURES`` order."""
        out = np.empty((len(rows), len(FEATURES)), dtype=float)
        for k, name in enumerate(FEATURES):
            if name in self.vocab:
                codes = {v: float(i) for i, v in enumerate(self.vocab[name])}
                out[:, k] = [codes.get(str(r[name]), math.nan) for r in rows]
            else:
                out[:, k] = [r[name] for r in rows]
        return out

    def baseline(self, rows: Sequence[dict]) -> np.ndarray:
        """The history median of each row (the fallback where a job has no history)."""
        base = np.array([history_median(r) for r in rows], dtype=float)
        return np.where(np.isnan(base), self.fallback_log, base)

    def predict_log(self, rows: Sequence[dict]) -> np.ndarray:
        if not rows:
            return np.empty(0)
        return self.booster.predict(self.matrix(rows), num_threads=1) + self.baseline(rows)

    def predict_gpu_s(self, rows: Sequence[dict]) -> np.ndarray:
        return np.expm1(np.maximum(self.predict_log(rows), 0.0))

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(folder / MODEL_FILE))
        (folder / META_FILE).write_text(json.dumps(
            {"format": FORMAT, "features": list(FEATURES), "vocab": self.vocab,
             "fallback_log": self.fallback_log}, indent=1))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "GpuTimeModel":
        """Text files only (LightGBM's model text and JSON): nothing is unpickled."""
        folder = Path(folder)
        try:
            meta = json.loads((folder / META_FILE).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"{folder / META_FILE}: unreadable ({exc})") from None
        if meta.get("format") != FORMAT or meta.get("features") != list(FEATURES):
            raise ModelError(f"{folder / META_FILE}: a model of another format or feature "
                             f"set; train it again with this version")
        try:
            booster = lgb.Booster(model_file=str(folder / MODEL_FILE))
        except (lgb.basic.LightGBMError, OSError) as exc:
            raise ModelError(f"{folder / MODEL_FILE}: unreadable ({exc})") from None
        return cls(booster=booster, vocab={k: list(v) for k, v in meta["vocab"].items()},
                   fallback_log=float(meta.get("fallback_log", 0.0)))


@dataclass(frozen=True)
class Prediction:
    job: HistoryJob
    model_log: float          # the model's log1p GPU-s (NaN before the first fit)
    baseline_log: float       # the history median's (NaN with no history at all)

    @property
    def truth_log(self) -> float:
        return math.log1p(self.job.gpu_time_s)


def replay(jobs: Sequence[HistoryJob],
           on_submit: Callable[[HistoryJob, dict, float], None],
           until_s: float | None = None) -> FeatureState:
    """Walk a history in submit order; ``on_submit(job, features, now)`` sees each job's
    features at its submission, after every job that ended by then was recorded (and
    nothing else). Returns the history as known at ``until_s`` (default: the last
    submission): the state a predictor continues from."""
    state = FeatureState()
    ends: list = []
    for seq, job in enumerate(sorted(jobs, key=lambda j: (j.submit_s, j.job_id))):
        sub = Submission.of(job)
        while ends and ends[0][0] <= sub.submit_s:
            _, _, ended_sub, gpu_s = heapq.heappop(ends)
            state.ended(ended_sub, gpu_s)
        row = state.features(sub)
        state.submitted(sub)
        on_submit(job, row, sub.submit_s)
        if job.end_s is not None:
            heapq.heappush(ends, (job.end_s, seq, sub, job.gpu_time_s))
    while until_s is not None and ends and ends[0][0] <= until_s:
        _, _, ended_sub, gpu_s = heapq.heappop(ends)
        state.ended(ended_sub, gpu_s)
    return state


MIN_TRAIN = 20  # fewer ended jobs than this teach a model nothing worth its risk


def train(jobs: Sequence[HistoryJob], until_s: float = math.inf, seed: int = 0
          ) -> tuple[GpuTimeModel, int]:
    """A model of the jobs of a history that had ended by ``until_s``, each described as it
    was known at its submission; (model, jobs trained on). ``ModelError`` with fewer than
    ``MIN_TRAIN`` such jobs."""
    rows, labels = [], []

    def take(job: HistoryJob, row: dict, _now: float) -> None:
        if job.end_s is not None and job.end_s <= until_s:
            rows.append(row)
            labels.append(math.log1p(job.gpu_time_s))

    replay(jobs, take)
    if len(rows) < MIN_TRAIN:
        raise ModelError(f"only {len(rows)} ended jobs to learn from (need {MIN_TRAIN})")
    return GpuTimeModel.fit(rows, labels, seed=seed), len(rows)


def next_refit(due_s: float, now_s: float, every_s: float) -> float:
    """The refit after one made at ``now_s`` that was due at ``due_s``: the first of
    ``due_s + k * every_s`` later than ``now_s`` (refits keep their grid when submissions
    skip a period)."""
    while due_s <= now_s:
        due_s += every_s
    return due_s


def rolling(jobs: Sequence[HistoryJob], start_s: float, end_s: float = math.inf,
            refit_every_s: float = 7 * 86400.0, min_train: int = 200, seed: int = 0,
            rounds: int = 200, on_fit: Callable[[int], None] | None = None
            ) -> list[Prediction]:
    """Predictions for the jobs submitted in [start_s, end_s), each from a model refit at
    most ``refit_every_s`` before its submission on the jobs that had ended by the refit."""
    seen: list[tuple[float, dict, float]] = []      # (end, features, label) of every job
    out: list[Prediction] = []
    model: GpuTimeModel | None = None
    next_fit = start_s

    def on_submit(job: HistoryJob, row: dict, now: float) -> None:
        nonlocal model, next_fit
        if job.end_s is not None:
            seen.append((job.end_s, row, math.log1p(job.gpu_time_s)))
        if not start_s <= now < end_s:
            return
        if now >= next_fit:
            train = [(r, y) for e, r, y in seen if e <= now]
            if len(train) >= min_train:
                model = GpuTimeModel.fit([r for r, _ in train], [y for _, y in train],
                                         seed=seed, rounds=rounds)
                if on_fit:
                    on_fit(len(train))
            next_fit = next_refit(next_fit, now, refit_every_s)
        pred = float(model.predict_log([row])[0]) if model is not None else math.nan
        out.append(Prediction(job, pred, history_median(row)))

    replay(jobs, on_submit)
    return out
