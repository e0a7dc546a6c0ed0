"""Predicted remaining GPU-time first, with least-attained-service once a job outlives its
prediction (predicted ordering with fixed rules).

Each job may carry ``predicted_gpu_s``: its total GPU-time (seconds x GPUs) as predicted from
what was known at submission (a site's predictor; in the simulator ``--prediction-error``).
It is measured against the job's work done (``progress_gpu_s``, at solo speed, where known)
rather than its attained service, which grows faster while interference slows the job.
Its *key* is what the order expects it still needs:

* within its prediction (attained < predicted): the predicted remaining GPU-time,
  ``predicted - attained`` (shortest first, as Helios' QSSF and SRTF);
* once it has outlived its prediction, or without one: its attained service, as 2D-LAS
  ranks it (for heavy-tailed run times a job's expected remaining time grows with its age),
  so a job whose prediction was too short falls back to where least attained service would
  put it instead of holding the head of the queue.

With ``rule = "gittins"`` and a known error distribution of the predictions (``error``,
``slurm_marl.prediction_error``; ``helios`` by default), a prediction is read as a
distribution of the job's true GPU-time (prediction x the distribution's ratios), and the
key is 1 / the job's Gittins index given its attained service (Tiresias' 2D-Gittins, on the
job's own distribution instead of the whole history's): the GPU-time per unit of completion
probability the job needs next. A job predicted long still has some chance of being short,
so it gets early service as under LAS; as it runs past the likely sizes its key grows. A job
that outlived every size its distribution allows falls back to its attained service.

With ``rule = "in_las_queues"`` the queues are Tiresias' 2D-LAS queues by attained service
(``thresholds_gpu_s``, Tiresias' by default) and the prediction orders only the *waiting*
jobs of a queue (shortest predicted remaining first, where 2D-LAS keeps arrival order).
Running jobs, and waiting jobs without a prediction (none made, or withheld by the
prediction-skill gate, ``history/skill.py``), keep their place in Tiresias' list of the
queue (``tiresias_las``' ``QueueLists``: entry order, a job demoted while running behind
the jobs already waiting in its new queue); the predicted waiting jobs come after them. So
a queue without predictions is ordered exactly as ``tiresias_las`` (no starvation
promotion) orders it. (Running jobs simply ahead of every waiting job of their queue, and
unpredicted waiting jobs by attained service, gave a much worse mean JCT than tiresias_las
on a Philly window with every prediction withheld: docs/benchmarks.md, "A prediction-skill
gate".) A wrong prediction can change which waiting job of a queue starts next, never
preempt a job that 2D-LAS would let run, nor move a job to another queue. (Ranking running
jobs by their prediction too let a stream of under-predicted arrivals preempt each running
job in turn, at a far worse average JCT than 2D-LAS's on one Philly window with predictions
learned in the run: docs/benchmarks.md, "A safety net that holds".)

Keys are discretised into geometric buckets (``bucket_factor``, default 2: [1, 2), [2, 4),
... GPU-s; [0, 1) with the first), as Tiresias discretises its queues, so two jobs of
similar keys never preempt each other: inside a bucket running jobs rank first, then
waiting jobs by when they entered the queue. A running job within its prediction only moves
to lower buckets as it runs; one past its prediction climbs buckets like a 2D-LAS job and
yields to waiting jobs of lower buckets.

Starvation bound (``starve_after_s``, 0: none): a waiting job that has waited that long since
it entered the queue goes to queue 0, ahead of every unpromoted job, oldest first, and stays
there for the run that follows (so the jobs it waited behind cannot preempt it at once), as
Tiresias' STARVELIMIT promotion does. A job whose
prediction was far too long can therefore wait at most ``starve_after_s`` plus the time the
promoted jobs ahead of it need.

Queues (``SetPriority.queue``): 0 promoted by the starvation bound, 1 within its
prediction, 2 past its prediction or without one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from slurm_marl.domain import Job
from slurm_marl.policy.order.tiresias_las import (DEFAULT_THRESHOLDS_GPU_S, TiresiasLas,
                                                  queue_for_service, validate_thresholds)
from slurm_marl.policy.plugins import PluginError, check_params
from slurm_marl.prediction_error import DISTRIBUTIONS, truth_ratios

KEY = "predicted_las"
PROMOTED, PREDICTED, ATTAINED = 0, 1, 2
RULES = ("remaining", "gittins", "in_las_queues")
MIN_RECHECK_S = 30.0


def expected_remaining_gpu_s(predicted_gpu_s: float | None, attained_gpu_s: float,
                             progress_gpu_s: float | None = None) -> tuple[float, bool]:
    """(the key, whether it comes from the prediction): predicted remaining GPU-time while
    the job is within its prediction (measured against its progress where known, else its
    attained service), else its attained service."""
    done = work_done(attained_gpu_s, progress_gpu_s)
    if predicted_gpu_s is not None and done < predicted_gpu_s:
        return predicted_gpu_s - done, True
    return max(0.0, attained_gpu_s), False


def work_done(attained_gpu_s: float, progress_gpu_s: float | None) -> float:
    """What a prediction is measured against: progress where known, else attained."""
    return max(0.0, attained_gpu_s if progress_gpu_s is None else progress_gpu_s)


def gittins_key(sizes: tuple[float, ...], attained: float) -> float | None:
    """1 / the Gittins index of a job of equally likely true ``sizes`` (ascending) that has
    attained ``attained``: min over quanta D of E[min(T - a, D) | T > a] / P(T - a <= D |
    T > a), D running over the sizes left. None when no size is left (outlived them all)."""
    first = 0
    n = len(sizes)
    while first < n and sizes[first] <= attained:
        first += 1
    if first == n:
        return None
    # Over the sizes left (equal weights): for D = sizes[j] - a, completions = j - first + 1,
    # expected service = sum_{i <= j} (s_i - a) + (n - j - 1) (s_j - a).
    best = math.inf
    done_service = 0.0
    for j in range(first, n):
        d = sizes[j] - attained
        done_service += d
        ratio = (done_service + (n - j - 1) * d) / (j - first + 1)
        if ratio < best:
            best = ratio
    return best


def _done(job: Job) -> float:
    return work_done(job.attained_gpu_s, job.progress_gpu_s)


class PredictedLas:
    key = KEY
    time_dependent = True

    def __init__(self, bucket_factor: float, starve_after_s: float, rule: str = "remaining",
                 error: str = "helios",
                 thresholds_gpu_s: tuple[float, ...] = DEFAULT_THRESHOLDS_GPU_S) -> None:
        self.thresholds_gpu_s = tuple(thresholds_gpu_s)
        self.bucket_factor = bucket_factor
        self._log_factor = math.log(bucket_factor)
        self.starve_after_s = starve_after_s
        self.rule = rule
        self.error = error
        self._ratios = truth_ratios(error)[0] if rule == "gittins" else ()
        # in_las_queues: Tiresias' queue lists (tiresias_las, no starvation promotion), for
        # running jobs and waiting jobs without a prediction
        self._las = TiresiasLas(self.thresholds_gpu_s, len(self.thresholds_gpu_s) + 1, 0.0) \
            if rule == "in_las_queues" else None

    @property
    def settles_at_wakes(self) -> bool:
        """in_las_queues only: running jobs in Tiresias' lists, waiting ones by a prediction
        and attained service that do not move while they wait. The other rules' keys
        follow progress, checked at events and at least MIN_RECHECK_S apart."""
        return self._las is not None

    def begin_cycle(self, jobs, now_s: float) -> None:
        if self._las is not None:
            self._las.begin_cycle(jobs, now_s)

    def reset(self) -> None:
        if self._las is not None:
            self._las.reset()

    def expected(self, job: Job) -> tuple[float, bool]:
        """(the job's key in GPU-s, whether it comes from its prediction)."""
        if self.rule == "gittins" and job.predicted_gpu_s is not None:
            p = job.predicted_gpu_s
            key = gittins_key(tuple(p * r for r in self._ratios), _done(job))
            if key is not None:
                return key, True
            return max(0.0, job.attained_gpu_s), False
        return expected_remaining_gpu_s(job.predicted_gpu_s, job.attained_gpu_s,
                                        job.progress_gpu_s)

    def bucket(self, key_gpu_s: float) -> int:
        if key_gpu_s < self.bucket_factor:
            return 0
        # A hair of slack so a key of exactly factor**k lands in bucket k despite rounding.
        return int(math.log(key_gpu_s) / self._log_factor + 1e-9)

    def _promoted(self, job: Job, now_s: float) -> bool:
        """Waiting past the bound, or running a run that began after such a wait."""
        if self.starve_after_s <= 0 or job.queue_since_s is None:
            return False
        if job.is_pending:
            return now_s - job.queue_since_s >= self.starve_after_s
        return (job.is_running and job.start_time_s is not None
                and job.start_time_s - job.queue_since_s >= self.starve_after_s)

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        """Promoted jobs first, oldest first; then every other job by its bucket, whether
        its key came from the prediction or from attained service (the queue only says
        which)."""
        since = job.queue_since_s if job.queue_since_s is not None else job.submit_time_s
        if self._promoted(job, now_s):
            return PROMOTED, (0, since)
        key, predicted = self.expected(job)
        running = 0 if job.is_running else 1
        if self.rule == "in_las_queues":
            las = queue_for_service(job.attained_gpu_s, self.thresholds_gpu_s,
                                    len(self.thresholds_gpu_s) + 1)
            # Running jobs, and waiting jobs without a prediction (none made, or withheld
            # by the skill gate), keep their place in Tiresias' list of the queue, as
            # tiresias_las ranks them; the waiting jobs with a prediction come after them,
            # shortest predicted remaining first. So the prediction never preempts a job
            # that 2D-LAS would have let run, and a queue without predictions is 2D-LAS.
            if running == 0 or job.predicted_gpu_s is None:
                place = self._las.lists.key(job.job_id, las) if self._las else None
                return (PREDICTED if predicted else ATTAINED,
                        (1, las, 0) + (place if place is not None else (math.inf, 0)))
            return (PREDICTED if predicted else ATTAINED,
                    (1, las, 1, self.bucket(key), since))
        return (PREDICTED if predicted else ATTAINED,
                (1, 0, self.bucket(key), running, since))

    def pick_group(self, job: Job, now_s: float) -> int | None:
        """``in_las_queues`` only: the job's 2D-LAS queue, within which a ``Picker`` may
        start waiting jobs in another order than by their predictions (None for a promoted
        job, never passed; and for the other rules, whose buckets are no 2D-LAS queue)."""
        if self._las is None or self._promoted(job, now_s):
            return None
        return queue_for_service(job.attained_gpu_s, self.thresholds_gpu_s,
                                 len(self.thresholds_gpu_s) + 1)

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        if queue == PROMOTED:
            waited = now_s - (job.queue_since_s or 0.0)
            return f"waited {waited:.0f} s (over {self.starve_after_s:g} s): promoted"
        key, predicted = self.expected(job)
        if predicted and self.rule == "gittins":
            return (f"predicted {job.predicted_gpu_s:.0f} GPU-s ({self.error} error), "
                    f"{_done(job):.0f} done: Gittins key {key:.0f} GPU-s")
        if predicted:
            return (f"predicted {job.predicted_gpu_s:.0f} GPU-s, {_done(job):.0f} done: "
                    f"{key:.0f} left")
        if job.predicted_gpu_s is not None:
            return (f"outlived its prediction of {job.predicted_gpu_s:.0f} GPU-s: ranked by "
                    f"{key:.0f} GPU-s attained")
        if job.prediction_withheld:
            return f"{job.prediction_withheld}: ranked by {key:.0f} GPU-s attained"
        return f"no prediction: ranked by {key:.0f} GPU-s attained"

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        if job.is_pending:
            if self.starve_after_s > 0 and job.queue_since_s is not None \
                    and not self._promoted(job, now_s):
                return job.queue_since_s + self.starve_after_s
            return None
        if not job.is_running or job.num_gpus <= 0:
            return None
        if self._las is not None:
            # in_las_queues: a running job's place is its place in Tiresias' lists, which
            # changes only when it is demoted (the prediction orders waiting jobs only)
            return self._las.next_change_s(job, now_s)
        key, predicted = self.expected(job)
        if predicted and self.rule == "remaining":
            # Its key only falls (it moves ahead, which changes no decision) until it
            # outlives its prediction.
            left = key
        else:
            # Attained service, or a Gittins key: it may rise past its bucket's upper edge.
            # Between two of its possible sizes a Gittins key grows no faster than attained
            # service; at a size it may jump, so that is a check too.
            left = self.bucket_factor ** (self.bucket(key) + 1) - key
            if predicted:
                a = _done(job)
                nxt = next((job.predicted_gpu_s * r for r in self._ratios
                            if job.predicted_gpu_s * r > a), None)
                if nxt is not None:
                    left = min(left, nxt - a)
        # Measured against progress, which interference slows by an unknown factor, the
        # earliest possible change may come and go many times as the key shrinks: look no
        # less than MIN_RECHECK_S ahead (a demotion is at most that late).
        return now_s + max(max(0.0, left) / job.num_gpus * 0.999, MIN_RECHECK_S)


def _settings(params: Mapping) -> tuple:
    check_params(KEY, params, {"bucket_factor": (int, float), "starve_after_s": (int, float),
                               "rule": str, "error": str, "thresholds_gpu_s": (list, tuple)})
    thresholds, _, _ = validate_thresholds(KEY, {"thresholds_gpu_s": params.get(
        "thresholds_gpu_s", DEFAULT_THRESHOLDS_GPU_S)})
    factor = float(params.get("bucket_factor", 2.0))
    if not math.isfinite(factor) or factor <= 1.0:
        raise PluginError(f"plugin {KEY!r}: bucket_factor must be a number > 1, got {factor}")
    starve = float(params.get("starve_after_s", 0.0))
    if not math.isfinite(starve) or starve < 0:
        raise PluginError(f"plugin {KEY!r}: starve_after_s must be >= 0 (0 = no bound), got "
                          f"{starve}")
    rule = params.get("rule", "remaining")
    if rule not in RULES:
        raise PluginError(f"plugin {KEY!r}: rule must be one of {list(RULES)}, got {rule!r}")
    error = params.get("error", "helios")
    if error not in DISTRIBUTIONS:
        raise PluginError(f"plugin {KEY!r}: error must be one of {sorted(DISTRIBUTIONS)}, "
                          f"got {error!r}")
    return factor, starve, rule, error, thresholds


def validate(params: Mapping) -> None:
    _settings(params)


def build(params: Mapping, **context) -> PredictedLas:
    return PredictedLas(*_settings(params))
