"""The Slurm-alone guard: no job should finish much later than Slurm's own policy would have
finished it (issue 33). It needs no hindsight: it keeps a shadow of Slurm's own first-come
first-served order over what the agent has seen so far, and a job that is still waiting
past the start that shadow gives it (plus a slack) is *protected*: it ranks before every
unprotected job (so it is started first, preempting if the profile preempts) and, once
running, no pending job may preempt it.

The shadow (``shadow_starts``) is a fluid FCFS schedule of the cluster's GPUs: jobs in
submission order, each starting when every earlier job has started and enough GPUs are
free, as ``fifo-backfill`` would start them but without backfill (so it never starts a job
earlier than FCFS would; backfilled jobs are rarely the ones the agent's order makes wait).
A job's length in the shadow is what is known at decision time: the run time it needed, if
it has ended; else an estimate from the jobs that have ended so far, given that it has run
``r`` seconds already: the mean length of the ended jobs longer than ``r`` (``r`` itself
while none is). No future enters: only runs that ended before now are counted. The mean,
not the median: the runs that end first are the short ones, and a median of them made the
shadow run ahead of Slurm (on ``b436b2`` 0:800 it protected so many jobs that the average
JCT rose 5x; the mean, 1.4-2x; docs/benchmarks.md).

Wraps any order plugin (``GuardedOrder``): Tiresias' 2D-LAS, the learned order, predicted
LAS alike, so a prediction can never push a protected job back.

Profile::

    [guard]
    slack = 0.1         # protected once waiting past its shadow start by this share of
    slack_min_s = 60    # its shadow wait, and at least this many seconds

``slack = 0`` with ``slack_min_s = 0`` protects a job the moment Slurm alone would have
started it. No ``[guard]`` table: no guard.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from slurm_marl.domain import Job
from slurm_marl.policy.plugins import CycleAwareOrder, OrderPlugin

@dataclass(frozen=True)
class GuardSettings:
    slack: float = 0.1
    slack_min_s: float = 60.0


GUARD_KEYS = frozenset(f.name for f in fields(GuardSettings))


def guard_settings(params: Mapping, where: str = "[guard]") -> GuardSettings:
    """Validated settings; a ValueError naming the key otherwise."""
    unknown = set(params) - GUARD_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: "
                         f"{sorted(GUARD_KEYS)}")
    out = {}
    for f in fields(GuardSettings):
        key = f.name
        value = params.get(key, f.default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"{where}: {key} must be a number >= 0, got {value!r}")
        out[key] = float(value)
    return GuardSettings(**out)


@dataclass
class _Seen:
    submit_s: float
    gpus: int
    run_s: float = 0.0           # run time so far (the whole run once it has ended)
    ended: bool = False


ShadowState = tuple[float, list[tuple[float, int]], int]   # last start, (end, GPUs) heap, free


def shadow_starts(jobs: Sequence[tuple[int, float, int, float]], capacity: int,
                  base: ShadowState | None = None) -> tuple[dict[int, float], ShadowState]:
    """Start times of a fluid FCFS schedule, and the state after it: ``jobs`` are (id,
    submit, GPUs, length) in submission order; each starts when every earlier one has
    started and ``capacity`` minus the GPUs of those still running is enough (a job larger
    than the cluster waits for all of it). ``base``: the state after a prefix scheduled
    before (its last start, the (end, GPUs) heap of its jobs, free GPUs)."""
    last, ends, free = base if base is not None else (-math.inf, [], capacity)
    ends = list(ends)
    out = {}
    for job_id, submit_s, gpus, length in jobs:
        need = min(gpus, capacity)
        t = max(last, submit_s)
        while ends and ends[0][0] <= t:
            free += heapq.heappop(ends)[1]
        while free < need and ends:
            end, g = heapq.heappop(ends)
            t = max(t, end)
            free += g
        out[job_id] = t
        last = t
        free -= need
        heapq.heappush(ends, (t + max(0.0, length), need))
    return out, (last, ends, free)


class SlurmAloneShadow:
    """What the guard remembers across cycles: every job seen (submit time, GPUs, run time
    so far, whether it has ended), and the shadow starts computed from it."""

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self.capacity = 0
        self.seen: dict[int, _Seen] = {}
        self.starts: dict[int, float] = {}
        self.protected: dict[int, float] = {}     # job id -> when it was protected
        # job id -> its shadow start when it was protected: its place among protected jobs,
        # kept fixed (a rank that moved with every recomputed shadow would change the order
        # each cycle, and the daemon's reuse of unchanged placements with it)
        self.protected_start: dict[int, float] = {}
        self._base: ShadowState | None = None     # the state after the forgotten jobs
        self.lengths: list[float] = []            # run times of the jobs ended so far
        self._now = -math.inf

    def reset(self) -> None:
        self.seen.clear()
        self.starts.clear()
        self.protected.clear()
        self.protected_start.clear()
        self._base = None
        self.lengths.clear()
        self._now = -math.inf

    def observe(self, jobs: Sequence[Job], now_s: float) -> None:
        """Bring the shadow up to ``now_s`` from the jobs in view (pending and running):
        a job seen before and gone now has ended, with the run time last seen."""
        if now_s == self._now:
            return
        self._now = now_s
        here = set()
        for job in jobs:
            if not (job.is_pending or job.is_running) or job.num_gpus <= 0:
                continue
            here.add(job.job_id)
            s = self.seen.get(job.job_id)
            if s is None:
                s = self.seen[job.job_id] = _Seen(job.submit_time_s, job.num_gpus)
            s.run_s = max(s.run_s, job.attained_gpu_s / job.num_gpus)
        for job_id, s in self.seen.items():
            if not s.ended and job_id not in here:
                s.ended = True
                self.protected.pop(job_id, None)
                self.protected_start.pop(job_id, None)
                bisect.insort(self.lengths, s.run_s)
        order = sorted(self.seen.items(), key=lambda kv: (kv[1].submit_s, kv[0]))
        if not self.capacity:
            self.capacity = max((s.gpus for s in self.seen.values()), default=1)
        self.starts, _ = shadow_starts(
            [(j, s.submit_s, s.gpus, s.run_s if s.ended else self.expected_length(s.run_s))
             for j, s in order], self.capacity, self._base)
        self._commit_settled(order)
        for job in jobs:
            if job.is_pending and job.job_id not in self.protected:
                due = self.due_s(job.job_id)
                if due is not None and now_s >= due:
                    self.protected[job.job_id] = now_s
                    self.protected_start[job.job_id] = self.starts[job.job_id]

    def _commit_settled(self, order) -> None:
        """Ended jobs at the head of the order whose shadow run ended before the first job
        still alive started in the shadow can move no start any more: folded into the base
        state and forgotten, so the shadow is as long as the oldest living job's history,
        not the cluster's."""
        alive = next((j for j, s in order if not s.ended), None)
        keep_from = self.starts[alive] if alive is not None else math.inf
        done = []
        for job_id, s in order:
            if not s.ended or self.starts[job_id] + s.run_s >= keep_from:
                break
            done.append((job_id, s.submit_s, s.gpus, s.run_s))
        if done:
            _, self._base = shadow_starts(done, self.capacity, self._base)
            for job_id, *_ in done:
                del self.seen[job_id]

    def expected_length(self, ran_s: float) -> float:
        """The run time a job that has run ``ran_s`` so far is expected to need: the mean
        of the ended runs longer than that, or ``ran_s`` while none is."""
        lengths = self.lengths
        i = bisect.bisect_right(lengths, ran_s)
        if i >= len(lengths):
            return ran_s
        return sum(lengths[i:]) / (len(lengths) - i)

    def due_s(self, job_id: int) -> float | None:
        """When the job becomes protected if it still waits: its shadow start plus the
        slack (a share of its shadow wait, at least ``slack_min_s``)."""
        start = self.starts.get(job_id)
        s = self.seen.get(job_id)
        if start is None or s is None:
            return None
        cfg = self.settings
        return start + max(cfg.slack_min_s, cfg.slack * max(0.0, start - s.submit_s))


