"""The Slurm-alone guard: no job should finish much later than Slurm's own policy would have
finished it (issue 33). It needs no hindsight: it keeps a shadow of Slurm's own first-come
first-served order over what the agent has seen so far, and a job that is still waiting
past the start that shadow gives it (plus a slack) is *protected*: it ranks before every
unprotected job (so it is started first, preempting if the profile preempts) and, once
running, no pending job may preempt it.

The shadow (``shadow_starts``) is a fluid FCFS schedule of the cluster's GPUs: jobs in
submission order, each starting when every earlier job has started and enough GPUs are
free, as ``fifo-backfill`` would start them but without backfill: a job Slurm alone would
have started around a blocked large one gets a later shadow start than it had (measured,
docs/benchmarks.md "How far off is the shadow": the main error left for 1-GPU jobs).
A job's length in the shadow is what is known at decision time: the run time it needed, if
it has ended; else, given that it has run ``r`` seconds already, the mean length of a run
longer than ``r`` on the Kaplan-Meier curve of every run seen (``survival.py``): the ended
runs at their lengths, the runs still alive censored at their run time so far. No future
enters: only what has ended or run before now. Not the ended runs alone: the runs that end
first are the short ones, and a mean (or a median) of them ran the shadow ahead of Slurm
(``benchmarks/guard_shadow_error.py`` measures both, docs/benchmarks.md).

``model = "replica"`` replaces the fluid schedule with ``policy/replica.py``'s replica of
the cluster (``ReplicaShadow``, a subclass of the shadow here): node packing and backfill
as ``fifo-backfill`` has them, built by ``framework.build_policy``; with ``rewind_s`` it
revises its past when a run's length becomes known.

Wraps any order plugin (``GuardedOrder``): Tiresias' 2D-LAS, the learned order, predicted
LAS alike, so a prediction can never push a protected job back.

Profile::

    [guard]
    slack = 0.1         # protected once waiting past its shadow start by this share of
    slack_min_s = 60    # its shadow wait, and at least this many seconds
    step_s = 60         # the shadow is recomputed, and jobs protected, once a step
    model = "fluid"     # or "replica": a replica of the nodes scheduled by fifo-backfill
    tick_s = 0          # (replica) its decisions on this time grid; 0: at each event
    rewind_s = 0        # (replica) how far back it revises its past when a run's length
                        # becomes known; 0: never
    protect_running = false   # a running job too is protected once past its due time
    slack_on = "wait"   # the slack is a share of its shadow wait; "jct": of its shadow
                        # wait plus the run it is expected to need (its Slurm-alone JCT)
    bound = 0           # > 0: the per-job bound instead of the slack settings: no job
                        # should finish later than submit + bound x max(its Slurm-alone
                        # JCT, 600 s); a job is protected once it must start to make that
                        # deadline (its deadline less the run it is expected still to need)

``slack = 0`` with ``slack_min_s = 0`` protects a job the moment Slurm alone would have
started it. ``bound`` spends the per-job bound the reports measure (a job's JCT over
max(its Slurm-alone JCT, ``RATIO_FLOOR_S``)) as a deadline: the profile orders freely until
a job must start to finish within it. No ``[guard]`` table: no guard.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType

from slurm_marl.domain import ClusterSnapshot, Job
from slurm_marl.policy.plugins import CycleAwareOrder, OrderPlugin
from slurm_marl.policy.survival import Survival

# Ended run lengths the survival curve keeps, the latest: a site's recent workload, and a
# shadow cost that does not grow with the daemon's uptime.
LENGTHS_KEPT = 20_000


# What the shadow of Slurm alone is: the fluid FCFS schedule of the GPUs (``shadow_starts``),
# or a replica of the cluster scheduled by the framework's own ``fifo-backfill``
# (``policy/replica.py``).
SHADOW_MODELS = ("fluid", "replica")
# What the slack is a share of: the job's Slurm-alone wait, or its Slurm-alone JCT (that
# wait plus the run it is expected to need, ``expected_length``): the per-job bound is on
# JCT, and a long job may start later by a share of its JCT and still finish within it.
SLACK_BASES = ("wait", "jct")


@dataclass(frozen=True)
class GuardSettings:
    slack: float = 0.1
    slack_min_s: float = 60.0
    step_s: float = 60.0
    model: str = "fluid"
    tick_s: float = 0.0
    rewind_s: float = 0.0
    protect_running: bool = False
    slack_on: str = "wait"
    bound: float = 0.0


# The floor of the per-job ratio (``sim/perjob.py``'s ``FLOOR_S``): a job's bound is on its
# JCT over max(its Slurm-alone JCT, this), so a short job may wait minutes.
RATIO_FLOOR_S = 600.0

GUARD_KEYS = frozenset(f.name for f in fields(GuardSettings))

# The guard the daemon puts in front of a profile that has no ``[guard]`` table of its own
# (``[agent] guard``, on by default; ``with_default_guard``): the point measured best per
# job on six Philly windows (docs/benchmarks.md "The replica revises its past, and protects
# running jobs"), with the replica's decisions on a 60 s grid (its cost on a large cluster).
DEFAULT_GUARD: Mapping = MappingProxyType({
    "model": "replica", "slack": 0.1, "slack_min_s": 60.0, "step_s": 60.0, "tick_s": 60.0,
    "rewind_s": 86_400.0, "protect_running": True})


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
        if isinstance(f.default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{where}: {key} must be true or false, got {value!r}")
            out[key] = value
            continue
        choices = {"model": SHADOW_MODELS, "slack_on": SLACK_BASES}.get(key)
        if choices is not None:
            if value not in choices:
                raise ValueError(f"{where}: {key} must be one of {list(choices)}, "
                                 f"got {value!r}")
            out[key] = value
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"{where}: {key} must be a number >= 0, got {value!r}")
        if key == "bound" and 0 < value < 1:
            raise ValueError(f"{where}: bound must be 0 (off) or at least 1 (no job later "
                             f"than that factor of its Slurm-alone JCT), got {value!r}")
        out[key] = float(value)
    return GuardSettings(**out)


@dataclass
class _Seen:
    submit_s: float
    gpus: int
    run_s: float = 0.0           # run time so far (the whole run once it has ended)
    ended: bool = False
    seen_s: float = -math.inf    # when it was last seen


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


def deadline_start_s(submit_s: float, alone_start_s: float, ran_s: float, length_s: float,
                     bound: float) -> float:
    """The latest start of a job's remaining run that still finishes it by its deadline,
    submit + ``bound`` x max(its Slurm-alone JCT, ``RATIO_FLOOR_S``): its Slurm-alone JCT
    is its start there less its submit time plus the run it needs (``length_s``, expected
    while unknown), and ``ran_s`` of that run is done."""
    alone_jct = max(0.0, alone_start_s - submit_s) + max(0.0, length_s)
    deadline = submit_s + bound * max(alone_jct, RATIO_FLOOR_S)
    return max(alone_start_s, deadline - max(0.0, length_s - ran_s))


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
        # run times of the last LENGTHS_KEPT jobs that ended (after they ran)
        self.lengths: deque[float] = deque(maxlen=LENGTHS_KEPT)
        self._step: float | None = None
        self.survival = Survival()
        self._now = -math.inf
        self._restored: dict[int, tuple[float, float | None]] = {}

    def restore(self, protected: Mapping[int, tuple[float, float | None]]) -> None:
        """The jobs a guard protected before a restart (job id -> (protected since, its
        Slurm-alone start)): the shadow begins at its first view (a replica does not replay
        what it did before), so a job it had found past its Slurm-alone start would lose
        its protection with the restart. Each stays protected if the first view has it
        waiting or running; the others are another view's, or gone."""
        self._restored = dict(protected)

    def reset(self) -> None:
        self.seen.clear()
        self.starts.clear()
        self.protected.clear()
        self.protected_start.clear()
        self._base = None
        self.lengths.clear()
        self.survival = Survival()
        self._step = None
        self._now = -math.inf

    def observe(self, jobs: Sequence[Job], now_s: float) -> None:
        """Bring the shadow up to ``now_s`` from the jobs in view (pending and running):
        a job seen before and gone now has ended, with the run time last seen."""
        if now_s == self._now:
            return
        self._now = now_s
        self._see(jobs, now_s)
        if self._restored:
            for job in jobs:
                back = self._restored.get(job.job_id)
                if back is not None and (job.is_pending or job.is_running):
                    self.protected[job.job_id] = back[0]
                    self.protected_start[job.job_id] = back[1] if back[1] is not None \
                        else back[0]
            self._restored = {}
        step = self.step_of(now_s)
        if step == self._step:
            return
        # the shadow is recomputed and jobs protected once a step: the order changes at
        # most once a step, and the daemon's reuse of unchanged placements holds between
        self._step = step
        self.survival = Survival(self.lengths,
                                 [s.run_s for s in self.seen.values() if not s.ended])
        self._recompute(now_s)
        running_too = self.settings.protect_running
        for job in jobs:
            if (job.is_pending or running_too and job.is_running) \
                    and job.job_id not in self.protected:
                due = self.due_s(job.job_id)
                if due is not None and now_s >= due:
                    self.protected[job.job_id] = now_s
                    self.protected_start[job.job_id] = self.starts[job.job_id]

    def _see(self, jobs: Sequence[Job], now_s: float) -> None:
        """What is known at ``now_s``: every job in view (its submit time, GPUs, run time so
        far), and which have ended (gone from view) after how long a run: the run time last
        seen plus the time since (a job cancelled while waiting counts as a run that short:
        a cycle apart in the daemon)."""
        here = set()
        for job in jobs:
            if not (job.is_pending or job.is_running) or job.num_gpus <= 0:
                continue
            here.add(job.job_id)
            s = self.seen.get(job.job_id)
            if s is None:
                s = self.seen[job.job_id] = _Seen(job.submit_time_s, job.num_gpus)
                self._arrived(job)
            s.run_s = max(s.run_s, job.attained_gpu_s / job.num_gpus)
            s.seen_s = now_s
        for job_id, s in self.seen.items():
            if not s.ended and job_id not in here:
                # it ran until some time since it was last seen (a job seen waiting may
                # have started then: the simulator's cycle that started it saw it so)
                s.ended = True
                since = now_s - s.seen_s
                if math.isfinite(since):
                    s.run_s += max(0.0, since)
                self.protected.pop(job_id, None)
                self.protected_start.pop(job_id, None)
                if s.run_s > 0:          # a job gone before it ran tells no length
                    self.lengths.append(s.run_s)
                self._gone(job_id)

    def _arrived(self, job: Job) -> None:
        """A job seen for the first time (a model that needs more of it than ``_Seen``
        keeps takes it here)."""

    def _gone(self, job_id: int) -> None:
        """A job seen gone: its whole run time is known now (``seen[job_id].run_s``)."""

    def _recompute(self, now_s: float) -> None:
        """The shadow starts from what is known at ``now_s``: the fluid FCFS schedule of
        every job seen, from the state the forgotten ones left."""
        order = sorted(self.seen.items(), key=lambda kv: (kv[1].submit_s, kv[0]))
        if not self.capacity:
            self.capacity = max((s.gpus for s in self.seen.values()), default=1)
        self.starts, _ = shadow_starts(
            [(j, s.submit_s, s.gpus, s.run_s if s.ended else self.expected_length(s.run_s))
             for j, s in order], self.capacity, self._base)
        self._commit_settled(order)

    def see_cluster(self, snapshot: ClusterSnapshot) -> None:
        """The fluid shadow runs on the GPUs of the largest view seen."""
        self.capacity = max(self.capacity, sum(n.gpu_count for n in snapshot.nodes))

    def step_of(self, t: float) -> float:
        """The step ``t`` falls in (``step_s`` 0: every time is its own)."""
        step = self.settings.step_s
        return math.floor(t / step + 1e-9) if step > 0 and math.isfinite(t) else t

    def next_step_s(self, t: float) -> float:
        """The first step boundary after ``t`` (``t`` itself with ``step_s`` 0)."""
        step = self.settings.step_s
        return (self.step_of(t) + 1) * step if step > 0 and math.isfinite(t) else t

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
        length of a run longer than that on the Kaplan-Meier curve of what has been seen
        (``Survival.conditional_mean``)."""
        return self.survival.conditional_mean(ran_s)

    def due_s(self, job_id: int) -> float | None:
        """When the job is due to be protected if it still waits: its shadow start plus
        the slack (a share of its shadow wait, at least ``slack_min_s``), or with ``bound``
        the latest start that still makes its deadline (``deadline_start_s``). It is
        protected at the first step boundary from then (``next_change_s``)."""
        start = self.starts.get(job_id)
        s = self.seen.get(job_id)
        if start is None or s is None:
            return None
        cfg = self.settings
        if cfg.bound:
            return deadline_start_s(s.submit_s, start, s.run_s, s.run_s if s.ended
                                    else self.expected_length(s.run_s), cfg.bound)
        basis = max(0.0, start - s.submit_s)
        if cfg.slack_on == "jct":
            basis += s.run_s if s.ended else self.expected_length(s.run_s)
        return start + max(cfg.slack_min_s, cfg.slack * basis)

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        """When a pending unprotected job may become protected: the step boundary at or
        after its due time; the next boundary for a job the shadow has not placed yet
        (seen since the last step)."""
        if not job.is_pending or job.job_id in self.protected:
            return None
        if job.job_id not in self.starts:
            return self.next_step_s(now_s) if job.job_id in self.seen else None
        due = self.due_s(job.job_id)
        if due is None:
            return None
        step = self.settings.step_s
        at = math.ceil(due / step - 1e-9) * step if step > 0 and math.isfinite(due) else due
        return at if at > now_s else self.next_step_s(now_s)


class GuardedOrder:
    """An order plugin with the guard in front: protected jobs first (running before
    pending, then by shadow start), every other job in the inner plugin's order."""

    time_dependent = True

    def __init__(self, inner: OrderPlugin, settings: GuardSettings,
                 shadow: SlurmAloneShadow | None = None) -> None:
        self.inner = inner
        self.key = inner.key
        self.shadow = shadow if shadow is not None else SlurmAloneShadow(settings)
        self._inner_begin = inner.begin_cycle if isinstance(inner, CycleAwareOrder) else None

    def see_cluster(self, snapshot: ClusterSnapshot) -> None:
        """The nodes (and partitions) of a view the policy decides: the shadow's cluster."""
        self.shadow.see_cluster(snapshot)

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

    def pick_group(self, job: Job, now_s: float):
        """The inner plugin's (None without one): protected jobs are never offered to a
        ``Picker`` nor passed by one (``allocation.py``)."""
        group = getattr(self.inner, "pick_group", None)
        return None if group is None else group(job, now_s)

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
        due = self.shadow.next_change_s(job, now_s)
        if due is not None and due > now_s and (inner is None or due < inner):
            return due
        return inner
