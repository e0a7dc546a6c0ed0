"""2D-LAS knobs learned by policy search in the simulator (issue 16, "learned ordering").

The cross-entropy method (CEM), a black-box policy-search method, tunes the knobs of
Tiresias' 2D-LAS for one virtual cluster (one partition's workload):

* the number of queues (1 = no demotion at all, i.e. FIFO-like; 2-4 = 1-3 boundaries) and
  the queue boundaries in GPU-seconds, sampled on a log scale;
* ``starve_limit`` (off, or a value);
* preemption on or off.

Reward = minus the mean over K training windows of (average JCT / average JCT of the
starting point on that window): minus average JCT, with each window weighing the same.

Subject to the per-job bound of issue 33 ("no user pays for the average"): each window also
runs ``fifo-backfill`` (once; it does not depend on the knobs) and every job's JCT is
compared with its JCT there (``sim/perjob.py``: ratio = JCT / max(fifo-backfill JCT,
600 s)). The bound on a window: at most 2% of jobs more than 1.1x slower, none more than
2x slower, p99 ratio <= 1.5. A candidate's *violation* is the mean over its windows of

    max(0, share > 1.1x - 0.02) / 0.02  +  share > 2x / 0.02  +  max(0, p99 - 1.5) / 0.5

(shares in units of the 2% the bound allows, p99 in units of the 0.5 between its limit and
2x; a window with unfinished jobs counts as infinitely far past the bound). It is 0 exactly
when the bound holds on every window. CEM ranks candidates feasible-first: less violation
always beats more, and only among equal violation (0: feasible) does the JCT reward decide;
the best-seen candidate follows the same order. So where the start (Tiresias' fixed
thresholds) itself breaks the bound, the search first minimises violation. ``starve_limit``
(Tiresias' starvation promotion) is among the searched knobs: the alternative to the
Slurm-alone guard (``policy/guard.py``) that issue 33 asks to measure. Without the bound
(``bound=False``; ``train thresholds --no-bound``) the violation is still measured and
reported, but only the reward ranks.
Training windows are the virtual cluster's own past: rows *before* a given row (the first
row of the window one will run), never after, and never inside an excluded (held-out)
window. Everything is seeded: the same inputs give the same knobs.

Over-fitting guard: the knobs the search finds on the training windows are kept only if,
on validation windows that are more recent than every training window (the past nearest to
the deployment; never trained on), they beat the starting point by at least ``min_gain``
(``validate``). Otherwise the starting point (Tiresias' fixed thresholds) is kept: a small
gain on two past windows is as likely noise as a trend (measured: without the guard, the
learned knobs were worse on a held-out window; docs/benchmarks.md, "Learned knobs behind an
over-fitting guard"). With the bound, the learned knobs must also not violate it more than
the start on the validation windows; where the start violates it, cutting its violation by
at least ``min_gain`` (relative) is a clear gain too (``validate`` has the rule).

The result becomes a ``tiresias_las`` profile with consolidate placement and fit-first
backfill (as ``las-consolidate``), written as TOML for ``slurm-marl simulate --profile``, and
for the daemon as that partition's profile (``agent.partition_profiles`` in its config).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from slurm_marl.policy.profile import Profile, profile_from_mapping
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.traces import TraceError, TraceJob, Window, load_trace

NUM_QUEUES = (1, 2, 3, 4)
LOG10_T_RANGE = (1.5, 6.5)          # first boundary: ~30 GPU-s .. ~3.2M GPU-s
MIN_LOG10_GAP = 0.05                # consecutive boundaries at least 12% apart
LOG10_STARVE_RANGE = (-1.0, 2.0)    # starve_limit 0.1 .. 100 (x the last run time)


@dataclass(frozen=True)
class LasKnobs:
    """The searched knobs. ``thresholds_gpu_s`` empty: one queue (no demotion)."""

    thresholds_gpu_s: tuple[float, ...] = (3250.0, 7200.0, 18000.0)
    starve_limit: float = 0.0
    preemption: bool = True

    @property
    def num_queues(self) -> int:
        return len(self.thresholds_gpu_s) + 1

    def canonical(self) -> "LasKnobs":
        """Rounded (whole GPU-s, starve limit to 2 decimals) so equal policies compare equal.
        Without preemption, or with one queue, every waiting job is a never-run job of queue
        0 and no running job is displaced, so the order is arrival order whatever the other
        knobs: all such knobs become the one FIFO-like point (one queue, no preemption, no
        starve limit)."""
        if not self.preemption or not self.thresholds_gpu_s:
            return LasKnobs((), 0.0, False)
        ts: list[float] = []
        for t in self.thresholds_gpu_s:
            t = float(max(1, round(t)))
            if ts and t <= ts[-1]:
                t = ts[-1] + 1.0
            ts.append(t)
        return LasKnobs(tuple(ts), round(max(0.0, self.starve_limit), 2), self.preemption)

    def order_params(self) -> dict:
        if not self.thresholds_gpu_s:   # one queue; the boundary is never used
            return {"thresholds_gpu_s": [3250], "num_queues": 1,
                    "starve_limit": self.starve_limit}
        return {"thresholds_gpu_s": [int(t) if float(t).is_integer() else t
                                     for t in self.thresholds_gpu_s],
                "starve_limit": self.starve_limit}

    def profile_mapping(self, name: str, description: str = "") -> dict:
        return {"name": name,
                "description": description or f"2D-LAS with learned knobs ({self.describe()})",
                "preemption": self.preemption, "backfill": True, "backfill_reserve": False,
                "order": {"plugin": "tiresias_las", **self.order_params()},
                "place": {"consolidate": 1.0}}

    def profile(self, name: str = "las-learned-thresholds", description: str = "") -> Profile:
        return profile_from_mapping(self.profile_mapping(name, description), source=name)

    def to_toml(self, name: str = "las-learned-thresholds", description: str = "") -> str:
        m = self.profile_mapping(name, description)
        order = m["order"]
        lines = [f"name = {_toml_str(m['name'])}", f"description = {_toml_str(m['description'])}",
                 f"preemption = {_toml_bool(m['preemption'])}", "backfill = true",
                 "backfill_reserve = false", "", "[order]", 'plugin = "tiresias_las"',
                 "thresholds_gpu_s = [" + ", ".join(str(t) for t in order["thresholds_gpu_s"])
                 + "]"]
        if "num_queues" in order:
            lines.append(f"num_queues = {order['num_queues']}")
        lines += [f"starve_limit = {order['starve_limit']!r}", "", "[place]",
                  "consolidate = 1.0", ""]
        return "\n".join(lines)

    def describe(self) -> str:
        queues = ("1 queue (no demotion)" if not self.thresholds_gpu_s else
                  "thresholds " + "/".join(f"{t:.0f}" for t in self.thresholds_gpu_s) + " GPU-s")
        starve = f"starve {self.starve_limit:g}" if self.starve_limit > 0 else "no starve limit"
        return f"{queues}, {starve}, preemption {'on' if self.preemption else 'off'}"

    def as_dict(self) -> dict:
        return {"thresholds_gpu_s": list(self.thresholds_gpu_s), "num_queues": self.num_queues,
                "starve_limit": self.starve_limit, "preemption": self.preemption}


FIXED_TIRESIAS = LasKnobs()   # las-consolidate's knobs


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_bool(b: bool) -> str:
    return "true" if b else "false"


# --- the per-job bound (issue 33) ------------------------------------------------------------

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


# --- the search -----------------------------------------------------------------------------


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


# --- the over-fitting guard --------------------------------------------------------------------


@dataclass(frozen=True)
class Validation:
    """The guard's verdict on validation windows: mean JCT ratio learned / start (None when
    a policy left jobs unfinished there), each one's per-job scores and violation, and the
    knobs kept."""

    windows: tuple[str, ...]
    learned_jct_s: tuple[float | None, ...]
    start_jct_s: tuple[float | None, ...]
    ratio: float | None
    min_gain: float
    kept: LasKnobs
    learned_kept: bool
    learned_scores: tuple[WindowScore, ...] = ()
    start_scores: tuple[WindowScore, ...] = ()
    bound: bool = True
    reason: str = ""

    @property
    def learned_violation(self) -> float:
        return mean_violation(self.learned_scores)

    @property
    def start_violation(self) -> float:
        return mean_violation(self.start_scores)

    def as_dict(self) -> dict:
        return {"windows": list(self.windows), "learned_avg_jct_s": list(self.learned_jct_s),
                "start_avg_jct_s": list(self.start_jct_s), "ratio": self.ratio,
                "min_gain": self.min_gain, "bound": self.bound,
                "learned": {"windows": [s.as_dict() for s in self.learned_scores],
                            "violation": _json_num(self.learned_violation),
                            "bound_holds": bound_holds(self.learned_scores)},
                "start": {"windows": [s.as_dict() for s in self.start_scores],
                          "violation": _json_num(self.start_violation),
                          "bound_holds": bound_holds(self.start_scores)},
                "learned_kept": self.learned_kept, "reason": self.reason,
                "kept": self.kept.describe()}


def validate(learned: LasKnobs, start: LasKnobs, evaluate: Evaluate,
             windows: Sequence[str], min_gain: float = 0.02, bound: bool = True
             ) -> Validation:
    """Keep ``learned`` or ``start`` by their scores on the validation windows (``evaluate``
    as for ``cem_search``). ``learned`` is kept only if it finishes every job where the start
    does and, with ``bound``, its violation of the per-job bound (mean over the windows) is
    at most the start's, and it gains clearly on one of the two objectives:

    * the start violates the bound and ``learned`` cuts that violation by at least
      ``min_gain`` of it (whatever its JCT: the bound comes first, as in the search); or
    * its mean JCT ratio to ``start`` is at most ``1 - min_gain``.

    So where both are within the bound it is the JCT rule alone; a learned point that
    violates more is refused however fast. Without ``bound`` (or with JCTs alone, which
    measure no bound) only the JCT rule applies. Otherwise ``start`` is kept."""
    learned, start = learned.canonical(), start.canonical()
    if learned == start:
        return Validation(tuple(windows), (), (), 1.0, min_gain, start, False, bound=bound,
                          reason="the search's best is the start")
    ours = tuple(WindowScore.of(x) for x in evaluate(learned))
    theirs = tuple(WindowScore.of(x) for x in evaluate(start))
    pairs = [(a.avg_jct_s, b.avg_jct_s) for a, b in zip(ours, theirs)
             if b.avg_jct_s is not None and b.avg_jct_s > 0]
    if not pairs or any(a is None for a, _ in pairs):
        ratio = None
    else:
        ratio = float(np.mean([a / b for a, b in pairs]))
    v_ours, v_theirs = mean_violation(ours), mean_violation(theirs)
    jct_gain = ratio is not None and ratio <= 1.0 - min_gain
    if ratio is None:
        keep, reason = False, "the learned knobs leave jobs unfinished where the start does not"
    elif bound and v_ours > v_theirs:
        keep, reason = False, "the learned knobs violate the per-job bound more than the start"
    elif bound and math.isfinite(v_theirs) and v_theirs > 0 and v_ours < v_theirs \
            and v_ours <= (1.0 - min_gain) * v_theirs:
        keep, reason = True, "the learned knobs cut the start's violation of the per-job bound"
    elif jct_gain:
        keep, reason = True, f"the learned knobs gain at least {min_gain:.0%} average JCT"
    else:
        keep, reason = False, f"the learned knobs gain less than {min_gain:.0%} average JCT" \
            + (" and do not cut the start's violation of the per-job bound by as much"
               if bound and v_theirs > 0 else "")
    return Validation(tuple(windows), tuple(s.avg_jct_s for s in ours),
                      tuple(s.avg_jct_s for s in theirs), ratio, min_gain,
                      learned if keep else start, keep, ours, theirs, bound, reason)


# --- training windows: the virtual cluster's past --------------------------------------------


@dataclass(frozen=True)
class HistoryWindow:
    window: str             # "vc=...,rows=A:B"
    first_row: int
    end_row: int            # exclusive
    load: float
    jobs: tuple[TraceJob, ...]


def load_of(jobs: Sequence[TraceJob], gpus: int) -> float:
    """GPU-seconds submitted per second of the submit span, per cluster GPU."""
    if len(jobs) < 2 or gpus <= 0:
        return 0.0
    span = jobs[-1].submit_time_s - jobs[0].submit_time_s
    work = sum(j.duration_s * j.num_gpus for j in jobs)
    return work / span / gpus if span > 0 else math.inf


def _rebased(jobs: Sequence[TraceJob]) -> tuple[TraceJob, ...]:
    from dataclasses import replace
    t0 = jobs[0].submit_time_s if jobs else 0.0
    return tuple(replace(j, job_id=i, submit_time_s=j.submit_time_s - t0)
                 for i, j in enumerate(jobs))


def trace_window(label: str, jobs: Sequence[TraceJob], gpus: int) -> HistoryWindow:
    """Any trace's jobs (in submit order) as one window the search and the guard take,
    rebased to its first submission, with its load on ``gpus`` GPUs: how a site's own
    history (``train/site_tuning.py``) is learned from, where a Philly trace has
    ``history_windows``. Its rows are the jobs' positions in ``jobs``."""
    return HistoryWindow(label, 0, len(jobs), load_of(jobs, gpus), _rebased(jobs))


