"""The guard's shadow of Slurm alone as a replica of the cluster (``[guard] model =
"replica"``): the nodes the policy sees, each with the GPUs, CPUs and memory the replica's
own jobs hold, scheduled by the framework's ``fifo-backfill`` (the policy the simulator
measures Slurm alone by) over every job seen, in lockstep with the real clock.

The fluid shadow (``guard.shadow_starts``) has neither node packing nor backfill, so it
starts a job Slurm alone backfills late, and is recomputed from scratch with lengths that
change as runs end. The replica runs Slurm's own rules instead: ``fifo-backfill`` decides
from arrivals and ends only, never from lengths, so with the true lengths the replica's
starts are the ``fifo-backfill`` run's (tested). A job's replica run ends:

- for a job that has ended, after its run time;
- for a job that has run in reality and not ended, when it ends (not before: its length is
  not known, and a run ended on an estimate would move every later start, irrevocably);
  while the agent runs it later than the replica did, the replica lags by that much, which
  the guard itself bounds (it protects a job soon after its replica start);
- for a job that has not run in reality, after the mean run length on the Kaplan-Meier
  curve of every run seen (``Survival``): a job the agent never starts (or Slurm keeps
  waiting for a reason the replica does not model) frees its replica GPUs after a typical
  run instead of holding them for ever (until a run has been seen: held).

Measured on six Philly windows (docs/benchmarks.md): ending live runs on the estimate (the
conditional mean) ran the replica ahead of ``fifo-backfill`` for most jobs of some windows;
holding them until known did not.

The replica takes events (arrivals, ends) in time order up to now, each at its own time (or
the next multiple of ``tick_s``, which bounds the cycles a busy cluster costs). With
``rewind_s = 0`` what it has started or ended stays so: a length learned later does not
rewrite its past, and a run the agent started later than the replica did holds the replica's
GPUs that much too long (its end is known only when reality ends it), so every replica start
after it comes late. With ``rewind_s > 0`` it revises its past: it keeps an undo log of its
last ``rewind_s`` seconds (arrivals taken, runs started, runs ended), and when a run's length
becomes known and its replica run ended (or must end) at another time than it did, it
undoes back to the earlier of the two and takes the events again from there with what is
known now (``_revise``). A change older than the log is applied at its oldest time. A
job's shadow start is the time the replica started it; one the replica has not started
has none, and is not due.

The replica begins at its first view of the cluster, with the cluster as it is (``_begin``):
a job running then runs in the replica on its own GPUs from its real start, a job waiting
then enters its queue then. What Slurm alone would have done before is not known (the
replica does not see the jobs that ended before it began, so a replay of the waiting jobs'
history would start them on GPUs that were busy then). A daemon restarted keeps the jobs
its guard had protected from the store (``SlurmAloneShadow.restore``).

A job cancelled while it waits counts as a run as short as the time since it was last seen
(``SlurmAloneShadow._see``): the replica runs it that long.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from slurm_marl.domain import (ClusterSnapshot, Decision, Job, JobState, Node, Partition, Place,
                               Switch)
from slurm_marl.policy.guard import GuardSettings, SlurmAloneShadow

Decide = Callable[[ClusterSnapshot], Sequence[Decision]]


@dataclass
class _Run:
    start_s: float
    holds: tuple[tuple[str, tuple[int, ...], int, int], ...]   # (node, GPUs, CPUs, MiB)


@dataclass(frozen=True)
class _Done:
    """One entry of the undo log: what the replica did at ``t`` to a job."""
    t: float
    kind: str                 # "arrive" (taken into its queue), "start", "end"
    job_id: int
    what: Job | _Run | None   # the job started (start), the run ended (end)


class ReplicaShadow(SlurmAloneShadow):
    """A ``SlurmAloneShadow`` whose starts come from a replica of the cluster scheduled by
    ``decide`` (one ``fifo-backfill`` cycle on a snapshot of the replica)."""

    def __init__(self, settings: GuardSettings, decide: Decide) -> None:
        super().__init__(settings)
        self._decide = decide
        self._clear_replica()

    def _clear_replica(self) -> None:
        self.clock = -math.inf
        self.origin = -math.inf                      # when the replica began (_begin)
        self._at_start: dict[int, Job] = {}          # running when first seen, before it
        self._nodes: dict[str, Node] = {}            # the latest real node, by name
        self._partitions: dict[str, Partition] = {}
        self._switches: dict[str, Switch] = {}
        # the switches as one tuple, kept while they are the same objects: the cycle's node
        # table is then reused for the nodes that did not change (``state._node_table``)
        self._switch_tuple: tuple[Switch, ...] | None = None
        self._used: dict[str, set[int]] = {}         # the replica's GPUs taken, by node
        self._cpus: dict[str, int] = {}
        self._mem: dict[str, int] = {}
        self._shown: dict[str, Node] = {}            # the replica's node objects, kept
        self._arrivals: dict[int, Job] = {}          # seen, not yet in the replica's queue
        self.queue: dict[int, Job] = {}              # waiting in the replica
        self.running: dict[int, _Run] = {}
        self.cycles = 0                              # replica cycles run (cost)
        self.rewinds = 0                             # revisions of its past (cost)
        self._log: deque[_Done] = deque()            # undo log, oldest first
        self._logged: Counter[int] = Counter()       # log entries by job (kept from _forget)
        self._ended: dict[int, _Done] = {}           # the end entry of runs ended in the log
        self._known: list[int] = []                  # lengths known since the last revision

    def reset(self) -> None:
        super().reset()
        self._clear_replica()

    def see_cluster(self, snapshot: ClusterSnapshot) -> None:
        super().see_cluster(snapshot)
        for node in snapshot.nodes:
            if self._nodes.get(node.name) is not node:
                self._nodes[node.name] = node
                self._shown.pop(node.name, None)
        for part in snapshot.partitions:
            self._partitions[part.name] = part
        for switch in snapshot.switches:
            if self._switches.get(switch.name) is not switch:
                self._switches[switch.name] = switch
                self._switch_tuple = None

    def _arrived(self, job: Job) -> None:
        if not math.isfinite(job.submit_time_s):
            return           # no time to arrive at: it never enters the replica
        if not math.isfinite(self.clock) and job.is_running \
                and job.start_time_s is not None and math.isfinite(job.start_time_s):
            self._at_start[job.job_id] = job     # taken as it runs (_begin)
        else:
            self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        """The job, as submitted, among the arrivals the replica takes in time order."""
        self._arrivals[job.job_id] = replace(
            job, state=JobState.PENDING, nodes=(), gpu_alloc=(), start_time_s=None,
            end_time_s=None, attained_gpu_s=0.0, priority=0, pending_reason="",
            reservation=None, restart_count=0)

    def _gone(self, job_id: int) -> None:
        if self.settings.rewind_s > 0:
            self._known.append(job_id)

    # -- the replica ---------------------------------------------------------------------
    def _recompute(self, now_s: float) -> None:
        self._revise()
        if self._nodes:
            if not math.isfinite(self.clock):
                self._begin(now_s)
            self._advance(now_s)
            self._trim()
        self._forget()

    def _begin(self, now_s: float) -> None:
        """The replica begins at its first view of the cluster, as the cluster is: what
        Slurm alone would have done before is not known (Slurm itself, or an agent not
        remembered, ran the cluster then). A job running then runs in the replica on the
        GPUs it holds, from its real start (its end is known when reality ends it: no
        revision); a job waiting then enters the replica's queue then, in submit order.
        Neither a day of history replayed at start, nor revisions of runs the replica
        would have placed otherwise."""
        self.clock = self.origin = now_s
        for job_id, job in self._at_start.items():
            holds = self._holds_of(job)
            if holds:
                run = self.running[job_id] = _Run(job.start_time_s, holds)
                self._hold(run)
                self.starts[job_id] = job.start_time_s
            else:        # on no node the replica has: it runs there when it can
                self._enqueue(job)
        self._at_start.clear()

    def _holds_of(self, job: Job) -> tuple[tuple[str, tuple[int, ...], int, int], ...]:
        """What a running job holds on the replica's nodes: the GPUs Slurm gave it (or,
        where the job does not say which, as many free ones of the node), CPUs and memory
        split by its GPUs as ``_start`` splits them."""
        alloc: dict[str, tuple[int, ...] | None] = dict(job.gpu_alloc) or dict.fromkeys(
            job.nodes)
        per_node = []
        for name, gpus in alloc.items():
            if name not in self._nodes:
                continue
            used = self._used.get(name, set())
            if gpus is None:
                gpus = tuple(i for g in self._nodes[name].gpu_groups for i in g.gpu_indices
                             if i not in used)[:job.gpus_per_node]
            per_node.append((name, tuple(i for i in gpus if i not in used)))
        total = max(1, sum(len(g) for _, g in per_node))
        return tuple((name, gpus, math.ceil(job.cpus * len(gpus) / total),
                      math.ceil(job.mem_mib * len(gpus) / total))
                     for name, gpus in per_node if gpus)

    # -- revising the past ---------------------------------------------------------------
    def _do(self, t: float, kind: str, job_id: int, what: Job | _Run | None = None) -> None:
        if self.settings.rewind_s > 0:
            done = _Done(t, kind, job_id, what)
            self._log.append(done)
            self._logged[job_id] += 1
            if kind == "end":
                self._ended[job_id] = done

    def _revise(self) -> None:
        """Runs whose length became known since the last call: where the replica ended one
        (or must end it) at another time than its start plus that length, undo back to the
        earlier of the two (at most ``rewind_s``); ``_advance`` then takes the events again.
        A job still waiting in the replica needs none: it will run there that long."""
        known, self._known = self._known, []
        if not math.isfinite(self.clock):
            return
        back = math.inf
        for job_id in known:
            run = self.running.get(job_id)
            done = self._ended.get(job_id)
            if run is None and done is None:
                continue
            s = self.seen[job_id]
            start = run.start_s if run is not None else done.what.start_s
            end = self._at(start + s.run_s)
            if run is not None:
                if end < self.clock:
                    back = min(back, end)
            elif abs(end - done.t) > 1e-9:
                back = min(back, end, done.t)
        if back < self.clock:
            self._rewind(max(back, self.clock - self.settings.rewind_s, self.origin))

    def _rewind(self, t: float) -> None:
        """Undo what the replica did at ``t`` or later; its clock back to ``t``."""
        self.rewinds += 1
        while self._log and self._log[-1].t >= t:
            done = self._log.pop()
            self._unlog(done)
            job_id = done.job_id
            if done.kind == "arrive":
                self._arrivals[job_id] = self.queue.pop(job_id)
            elif done.kind == "start":
                self._free(self.running.pop(job_id))
                self.queue[job_id] = done.what
                self.starts.pop(job_id, None)
            else:
                self._hold(done.what)
                self.running[job_id] = done.what
        self.clock = min(self.clock, t)

    def _unlog(self, done: _Done) -> None:
        self._logged[done.job_id] -= 1
        if not self._logged[done.job_id]:
            del self._logged[done.job_id]
        if done.kind == "end" and self._ended.get(done.job_id) is done:
            del self._ended[done.job_id]

    def _trim(self) -> None:
        """The log keeps the last ``rewind_s`` seconds."""
        oldest = self.clock - self.settings.rewind_s
        while self._log and self._log[0].t < oldest:
            self._unlog(self._log.popleft())

    def _end_s(self, job_id: int, run: _Run) -> float:
        """When the replica's run of a job ends, from what is known now."""
        s = self.seen[job_id]
        if s.ended:
            return run.start_s + s.run_s
        if s.run_s > 0 or not self.survival.horizon:
            return math.inf      # running (or ran) in reality: its end will be known
        return run.start_s + self.expected_length(0.0)

    def _at(self, t: float) -> float:
        tick = self.settings.tick_s
        return math.ceil(t / tick - 1e-9) * tick if tick > 0 and math.isfinite(t) else t

    def _advance(self, now_s: float) -> None:
        """Take the replica's events up to ``now_s`` in time order. What is known does not
        change within one call, so each run's end is reckoned once (a heap of ends, the runs
        a cycle starts pushed) and arrivals are taken in submit order: O(events x log
        jobs), plus one ``fifo-backfill`` cycle per event time."""
        if not math.isfinite(now_s):
            return
        seen = self.seen
        ends = [(self._end_at(j, r), j) for j, r in self.running.items()]
        heapq.heapify(ends)
        arrivals = sorted((self._at(seen[j].submit_s), j) for j in self._arrivals)
        a = 0
        while True:
            t = min(ends[0][0] if ends else math.inf,
                    arrivals[a][0] if a < len(arrivals) else math.inf)
            t = max(t, self.clock)
            if t > now_s:
                break
            while ends and ends[0][0] <= t:
                self._release(heapq.heappop(ends)[1], t)
            while a < len(arrivals) and arrivals[a][0] <= t:
                job_id = arrivals[a][1]
                self.queue[job_id] = self._arrivals.pop(job_id)
                self._do(t, "arrive", job_id)
                a += 1
            self.clock = t
            if self.queue:
                for job_id in self._cycle(t):
                    heapq.heappush(ends, (self._end_at(job_id, self.running[job_id]), job_id))
        self.clock = max(self.clock, now_s)

    def _end_at(self, job_id: int, run: _Run) -> float:
        """``_end_s`` on the tick grid; an end that is not a number (a time no arithmetic
        moves) is held."""
        e = self._at(self._end_s(job_id, run))
        return e if e == e else math.inf

    def _cycle(self, t: float) -> list[int]:
        """One ``fifo-backfill`` cycle of the replica at ``t``; the jobs it started."""
        self.cycles += 1
        snap = ClusterSnapshot(time_s=t, nodes=tuple(self._node(n) for n in self._nodes),
                               jobs=tuple(self.queue.values()),
                               partitions=tuple(self._partitions.values()),
                               switches=self._switches_now())
        started = []
        for d in self._decide(snap):
            if isinstance(d, Place) and d.start_now and d.job_id in self.queue:
                self._start(self.queue.pop(d.job_id), d, t)
                started.append(d.job_id)
        return started

    def _switches_now(self) -> tuple[Switch, ...]:
        if self._switch_tuple is None:
            self._switch_tuple = tuple(self._switches.values())
        return self._switch_tuple

    def _node(self, name: str) -> Node:
        node = self._shown.get(name)
        if node is None:
            real = self._nodes[name]
            used = frozenset(self._used.get(name, ()))
            state = ("ALLOCATED" if used else "IDLE") if real.available else real.state
            node = self._shown[name] = replace(
                real, used_gpu_indices=used, alloc_cpus=self._cpus.get(name, 0),
                alloc_memory_mib=self._mem.get(name, 0), state=state)
        return node

    def _start(self, job: Job, place: Place, t: float) -> None:
        total = max(1, place.gpus)
        holds = []
        per_node: dict[str, int] = {}
        for a in place.allocs:
            per_node[a.node] = per_node.get(a.node, 0) + a.gpus
        for name, k in per_node.items():
            node = self._nodes[name]
            used = self._used.get(name, ())
            groups = {g.index: g for g in node.gpu_groups}
            taken: list[int] = []
            for a in place.allocs:
                if a.node == name:
                    free = [i for i in groups[a.group].gpu_indices
                            if i not in used and i not in taken]
                    taken.extend(free[:a.gpus])
            holds.append((name, tuple(taken), math.ceil(job.cpus * k / total),
                          math.ceil(job.mem_mib * k / total)))
        run = self.running[job.job_id] = _Run(t, tuple(holds))
        self._hold(run)
        self.starts[job.job_id] = t
        self._do(t, "start", job.job_id, job)

    def _release(self, job_id: int, t: float) -> None:
        run = self.running.pop(job_id)
        self._free(run)
        self._do(t, "end", job_id, run)

    def _hold(self, run: _Run) -> None:
        """The replica's nodes take what the run holds (``_free``'s inverse)."""
        for name, gpus, cpus, mem in run.holds:
            self._used.setdefault(name, set()).update(gpus)
            self._cpus[name] = self._cpus.get(name, 0) + cpus
            self._mem[name] = self._mem.get(name, 0) + mem
            self._shown.pop(name, None)

    def _free(self, run: _Run) -> None:
        for name, gpus, cpus, mem in run.holds:
            self._used.get(name, set()).difference_update(gpus)
            self._cpus[name] = self._cpus.get(name, 0) - cpus
            self._mem[name] = self._mem.get(name, 0) - mem
            self._shown.pop(name, None)

    def _forget(self) -> None:
        """A job ended in reality and done in the replica (ended there, or never to run
        there), and out of the undo log, can move nothing any more: forgotten, so memory
        follows the live jobs (and the log's seconds)."""
        for job_id in [j for j, s in self.seen.items() if s.ended
                       and j not in self.running and j not in self.queue
                       and j not in self._arrivals and j not in self._logged
                       and j not in self._at_start]:
            del self.seen[job_id]
            self.starts.pop(job_id, None)
