"""How wrong a job-length prediction may be: error distributions of predicted GPU-time.

A distribution is given by points (cumulative share of jobs, factor): that share of jobs is
predicted within that factor of its truth, where "within x" means max(p/t, t/p) <= x,
symmetric in log space (over- and under-prediction equally likely). Between points the log
of the factor is interpolated linearly.

``helios``: the distribution the Helios artifact (SC'21) uses to emulate its QSSF estimator
on Philly: 10% of jobs within 10%, 50% within 50%, 70% within 2x, 90%
within 10x, all within 100x. The simulator perturbs true GPU-times with it
(``--prediction-error helios``); an order that knows it (``predicted_las`` with
``rule = "gittins"``) turns a prediction into a distribution of the job's true GPU-time.

A shared vocabulary: imports nothing of slurm-marl.
"""

from __future__ import annotations

import bisect
import math

HELIOS_POINTS = ((0.0, 1.0), (0.1, 1.1), (0.5, 1.5), (0.7, 2.0), (0.9, 10.0), (1.0, 100.0))
DISTRIBUTIONS = {"helios": HELIOS_POINTS}


def error_factor(u: float, points=HELIOS_POINTS) -> float:
    """The error magnitude max(p/t, t/p) at quantile ``u`` in [0, 1] of ``points``."""
    shares = [s for s, _ in points]
    i = min(max(1, bisect.bisect_left(shares, u)), len(points) - 1)
    (s0, f0), (s1, f1) = points[i - 1], points[i]
    w = (u - s0) / (s1 - s0) if s1 > s0 else 0.0
    return math.exp(math.log(f0) + min(1.0, max(0.0, w)) * (math.log(f1) - math.log(f0)))


def truth_ratios(name: str, k: int = 32) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """A discrete version of the distribution of truth / prediction: ``2 k`` ratios,
    ascending, with equal weights (``k`` magnitudes at the mid-quantiles, each above and
    below 1)."""
    points = DISTRIBUTIONS[name]
    mags = [error_factor((i + 0.5) / k, points) for i in range(k)]
    ratios = sorted([1.0 / m for m in mags] + mags)
    return tuple(ratios), tuple([1.0 / len(ratios)] * len(ratios))