def history_windows(trace: str, vc: str, before_row: int, cluster: SimCluster, *,
                    rows: int = 500, count: int = 2, min_load: float = 0.9,
                    exclude: Sequence[str | Window] = ()) -> list[HistoryWindow]:
    """Up to ``count`` windows of ``rows`` consecutive rows of virtual cluster ``vc``, all
    ending at or before ``before_row`` (only rows ``0:before_row`` are read), none
    overlapping an ``exclude`` window of that cluster, most recent first, keeping those with
    load >= ``min_load`` (ordering only matters where jobs wait). If fewer are that busy,
    the most recent of the others fill up. Empty when there are fewer than ``rows`` rows."""
    if before_row < rows:
        return []
    try:
        past = load_trace(trace, Window(cluster=vc, first_row=0, rows=before_row))
    except TraceError:
        return []
    banned = []
    for w in exclude:
        w = Window.parse(w) if isinstance(w, str) else w
        if w.cluster == vc:
            banned.append((w.first_row, math.inf if w.rows is None else w.first_row + w.rows))
    gpus = sum(p.nodes * p.sockets * p.gpus_per_socket for p in cluster.partitions_spec)
    busy, quiet = [], []
    end = min(before_row, len(past))
    while end - rows >= 0 and len(busy) < count:
        a = end - rows
        clash = [lo for lo, hi in banned if a < hi and lo < end]
        if clash:
            end = min(clash)
            continue
        jobs = past[a:end]
        hw = HistoryWindow(f"vc={vc},rows={a}:{end}", a, end, load_of(jobs, gpus),
                           _rebased(jobs))
        (busy if hw.load >= min_load else quiet).append(hw)
        end = a
    return busy + quiet[:count - len(busy)]


