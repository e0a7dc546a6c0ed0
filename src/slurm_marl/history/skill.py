"""A prediction-skill gate (the safety net of predicted ordering): predictions order a partition's jobs only
while they have proven skill on the jobs of that partition that have already finished.

Skill is pairwise concordance (Harrell's C) over the last ``window`` finished jobs of the
partition that had a prediction: of the pairs of different true GPU-times, the share the
predictions put in the right order (a tie in prediction counts one half). ``weighted`` (the
default) counts each pair by how far apart its truths are, ``|log(1 + t1) - log(1 + t2)|``:
sending a 1-minute job behind a 1-day one costs more than swapping two one-hour jobs. 0.5 is
what a random order, or arrival order, gets; 1.0 the true order. It is what ordering waiting
jobs by prediction needs (the right relative order, not the right values).

The gate is *open* for a partition while at least ``min_scored`` of its jobs are scored and
their concordance is at least ``threshold``; closed, no job of the partition uses its
prediction (``predicted_las`` then orders them as plain 2D-LAS) and each says why
(``SkillGate.withheld``). Every prediction is recorded when its job is submitted
(``record``), whether the gate is open or not, and scored when the job finishes
(``finished``), so a closed gate can reopen. The verdict at any moment reads only the
outcomes of jobs finished by then: no look-ahead.

Per partition and per moment, not per job at submission: a job keeps the prediction it got
at submission (it is never re-predicted), but whether the partition's predictions are used
applies to all its jobs at once. A verdict fixed per job at submission would mix, in one
queue, jobs ranked by prediction with jobs ranked as 2D-LAS whenever the gate opens or
closes, and the two keys do not compare: ``predicted_las`` puts predicted waiting jobs after
every unpredicted one of their queue, so after the gate closed, the jobs submitted while it
was open would wait behind every later arrival (and the other way round, unpredicted jobs
could not be ranked against predicted ones at all). All or none per partition never mixes
them, and a closed gate is exactly 2D-LAS. A flip re-ranks only waiting jobs (in
``predicted_las`` rule ``in_las_queues`` a prediction never preempts a job 2D-LAS would let
run), so it costs no restart. (Reasoning, not a measurement: a per-job gate was tried first
and lost on a tuning window, but with the old fallback, which alone lost at least as much
there: docs/benchmarks.md, "A prediction-skill gate".)

``GateParams.measure`` can instead be ``"gain"`` or ``"log-gain"`` (``Gain``: the share of
the true order's mean-completion gain over arrival order that ordering the last ``window``
finished jobs by prediction captures). Not the default: on the held-out windows log-gain
kept learned predictions as safe as concordance but lost the Helios-quality gain on
``ee9e8c`` (docs/benchmarks.md, "A gain-based skill measure for the gate").

Pure (no I/O, no project imports): the simulator (``sim/online_prediction.py``,
``sim/predictions.py``, ``sim/engine.py``) and the daemon (``daemon/predictions.py``) use
the same gate.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

# Chosen on seven Philly windows that are not among the six held-out windows of
# benchmarks/prediction_order.py (docs/benchmarks.md, "A prediction-skill gate"): of the
# settings tried, the one whose worst learned-order / tiresias_las ratio was lowest.
WINDOW = 400
MIN_SCORED = 50
THRESHOLD = 0.85
WEIGHTED = True
MEASURE = "concordance"
MEASURES = ("concordance", "gain", "log-gain")


class Concordance:
    """Concordance of (prediction, truth) pairs over the last ``window`` added, kept
    incrementally (O(window) per job). ``weighted``: each pair counts by how far apart its
    truths are (``|log(1 + t1) - log(1 + t2)|``), so swapping a 1-minute and a 1-day job
    weighs more than swapping two jobs of an hour; else every pair counts 1."""

    def __init__(self, window: int, weighted: bool = True) -> None:
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        self.window = window
        self.weighted = weighted
        self.items: deque[tuple[float, float]] = deque()
        self.agree = 0.0      # weight of the pairs in the right order (ties in prediction: half)
        self.pairs = 0.0      # weight of the pairs of different truths

    def _weight(self, t: float, u: float) -> float:
        return abs(math.log1p(max(0.0, t)) - math.log1p(max(0.0, u))) if self.weighted else 1.0

    def _against(self, p: float, t: float) -> tuple[float, float]:
        agree = pairs = 0.0
        for q, u in self.items:
            if u == t:
                continue
            w = self._weight(t, u)
            pairs += w
            if q == p:
                agree += w / 2
            elif (q < p) == (u < t):
                agree += w
        return agree, pairs

    def add(self, predicted: float, truth: float, arrival: int = 0) -> None:
        """Score one finished job (``arrival`` is not used by concordance)."""
        if len(self.items) == self.window:
            p, t = self.items.popleft()
            a, n = self._against(p, t)
            self.agree -= a
            self.pairs -= n
        a, n = self._against(predicted, truth)
        self.agree += a
        self.pairs += n
        self.items.append((predicted, truth))

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def value(self) -> float | None:
        """The concordance, None without a pair of different truths."""
        if self.pairs <= 1e-9:
            return None
        return min(1.0, max(0.0, self.agree / self.pairs))


def mean_completion(sizes: list[float]) -> float:
    """Mean completion time of jobs run one after another, in the given order, on one
    server that does one unit of work per second: ``sum_i (n - i) * sizes[i] / n``."""
    total = done = 0.0
    for s in sizes:
        done += s
        total += done
    return total / len(sizes) if sizes else 0.0


class Gain:
    """The share of the oracle's gain over arrival order that ordering by prediction
    captures, over the last ``window`` finished jobs of a partition: with one server running
    them one after another, ``(C_fifo - C_pred) / (C_fifo - C_true)``, where ``C_x`` is the
    mean completion time with the jobs in arrival order (what 2D-LAS does inside a queue),
    in predicted order (ties kept in arrival order) and in true order (shortest first, the
    best any order can do). 1 is the true order's gain; 0 arrival order's (a constant
    prediction scores 0); negative, worse than arrival order. Undefined (None) when
    arrival order is already within 1e-9 (relative) of the best order: there is nothing to
    gain. It compares the predictions with the partition's own job mix: a window of alike
    jobs has little to gain, and so little to lose.

    ``log_sizes`` ("log-gain"): the same with each job's size taken as ``log(1 + GPU-s)``,
    so a few very long jobs do not make up most of the gain (on raw GPU-time, putting them
    last is most of it, and noisy predictions get that right as well as good ones).

    O(window log window) to evaluate; evaluated only when read and kept until the next
    ``add``."""

    def __init__(self, window: int, log_sizes: bool = False) -> None:
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        self.window = window
        self.log_sizes = log_sizes
        self.items: deque[tuple[int, float, float]] = deque(maxlen=window)
        self._value: float | None = None
        self._stale = False

    def add(self, predicted: float, truth: float, arrival: int = 0) -> None:
        """Score one finished job; ``arrival`` orders jobs by submission (smaller first)."""
        size = math.log1p(max(0.0, truth)) if self.log_sizes else max(0.0, truth)
        self.items.append((arrival, predicted, size))
        self._stale = True

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def value(self) -> float | None:
        if self._stale:
            self._value = self._compute()
            self._stale = False
        return self._value

    def _compute(self) -> float | None:
        by_arrival = sorted(self.items)
        fifo = mean_completion([t for _, _, t in by_arrival])
        best = mean_completion(sorted(t for _, _, t in by_arrival))
        if fifo - best <= 1e-9 * max(fifo, 1.0):
            return None
        # sorted() is stable: ties in prediction keep arrival order
        pred = mean_completion([t for _, _, t in sorted(by_arrival, key=lambda x: x[1])])
        return (fifo - pred) / (fifo - best)


@dataclass(frozen=True)
class GateParams:
    window: int = WINDOW
    min_scored: int = MIN_SCORED
    threshold: float = THRESHOLD
    weighted: bool = WEIGHTED
    # "concordance" (above), "gain" (``Gain``: share of the oracle's gain over arrival
    # order) or "log-gain" (the same on log(1 + GPU-s) sizes); for the gains ``weighted``
    # does not apply and the threshold may be negative
    measure: str = MEASURE

    def __post_init__(self) -> None:
        if self.window < 2 or not 1 <= self.min_scored <= self.window:
            raise ValueError(f"skill gate: need window >= 2 and 1 <= min_scored <= window, "
                             f"got {self.window} and {self.min_scored}")
        if self.measure not in MEASURES:
            raise ValueError(f"skill gate: measure must be one of {MEASURES}, "
                             f"got {self.measure!r}")
        low = 0.0 if self.measure == "concordance" else -math.inf
        if not low <= self.threshold <= 1.0:
            raise ValueError(f"skill gate: threshold must be in [{low:g}, 1] for "
                             f"{self.measure}, got {self.threshold}")


class SkillGate:
    """Per partition: whether predictions may order its jobs now. ``record`` a job's
    prediction when it is submitted, ``finished`` when its GPU-time is known, ``forget`` a
    job that ended without one (cancelled while pending); ``withheld`` says whether, and
    why, the partition's predictions are withheld now."""

    def __init__(self, params: GateParams | None = None) -> None:
        self.params = params or GateParams()
        self.scores: dict[str, Concordance | Gain] = {}
        self._recorded: dict[int, tuple[str, float, int]] = {}
        self._arrivals = 0

    def skill(self, partition: str) -> tuple[float | None, int]:
        """(skill, jobs scored) of ``partition`` so far: concordance or gain (``measure``)."""
        c = self.scores.get(partition)
        return (None, 0) if c is None else (c.value, c.count)

    def withheld(self, partition: str) -> str:
        """Why predictions of ``partition`` are withheld now, "" if they are not."""
        p = self.params
        value, n = self.skill(partition)
        if n < p.min_scored:
            return (f"predictions withheld in partition {partition}: {n} finished jobs "
                    f"scored (< {p.min_scored})")
        if value is None or value < p.threshold:
            shown = "undefined" if value is None else f"{value:.2f}"
            return (f"predictions withheld in partition {partition}: {p.measure} {shown} "
                    f"on the last {n} finished jobs (< {p.threshold:g})")
        return ""

    def record(self, job_id: int, partition: str, predicted: float | None,
               arrival: int | None = None) -> int | None:
        """What was predicted for a job at its submission (None: nothing to score); returns
        its arrival number. Jobs are taken to arrive in the order they are recorded
        (``Gain``'s arrival order), unless ``arrival`` says (a prediction recorded again
        after a restart keeps the number it had)."""
        if predicted is None:
            return None
        if arrival is None:
            arrival = self._arrivals
        self._recorded[job_id] = (partition, predicted, arrival)
        self._arrivals = max(self._arrivals, arrival + 1)
        return arrival

    def finished(self, job_id: int, truth_gpu_s: float) -> tuple[str, float, int] | None:
        """The job's GPU-time is known: score its prediction (a job never recorded, or
        already scored, is ignored). Returns what was scored: (partition, prediction,
        arrival), or None."""
        rec = self._recorded.pop(job_id, None)
        if rec is None:
            return None
        self.score(*rec[:2], truth_gpu_s, rec[2])
        return rec

    def score(self, partition: str, predicted: float, truth_gpu_s: float,
              arrival: int = 0) -> None:
        """Score one (prediction, truth) pair of ``partition`` directly: ``finished`` does
        it, and a restarted daemon rebuilds its gate from the pairs it scored before, in the
        order it scored them (``daemon/predictions.py``)."""
        c = self.scores.get(partition)
        if c is None:
            p = self.params
            c = self.scores[partition] = (
                Concordance(p.window, p.weighted) if p.measure == "concordance"
                else Gain(p.window, log_sizes=p.measure == "log-gain"))
        c.add(predicted, truth_gpu_s, arrival)
        self._arrivals = max(self._arrivals, arrival + 1)

    def forget(self, job_id: int) -> None:
        self._recorded.pop(job_id, None)
