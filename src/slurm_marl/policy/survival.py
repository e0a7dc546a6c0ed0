"""The Kaplan-Meier estimate of run lengths the Slurm-alone guard's shadow uses
(``policy/guard.py``): what a job still running is expected to need, from the runs that
have ended and the runs still alive, with no future entering."""

from __future__ import annotations

import bisect
from collections.abc import Sequence


class Survival:
    """The Kaplan-Meier estimate of the run-length distribution: ended runs are events at
    their length, runs still alive are censored at their run time so far (they are known
    to be longer, nothing more). Unlike the lengths of the ended runs alone, it is not
    biased short by the long runs that have not ended yet."""

    def __init__(self, ended: Sequence[float] = (), alive: Sequence[float] = ()) -> None:
        points = sorted([(t, 0) for t in ended] + [(t, 1) for t in alive])
        at_risk = len(points)
        self.horizon = points[-1][0] if points else 0.0   # the longest run seen
        self.times: list[float] = []     # event times, ascending
        self.neg_s: list[float] = []     # -S(t) just after each (ascending, for bisect)
        s = 1.0
        i = 0
        while i < len(points):
            t = points[i][0]
            events = censored = 0
            while i < len(points) and points[i][0] == t:
                if points[i][1]:
                    censored += 1
                else:
                    events += 1
                i += 1
            if events:
                s *= 1.0 - events / at_risk
                self.times.append(t)
                self.neg_s.append(-s)
            at_risk -= events + censored
        # area under S from 0 to each event time, for restricted means
        self.area: list[float] = []
        prev_t, prev_s, a = 0.0, 1.0, 0.0
        for t, ns in zip(self.times, self.neg_s):
            a += prev_s * (t - prev_t)
            self.area.append(a)
            prev_t, prev_s = t, -ns

    def _area_to(self, x: float) -> float:
        i = bisect.bisect_right(self.times, x)
        if i == 0:
            return x
        return self.area[i - 1] + -self.neg_s[i - 1] * (x - self.times[i - 1])

    def conditional_mean(self, ran_s: float) -> float:
        """The mean length of a run longer than ``ran_s``, restricted to the longest run
        seen (the runs alive beyond it count as ending there: a lower bound for them):
        ``ran_s`` + the area under S from ``ran_s`` to that horizon / S(``ran_s``)."""
        s_r = self.s(ran_s)
        if s_r <= 0.0 or ran_s >= self.horizon:
            return ran_s
        return ran_s + (self._area_to(self.horizon) - self._area_to(ran_s)) / s_r

    def s(self, t: float) -> float:
        """S(t): the estimated share of runs longer than ``t``."""
        i = bisect.bisect_right(self.times, t)
        return 1.0 if i == 0 else -self.neg_s[i - 1]