def split_history(found: Sequence[HistoryWindow], validation_windows: int
                  ) -> tuple[list[HistoryWindow], list[HistoryWindow]]:
    """(validation, training) windows of a ``history_windows`` answer (most recent first):
    the nearest ``validation_windows`` validate, the ones before them train. Both empty
    when there is not at least one window to train on."""
    if len(found) <= validation_windows:
        return [], []
    return list(found[:validation_windows]), list(found[validation_windows:])


def guard(result: SearchResult, checks: Sequence[HistoryWindow], cluster: SimCluster,
          interference: str, min_gain: float, bound: bool | None = None) -> Validation | None:
    """``validate`` the search's best knobs against its start on the validation windows
    ``checks`` (None without any: nothing is guarded); ``bound`` None: as the search."""
    if not checks:
        return None
    return validate(result.best.knobs, result.start.knobs,
                    simulator_evaluator(checks, cluster, interference),
                    [w.window for w in checks], min_gain,
                    result.bound if bound is None else bound)


def simulator_evaluator(windows: Sequence[HistoryWindow], cluster: SimCluster,
                        interference: str = "none", seed: int = 0,
                        restart_delay_s: float = 30.0, baseline: str | None = BASELINE
                        ) -> Callable[[LasKnobs], list[WindowScore]]:
    """``evaluate`` for ``cem_search``: the knobs' ``WindowScore`` on each window: average
    JCT and, unless ``baseline`` is None, the per-job comparison with that profile's run of
    the same window (run once per window, on first use, and kept)."""
    from slurm_marl.sim.perjob import per_job_comparison, records
    from slurm_marl.sim.run import simulate

    def run(w: HistoryWindow, prof):
        return simulate(list(w.jobs), cluster, prof, interference=interference, seed=seed,
                        restart_delay_s=restart_delay_s, drop_oversized=True)

    base: dict[int, list] = {}

    def evaluate(knobs: LasKnobs) -> list[WindowScore]:
        prof = knobs.profile()
        out = []
        for i, w in enumerate(windows):
            r = run(w, prof)
            jct = None if r.summary.get("unfinished") else r.summary["avg_jct_s"]
            if baseline is None:
                out.append(WindowScore(jct))
                continue
            if i not in base:
                base[i] = records(run(w, baseline).outcome.jobs)
            c = per_job_comparison(r.outcome.jobs, base[i], baseline=baseline)
            out.append(WindowScore(jct, c["share_slower_1_1x"], c["share_slower_2x"],
                                   c["p99_ratio"], c["compared_jobs"]))
        return out

    return evaluate