class GuardedOrder:
    """An order plugin with the guard in front: protected jobs first (running before
    pending, then by shadow start), every other job in the inner plugin's order."""

    time_dependent = True

    def __init__(self, inner: OrderPlugin, settings: GuardSettings) -> None:
        self.inner = inner
        self.key = inner.key
        self.shadow = SlurmAloneShadow(settings)
        self._inner_begin = inner.begin_cycle if isinstance(inner, CycleAwareOrder) else None

    def set_capacity(self, gpus: int) -> None:
        self.shadow.capacity = max(self.shadow.capacity, gpus)

    def begin_cycle(self, jobs: Sequence[Job], now_s: float) -> None:
        self.shadow.observe(jobs, now_s)
        if self._inner_begin is not None:
            self._inner_begin(jobs, now_s)

    def reset(self) -> None:
        self.shadow.reset()
        if hasattr(self.inner, "reset"):
            self.inner.reset()

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        queue, key = self.inner.classify(job, now_s)
        since = self.shadow.protected.get(job.job_id)
        if since is not None:
            start = self.shadow.protected_start.get(job.job_id, since)
            return queue, (0, 0 if job.is_running else 1, start)
        return queue, (1,) + tuple(key)

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        text = self.inner.describe(job, now_s, queue)
        since = self.shadow.protected.get(job.job_id)
        if since is None:
            return text
        start = self.shadow.starts.get(job.job_id)
        est = f"{max(0.0, now_s - start):.0f} s ago" if start is not None else "earlier"
        return (f"protected by the Slurm-alone guard since {max(0.0, now_s - since):.0f} s: "
                f"Slurm alone would have started it {est}; ranked first, never preempted "
                f"({text})")

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        inner = self.inner.next_change_s(job, now_s)
        if job.is_pending and job.job_id not in self.shadow.protected:
            due = self.shadow.due_s(job.job_id)
            if due is not None and due > now_s and (inner is None or due < inner):
                return due
        return inner
