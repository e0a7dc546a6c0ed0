"""Tiresias' 2D-LAS (discretised two-dimensional least attained service).

Attained service is GPUs x seconds run. Jobs sit in K queues split by service thresholds
(default 3250 / 7200 / 18000 GPU-s, the limits in Tiresias' simulator); a job is demoted when
its service reaches its queue's limit, and lower queues yield to higher ones (preemption,
when the profile enables it).

Inside a queue (``in_queue``):

* ``"tiresias"`` (default) keeps each queue as a list, as Tiresias' simulator does: a job
  enters at the tail (on arrival in queue 0, on demotion into the next queue, on a
  starvation promotion back into queue 0) and keeps that entry order; after every pass the
  waiting jobs move behind the running ones. So running jobs normally rank ahead of waiting
  ones of their queue, but a job demoted while running ranks behind every job already
  waiting in its new queue, which may preempt it at once. The lists are state kept across
  cycles (``begin_cycle``); a job the lists do not know yet (a daemon restart) goes to the
  tail of its queue, running jobs first, then by submit time.
* ``"running_first"``: running jobs ahead of waiting ones, each by submit time; stateless.
  This is the order of earlier versions (see docs/simulator.md for how the two compare).

STARVELIMIT: a waiting job that has run before is promoted to queue 0 once it has waited
``starve_limit`` x its last run time; during the run that follows, only service from that
run counts for its queue. Fields read (the contract with whoever builds the snapshot):

* ``attained_gpu_s`` - total service so far, including the current run;
* ``start_time_s``   - start of the current (latest) run;
* ``queue_since_s``  - when the job last entered the queue (submit or requeue);
* ``last_run_s``     - length of the last finished run (0 if none).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_marl.domain import Job, JobState
from slurm_marl.policy.plugins import PluginError, check_params

KEY = "tiresias_las"
DEFAULT_THRESHOLDS_GPU_S = (3250.0, 7200.0, 18000.0)


def queue_for_service(service_gpu_s: float, thresholds_gpu_s: Sequence[float],
                      num_queues: int) -> int:
    """Queue index for a service level: the number of thresholds reached, capped at K-1."""
    return min(bisect.bisect_right(thresholds_gpu_s, service_gpu_s), num_queues - 1)


def starvation_deadline_s(queue_since_s: float, last_run_s: float,
                          starve_limit: float) -> float:
    """When a waiting job that last ran ``last_run_s`` seconds is promoted to queue 0."""
    return queue_since_s + starve_limit * last_run_s


def las_service(job: Job, now_s: float, starve_limit: float) -> tuple[float, bool]:
    """(service that places the job in a queue, whether it holds a starvation promotion)."""
    if starve_limit > 0 and job.last_run_s > 0 and job.queue_since_s is not None:
        limit = starve_limit * job.last_run_s
        if job.is_pending:
            if now_s - job.queue_since_s >= limit:
                return 0.0, True
        elif job.is_running and job.start_time_s is not None \
                and job.start_time_s - job.queue_since_s >= limit:
            return job.num_gpus * max(0.0, now_s - job.start_time_s), True
    return job.attained_gpu_s, False


def validate_thresholds(key: str, params: Mapping) -> tuple[tuple[float, ...], int, float]:
    raw = params.get("thresholds_gpu_s", DEFAULT_THRESHOLDS_GPU_S)
    if not isinstance(raw, (list, tuple)) or not raw \
            or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in raw):
        raise PluginError(f"plugin {key!r}: thresholds_gpu_s must be a non-empty list of "
                          f"numbers, got {raw!r}")
    thresholds = tuple(float(t) for t in raw)
    if any(t <= 0 or not math.isfinite(t) for t in thresholds) \
            or any(b <= a for a, b in zip(thresholds, thresholds[1:])):
        raise PluginError(f"plugin {key!r}: thresholds_gpu_s must be positive and strictly "
                          f"increasing, got {list(thresholds)}")
    num_queues = params.get("num_queues", len(thresholds) + 1)
    if not isinstance(num_queues, int) or isinstance(num_queues, bool) \
            or not 1 <= num_queues <= len(thresholds) + 1:
        raise PluginError(f"plugin {key!r}: num_queues must be an integer in "
                          f"1..{len(thresholds) + 1}, got {num_queues!r}")
    starve = params.get("starve_limit", 0.0)
    if isinstance(starve, bool) or not isinstance(starve, (int, float)) or starve < 0:
        raise PluginError(f"plugin {key!r}: starve_limit must be a number >= 0 (0 = off), "
                          f"got {starve!r}")
    return thresholds[:num_queues - 1], num_queues, float(starve)


IN_QUEUE_ORDERS = ("tiresias", "running_first")


_ACTIVE = frozenset(st for st in JobState if st.is_active)
_RUNNING_PART, _WAITING_PART, _ENTERED_PART = 0, 1, 2


@dataclass(slots=True)
class _Entry:
    queue: int
    part: int          # running part, waiting part, or entered since the last pass
    position: int      # order inside the part
    running: bool      # status when last seen
    partition: str
    entered_s: float
    why: str
    check_s: float = -math.inf   # while running: no queue change before this time


class QueueLists:
    """Tiresias' per-queue job lists, kept across cycles.

    A queue's list is its running part, then its waiting part, then the jobs that entered
    it since the last pass, each in order (``_Entry.part``, ``_Entry.position``). ``settle``
    runs at the start of a cycle and replays what Tiresias' simulator does between two
    passes. First what it does after a pass, from the statuses seen now (the outcome of the
    last pass): waiting jobs move behind running ones, each group keeping its list order, so
    a job that started joins the tail of the running part and a preempted job the head of
    the waiting part. Then the entries since the last cycle at the tail: arrivals, then
    demotions and promotions in the order they happened. Only jobs whose status or queue
    changed are touched, so a cycle costs what changed (plus one pass over the jobs).
    """

    prune_slack = 64        # forget ended jobs once entries exceed 2 x live jobs + this

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}
        self._next = 0      # tail positions, growing
        self._head = 0      # head-of-waiting positions, shrinking
        self.last_now_s: float | None = None

    def clear(self) -> None:
        self.entries.clear()
        self._next = self._head = 0
        self.last_now_s = None

    def key(self, job_id: int, queue: int) -> tuple[int, int] | None:
        e = self.entries.get(job_id)
        if e is None or e.queue != queue:
            return None
        return e.part, e.position

    def settle(self, jobs: Sequence[Job], now_s: float, order: "TiresiasLas") -> None:
        if self.last_now_s is not None and now_s < self.last_now_s:
            self.clear()   # the clock went back: a new run (simulator, training episode)
        self.last_now_s = now_s
        entries = self.entries
        pending_state = JobState.PENDING
        watch_waiting = order.starve_limit > 0
        live = 0
        started: list[tuple[int, int, Job]] = []
        stopped: list[tuple[int, Job]] = []
        arrivals: list[tuple[tuple, Job]] = []
        check: list[Job] = []
        for job in jobs:
            state = job.state
            if state in _ACTIVE:
                running = True
            elif state is pending_state:
                running = False
            else:
                continue
            live += 1
            e = entries.get(job.job_id)
            if e is None:
                arrivals.append(((0 if running else 1, job.submit_time_s, job.job_id), job))
                continue
            if e.part == _ENTERED_PART:
                if running:
                    started.append((_ENTERED_PART, e.position, job))
                else:
                    e.part = _WAITING_PART   # its tail position is behind every waiting job
            elif running and e.part == _WAITING_PART:
                started.append((_WAITING_PART, e.position, job))
            elif not running and e.part == _RUNNING_PART:
                stopped.append((e.position, job))
            # Service grows only while running (a running job changes queue at a known
            # time); a waiting job's queue changes by itself only with starvation
            # promotion, or when it stops (a promotion may end).
            if (now_s >= e.check_s or not e.running) if running \
                    else (watch_waiting or e.running):
                check.append(job)
            e.running = running
        # After the last pass: started jobs to the tail of the running part (those that
        # waited before those that entered since), preempted ones to the head of the
        # waiting part, each group in its list order.
        started.sort(key=lambda x: (x[0], x[1]))
        for _, _, job in started:
            self._next += 1
            e = entries[job.job_id]
            e.part, e.position = _RUNNING_PART, self._next
        stopped.sort(key=lambda x: -x[0])
        for _, job in stopped:
            self._head -= 1
            e = entries[job.job_id]
            e.part, e.position = _WAITING_PART, self._head
        # Entries since the last cycle: new jobs (running first: a restarted daemon), then
        # queue changes in the order they happened.
        arrivals.sort(key=lambda a: a[0])
        for _, job in arrivals:
            queue, _, _ = order.queue_of(job, now_s)
            first_seen = job.submit_time_s if job.state is pending_state \
                and job.attained_gpu_s <= 0 else now_s
            self._append(job, queue, min(first_seen, now_s), "arrival")
        moves: list[tuple[tuple, Job, int, float, str]] = []
        for job in check:
            e = entries[job.job_id]
            queue, service, promoted = order.queue_of(job, now_s)
            if queue != e.queue:
                at = order.entered_at(job, now_s, e.queue, queue, service, promoted)
                why = "demotion" if queue > e.queue else "promotion"
                moves.append(((at, job.submit_time_s, job.job_id), job, queue, at, why))
            elif e.running:
                e.check_s = order.next_check_s(job, now_s, queue, service)
        moves.sort(key=lambda m: m[0])
        for _, job, queue, at, why in moves:
            self._append(job, queue, at, why)
        if len(entries) > 2 * live + self.prune_slack:
            self._prune(jobs)

    def _append(self, job: Job, queue: int, entered_s: float, why: str) -> None:
        self._next += 1
        self.entries[job.job_id] = _Entry(queue, _ENTERED_PART, self._next,
                                          job.state is not JobState.PENDING, job.partition,
                                          entered_s, why)

    def _prune(self, jobs: Sequence[Job]) -> None:
        """Forget jobs that ended: those of the partitions in view that are not live (a view
        may hold one partition's jobs: others' entries stay)."""
        live = {j.job_id for j in jobs if j.state in _ACTIVE or j.state is JobState.PENDING}
        partitions = {j.partition for j in jobs}
        for job_id in [i for i, e in self.entries.items()
                       if i not in live and e.partition in partitions]:
            del self.entries[job_id]


class TiresiasLas:
    key = KEY
    time_dependent = True
    settles_at_wakes = True     # queue changes are demotions and promotions, at their times

    def __init__(self, thresholds_gpu_s: Sequence[float], num_queues: int,
                 starve_limit: float, running_first: bool = True,
                 in_queue: str = "tiresias") -> None:
        self.thresholds_gpu_s = tuple(thresholds_gpu_s)
        self.num_queues = num_queues
        self.starve_limit = starve_limit
        self.running_first = running_first
        self.in_queue = in_queue
        self.lists = QueueLists()

    def queue_of(self, job: Job, now_s: float) -> tuple[int, float, bool]:
        service, promoted = las_service(job, now_s, self.starve_limit)
        return queue_for_service(service, self.thresholds_gpu_s, self.num_queues), \
            service, promoted

    def entered_at(self, job: Job, now_s: float, old_queue: int, queue: int,
                   service: float, promoted: bool) -> float:
        """When a job moved from ``old_queue`` to ``queue``: the moment its service crossed
        the threshold (demotion) or its starvation deadline (promotion), else now."""
        if queue > old_queue and job.is_running and job.num_gpus > 0 \
                and job.start_time_s is not None:
            crossed = now_s - (service - self.thresholds_gpu_s[queue - 1]) / job.num_gpus
            return min(now_s, max(job.start_time_s, crossed))
        if queue < old_queue and promoted and job.queue_since_s is not None:
            deadline = starvation_deadline_s(job.queue_since_s, job.last_run_s,
                                             self.starve_limit)
            return min(now_s, deadline)
        return now_s

    def _to_threshold_s(self, job: Job, queue: int, service: float) -> float | None:
        """Run time left before a running job reaches its queue's limit (None: last queue)."""
        if queue >= self.num_queues - 1 or job.num_gpus <= 0:
            return None
        return (self.thresholds_gpu_s[queue] - service) / job.num_gpus

    def next_check_s(self, job: Job, now_s: float, queue: int, service: float) -> float:
        """A running job cannot change queue before this time (its next threshold; a little
        early, so rounding never makes a demotion late)."""
        left = self._to_threshold_s(job, queue, service)
        return math.inf if left is None else now_s + left * 0.999

    def begin_cycle(self, jobs: Sequence[Job], now_s: float) -> None:
        if self.in_queue == "tiresias":
            self.lists.settle(jobs, now_s, self)

    def reset(self) -> None:
        self.lists.clear()

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        queue, _, _ = self.queue_of(job, now_s)
        if self.in_queue == "tiresias":
            key = self.lists.key(job.job_id, queue)
            return queue, (queue,) + key if key is not None else (queue, math.inf, 0)
        waiting = 0 if (self.running_first and job.is_running) else 1
        return queue, (queue, waiting)

    def pick_group(self, job: Job, now_s: float) -> int | None:
        """The 2D-LAS queue a ``Picker`` may start the job's waiting peers of in another
        order; None for a job promoted by the starvation bound (never passed by a pick)."""
        queue, _, promoted = self.queue_of(job, now_s)
        return None if promoted else queue

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        service, promoted = las_service(job, now_s, self.starve_limit)
        if promoted:
            text = f"queue {queue}: promoted after waiting {self.starve_limit:g}x last run"
        else:
            text = f"queue {queue}: {service:.0f} GPU-s attained"
        e = self.lists.entries.get(job.job_id) if self.in_queue == "tiresias" else None
        if e is not None and e.queue == queue:
            text += f", entered {max(0.0, now_s - e.entered_s):.0f} s ago by {e.why}"
        return text

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        queue, service, promoted = self.queue_of(job, now_s)
        if job.is_running:
            left = self._to_threshold_s(job, queue, service)
            return None if left is None else now_s + max(0.0, left)
        if job.is_pending and not promoted and self.starve_limit > 0 and job.last_run_s > 0 \
                and job.queue_since_s is not None and queue > 0:
            return starvation_deadline_s(job.queue_since_s, job.last_run_s, self.starve_limit)
        return None


