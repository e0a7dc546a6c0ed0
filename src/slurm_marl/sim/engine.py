"""The discrete-event simulator: a trace on a simulated clock, scheduled by ``run_cycle``.

Events are job arrivals, job completions and policy wake-ups (the time a job's queue changes
by itself: Tiresias demotion or starvation promotion), optionally plus a fixed period. At
each event time the simulator settles progress, builds a ``ClusterSnapshot`` and applies the
cycle's decisions: ``Preempt`` (the job goes back to the queue, keeps its attained service and
pays ``restart_delay_s`` of extra work when it restarts) and ``Place(start_now=True)`` (GPUs
taken from the named groups, lowest free indices first). ``SetPriority`` and advisory
``Place(start_now=False)`` change nothing in the simulated cluster.

A cycle is skipped when it cannot change anything: no pending job, or no free GPU and no
preemption in the profile (tested: identical results with and without the skip). Events are
versioned: a job's finish event goes stale when the job is preempted or its speed changes (a
new one is pushed); stale events trigger no cycle, and the heap is compacted when more than
half of it is stale, so heavy preemption cannot grow it without bound.

With GPU sharing (``share=K``) a job of the trace's ``gpu_fraction`` f takes
max(1, round(f x K)) slots of one physical GPU (``same_gpu``, see ``sim.jobs``): the
simulator picks the GPU of the named group with the most free slots; a placement no single
GPU can hold is refused (the job stays pending, counted in ``refused_placements``), as Slurm
allocates a job's shards of a node from one GPU.

Partitions decided apart: where the policy's partitions cannot affect each other's
decisions (``Policy.decides_partitions_apart``), a cycle decides only the partitions in
which something happened since their last cycle, the others having nothing new to decide
(``tests/sim/test_partitions_apart.py``: the same run, job by job). A wake-up comes a
microsecond after the change it is for, so the change is there when it runs.

Speed: the snapshot reuses every domain object that did not change (nodes whose GPUs did
not change, pending jobs), so a cycle costs O(pending + running) object references plus one
refreshed ``Job`` per running job; with interference ``none`` every speed is 1 and no
neighbourhood is computed.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from slurm_marl.colocation import ColocationIndex, sample_colocated
from slurm_marl.domain import ClusterSnapshot, Node, Place, Preempt
from slurm_marl.policy.framework import Policy
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.jobs import (SimJob, SimOutcome, SimulationError, build_jobs, domain_job,
                                  with_attained)
from slurm_marl.sim.perf import PerfParams, job_speed
from slurm_marl.sim.traces import TraceJob

if TYPE_CHECKING:  # LightGBM is imported only where predictions are learned
    from slurm_marl.sim.online_prediction import OnlinePredictor
    from slurm_marl.sim.predictions import FixedPredictor

FINISH, ARRIVAL, WAKE, TICK = 0, 1, 2, 3
_EPS = 1e-6


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
        # predicts each job at its arrival, told of each job that finishes: learned from
        # them (``sim/online_prediction.py``) or fixed (``sim/predictions.py``); a
        # partition's predictions are used only while its skill gate is open
        self.predictor = predictor
        self.withheld_in: dict[str, str] = {}       # partition -> why withheld ("": used)
        self.predictions_given = [0, 0]             # arrivals with it used, withheld
        self.gate_flips = 0
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
        self.sharing = any(p.share > 1 for p in cluster.partitions_spec)
        # Samples need every change of neighbourhood tracked, even with no interference.
        self.interference_on = self.perf.scale > 0 or self.sharing or collect_samples
        self.preemptive = policy.profile.preemption
        self.time_dependent = policy.order.time_dependent \
            and self.preemptive

        self.nodes: list[Node] = list(cluster.nodes)
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.group_pos = [{g.index: p for p, g in enumerate(n.gpu_groups)} for n in self.nodes]
        self.used: list[set[int]] = [set() for _ in self.nodes]
        self.alloc_cpus = [0] * len(self.nodes)
        self.alloc_mem = [0] * len(self.nodes)
        self.leaf = [n.leaf_switch for n in self.nodes]
        self.free_slots = sum(n.gpu_count for n in self.nodes)
        self.total_slots = self.free_slots
        # Running jobs by where they hold GPUs (physical GPUs as (node, GPU) with sharing).
        self.coloc = ColocationIndex([[g.gpu_count for g in n.gpu_groups] for n in self.nodes],
                                     self.leaf)
        self.snapshot_nodes: tuple[Node, ...] = tuple(self.nodes)
        # Partitions decided apart (``Policy.decides_partitions_apart``): a cycle decides
        # only the partitions where something changed since their last cycle (an arrival,
        # a finish, a refused start, a prediction gate that flipped; partitions sharing
        # nodes together; with ``reads_leaves``, a multi-node job starting or ending on a
        # leaf switch touches every partition there), the others deciding nothing new;
        # a wake-up or a tick touches all. Same decisions, tested; a cycle otherwise costs
        # every pending job of the cluster however few partitions changed.
        self.apart = policy.decides_partitions_apart
        self.reads_leaves = policy.reads_leaves
        self.dirty: set[str] = set()
        self.all_dirty = True
        self.group_of, self.parts_on_leaf = _partition_groups(self.nodes)

        self.jobs, self.dropped = build_jobs(cluster, trace, seed, drop_oversized)
        self.by_id = {j.job_id: j for j in self.jobs}
        self.pending: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.events: list = []
        self.stale = 0                   # stale finish events still in the heap
        self.seq = 0
        self.refused_count = 0
        self.samples: list[dict] = []
        self.cycles = 0
        self.preemption_count = 0
        self.reservation_count = 0
        self.next_wake: float | None = None

    # -- events --------------------------------------------------------------------------
    def _push(self, t: float, kind: int, job_id: int = -1, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, job_id, version))

    def _compact(self) -> None:
        """Drop stale finish events once they are more than half the heap (the order of
        the rest is unchanged: entries are unique by their sequence number)."""
        if self.stale * 2 <= len(self.events):
            return
        by_id = self.by_id
        self.events = [e for e in self.events
                       if e[1] != FINISH or by_id[e[3]].version == e[4]]
        heapq.heapify(self.events)
        self.stale = 0

    # -- domain objects ------------------------------------------------------------------
    def _node_obj(self, n: int) -> Node:
        base = self.cluster.nodes[n]
        new = object.__new__(Node)
        d = new.__dict__
        d.update(base.__dict__)
        d["used_gpu_indices"] = frozenset(self.used[n])
        d["alloc_cpus"] = self.alloc_cpus[n]
        d["alloc_memory_mib"] = self.alloc_mem[n]
        d["state"] = "ALLOCATED" if self.used[n] else "IDLE"
        return new

    def snapshot(self, now: float) -> ClusterSnapshot:
        nodes = self.nodes
        jobs = [j.job_obj or domain_job(j, now, nodes) for j in self.pending.values()]
        for j in self.running.values():
            obj = j.job_obj
            if obj is None:
                jobs.append(domain_job(j, now, nodes))
            else:
                jobs.append(with_attained(
                    obj, j.attained_base_gpu_s + j.num_gpus * (now - j.stint_start_s),
                    j.progress_shown(now)))
        return ClusterSnapshot(time_s=now, nodes=self.snapshot_nodes, jobs=tuple(jobs),
                               partitions=self.cluster.partitions,
                               switches=self.cluster.switches)

    # -- resources -----------------------------------------------------------------------
    def _start(self, j: SimJob, place: Place, now: float) -> list[int] | None:
        """Start a job where the policy says; None when a same-GPU job cannot have its
        slots on one physical GPU there (refused: the job stays pending)."""
        if j.state != "pending":
            raise SimulationError(f"policy placed job {j.job_id}, which is {j.state}")
        if place.gpus != j.num_gpus:
            raise SimulationError(f"policy gave job {j.job_id} {place.gpus} GPUs, it needs "
                                  f"{j.num_gpus}")
        allocs = []
        per_node: dict[int, int] = {}
        taken: dict[int, set[int]] = {}
        for a in place.allocs:
            n = self.node_index.get(a.node)
            if n is None or a.group not in self.group_pos[n]:
                raise SimulationError(f"policy placed job {j.job_id} on unknown "
                                      f"{a.node} group {a.group}")
            if j.partition not in self.nodes[n].partitions:
                raise SimulationError(f"policy placed job {j.job_id} (partition "
                                      f"{j.partition}) on {a.node}")
            pos = self.group_pos[n][a.group]
            group = self.nodes[n].gpu_groups[pos]
            busy = taken.setdefault(n, set())
            free = [i for i in group.gpu_indices if i not in self.used[n] and i not in busy]
            if len(free) < a.gpus:
                raise SimulationError(f"policy placed {a.gpus} GPUs of job {j.job_id} on "
                                      f"{a.node} group {a.group}, which has {len(free)} free")
            take = tuple(free[:a.gpus])
            if j.same_gpu:
                take = (self.cluster.one_gpu_slots(self.nodes[n].name, free, a.gpus)
                        if len(place.allocs) == 1 else None)
                if take is None:
                    return None          # refused before anything changed
            busy.update(take)
            allocs.append((n, pos, take))
            per_node[n] = per_node.get(n, 0) + a.gpus
        for n, _, take in allocs:
            self.used[n].update(take)
        if j.gpus_per_node and any(k != j.gpus_per_node for k in per_node.values()):
            raise SimulationError(f"policy split job {j.job_id} as {per_node}, it asks for "
                                  f"{j.gpus_per_node} GPUs on each of {j.node_count} nodes")
        for n, k in per_node.items():
            self.alloc_cpus[n] += math.ceil(j.cpus * k / j.num_gpus)
            self.alloc_mem[n] += math.ceil(j.mem_mib * k / j.num_gpus)
        self.free_slots -= j.num_gpus
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
        j.last_nodes = tuple(self.nodes[n].name for n in per_node)
        self.coloc.add(j.job_id, j.model_type, [(n, g, len(t)) for n, g, t in allocs],
                       self._physical(j) if self.sharing else ())
        touched = list(per_node)
        for n in touched:
            self._refresh_node(n)
        return touched

    def _stop(self, j: SimJob, now: float) -> list[int]:
        self._settle(j, now)
        per_node = {n for n, _, _ in j.allocs}
        for n, _, gpus in j.allocs:
            self.used[n].difference_update(gpus)
        counts: dict[int, int] = {}
        for n, _, gpus in j.allocs:
            counts[n] = counts.get(n, 0) + len(gpus)
        for n, k in counts.items():
            self.alloc_cpus[n] -= math.ceil(j.cpus * k / j.num_gpus)
            self.alloc_mem[n] -= math.ceil(j.mem_mib * k / j.num_gpus)
        self.coloc.remove(j.job_id)
        self.free_slots += j.num_gpus
        del self.running[j.job_id]
        run = now - (now if j.stint_start_s is None else j.stint_start_s)
        j.attained_base_gpu_s += j.num_gpus * run
        j.run_total_s += run
        j.allocs = []
        j.hood = None
        j.version += 1
        if j.finish_queued:          # its finish event is stale now
            j.finish_queued = False
            self.stale += 1
        j.job_obj = None
        for n in per_node:
            self._refresh_node(n)
        return list(per_node)

    def _refresh_node(self, n: int) -> None:
        self.nodes[n] = self._node_obj(n)
        nodes = list(self.snapshot_nodes)
        nodes[n] = self.nodes[n]
        self.snapshot_nodes = tuple(nodes)

    def _physical(self, j: SimJob) -> list[tuple[int, int]]:
        """(node, physical GPU) of a job's slots, each once (two slots of one GPU share it
        with the same jobs)."""
        keys: dict[tuple[int, int], None] = {}
        for n, _, gpus in j.allocs:
            name = self.nodes[n].name
            for gpu in gpus:
                keys[(n, self.cluster.physical_gpu(name, gpu))] = None
        return list(keys)

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
        hood = j.hood if j.hood is not None else self.coloc.neighbourhood(j.job_id)
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
            self.stale += 1
        j.version += 1
        remaining = j.remaining_work_s
        finish = now + max(0.0, remaining) / j.speed
        self._push(finish, FINISH, j.job_id, j.version)
        j.finish_queued = True

    def _update_speeds(self, changed_nodes: Iterable[int], started: Iterable[SimJob],
                       multi_leaves: Iterable, now: float) -> None:
        """Recompute speeds of jobs around changed nodes and leaves; reschedule finishes."""
        started = list(started)
        if not self.interference_on:
            for j in started:
                self._reschedule(j, now)
            return
        affected = self.coloc.jobs_near(changed_nodes, multi_leaves)
        affected.update(j.job_id for j in started)
        fresh = {j.job_id for j in started}
        for jid in sorted(affected):
            j = self.running.get(jid)
            if j is None:
                continue
            hood = self.coloc.neighbourhood(jid)
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
        for j in self.jobs:
            self._push(j.submit_s, ARRIVAL, j.job_id)
        if self.cycle_period_s > 0 and self.jobs:
            self._push(self.jobs[0].submit_s + self.cycle_period_s, TICK)
        done = 0
        total = len(self.jobs)
        now = end = 0.0
        by_id = self.by_id
        while self.events:
            head = self.events[0]
            if head[1] == FINISH and by_id[head[3]].version != head[4]:
                heapq.heappop(self.events)   # stale: no batch (and no cycle) starts here
                self.stale -= 1
                continue
            now = end = head[0]
            changed_nodes: set[int] = set()
            multi_leaves: set = set()
            scored: set[str] = set()
            ended = False
            while self.events and self.events[0][0] <= now + _EPS:
                t, kind, _, jid, version = heapq.heappop(self.events)
                if kind == FINISH:
                    j = self.by_id[jid]
                    if version != j.version:
                        self.stale -= 1
                        continue
                    j.finish_queued = False
                    nodes = self._stop(j, now)
                    self._touch(j.partition)
                    if len(nodes) > 1:
                        multi_leaves.update(self.leaf[n] for n in nodes)
                        if self.reads_leaves:
                            self._touch_leaves(self.leaf[n] for n in nodes)
                    changed_nodes.update(nodes)
                    j.state = "done"
                    j.finish_s = now
                    done += 1
                    ended = True
                    if self.predictor is not None:
                        self.predictor.finished(j, now)
                        scored.add(j.partition)
                elif kind == ARRIVAL:
                    j = self.by_id[jid]
                    j.state = "pending"
                    j.queue_since_s = now
                    self._touch(j.partition)
                    if self.predictor is not None:
                        j.predicted_gpu_s = self.predictor.arrived(j, now)
                        if j.predicted_gpu_s is not None:
                            j.prediction_withheld = self._withheld(j.partition)
                            self.predictions_given[bool(j.prediction_withheld)] += 1
                    self.pending[jid] = j
                elif kind == WAKE:
                    self.all_dirty = True
                    if self.next_wake is not None and t >= self.next_wake - _EPS:
                        self.next_wake = None
                elif kind == TICK:
                    self.all_dirty = True
                    if self.pending or self.running or any(
                            e[1] == ARRIVAL for e in self.events):
                        self._push(now + self.cycle_period_s, TICK)
            if scored:
                self._regate(scored)
            if changed_nodes:
                self._update_speeds(changed_nodes, (), multi_leaves, now)
            if self.pending and (self.free_slots > 0 or self.preemptive
                                 or not self.skip_idle_cycles):
                self._cycle(now)
            elif ended and self.watches_ends and not self.pending:
                self._cycle(now)
            self._compact()
            if self.progress is not None and changed_nodes:
                self.progress(done, total)
            if not self.events and self.pending:
                break  # nothing will ever free resources for what is left
        for j in list(self.running.values()):
            self._settle(j, end)
        unfinished = sum(1 for j in self.jobs if j.state != "done")
        return SimOutcome(jobs=self.jobs, cycles=self.cycles,
                          wall_time_s=time.perf_counter() - wall0,
                          preemptions=self.preemption_count,
                          reservations=self.reservation_count, samples=self.samples,
                          end_time_s=end, unfinished=unfinished, total_gpus=self.total_slots,
                          dropped=len(self.dropped), refused_placements=self.refused_count)

    def _withheld(self, partition: str) -> str:
        """Why ``partition``'s predictions are withheld now ("": used), as of the gate's
        last flip (the reason's numbers are those that closed it)."""
        why = self.withheld_in.get(partition)
        if why is None:
            why = self.withheld_in[partition] = self.predictor.withheld(partition)
        return why

    def _regate(self, partitions: set[str]) -> None:
        """Jobs finished in ``partitions``: where the skill gate opened or closed, every
        pending or running job there with a prediction uses it, or not, from now on."""
        for part in partitions:
            old = self.withheld_in.get(part)
            new = self.predictor.withheld(part)
            if old is not None and bool(old) == bool(new):
                continue
            self.withheld_in[part] = new
            if old is None:
                continue
            self.gate_flips += 1
            self._touch(part)
            for j in itertools.chain(self.pending.values(), self.running.values()):
                if j.partition == part and j.predicted_gpu_s is not None:
                    j.prediction_withheld = new
                    j.job_obj = None

    def _touch(self, partition: str) -> None:
        """Something changed in ``partition``: its next cycle decides it (and the
        partitions sharing nodes with it)."""
        group = self.group_of.get(partition)
        if group is None:
            self.all_dirty = True
        else:
            self.dirty.update(group)

    def _touch_leaves(self, leaves: Iterable) -> None:
        for leaf in leaves:
            for part in self.parts_on_leaf.get(leaf, ()):
                self._touch(part)

    def _decide(self, snap: ClusterSnapshot, now: float) -> list:
        """The cycle's decisions: of every partition, or (``apart``) of those touched since
        their last cycle. With ``reads_leaves``, a multi-node job started or preempted in
        the cycle changes the leaf-level co-location of every partition on its leaves:
        decided again with those in (as one cycle of them all would have)."""
        policy = self.policy
        if not self.apart or self.all_dirty:
            decisions = policy.run_cycle(snap)
        else:
            policy.settle_order(snap.jobs, now)
            view = frozenset(self.dirty)
            decisions = policy.run_cycle(snap, view)
            while self.reads_leaves:
                more = self._leaf_partitions(decisions) - view
                if not more:
                    break
                for part in more:
                    self._touch(part)
                view = frozenset(self.dirty)
                decisions = policy.run_cycle(snap, view)
        self.dirty.clear()
        self.all_dirty = False
        return decisions

    def _leaf_partitions(self, decisions: list) -> set[str]:
        """Partitions on the leaf switches of the multi-node jobs these decisions start or
        preempt."""
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
                leaves.update(self.leaf[self.node_index[n]] for n in nodes
                              if n in self.node_index)
        return {p for leaf in leaves for p in self.parts_on_leaf.get(leaf, ())}

    def _cycle(self, now: float) -> None:
        self.cycles += 1
        snap = self.snapshot(now)
        decisions = self._decide(snap, now)
        changed_nodes: set[int] = set()
        multi_leaves: set = set()
        started: list[SimJob] = []
        for d in decisions:
            if isinstance(d, Preempt):
                j = self.by_id.get(d.job_id)
                if j is None or j.state != "running":
                    raise SimulationError(f"policy preempted job {d.job_id}, not running")
                nodes = self._stop(j, now)
                changed_nodes.update(nodes)
                if len(nodes) > 1:
                    multi_leaves.update(self.leaf[n] for n in nodes)
                j.state = "pending"
                j.queue_since_s = now
                j.last_run_s = now - (now if j.stint_start_s is None else j.stint_start_s)
                j.preemptions += 1
                j.extra_work_s += self.restart_delay_s
                self._touch(j.partition)   # it may fit in what is left; below, ranks moved
                self.pending[j.job_id] = j
                self.preemption_count += 1
            elif isinstance(d, Place):
                if not d.start_now:
                    self.reservation_count += 1
                    continue
                j = self.by_id.get(d.job_id)
                if j is None:
                    raise SimulationError(f"policy placed unknown job {d.job_id}")
                nodes = self._start(j, d, now)
                if nodes is None:
                    self.refused_count += 1
                    self._touch(j.partition)   # tried again at the next cycle
                    continue
                changed_nodes.update(nodes)
                if len(nodes) > 1:
                    multi_leaves.update(self.leaf[n] for n in nodes)
                started.append(j)
                # running now, it ranks among the running jobs: a job ranked above it that
                # waits may preempt it at the next cycle
                self._touch(j.partition)
        if changed_nodes or started:
            self._update_speeds(changed_nodes, started, multi_leaves, now)
        if self.time_dependent and self.pending:
            # Only running jobs and jobs that ran before change queue by themselves.
            candidates = [domain_job(j, now, self.nodes) for j in self.running.values()]
            candidates.extend(domain_job(j, now, self.nodes) for j in self.pending.values()
                              if j.last_run_s > 0)
            wake = self.policy.next_change_s(candidates, now)
            # A little past the change: at the change itself a job's service, summed in
            # floating point, may fall short of its threshold by a rounding error, and the
            # demotion would wait for whatever event came next (which a partition decided
            # apart may not even see).
            wake = None if wake is None else wake + _EPS
            if wake is not None and (self.next_wake is None or wake < self.next_wake - _EPS):
                self.next_wake = wake
                self._push(wake, WAKE)


def _partition_groups(nodes: list[Node]) -> tuple[dict[str, frozenset[str]],
                                                  dict[object, frozenset[str]]]:
    """(partition -> the partitions sharing nodes with it, transitively, itself included;
    leaf switch -> the partitions with nodes under it)."""
    parent: dict[str, str] = {}

    def root(p: str) -> str:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    on_leaf: dict[object, set[str]] = {}
    for node in nodes:
        parts = list(node.partitions)
        for p in parts:
            parent.setdefault(p, p)
        for p in parts[1:]:
            parent[root(p)] = root(parts[0])
        on_leaf.setdefault(node.leaf_switch, set()).update(parts)
    members: dict[str, set[str]] = {}
    for p in parent:
        members.setdefault(root(p), set()).add(p)
    group_of = {p: frozenset(members[root(p)]) for p in parent}
    return group_of, {leaf: frozenset(ps) for leaf, ps in on_leaf.items()}
