"""The per-job bound against Slurm alone: each window's score and how far a policy is past
the bound (the search ranks by it before the JCT)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


MAX_SHARE_SLOWER = 0.02     # at most 2% of jobs more than 1.1x slower than under fifo-backfill
MAX_P99_RATIO = 1.5         # p99 of the per-job ratio; and no job more than 2x slower
P99_UNIT = 0.5              # p99 past its limit counts in units of (2x - 1.5)
BASELINE = "fifo-backfill"  # Slurm's own FIFO with backfill: what a site runs without the agent


@dataclass(frozen=True)
class WindowScore:
    """One policy on one window: its average JCT (None: it left jobs unfinished) and, where
    measured, the per-job comparison with ``fifo-backfill`` on the same window (shares of
    the compared jobs more than 1.1x / 2x slower, p99 ratio; None: not measured)."""

    avg_jct_s: float | None
    share_slower_1_1x: float | None = None
    share_slower_2x: float | None = None
    p99_ratio: float | None = None
    compared_jobs: int = 0

    @classmethod
    def of(cls, x: "WindowScore | float | None") -> "WindowScore":
        """An evaluator's answer for one window: a ``WindowScore``, or the average JCT alone
        (a float, None or non-finite: unfinished jobs), with the bound not measured."""
        if isinstance(x, WindowScore):
            jct = x.avg_jct_s
            if jct is not None and math.isfinite(jct):
                return x
            return cls(None, x.share_slower_1_1x, x.share_slower_2x, x.p99_ratio,
                       x.compared_jobs)
        if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
            if x is not None:
                raise TypeError(f"an evaluator returned {x!r} for a window, not an average "
                                "JCT or a WindowScore")
            return cls(None)
        return cls(float(x) if math.isfinite(x) else None)

    @property
    def measured(self) -> bool:
        return self.share_slower_1_1x is not None and self.share_slower_2x is not None

    def violation(self) -> float:
        """How far past the bound (module docstring): 0 when it holds or is not measured,
        infinite with unfinished jobs. Rounded to 9 digits, so that equal shares reached by
        different sums compare equal (the shares themselves have 4)."""
        if self.avg_jct_s is None:
            return math.inf
        if not self.measured:
            return 0.0
        p99 = self.p99_ratio if self.p99_ratio is not None else 0.0
        return round(max(0.0, self.share_slower_1_1x - MAX_SHARE_SLOWER) / MAX_SHARE_SLOWER
                     + self.share_slower_2x / MAX_SHARE_SLOWER
                     + max(0.0, p99 - MAX_P99_RATIO) / P99_UNIT, 9)

    def bound_holds(self) -> bool | None:
        """None: not measured; False with unfinished jobs."""
        if self.avg_jct_s is None:
            return False
        if not self.measured:
            return None
        return (self.share_slower_1_1x <= MAX_SHARE_SLOWER and self.share_slower_2x == 0
                and (self.p99_ratio is None or self.p99_ratio <= MAX_P99_RATIO))

    def as_dict(self) -> dict:
        return {"avg_jct_s": self.avg_jct_s, "share_slower_1_1x": self.share_slower_1_1x,
                "share_slower_2x": self.share_slower_2x, "p99_ratio": self.p99_ratio,
                "compared_jobs": self.compared_jobs, "bound_holds": self.bound_holds()}


def mean_violation(scores: Sequence[WindowScore]) -> float:
    """A policy's violation: the mean over its windows (0 with no windows)."""
    if not scores:
        return 0.0
    vs = [s.violation() for s in scores]
    return math.inf if any(math.isinf(v) for v in vs) else round(float(np.mean(vs)), 9)


def bound_holds(scores: Sequence[WindowScore]) -> bool | None:
    """Whether the bound holds on every window; None when no window measured it."""
    got = [s.bound_holds() for s in scores]
    if any(g is False for g in got):
        return False
    return True if got and all(g is True for g in got) else None
