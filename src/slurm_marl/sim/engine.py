"""The discrete-event simulator: a trace on a simulated clock, scheduled by ``run_cycle``.

Events are job arrivals, job completions and policy wake-ups (the time a job's queue changes
by itself: Tiresias demotion or starvation promotion), optionally plus a fixed period. At
each event time the simulator settles progress, builds a ``ClusterSnapshot`` and applies the
cycle's decisions: ``Preempt`` (the job goes back to the queue, keeps its attained service and
pays ``restart_delay_s`` of extra work when it restarts) and ``Place(start_now=True)`` (GPUs
taken from the named groups, lowest free indices first). ``SetPriority`` and advisory
``Place(start_now=False)`` change nothing in the simulated cluster.

A cycle is skipped when it cannot change anything: no pending job, or no free GPU and no
preemption in the profile (tested: identical results with and without the skip). Stale
finish events (``sim/events.py``) trigger no cycle.

Where the rest lives: ``sim/resources.py`` takes and gives back GPU slots, CPUs and
memory (GPU sharing included: a same-GPU placement no single GPU can hold is refused, the job
stays pending, counted in ``refused_placements``); ``sim/partitions_apart.py`` says which
partitions a cycle decides; ``sim/prediction_gate.py`` gives jobs their predictions. A
wake-up comes a microsecond after the change it is for, so the change is there when it runs.

Speed: the snapshot reuses every domain object that did not change (nodes whose GPUs did
not change, pending jobs), so a cycle costs O(pending + running) object references plus one
refreshed ``Job`` per running job; with interference ``none`` every speed is 1 and no
neighbourhood is computed.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slurm_marl.colocation import sample_colocated
from slurm_marl.domain import ClusterSnapshot, Node, Place, Preempt
from slurm_marl.policy.framework import Policy
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.events import ARRIVAL, EPS, FINISH, TICK, WAKE, EventHeap
from slurm_marl.sim.jobs import (SimJob, SimOutcome, SimulationError, build_jobs, domain_job,
                                  with_attained)
from slurm_marl.sim.partitions_apart import TouchedPartitions
from slurm_marl.sim.perf import PerfParams, job_speed
from slurm_marl.sim.prediction_gate import GatedPredictions
from slurm_marl.sim.resources import ClusterResources
from slurm_marl.sim.traces import TraceJob

if TYPE_CHECKING:  # LightGBM is imported only where predictions are learned
    from slurm_marl.sim.online_prediction import OnlinePredictor
    from slurm_marl.sim.predictions import FixedPredictor


@dataclass
class _Changes:
    """What one batch of events, or one cycle's decisions, changed in the cluster: what the
    speeds, the predictions' gates and the next cycle are updated from."""

    nodes: set[int] = field(default_factory=set)        # nodes whose GPUs changed
    multi_leaves: set = field(default_factory=set)      # leaves of multi-node jobs moved
    started: list[SimJob] = field(default_factory=list)
    scored: set[str] = field(default_factory=set)       # partitions with an end predicted
    ended: bool = False                                 # a job finished

    def moved(self, nodes: list[int], leaf: list) -> None:
        """A job started or stopped on ``nodes`` (``leaf``: each node's leaf switch)."""
        self.nodes.update(nodes)
        if len(nodes) > 1:
            self.multi_leaves.update(leaf[n] for n in nodes)


