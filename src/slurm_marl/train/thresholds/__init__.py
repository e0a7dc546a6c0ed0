"""2D-LAS knobs learned by policy search in the simulator ("learned ordering").

The cross-entropy method (CEM), a black-box policy-search method, tunes the knobs of
Tiresias' 2D-LAS for one virtual cluster (one partition's workload):

* the number of queues (1 = no demotion at all, i.e. FIFO-like; 2-4 = 1-3 boundaries) and
  the queue boundaries in GPU-seconds, sampled on a log scale;
* ``starve_limit`` (off, or a value);
* preemption on or off.

Reward = minus the mean over K training windows of (average JCT / average JCT of the
starting point on that window): minus average JCT, with each window weighing the same.

Subject to the per-job bound ("no user pays for the average"): each window also
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
Slurm-alone guard (``policy/guard.py``), to be measured against it. Without the bound
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

The package's modules, one concern each: ``knobs`` (the knobs and their profile), ``bound``
(the per-job bound and each window's score), ``search`` (CEM), ``windows`` (the past the
search learns on) and ``validation`` (the over-fitting guard and the simulator as the
evaluator). Their public names are importable from here, as callers always have.
"""

from slurm_marl.train.thresholds.bound import (BASELINE, MAX_P99_RATIO, MAX_SHARE_SLOWER,
                                               P99_UNIT, WindowScore, bound_holds,
                                               mean_violation)
from slurm_marl.train.thresholds.knobs import (FIXED_TIRESIAS, LOG10_STARVE_RANGE,
                                               LOG10_T_RANGE, MIN_LOG10_GAP, NUM_QUEUES,
                                               LasKnobs)
from slurm_marl.train.thresholds.search import (Candidate, CemConfig, Evaluate,
                                                SearchResult, cem_search, rank_key)
from slurm_marl.train.thresholds.validation import (Validation, guard, simulator_evaluator,
                                                    validate)
from slurm_marl.train.thresholds.windows import (HistoryWindow, history_windows, load_of,
                                                 split_history, trace_window)

__all__ = ["BASELINE", "MAX_P99_RATIO", "MAX_SHARE_SLOWER", "P99_UNIT", "WindowScore",
           "bound_holds", "mean_violation", "FIXED_TIRESIAS", "LOG10_STARVE_RANGE",
           "LOG10_T_RANGE", "MIN_LOG10_GAP", "NUM_QUEUES", "LasKnobs", "Candidate",
           "CemConfig", "Evaluate", "SearchResult", "cem_search", "rank_key", "Validation",
           "guard", "simulator_evaluator", "validate", "HistoryWindow", "history_windows",
           "load_of", "split_history", "trace_window"]