def validate_in_queue(key: str, params: Mapping) -> str:
    value = params.get("in_queue", "tiresias")
    if value not in IN_QUEUE_ORDERS:
        raise PluginError(f"plugin {key!r}: in_queue must be one of {list(IN_QUEUE_ORDERS)}, "
                          f"got {value!r}")
    return value


def validate(params: Mapping) -> None:
    _settings(params)


def build(params: Mapping, **context) -> TiresiasLas:
    return TiresiasLas(*_settings(params))


def _settings(params: Mapping) -> tuple:
    """TiresiasLas' arguments from checked parameters."""
    check_params(KEY, params, {"thresholds_gpu_s": (list, tuple), "num_queues": int,
                               "starve_limit": (int, float), "running_first": bool,
                               "in_queue": str})
    thresholds, num_queues, starve = validate_thresholds(KEY, params)
    in_queue = validate_in_queue(KEY, params)
    if "running_first" in params:
        if "in_queue" not in params:
            in_queue = "running_first"   # profiles written before in_queue existed
        elif in_queue == "tiresias":
            raise PluginError(f"plugin {KEY!r}: running_first applies to in_queue = "
                              f"'running_first' only (Tiresias' lists decide it themselves)")
    return thresholds, num_queues, starve, params.get("running_first", True), in_queue
