"""The allocate action: one cycle's walk over the ranked pending jobs.

Each job in rank order starts on free GPUs if it can (the place plugins' best candidate,
claimed in the cycle state so later jobs see it); a job that cannot start runs the other
actions (``actions.py``) the profile lists, in its order (``Profile.action_order``; by
default preemption, then backfill's reservation), and without backfill ends its
partition's walk. What a blocked job does to the jobs after it holds in its own partition,
as when the daemon decides each partition on its own view and as Slurm's main scheduler
blocks a partition, not the cluster: the guard (a protected job that cannot start is passed
by no later arrival of its partition, ``policy/guard.py``), the end of the walk without
backfill, backfill's one reservation.

Searches that found no room are remembered for the rest of the walk (``FailureMemo``), so
a job alike with them is not searched again while the state only loses room.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

from slurm_marl.domain import Decision, Job
from slurm_marl.placement_shapes import has_candidate, job_shape
from slurm_marl.policy.actions import Preemption, RankedJob, reserve_for_blocked
from slurm_marl.policy.profile import Profile
from slurm_marl.policy.state import CycleState


def failure_key(job: Job) -> tuple:
    """Jobs alike in everything but size: if one of size s found no room this cycle, a
    larger one will not either (free resources only shrink while the cycle walks)."""
    total, per_node, count = job_shape(job)
    cpus_per_gpu = job.cpus / total if total else 0
    mem_per_gpu = job.mem_mib / total if total else 0
    # the GPU type too: a job of type s0 that fits nowhere says nothing of an untyped one
    return (job.partition, per_node, count if per_node else 0, job.model_type, job.gpu_type,
            job.required_nodes, job.excluded_nodes, round(cpus_per_gpu, 6),
            round(mem_per_gpu, 3))


@dataclass
class FailureMemo:
    """Searches that found no room this cycle, by job kind (``failure_key``).

    "A job of size s found no room, so a larger alike job will not either" holds only when
    no plugin filters candidates (a filter may accept a larger job's shape): ``monotone``.
    Preemption searches are kept as (cut, size): a job alike with at least that size and at
    most those candidates (a cut as large) finds none either while the state only loses
    room, so its search is skipped (otherwise O(pending x lower-ranked running), see
    docs/benchmarks.md). Walked in rank order, cuts only grow; the cut is compared all the
    same, so the rule holds whatever the order. Cleared wherever the state gains room
    (victims preempted) or a reservation changes what is free."""

    monotone: bool
    sizes: dict[tuple, int] = field(default_factory=dict)
    takes: dict[tuple, list[tuple[int, int]]] = field(default_factory=dict)

    def key(self, job: Job) -> tuple | None:
        return failure_key(job) if self.monotone else None

    def known_size(self, key: tuple | None) -> int | None:
        """The smallest size of this kind that found no free room, if any."""
        return self.sizes.get(key) if self.monotone else None

    def may_take(self, key: tuple | None, cut: int, total: int) -> bool:
        """Whether a preemption search for this job may find room (none known not to)."""
        known = self.takes.get(key, ()) if self.monotone else ()
        return not any(cut >= c and total >= t for c, t in known)

    def take_failed(self, key: tuple | None, cut: int, total: int) -> None:
        if self.monotone:
            self.takes.setdefault(key, []).append((cut, total))

    def start_failed(self, key: tuple | None, total: int, known: int | None) -> None:
        if self.monotone and (known is None or total < known):
            self.sizes[key] = total

    def clear(self) -> None:
        self.sizes.clear()
        self.takes.clear()


@dataclass
class _Blocks:
    """What blocked jobs left in their partitions: the guard's hold on later arrivals
    (earliest submit time of a protected blocked job), walks ended without backfill, and
    partitions whose one reservation is made."""

    protected: Container[int]
    since: dict[str, float] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)
    reserved: set[str] = field(default_factory=set)

    def passes_over(self, job: Job) -> bool:
        """Whether the walk leaves this job out: its partition stopped, or a protected job
        of its partition submitted before it is blocked."""
        part = job.partition
        if part in self.stopped:
            return True
        since = self.since.get(part)
        return since is not None and job.submit_time_s > since \
            and job.job_id not in self.protected

    def hold(self, job: Job) -> None:
        """A protected job is blocked: no later arrival of its partition passes it."""
        if job.job_id in self.protected:
            since = self.since.get(job.partition)
            self.since[job.partition] = job.submit_time_s if since is None \
                else min(job.submit_time_s, since)


class Allocation:
    """The allocate action over one cycle's snapshot and state (module docstring)."""

    def __init__(self, policy, profile: Profile, state: CycleState,
                 preemption: Preemption | None, protected: Container[int],
                 monotone: bool) -> None:
        self.policy = policy
        self.state = state
        # What a job that cannot start on free GPUs tries, in the profile's order
        # (``Profile.action_order``): preemption, backfill's reservation.
        actions = profile.action_order
        self.when_blocked = tuple(a for a in actions if a in ("preempt", "reserve")
                                  and (a != "preempt" or preemption is not None))
        self.backfill = "backfill" in actions
        self.preemption = preemption
        self.memo = FailureMemo(monotone)
        self.blocks = _Blocks(protected)
        self.preempts: list[Decision] = []
        self.places: list[Decision] = []

    def run(self, ranked: list[RankedJob]) -> list[Decision]:
        """Preemptions, then placements, for the ranked pending jobs."""
        if self.policy._picker is not None:
            self._run_picking(ranked)
            return self.preempts + self.places
        for r in ranked:
            self._walk(r)
        return self.preempts + self.places

    def _passed(self, job: Job) -> bool:
        """The walk leaves this job out: it asks for no GPU, or ``passes_over``."""
        return job_shape(job)[0] <= 0 or self.blocks.passes_over(job)

    def _walk(self, r: RankedJob) -> None:
        """The job the walk reached: start it on free GPUs, else its blocked actions."""
        total = job_shape(r.job)[0]
        if total <= 0 or self.blocks.passes_over(r.job):     # (``_passed``, shape once)
            return
        key = self.memo.key(r.job)
        known = self.memo.known_size(key)
        if (known is None or total < known) and self._start(r.job):
            return
        self._not_started(r, key, total, known)

    def _run_picking(self, ranked: list[RankedJob]) -> None:
        """The walk with a ``Picker``: where the job reached can start now, the picker
        names which of it and its queue's next startable jobs starts first (``_window``).
        A job picked ahead starts now or stays where it was (it does not run the blocked
        actions out of its rank: it is walked again at its rank, and offered no more this
        cycle); the job reached is then offered again, with the window as it is now."""
        done: set[int] = set()
        tried: set[int] = set()
        i = 0
        while i < len(ranked):
            r = ranked[i]
            if r.job.job_id in done:
                i += 1
                continue
            window = self._window(ranked, i, done, tried)
            index, why = (0, "") if len(window) < 2 else \
                self.policy._picker.pick_next(window, self.state)
            if 0 < index < len(window):
                picked = window[index]
                tried.add(picked.job_id)
                if self._start(picked, f"; picked ahead of job {r.job.job_id} "
                               f"({self.policy._picker.key}: {why})"):
                    done.add(picked.job_id)
                continue
            self._walk(r)
            i += 1

    def _window(self, ranked: list[RankedJob], i: int, done: set[int],
                tried: set[int]) -> list[Job]:
        """The job reached and the next jobs of its partition in its queue (the order's
        ``pick_group``) that can start now on free GPUs, up to the picker's window; none
        if the job reached cannot start now, is protected by the guard or in no group.
        The window ends at a job of another queue or a protected one (never passed), and
        after looking at 4 x the window's jobs of the partition or 16 x of any partition
        (a cycle's cost stays linear in its jobs)."""
        job = ranked[i].job
        blocks = self.blocks
        state = self.state
        if job.job_id in blocks.protected or self._passed(job):
            return [job]
        group_of = self.policy._pick_group
        now = state.now_s
        group = group_of(job, now)
        if group is None or not has_candidate(job, state, state.free):
            return [job]
        size = self.policy._picker.pick_window
        window = [job]
        looked = 0
        for k in range(i + 1, min(len(ranked), i + 1 + 16 * size)):
            other = ranked[k].job
            if other.partition != job.partition or other.job_id in done:
                continue
            if other.job_id in blocks.protected or group_of(other, now) != group:
                break
            looked += 1
            if looked > 4 * size:
                break
            if other.job_id in tried or self._passed(other):
                continue
            if has_candidate(other, state, state.free):
                window.append(other)
                if len(window) >= size:
                    break
        return window

    def _not_started(self, r: RankedJob, key: tuple | None, total: int,
                     known: int | None) -> None:
        """A job that cannot start on free GPUs: the profile's actions for it in order,
        until one places it (preemption: now; a reservation: later). One it leaves waiting
        (a reservation included) is blocked: the guard's hold, and without backfill the end
        of its partition's walk. Its failure to start on free GPUs is remembered before a
        reservation (which clears the memo) or once nothing placed it."""
        remembered = reserved = False
        for action in self.when_blocked:
            if action == "preempt":
                if self._preempt(r, key, total):
                    return
            else:
                self.memo.start_failed(key, total, known)
                remembered = True
                if self._reserve(r.job):
                    reserved = True
                    break
        if not remembered:
            self.memo.start_failed(key, total, known)
        protected = r.job.job_id in self.blocks.protected
        if not (protected and (reserved or self._reserve_protected(r.job))):
            self.blocks.hold(r.job)
        if not self.backfill:
            self.blocks.stopped.add(r.job.partition)

    def _reserve_protected(self, job: Job) -> bool:
        """A protected job that cannot start holds the GPUs it will start on (the readiest
        placement: ``reserve_for_blocked``), so later arrivals may still start on the
        others without delaying it, as backfill lets them around Slurm's blocked job.
        Without such a placement False: the walk's hold keeps every later arrival of its
        partition behind it."""
        place = reserve_for_blocked(self.policy, job, self.state)
        if place is None:
            return False
        self.memo.clear()
        self.places.append(place)
        return True

    def _start(self, job: Job, note: str = "") -> bool:
        """Start the job on free GPUs if a candidate is feasible (``note``: why it starts
        out of its rank, for the decision's reason)."""
        state = self.state
        choice = self.policy._best(job, state, state.free)
        if choice is None:
            return False
        cand, terms, _ = choice
        state.claim(job, cand)
        self.places.append(self.policy.decision(
            job, cand, terms, True, state,
            f"starts now on {len(cand.nodes)} node(s), {cand.groups} GPU group(s){note}"
            f"{self._handed(job)}"))
        return True

    def _handed(self, job: Job) -> str:
        """Why a plugin the profile does not name decided the job, for the decision's
        reason: each delegating plugin's ``handed_note`` ("" where it decided itself)."""
        policy = self.policy
        if not policy._delegating:
            return ""
        notes = (plugin.handed_note(job, self.state)
                 for (plugin, _), delegates in zip(policy.place, policy._delegates)
                 if delegates and hasattr(plugin, "handed_note"))
        return "".join(f"; {note}" for note in notes if note)

    def _preempt(self, r: RankedJob, key: tuple | None, total: int) -> bool:
        """Start the job on GPUs taken from lower-ranked running jobs, if it can."""
        preemption = self.preemption
        cut = preemption.cut(r)
        if not self.memo.may_take(key, cut, total):
            return False
        taken = preemption.take(r)
        if taken is None:
            self.memo.take_failed(key, cut, total)
            return False
        victims, place = taken
        self.preempts.extend(victims)
        self.places.append(place)
        if victims:
            self.memo.clear()
        return True

    def _reserve(self, job: Job) -> bool:
        """Backfill's reservation for the first job of its partition that cannot start:
        the GPUs it will wait for, which later jobs may not take this cycle."""
        part = job.partition
        if part in self.blocks.reserved:
            return False
        place = reserve_for_blocked(self.policy, job, self.state)
        if place is None:
            return False
        self.blocks.reserved.add(part)
        self.memo.clear()
        self.places.append(place)
        return True