class Simulator:
    def __init__(self, cluster: SimCluster, trace: list[TraceJob], policy: Policy, *,
                 interference: str = "none", seed: int = 0, restart_delay_s: float = 30.0,
                 cycle_period_s: float = 0.0, collect_samples: bool = False,
                 sample_noise: float = 0.02, min_sample_s: float = 60.0,
                 skip_idle_cycles: bool = True, drop_oversized: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 perf: PerfParams | None = None,
                 predictor: OnlinePredictor | FixedPredictor | None = None) -> None:
        self.cluster = cluster
        # predicts each job at its arrival, told of each job that finishes
        self.gates = GatedPredictions(predictor) if predictor is not None else None
        self.policy = policy
        policy.emit_priorities = False   # only placements and preemptions are acted on
        self.perf = perf or PerfParams(strength=interference)
        self.restart_delay_s = restart_delay_s
        self.cycle_period_s = cycle_period_s
        self.collect_samples = collect_samples
        self.sample_noise = sample_noise
        self.min_sample_s = min_sample_s
        self.skip_idle_cycles = skip_idle_cycles
        # a policy that learns from ends (the guard) is shown each one, also when nothing
        # waits (as the daemon's cycles show it): a cycle with no job to decide
        self.watches_ends = bool(getattr(policy, "watches_ends", False))
        self.progress = progress
        self.rng = random.Random(seed + 7919)
        self.res = ClusterResources(cluster)
        self.sharing = self.res.sharing
        # Samples need every change of neighbourhood tracked, even with no interference.
        self.interference_on = self.perf.scale > 0 or self.sharing or collect_samples
        self.preemptive = policy.profile.preemption
        self.time_dependent = policy.order.time_dependent \
            and self.preemptive
        # Partitions decided apart (``Policy.decides_partitions_apart``): a cycle decides
        # only the partitions touched since their last cycle (``sim/partitions_apart.py``).
        self.reads_leaves = policy.reads_leaves
        self.parts = TouchedPartitions(self.res.nodes, policy.decides_partitions_apart,
                                       self.reads_leaves)

        self.jobs, self.dropped = build_jobs(cluster, trace, seed, drop_oversized)
        self.by_id = {j.job_id: j for j in self.jobs}
        self.pending: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.heap = EventHeap(self.by_id)
        self.done = 0                    # jobs finished
        self.refused_count = 0
        self.samples: list[dict] = []
        self.cycles = 0
        self.preemption_count = 0
        self.reservation_count = 0
        self.next_wake: float | None = None

    @property
    def nodes(self) -> list[Node]:
        """The cluster's nodes as they are now (``sim/resources.py``)."""
        return self.res.nodes

    @property
    def events(self) -> list:
        """The event heap's entries (``sim/events.py``)."""
        return self.heap.items

    def snapshot(self, now: float) -> ClusterSnapshot:
        nodes = self.res.nodes
        jobs = [j.job_obj or domain_job(j, now, nodes) for j in self.pending.values()]
        for j in self.running.values():
            obj = j.job_obj
            if obj is None:
                jobs.append(domain_job(j, now, nodes))
            else:
                jobs.append(with_attained(
                    obj, j.attained_base_gpu_s + j.num_gpus * (now - j.stint_start_s),
                    j.progress_shown(now)))
        return ClusterSnapshot(time_s=now, nodes=self.res.snapshot_nodes, jobs=tuple(jobs),
                               partitions=self.cluster.partitions,
                               switches=self.cluster.switches)

    # -- starting and stopping jobs ------------------------------------------------------
    def _start(self, j: SimJob, place: Place, now: float) -> list[int] | None:
        """Start a job where the policy says; None when a same-GPU job cannot have its
        slots on one physical GPU there (refused: the job stays pending)."""
        if j.state != "pending":
            raise SimulationError(f"policy placed job {j.job_id}, which is {j.state}")
        if place.gpus != j.num_gpus:
            raise SimulationError(f"policy gave job {j.job_id} {place.gpus} GPUs, it needs "
                                  f"{j.num_gpus}")
        got = self.res.take(j, place)
        if got is None:
            return None          # refused before anything changed
        allocs, touched = got
        del self.pending[j.job_id]
        self.running[j.job_id] = j
        j.pending_total_s += now - j.queue_since_s
        j.state = "running"
        j.allocs = allocs
        j.stint_start_s = now
        j.seg_start_s = now
        j.speed = 1.0
        if j.first_start_s is None:
            j.first_start_s = now
        j.job_obj = None
        j.last_nodes = tuple(self.res.nodes[n].name for n in touched)
        return touched

    def _stop(self, j: SimJob, now: float) -> list[int]:
        self._settle(j, now)
        nodes = self.res.release(j)
        del self.running[j.job_id]
        run = now - (now if j.stint_start_s is None else j.stint_start_s)
        j.attained_base_gpu_s += j.num_gpus * run
        j.run_total_s += run
        j.allocs = []
        j.hood = None
        j.version += 1
        if j.finish_queued:          # its finish event is stale now
            j.finish_queued = False
            self.heap.went_stale()
        j.job_obj = None
        return nodes

    # -- progress and speed --------------------------------------------------------------
    def _settle(self, j: SimJob, now: float) -> None:
        """Book progress since the last speed change; emit a co-location sample for it."""
        elapsed = now - j.seg_start_s
        if elapsed > 0:
            j.work_done_s += j.speed * elapsed
            j.speed_weighted_s += j.speed * elapsed
            if self.collect_samples and elapsed >= self.min_sample_s:
                self._emit_sample(j, now, elapsed)
        j.seg_start_s = now

    def _emit_sample(self, j: SimJob, now: float, elapsed: float) -> None:
        hood = j.hood if j.hood is not None else self.res.coloc.neighbourhood(j.job_id)
        noise = math.exp(self.rng.gauss(0.0, self.sample_noise)) if self.sample_noise else 1
        self.samples.append({
            "time_s": round(now, 3), "job_id": j.job_id, "model_type": j.model_type,
            "num_gpus": j.num_gpus, "groups": hood.n_groups, "nodes": hood.n_nodes,
            "leaves": hood.n_leaves, "cross_leaf": hood.n_leaves > 1,
            "colocated": sample_colocated(hood),
            "duration_s": round(elapsed, 3), "speed": round(j.speed * noise, 5),
            "strength": self.perf.strength})

    def _reschedule(self, j: SimJob, now: float) -> None:
        if j.finish_queued:
            self.heap.went_stale()
        j.version += 1
        remaining = j.remaining_work_s
        finish = now + max(0.0, remaining) / j.speed
        self.heap.push(finish, FINISH, j.job_id, j.version)
        j.finish_queued = True

    def _update_speeds(self, changed_nodes: Iterable[int], started: Iterable[SimJob],
                       multi_leaves: Iterable, now: float) -> None:
        """Recompute speeds of jobs around changed nodes and leaves; reschedule finishes."""
        started = list(started)
        if not self.interference_on:
            for j in started:
                self._reschedule(j, now)
            return
        coloc = self.res.coloc
        affected = coloc.jobs_near(changed_nodes, multi_leaves)
        affected.update(j.job_id for j in started)
        fresh = {j.job_id for j in started}
        for jid in sorted(affected):
            j = self.running.get(jid)
            if j is None:
                continue
            hood = coloc.neighbourhood(jid)
            speed = job_speed(j.model_type, hood, self.perf)
            if jid in fresh:
                j.speed, j.hood = speed, hood
                j.seg_start_s = now
                self._reschedule(j, now)
            elif abs(speed - j.speed) > 1e-12:
                self._settle(j, now)
                j.speed, j.hood = speed, hood
                self._reschedule(j, now)
            elif hood != j.hood:
                self._settle(j, now)
                j.hood = hood

    # -- main loop -----------------------------------------------------------------------
    def run(self) -> SimOutcome:
        wall0 = time.perf_counter()
        heap = self.heap
        for j in self.jobs:
            heap.push(j.submit_s, ARRIVAL, j.job_id)
        if self.cycle_period_s > 0 and self.jobs:
            heap.push(self.jobs[0].submit_s + self.cycle_period_s, TICK)
        now = 0.0
        # until no event is left: then nothing will ever free resources for what waits
        while (t := heap.next_live_time()) is not None:
            now = t
            self._react(self._pop_events(now), now)
        for j in list(self.running.values()):
            self._settle(j, now)
        unfinished = sum(1 for j in self.jobs if j.state != "done")
        return SimOutcome(jobs=self.jobs, cycles=self.cycles,
                          wall_time_s=time.perf_counter() - wall0,
                          preemptions=self.preemption_count,
                          reservations=self.reservation_count, samples=self.samples,
                          end_time_s=now, unfinished=unfinished,
                          total_gpus=self.res.total_slots, dropped=len(self.dropped),
                          refused_placements=self.refused_count)

    def _pop_events(self, now: float) -> _Changes:
        """Apply every event due at ``now`` (within ``EPS``), as one batch."""
        changes = _Changes()
        for t, kind, jid in self.heap.pop_due(now):
            if kind == FINISH:
                self._finished(self.by_id[jid], now, changes)
            elif kind == ARRIVAL:
                self._arrived(self.by_id[jid], now)
            elif kind == WAKE:
                self.parts.touch_all()
                if self.next_wake is not None and t >= self.next_wake - EPS:
                    self.next_wake = None
            elif kind == TICK:
                self.parts.touch_all()
                if self.pending or self.running or self.heap.has_arrivals():
                    self.heap.push(now + self.cycle_period_s, TICK)
        return changes

    def _finished(self, j: SimJob, now: float, changes: _Changes) -> None:
        j.finish_queued = False
        nodes = self._stop(j, now)
        self.parts.touch(j.partition)
        changes.moved(nodes, self.res.leaf)
        if len(nodes) > 1 and self.reads_leaves:
            self.parts.touch_leaves(self.res.leaf[n] for n in nodes)
        j.state = "done"
        j.finish_s = now
        self.done += 1
        changes.ended = True
        if self.gates is not None:
            self.gates.finished(j, now)
            changes.scored.add(j.partition)

    def _arrived(self, j: SimJob, now: float) -> None:
        j.state = "pending"
        j.queue_since_s = now
        self.parts.touch(j.partition)
        if self.gates is not None:
            self.gates.arrived(j, now)
        self.pending[j.job_id] = j

    def _react(self, changes: _Changes, now: float) -> None:
        """After a batch of events: gates, speeds, the cycle if it can change anything."""
        if changes.scored:
            self._regate(changes.scored)
        if changes.nodes:
            self._update_speeds(changes.nodes, (), changes.multi_leaves, now)
        if self._cycle_can_act(changes.ended):
            self._cycle(now)
        self.heap.compact()
        if self.progress is not None and changes.nodes:
            self.progress(self.done, len(self.jobs))

    def _cycle_can_act(self, ended: bool) -> bool:
        """Whether a cycle now could change anything: a job waits and a GPU is free (or the
        profile preempts, or idle cycles are not skipped), or a job ended and the policy
        watches ends."""
        if self.pending:
            return self.res.free_slots > 0 or self.preemptive or not self.skip_idle_cycles
        return ended and self.watches_ends

    def _regate(self, partitions: set[str]) -> None:
        """Jobs finished in ``partitions``: where the skill gate opened or closed, every
        pending or running job there with a prediction uses it, or not, from now on."""
        for part, why in self.gates.flipped(partitions):
            self.parts.touch(part)
            for j in itertools.chain(self.pending.values(), self.running.values()):
                if j.partition == part and j.predicted_gpu_s is not None:
                    j.prediction_withheld = why
                    j.job_obj = None

    # -- the cycle -----------------------------------------------------------------------
    def _multi_node_leaves(self, decisions: list) -> set:
        """The leaf switches of the multi-node jobs these decisions start or preempt."""
        index = self.res.node_index
        leaves = set()
        for d in decisions:
            if isinstance(d, Place) and d.start_now:
                nodes = {a.node for a in d.allocs}
            elif isinstance(d, Preempt):
                j = self.by_id.get(d.job_id)
                nodes = set(j.last_nodes) if j is not None and j.last_nodes else set()
            else:
                continue
            if len(nodes) > 1:
                leaves.update(self.res.leaf[index[n]] for n in nodes if n in index)
        return leaves

    def _cycle(self, now: float) -> None:
        self.cycles += 1
        decisions = self.parts.decide(self.policy, self.snapshot(now), now,
                                      self._multi_node_leaves)
        changes = _Changes()
        for d in decisions:
            if isinstance(d, Preempt):
                self._preempt(d, now, changes)
            elif isinstance(d, Place):
                self._place(d, now, changes)
        if changes.nodes or changes.started:
            self._update_speeds(changes.nodes, changes.started, changes.multi_leaves, now)
        if self.time_dependent and self.pending:
            self._schedule_wake(now)

    def _preempt(self, d: Preempt, now: float, changes: _Changes) -> None:
        """The job goes back to the queue, keeping its attained service; it pays
        ``restart_delay_s`` of extra work when it restarts."""
        j = self.by_id.get(d.job_id)
        if j is None or j.state != "running":
            raise SimulationError(f"policy preempted job {d.job_id}, not running")
        changes.moved(self._stop(j, now), self.res.leaf)
        j.state = "pending"
        j.queue_since_s = now
        j.last_run_s = now - (now if j.stint_start_s is None else j.stint_start_s)
        j.preemptions += 1
        j.extra_work_s += self.restart_delay_s
        self.parts.touch(j.partition)   # it may fit in what is left; below, ranks moved
        self.pending[j.job_id] = j
        self.preemption_count += 1

    def _place(self, d: Place, now: float, changes: _Changes) -> None:
        """Start the job now, or count an advisory placement (a reservation)."""
        if not d.start_now:
            self.reservation_count += 1
            return
        j = self.by_id.get(d.job_id)
        if j is None:
            raise SimulationError(f"policy placed unknown job {d.job_id}")
        nodes = self._start(j, d, now)
        if nodes is None:
            self.refused_count += 1
            self.parts.touch(j.partition)   # tried again at the next cycle
            return
        changes.moved(nodes, self.res.leaf)
        changes.started.append(j)
        # running now, it ranks among the running jobs: a job ranked above it that waits
        # may preempt it at the next cycle
        self.parts.touch(j.partition)

    def _schedule_wake(self, now: float) -> None:
        """A wake-up when the next job changes queue by itself (only running jobs and jobs
        that ran before do)."""
        nodes = self.res.nodes
        candidates = [domain_job(j, now, nodes) for j in self.running.values()]
        candidates.extend(domain_job(j, now, nodes) for j in self.pending.values()
                          if j.last_run_s > 0)
        wake = self.policy.next_change_s(candidates, now)
        # A little past the change: at the change itself a job's service, summed in
        # floating point, may fall short of its threshold by a rounding error, and the
        # demotion would wait for whatever event came next (which a partition decided
        # apart may not even see).
        wake = None if wake is None else wake + EPS
        if wake is not None and (self.next_wake is None or wake < self.next_wake - EPS):
            self.next_wake = wake
            self.heap.push(wake, WAKE)
