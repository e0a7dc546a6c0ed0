"""How good a GPU-time predictor is, in the terms the literature reports: Spearman rank
correlation, the share of jobs predicted within 2x, and the median absolute log error
(``|ln(predicted / true)|``), for the model and for the history-median baseline, on all
jobs and on jobs of more than one GPU-hour (the ones an ordering must get right)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import spearmanr

from slurm_marl.history.predictor import Prediction

LONG_GPU_S = 3600.0


def scores(pred_log: np.ndarray, truth_log: np.ndarray) -> dict:
    if len(pred_log) < 2:
        return {"n": int(len(pred_log)), "spearman": None, "within_2x": None,
                "median_abs_log_error": None}
    # log1p values: compare GPU-seconds (a job of 0 s counts as 1 s)
    err = np.abs(np.log(np.maximum(np.expm1(pred_log), 1.0))
                 - np.log(np.maximum(np.expm1(truth_log), 1.0)))
    rho = spearmanr(pred_log, truth_log).statistic
    return {"n": int(len(pred_log)),
            "spearman": None if math.isnan(rho) else round(float(rho), 4),
            "within_2x": round(float(np.mean(err <= math.log(2))), 4),
            "median_abs_log_error": round(float(np.median(err)), 4)}


def report(preds: Sequence[Prediction]) -> dict:
    """Scores on the jobs both predictors could predict (a model exists and the job's
    kind has history); how many were left out says itself."""
    both = [p for p in preds if not math.isnan(p.model_log) and not math.isnan(p.baseline_log)]
    out = {"jobs": len(preds), "scored": len(both)}
    for label, subset in (("all", both),
                          ("over_1_gpu_hour", [p for p in both
                                               if p.job.gpu_time_s > LONG_GPU_S])):
        truth = np.array([p.truth_log for p in subset])
        out[label] = {
            "model": scores(np.array([p.model_log for p in subset]), truth),
            "history_median": scores(np.array([p.baseline_log for p in subset]), truth)}
    return out
