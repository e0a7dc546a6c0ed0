"""The cross-entropy search over the knobs, feasible-first under the per-job bound."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from slurm_marl.train.thresholds.bound import WindowScore, bound_holds, mean_violation
from slurm_marl.train.thresholds.knobs import (FIXED_TIRESIAS, LOG10_STARVE_RANGE,
                                               LOG10_T_RANGE, MIN_LOG10_GAP, NUM_QUEUES,
                                               LasKnobs)



@dataclass(frozen=True)
class CemConfig:
    population: int = 8
    iterations: int = 4
    elite_fraction: float = 0.25
    seed: int = 0
    smoothing: float = 0.7      # new = smoothing * elite estimate + (1 - smoothing) * old
    min_prob: float = 0.05      # categorical probabilities never drop below this
    min_std: float = 0.05


@dataclass
class _Dist:
    """The sampling distribution: categorical num_queues, Bernoulli preemption / starve on,
    Gaussians over log10 first boundary, log10 gaps, log10 starve limit."""

    q_probs: np.ndarray
    p_preempt: float
    p_starve: float
    mean: np.ndarray     # [log10 t1, gap2, gap3, log10 starve]
    std: np.ndarray

    @classmethod
    def around(cls, start: LasKnobs) -> "_Dist":
        ts = list(start.thresholds_gpu_s) or [3250.0]
        logs = [math.log10(t) for t in ts]
        gaps = [b - a for a, b in zip(logs, logs[1:])]
        gaps += [0.35] * (2 - len(gaps))
        starve = math.log10(start.starve_limit) if start.starve_limit > 0 else 0.5
        return cls(q_probs=np.full(len(NUM_QUEUES), 1.0 / len(NUM_QUEUES)), p_preempt=0.5,
                   p_starve=0.5, mean=np.array([logs[0], *gaps[:2], starve]),
                   std=np.array([0.75, 0.4, 0.4, 0.5]))


@dataclass
class Candidate:
    knobs: LasKnobs
    jct_s: list[float]           # per training window (inf: jobs left unfinished)
    reward: float
    scores: list[WindowScore] = field(default_factory=list)   # per training window
    violation: float = 0.0       # how far past the per-job bound (0: within it, or unmeasured)

    def as_dict(self) -> dict:
        return {**self.knobs.as_dict(), "description": self.knobs.describe(),
                "train_avg_jct_s": self.jct_s, "reward": self.reward,
                "train_windows": [s.as_dict() for s in self.scores],
                "violation": _json_num(self.violation), "bound_holds": bound_holds(self.scores)}


def _json_num(x: float) -> float | None:
    """None for a non-finite number (unfinished jobs): strict JSON has no Infinity."""
    return x if math.isfinite(x) else None


def rank_key(c: Candidate, bound: bool = True) -> tuple[float, float]:
    """Smaller is better. With the bound, feasible first: less violation always wins, and
    the JCT reward decides only between equal violations; without it, the reward alone."""
    return (c.violation if bound else 0.0, -c.reward)


@dataclass
class SearchResult:
    best: Candidate
    start: Candidate
    history: list[dict] = field(default_factory=list)    # per iteration
    evaluations: int = 0          # distinct policies simulated (cache misses)
    bound: bool = True            # whether the per-job bound ranked the candidates

    def as_dict(self) -> dict:
        return {"bound": self.bound, "best": self.best.as_dict(),
                "start": self.start.as_dict(), "iterations": self.history,
                "evaluations": self.evaluations}


def _sample(dist: _Dist, rng: np.random.Generator) -> LasKnobs:
    q = NUM_QUEUES[int(rng.choice(len(NUM_QUEUES), p=dist.q_probs))]
    z = rng.normal(dist.mean, dist.std)
    preempt = bool(rng.random() < dist.p_preempt)
    starve_on = bool(rng.random() < dist.p_starve)
    log_t = float(np.clip(z[0], *LOG10_T_RANGE))
    ts = [log_t]
    for gap in z[1:q - 1]:
        ts.append(ts[-1] + max(MIN_LOG10_GAP, float(gap)))
    starve = 10 ** float(np.clip(z[3], *LOG10_STARVE_RANGE)) if starve_on else 0.0
    thresholds = tuple(10 ** t for t in ts) if q > 1 else ()
    return LasKnobs(thresholds, starve, preempt).canonical()


def _refit(dist: _Dist, elites: Sequence[LasKnobs], cfg: CemConfig) -> _Dist:
    a = cfg.smoothing
    counts = np.array([sum(e.num_queues == q for e in elites) for q in NUM_QUEUES], float)
    q_probs = a * counts / len(elites) + (1 - a) * dist.q_probs
    q_probs = np.maximum(q_probs, cfg.min_prob)
    q_probs /= q_probs.sum()

    def bern(old: float, hits: int) -> float:
        return float(np.clip(a * hits / len(elites) + (1 - a) * old, cfg.min_prob,
                             1 - cfg.min_prob))

    p_preempt = bern(dist.p_preempt, sum(e.preemption for e in elites))
    starving = [e for e in elites if e.starve_limit > 0]
    p_starve = bern(dist.p_starve, len(starving))
    mean, std = dist.mean.copy(), dist.std.copy()
    # Each Gaussian coordinate is refitted on the elites that use it.
    columns: list[list[float]] = [[], [], [], []]
    for e in elites:
        logs = [math.log10(t) for t in e.thresholds_gpu_s]
        if logs:
            columns[0].append(logs[0])
        for i, (x, y) in enumerate(zip(logs, logs[1:])):
            columns[1 + i].append(y - x)
        if e.starve_limit > 0:
            columns[3].append(math.log10(e.starve_limit))
    for i, col in enumerate(columns):
        if col:
            mean[i] = a * float(np.mean(col)) + (1 - a) * mean[i]
            std[i] = max(cfg.min_std, a * float(np.std(col)) + (1 - a) * std[i])
    return _Dist(q_probs, p_preempt, p_starve, mean, std)


Evaluate = Callable[[LasKnobs], Sequence[WindowScore | float | None]]


def cem_search(evaluate: Evaluate, cfg: CemConfig = CemConfig(),
               start: LasKnobs = FIXED_TIRESIAS,
               progress: Callable[[int, int, float], None] | None = None,
               bound: bool = True) -> SearchResult:
    """Cross-entropy method over 2D-LAS knobs. ``evaluate(knobs)`` gives, per training
    window, a ``WindowScore`` or the average JCT alone (None or non-finite: the policy left
    jobs unfinished, the worst reward). Candidates rank by ``rank_key``: with ``bound``, the
    per-job bound's violation first (a plain JCT measures none), then the reward. The
    starting point is the first candidate of the first iteration; the result is the best
    candidate seen in that order (so never worse than the start on the training windows).
    ``progress(done, total, best_reward)`` after every candidate."""
    rng = np.random.default_rng(cfg.seed)
    cache: dict[LasKnobs, list[WindowScore]] = {}
    base: list[float] = []

    def run(knobs: LasKnobs) -> Candidate:
        if knobs not in cache:
            cache[knobs] = [WindowScore.of(x) for x in evaluate(knobs)]
        scores = cache[knobs]
        jct = [s.avg_jct_s if s.avg_jct_s is not None else math.inf for s in scores]
        if not base:
            base.extend(j if math.isfinite(j) and j > 0 else 1.0 for j in jct)
        ratios = [j / b for j, b in zip(jct, base)]
        return Candidate(knobs, jct, -float(np.mean(ratios)) if ratios else 0.0,
                         list(scores), mean_violation(scores))

    def key(c: Candidate) -> tuple[float, float]:
        return rank_key(c, bound)

    start = start.canonical()
    dist = _Dist.around(start)
    n_elite = max(1, int(round(cfg.population * cfg.elite_fraction)))
    total = cfg.population * cfg.iterations
    done = 0
    start_c = best = run(start)
    history = []
    for it in range(cfg.iterations):
        knobs = [_sample(dist, rng) for _ in range(cfg.population)]
        if it == 0:
            knobs[0] = start
        cands = []
        for k in knobs:
            c = run(k)
            cands.append(c)
            if key(c) < key(best):
                best = c
            done += 1
            if progress is not None:
                progress(done, total, best.reward)
        # stable sort: ties keep sampling order (deterministic)
        elites = sorted(cands, key=key)[:n_elite]
        history.append({"iteration": it + 1, "best_reward": best.reward,
                        "best_violation": best.violation,
                        "elite_mean_reward": float(np.mean([c.reward for c in elites])),
                        "feasible": sum(c.violation == 0.0 for c in cands),
                        "p_num_queues": [round(float(p), 3) for p in dist.q_probs],
                        "p_preemption": round(dist.p_preempt, 3)})
        dist = _refit(dist, [c.knobs for c in elites], cfg)
    return SearchResult(best=best, start=start_c, history=history, evaluations=len(cache),
                        bound=bound)
