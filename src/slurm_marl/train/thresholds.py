"""2D-LAS knobs learned by policy search in the simulator (issue 16, "learned ordering").

The cross-entropy method (CEM), a black-box policy-search method, tunes the knobs of
Tiresias' 2D-LAS for one virtual cluster (one partition's workload):

* the number of queues (1 = no demotion at all, i.e. FIFO-like; 2-4 = 1-3 boundaries) and
  the queue boundaries in GPU-seconds, sampled on a log scale;
* ``starve_limit`` (off, or a value);
* preemption on or off.

Reward = minus the mean over K training windows of (average JCT / average JCT of the
starting point on that window): minus average JCT, with each window weighing the same.
Training windows are the virtual cluster's own past: rows *before* a given row (the first
row of the window one will run), never after, and never inside an excluded (held-out)
window. Everything is seeded: the same inputs give the same knobs.

Over-fitting guard: the knobs the search finds on the training windows are kept only if,
on validation windows that are more recent than every training window (the past nearest to
the deployment; never trained on), they beat the starting point by at least ``min_gain``
(``validate``). Otherwise the starting point (Tiresias' fixed thresholds) is kept: a small
gain on two past windows is as likely noise as a trend (measured: +2.3% on one held-out
window without the guard).

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
    jct_s: list[float]           # per training window
    reward: float


@dataclass
class SearchResult:
    best: Candidate
    start: Candidate
    history: list[dict] = field(default_factory=list)    # per iteration
    evaluations: int = 0          # distinct policies simulated (cache misses)

    def as_dict(self) -> dict:
        return {"best": {**self.best.knobs.as_dict(), "train_avg_jct_s": self.best.jct_s,
                         "reward": self.best.reward, "description": self.best.knobs.describe()},
                "start": {**self.start.knobs.as_dict(), "train_avg_jct_s": self.start.jct_s,
                          "reward": self.start.reward},
                "iterations": self.history, "evaluations": self.evaluations}


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


def cem_search(evaluate: Callable[[LasKnobs], Sequence[float]], cfg: CemConfig = CemConfig(),
               start: LasKnobs = FIXED_TIRESIAS,
               progress: Callable[[int, int, float], None] | None = None) -> SearchResult:
    """Cross-entropy method over 2D-LAS knobs. ``evaluate(knobs)`` gives the average JCT on
    each training window (None or non-finite: the policy left jobs unfinished, the worst
    reward). The starting point is the first candidate of the first iteration; the result is
    the best candidate seen (so never worse than the start on the training windows).
    ``progress(done, total, best_reward)`` after every candidate."""
    rng = np.random.default_rng(cfg.seed)
    cache: dict[LasKnobs, list[float]] = {}
    base: list[float] = []

    def run(knobs: LasKnobs) -> Candidate:
        if knobs not in cache:
            cache[knobs] = [float(x) if x is not None and math.isfinite(x) else math.inf
                            for x in evaluate(knobs)]
        jct = cache[knobs]
        if not base:
            base.extend(j if math.isfinite(j) and j > 0 else 1.0 for j in jct)
        ratios = [j / b for j, b in zip(jct, base)]
        return Candidate(knobs, jct, -float(np.mean(ratios)) if ratios else 0.0)

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
            if c.reward > best.reward:
                best = c
            done += 1
            if progress is not None:
                progress(done, total, best.reward)
        # stable sort: ties keep sampling order (deterministic)
        elites = sorted(cands, key=lambda c: -c.reward)[:n_elite]
        history.append({"iteration": it + 1, "best_reward": best.reward,
                        "elite_mean_reward": float(np.mean([c.reward for c in elites])),
                        "p_num_queues": [round(float(p), 3) for p in dist.q_probs],
                        "p_preemption": round(dist.p_preempt, 3)})
        dist = _refit(dist, [c.knobs for c in elites], cfg)
    return SearchResult(best=best, start=start_c, history=history, evaluations=len(cache))


# --- the over-fitting guard --------------------------------------------------------------------


@dataclass(frozen=True)
class Validation:
    """The guard's verdict on validation windows: mean JCT ratio learned / start (None when
    a policy left jobs unfinished there), and the knobs kept."""

    windows: tuple[str, ...]
    learned_jct_s: tuple[float | None, ...]
    start_jct_s: tuple[float | None, ...]
    ratio: float | None
    min_gain: float
    kept: LasKnobs
    learned_kept: bool

    def as_dict(self) -> dict:
        return {"windows": list(self.windows), "learned_avg_jct_s": list(self.learned_jct_s),
                "start_avg_jct_s": list(self.start_jct_s), "ratio": self.ratio,
                "min_gain": self.min_gain, "learned_kept": self.learned_kept,
                "kept": self.kept.describe()}


def validate(learned: LasKnobs, start: LasKnobs,
             evaluate: Callable[[LasKnobs], Sequence[float | None]],
             windows: Sequence[str], min_gain: float = 0.02) -> Validation:
    """Keep ``learned`` only if its mean JCT ratio to ``start`` over the validation windows
    (``evaluate`` gives each one's average JCT) is at most ``1 - min_gain``, and it finishes
    every job where the start does; otherwise keep ``start``."""
    learned, start = learned.canonical(), start.canonical()
    if learned == start:
        return Validation(tuple(windows), (), (), 1.0, min_gain, start, False)
    ours = [float(x) if x is not None and math.isfinite(x) else None for x in evaluate(learned)]
    base = [float(x) if x is not None and math.isfinite(x) else None for x in evaluate(start)]
    pairs = [(a, b) for a, b in zip(ours, base) if b is not None and b > 0]
    if not pairs or any(a is None for a, _ in pairs):
        ratio = None
    else:
        ratio = float(np.mean([a / b for a, b in pairs]))
    keep = ratio is not None and ratio <= 1.0 - min_gain
    return Validation(tuple(windows), tuple(ours), tuple(base), ratio, min_gain,
                      learned if keep else start, keep)


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
          interference: str, min_gain: float) -> Validation | None:
    """``validate`` the search's best knobs against its start on the validation windows
    ``checks`` (None without any: nothing is guarded)."""
    if not checks:
        return None
    return validate(result.best.knobs, result.start.knobs,
                    simulator_evaluator(checks, cluster, interference),
                    [w.window for w in checks], min_gain)


def simulator_evaluator(windows: Sequence[HistoryWindow], cluster: SimCluster,
                        interference: str = "none", seed: int = 0,
                        restart_delay_s: float = 30.0
                        ) -> Callable[[LasKnobs], list[float | None]]:
    """``evaluate`` for ``cem_search``: average JCT of the knobs on each window."""
    from slurm_marl.sim.run import simulate

    def evaluate(knobs: LasKnobs) -> list[float | None]:
        prof = knobs.profile()
        out = []
        for w in windows:
            run = simulate(list(w.jobs), cluster, prof, interference=interference, seed=seed,
                           restart_delay_s=restart_delay_s, drop_oversized=True)
            s = run.summary
            out.append(None if s.get("unfinished") else s["avg_jct_s"])
        return out

    return evaluate
