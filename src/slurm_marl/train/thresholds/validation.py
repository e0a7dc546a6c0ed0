"""The over-fitting guard: the learned knobs kept only where they beat the start on
windows never trained on; and the simulator as the search's and the guard's evaluator."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_marl.sim.cluster import SimCluster
from slurm_marl.train.thresholds.bound import BASELINE, WindowScore, bound_holds, mean_violation
from slurm_marl.train.thresholds.knobs import LasKnobs
from slurm_marl.train.thresholds.search import Evaluate, SearchResult, _json_num
from slurm_marl.train.thresholds.windows import HistoryWindow



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
