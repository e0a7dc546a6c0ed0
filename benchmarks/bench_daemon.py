"""Benchmark: one agent cycle on a large generated snapshot, and the agent's memory.

    .venv/bin/python benchmarks/bench_daemon.py [--nodes 2000] [--pending 1000] [--cycles 5]
        [--profile P] [--learned-agents] [--varied-hosts] [--no-reuse] [--fresh-jobs]
        [--max-agent-jobs N] [--past-depth what_if|fallback] [--probe-standing]
        [--clock-step-s S] [--cycle-s S]
        [--busy-fraction F] [--saturated] [--cprofile FILE]
        [--churn N [--step-s 60] [--closed-loop]] [--guard [--paired]] [--against P]

The snapshot (2,000 nodes x 8 GPUs in 2 groups, 40 nodes per leaf, half the GPUs busy,
1,000 pending jobs of 1-16 GPUs) comes from topology.synthetic; the cycle is the daemon's
own ``Agent.cycle`` (accounting, store, run_cycle per partition, translation) in shadow mode,
so every step but the scontrol writes runs. Torch threads = 1.

With ``--learned-agents`` (for a profile with the ``learned`` plugin) the plugin gets an
untrained checkpoint with one agent per generated partition, so every job is decided by a
GNN agent (cost does not depend on the weights); without it the shipped demo checkpoint is
used, whose partition has no counterpart here, so every job goes to the fallback heuristic.

With ``--varied-hosts`` each node's hosts use a random (seeded) extra 0-16 CPUs and 0-100,000
MiB of memory beyond their GPU jobs', as on a real cluster, so nodes alike in GPUs differ in
free CPUs and memory (issue 17: this made almost every node its own class of alike nodes).

Without ``--churn`` the snapshot stays the same and only the clock moves: with the wall
clock, or with ``--cycle-s S`` by S seconds a cycle from a whole minute (the daemon's
``interval_s`` is 5), so a clock read in steps (``--clock-step-s``, the learned plugin's
``clock_step_s``) moves as often in every run.

With ``--churn N`` the cluster moves as a busy one does: the clock advances ``--step-s``
(60: a guard step) per cycle, N running jobs end (their GPUs freed) and N new jobs arrive;
running jobs started at random in the last day, submitted up to an hour before. Every cycle
then has ends and arrivals, and each is a guard step boundary (``[guard]``'s shadow moves).
The agent's decisions are not carried out (shadow mode): reality never leaves the order the
guard's replica begins with, so it never revises its past. ``--closed-loop`` carries them
out (``LoopSource``; the agent may preempt in every partition): starts, preemptions, runs
ending after hidden lengths; the replica
then revises its past as on a live cluster. ``--guard``: the daemon's default guard
(``agent.guard``) in front of the profile.

With ``--guard`` the result has the guard's own work (its shadow's ``observe``: the replica
and what it saw) per cycle and as a share of the cycles. With ``--paired`` a second agent,
the same profile without the guard, decides every snapshot the guarded one sees, the two in
alternating order (module-level node memos favour whichever runs second); its decisions are
never carried out. The per-cycle ratio is then the guard's cost on the same inputs. In the
closed loop those inputs are the guarded trajectory, on which the unguarded agent would
preempt the jobs the guard protects.

``--against P`` pairs the same way with an agent of another profile (built as the first,
with the same context, without this run's learned-plugin overrides; guarded too with
``--guard``): two profiles' cycles measured side by side on the same snapshots, a cycle
apart in time, which on a shared machine whose speed drifts from minute to minute is a
steadier ratio than two runs one after the other. With ``--no-reuse`` every cycle is
decided afresh, so the later cycles measure what a changed cluster's cycle costs. The first
cycle's ratio favours whichever agent decides second (it finds memos the first filled):
this run's profile decides first unless ``--other-first``; a run each way bounds the
first cycle's true ratio from both sides.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil
import torch

from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, Job, JobState, Place, Preempt
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile, with_default_guard
from slurm_marl.topology.synthetic import synthetic_snapshot


def pending_jobs(n: int, partitions: list[str], now: float, seed: int = 1) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        gpus = rng.choice([1, 1, 1, 1, 2, 2, 4, 8, 16])
        nodes = max(1, gpus // 8)
        jobs.append(Job(job_id=1_000_000 + i, name=f"job{i}", user=f"u{i % 50}",
                        partition=rng.choice(partitions), state=JobState.PENDING,
                        gpus_per_node=gpus // nodes, node_count=nodes, cpus=4 * nodes,
                        mem_mib=8000 * nodes, submit_time_s=now - rng.uniform(0, 3600),
                        eligible_time_s=now + 10))
    return jobs


def varied_hosts(snap: ClusterSnapshot, seed: int = 7) -> ClusterSnapshot:
    """Each node's hosts use 0-16 more CPUs and 0-100,000 MiB more memory (capped at the
    node's own), seeded."""
    rng = random.Random(seed)
    return replace(snap, nodes=tuple(
        replace(n, alloc_cpus=min(n.cpus, n.alloc_cpus + rng.randint(0, 16)),
                alloc_memory_mib=min(n.real_memory_mib,
                                     n.alloc_memory_mib + rng.randint(0, 100_000)))
        for n in snap.nodes))


def saturated(snap: ClusterSnapshot) -> ClusterSnapshot:
    """Every free GPU taken: one more running job per GPU group with free GPUs (a full
    cluster, where no waiting job can start without a preemption)."""
    jobs = list(snap.jobs)
    nodes = []
    job_id = max((j.job_id for j in jobs), default=0) + 1
    for node in snap.nodes:
        taken = set(node.used_gpu_indices)
        for group in node.gpu_groups:
            free = tuple(g for g in group.gpu_indices if g not in taken)
            if free:
                jobs.append(Job(job_id=job_id, state=JobState.RUNNING, nodes=(node.name,),
                                gpus_per_node=len(free), gpu_alloc=((node.name, free),),
                                partition=node.partitions[0]))
                job_id += 1
                taken.update(free)
        nodes.append(replace(node, used_gpu_indices=frozenset(taken),
                             alloc_cpus=min(node.cpus, 4 * len(taken)),
                             alloc_memory_mib=min(node.real_memory_mib, 16_000 * len(taken))))
    return replace(snap, nodes=tuple(nodes), jobs=tuple(jobs))


class FixedSource:
    """The same snapshot every cycle, the clock moving. With ``fresh_jobs`` its jobs are new
    (equal) objects each cycle, as parsing Slurm's answer gives (the daemon's source keeps
    equal nodes the same objects, not jobs)."""

    def __init__(self, snap: ClusterSnapshot, fresh_jobs: bool = False,
                 cycle_s: float | None = None) -> None:
        self.snap = snap
        self.fresh_jobs = fresh_jobs
        # the clock: the wall clock, or (``cycle_s``) this many seconds more each cycle from
        # the snapshot's time, as the daemon's cycles come (``agent.interval_s``)
        self.cycle_s = cycle_s
        self.cycles = 0

    def snapshot(self) -> ClusterSnapshot:
        now = time.time() if self.cycle_s is None else \
            self.snap.time_s + self.cycle_s * self.cycles
        self.cycles += 1
        if self.fresh_jobs:
            return replace(self.snap, time_s=now,
                           jobs=tuple(j.with_() for j in self.snap.jobs))
        return replace(self.snap, time_s=now)


class ChurnSource:
    """A cluster that moves: each snapshot ``step_s`` later, ``n`` running jobs ended (their
    GPUs, CPUs and memory freed on their nodes) and ``n`` new jobs pending."""

    def __init__(self, snap: ClusterSnapshot, n: int, step_s: float, seed: int = 3) -> None:
        self.rng = random.Random(seed)
        self.now = snap.time_s
        self.n, self.step_s = n, step_s
        self.partitions = [p.name for p in snap.partitions]
        self.nodes = {node.name: node for node in snap.nodes}
        self.jobs: dict[int, Job] = {}
        for j in snap.jobs:
            if j.is_running:
                age = self.rng.uniform(0, 86_400)
                j = j.with_(start_time_s=self.now - age, attained_gpu_s=age * j.num_gpus,
                            submit_time_s=self.now - age - self.rng.uniform(0, 3600))
            self.jobs[j.job_id] = j
        self.snap = snap
        self.arrived = 0

    def snapshot(self) -> ClusterSnapshot:
        self.now += self.step_s
        self._end_runs()
        for j in pending_jobs(self.n, self.partitions, self.now, seed=100 + self.arrived):
            j = j.with_(job_id=2_000_000 + self.arrived,
                        submit_time_s=self.now - self.rng.uniform(0, self.step_s))
            self.jobs[j.job_id] = j
            self._arrived(j)
            self.arrived += 1
        return replace(self.snap, time_s=self.now, nodes=tuple(self.nodes.values()),
                       jobs=tuple(self.jobs.values()))

    def _end_runs(self) -> None:
        """``n`` running jobs, drawn at random, end."""
        running = [j for j in self.jobs.values() if j.is_running]
        for j in self.rng.sample(running, min(self.n, len(running))):
            del self.jobs[j.job_id]
            self._free(j)

    def _arrived(self, job: Job) -> None:
        """A new job has arrived (a subclass that gives jobs more takes it here)."""

    def _free(self, j: Job) -> None:
        """The GPUs, CPUs and memory ``j`` holds, freed on its nodes."""
        for name, gpus in j.gpu_alloc:
            node = self.nodes[name]
            self.nodes[name] = replace(
                node, used_gpu_indices=node.used_gpu_indices - frozenset(gpus),
                alloc_cpus=max(0, node.alloc_cpus - 4 * len(gpus)),
                alloc_memory_mib=max(0, node.alloc_memory_mib - 16_000 * len(gpus)))


class LoopSource(ChurnSource):
    """A churning cluster that carries out the agent's decisions (``--closed-loop``): each
    job has a hidden run length (log-normal, median 15 min, up to 2 days; a job running at
    the start has that much left); a cycle's starts take the GPUs its placements name and a
    preemption puts the job back to waiting with what it has run; a run ends when its length
    has run. So reality moves away from Slurm alone's order as the agent's policy does, and
    the guard's replica revises its past as it would on a live cluster."""

    def __init__(self, snap: ClusterSnapshot, n: int, step_s: float, seed: int = 3) -> None:
        super().__init__(snap, n, step_s, seed)
        self.left = {j.job_id: self._length() for j in self.jobs.values()}

    def _length(self) -> float:
        return min(2 * 86_400.0, self.rng.lognormvariate(math.log(900.0), 1.5))

    def _end_runs(self) -> None:
        """Each running job runs a step more; those whose length has run end."""
        for j in [j for j in self.jobs.values() if j.is_running]:
            ran = min(self.step_s, self.left[j.job_id])
            self.left[j.job_id] -= ran
            if self.left[j.job_id] <= 0:
                self._free(j)
                del self.jobs[j.job_id], self.left[j.job_id]
            else:
                self.jobs[j.job_id] = j.with_(attained_gpu_s=j.attained_gpu_s
                                              + ran * j.num_gpus)

    def _arrived(self, job: Job) -> None:
        self.left[job.job_id] = self._length()

    def apply(self, decisions) -> tuple[int, int]:
        """The cycle's preemptions, then its starts (a placement on GPUs taken meanwhile is
        not carried out); how many of each."""
        preempted = started = 0
        for d in decisions:
            j = self.jobs.get(d.job_id)
            if isinstance(d, Preempt) and j is not None and j.is_running:
                self._free(j)
                self.jobs[j.job_id] = j.with_(state=JobState.PENDING, nodes=(), gpu_alloc=(),
                                              start_time_s=None)
                preempted += 1
        for d in decisions:
            j = self.jobs.get(d.job_id)
            if not (isinstance(d, Place) and d.start_now and j is not None and j.is_pending):
                continue
            taken: dict[str, list[int]] = {}
            for a in d.allocs:
                node = self.nodes[a.node]
                group = next(g for g in node.gpu_groups if g.index == a.group)
                free = [i for i in group.gpu_indices if i not in node.used_gpu_indices
                        and i not in taken.get(a.node, ())]
                if len(free) < a.gpus:
                    break
                taken.setdefault(a.node, []).extend(free[:a.gpus])
            else:
                for name, gpus in taken.items():
                    node = self.nodes[name]
                    self.nodes[name] = replace(
                        node, used_gpu_indices=node.used_gpu_indices | frozenset(gpus),
                        alloc_cpus=min(node.cpus, node.alloc_cpus + 4 * len(gpus)),
                        alloc_memory_mib=min(node.real_memory_mib,
                                             node.alloc_memory_mib + 16_000 * len(gpus)))
                self.jobs[j.job_id] = j.with_(
                    state=JobState.RUNNING, start_time_s=self.now, nodes=tuple(taken),
                    gpu_alloc=tuple((n, tuple(g)) for n, g in taken.items()))
                started += 1
        return preempted, started


def _timed_cycle(agent) -> float:
    t0 = time.perf_counter()
    report = agent.cycle()
    assert report.error is None, report.error
    return time.perf_counter() - t0


class Seen:
    """A source whose snapshot moves on only when told (``advance``), so two agents see
    the same one (``--paired``)."""

    def __init__(self, source) -> None:
        self.source = source
        self.last: ClusterSnapshot | None = None

    def advance(self) -> None:
        self.last = self.source.snapshot()

    def snapshot(self) -> ClusterSnapshot:
        return self.last

    def __getattr__(self, name):
        return getattr(self.source, name)


class Again:
    """The snapshot a ``Seen`` source gave last, again (the paired agent's source)."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def snapshot(self) -> ClusterSnapshot:
        return self.seen.snapshot()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--profile", default="las-consolidate")
    ap.add_argument("--learned-agents", action="store_true",
                    help="an untrained checkpoint with an agent per partition")
    ap.add_argument("--varied-hosts", action="store_true",
                    help="random (seeded) extra CPU and memory use on each node")
    ap.add_argument("--no-reuse", action="store_true",
                    help="decide every cycle from scratch (agent.reuse_decisions = false)")
    ap.add_argument("--max-agent-jobs", type=int, default=None,
                    help="the learned plugin's max_agent_jobs (per agent and cycle)")
    ap.add_argument("--past-depth", choices=("what_if", "fallback"), default=None,
                    help="the learned plugin's past_depth (who places the jobs past it)")
    ap.add_argument("--probe-standing", action="store_true",
                    help="a probe, not product behaviour: the learned plugin's placements "
                         "stand while only the clock moves (its reuse horizon forced to "
                         "inf), to measure what that proposal would cost")
    ap.add_argument("--clock-step-s", type=float, default=None,
                    help="the learned plugin's clock_step_s (the agents' clock, in steps)")
    ap.add_argument("--order-window", type=int, default=None, metavar="K",
                    help="with --learned-agents: the agents also pick which job of a queue "
                    "starts next among K (an order head with fixed weights)")
    ap.add_argument("--cycle-s", type=float, default=None,
                    help="without --churn: the clock moves this much a cycle (the daemon's "
                         "interval_s) instead of with the wall clock")
    ap.add_argument("--fresh-jobs", action="store_true",
                    help="new (equal) job objects every cycle, as the daemon's source gives")
    ap.add_argument("--busy-fraction", type=float, default=0.5,
                    help="share of the GPU groups running jobs use (each some of its GPUs)")
    ap.add_argument("--saturated", action="store_true",
                    help="then every free GPU taken by one more running job (a full cluster)")
    ap.add_argument("--cprofile", metavar="FILE", default=None,
                    help="write a cProfile of the cycles after the first to FILE (pstats)")
    ap.add_argument("--cprofile-first", action="store_true",
                    help="with --cprofile: profile the first cycle alone")
    ap.add_argument("--churn", type=int, default=0, metavar="N",
                    help="each cycle N running jobs end and N new jobs arrive (module doc)")
    ap.add_argument("--step-s", type=float, default=60.0,
                    help="with --churn: the clock's advance per cycle")
    ap.add_argument("--closed-loop", action="store_true",
                    help="with --churn: the agent's starts and preemptions are carried out "
                         "and runs end after hidden lengths (LoopSource)")
    ap.add_argument("--guard", action="store_true",
                    help="the daemon's default Slurm-alone guard in front of the profile "
                         "where it has none (agent.guard)")
    ap.add_argument("--paired", action="store_true",
                    help="with --guard: a second agent without the guard decides every "
                         "snapshot the guarded one sees (its decisions not carried out), "
                         "the two in alternating order; both timed (module doc)")
    ap.add_argument("--against", metavar="P",
                    help="a second agent with profile P decides every snapshot this one "
                         "sees (its decisions not carried out), the two in alternating "
                         "order; both timed (module doc)")
    ap.add_argument("--other-first", action="store_true",
                    help="with --paired or --against: the second agent decides first in the "
                         "first cycle (and in every even one): the first-cycle ratio then "
                         "flatters this run's profile instead of the other (module doc)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.paired and not args.guard:
        ap.error("--paired needs --guard")
    if args.paired and args.against:
        ap.error("--paired and --against are two kinds of pairing: give one")
    if args.probe_standing:
        import slurm_marl.agent.learned as learned
        learned.LearnedPlacement.reuse_horizon = lambda self, state: math.inf
    torch.set_num_threads(1)
    proc = psutil.Process()
    rss_start = proc.memory_info().rss

    base = synthetic_snapshot(args.nodes, busy_fraction=args.busy_fraction, seed=0)
    if args.saturated:
        base = saturated(base)
    if args.varied_hosts:
        base = varied_hosts(base)
    # On a whole minute: the guard's 60 s steps and ticks then fall alike in every run, so
    # two runs of one seed decide alike (from time.time() itself they did not).
    now = math.floor(time.time() / 60.0) * 60.0
    partitions = [p.name for p in base.partitions]
    context = {}
    if args.learned_agents:
        from bench_models import model_parts   # untrained agents, as bench_models uses
        context["learned_checkpoint"] = model_parts(tuple(partitions))
        if args.order_window:
            from slurm_marl.agent.order_head import OrderHead
            context["learned_checkpoint"].order = OrderHead.shared(
                tuple(partitions), [0.1, -0.5, 0.5, 0.0, 0.5, -1.0, 0.5], args.order_window)
    snap = replace(base, time_s=now,
                   jobs=base.jobs + tuple(pending_jobs(args.pending, partitions, now)))
    profile = load_profile(args.profile)
    if args.guard:
        profile = with_default_guard(profile)
    for key, value in (("max_agent_jobs", args.max_agent_jobs),
                       ("past_depth", args.past_depth),
                       ("clock_step_s", args.clock_step_s),
                       ("order_window", args.order_window)):
        if value is not None:
            params = {k: dict(v) for k, v in profile.place_params.items()}
            params.setdefault("learned", {})[key] = value
            profile = replace(profile, place_params=params)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config({"agent": {"shadow": True, "managed_partitions": partitions,
                                      # (closed loop: the agent's preemptions carried out)
                                      "preempt_partitions": partitions if args.closed_loop
                                      else [],
                                      "profile": args.profile, "state_dir": tmp,
                                      "reuse_decisions": not args.no_reuse}})
        if args.closed_loop and not args.churn:
            ap.error("--closed-loop needs --churn N")
        source = ((LoopSource if args.closed_loop else ChurnSource)(
            snap, args.churn, args.step_s) if args.churn
            else FixedSource(snap, args.fresh_jobs, args.cycle_s))
        carried = [0, 0]
        paired = args.paired or bool(args.against)
        if paired:
            source = Seen(source)
            other = load_profile(args.against or args.profile)
            if args.against and args.guard:
                other = with_default_guard(other)
            bare = Agent(cfg, Again(source), sink=None, store=Store(Path(tmp) / "b.sqlite"),
                         policy=build_policy(other, **context))
        agent = Agent(cfg, source, sink=None,
                      store=Store(Path(tmp) / "s.sqlite"),
                      policy=build_policy(profile, **context))
        times, bare_times = [], []
        # the guard's own work each cycle (its shadow's observe: the replica, what it saw)
        guard_s = [0.0]
        shadow_of = getattr(getattr(agent.policy, "_guard", None), "shadow", None)
        if shadow_of is not None:
            observe = shadow_of.observe

            def timed_observe(*a, **k):
                t0 = time.perf_counter()
                try:
                    return observe(*a, **k)
                finally:
                    guard_s[0] += time.perf_counter() - t0
            shadow_of.observe = timed_observe
        guard_times = []
        prof = cProfile.Profile() if args.cprofile else None
        for i in range(args.cycles):
            if prof is not None and i == (0 if args.cprofile_first else 1):
                prof.enable()
            if paired:
                source.advance()
            other_first = paired and (i + args.other_first) % 2
            if other_first:             # (the node memos favour the second)
                bare_times.append(_timed_cycle(bare))
            guard_s[0] = 0.0
            t0 = time.perf_counter()
            report = agent.cycle()
            times.append(time.perf_counter() - t0)
            guard_times.append(guard_s[0])
            assert report.error is None, report.error
            if paired and not other_first:
                bare_times.append(_timed_cycle(bare))
            if prof is not None and args.cprofile_first and i == 0:
                prof.disable()
            if args.closed_loop:
                done = source.apply(report.decisions)
                carried = [carried[0] + done[0], carried[1] + done[1]]
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.cprofile)
        rss = proc.memory_info().rss
        guard = getattr(agent.policy, "_guard", None)
        shadow = guard.shadow if guard is not None else None
    result = {
        "nodes": args.nodes, "gpus": sum(n.gpu_count for n in snap.nodes),
        "running_jobs": len(base.jobs), "pending_jobs": args.pending,
        "busy_fraction": args.busy_fraction, "saturated": args.saturated,
        "profile": args.profile + (" (untrained agents)" if args.learned_agents else ""),
        "max_agent_jobs": args.max_agent_jobs,
        "past_depth": args.past_depth,
        "varied_hosts": args.varied_hosts,
        "decisions_last_cycle": len(report.decisions),
        "reuse_decisions": not args.no_reuse,
        "fresh_jobs": args.fresh_jobs,
        "churn": args.churn, "step_s": args.step_s if args.churn else None,
        "closed_loop": args.closed_loop, "guard_default": args.guard,
        # (closed loop) the agent's preemptions and starts carried out, all cycles
        "carried_preemptions_starts": carried,
        "guard_protected_last_cycle": report.protected,
        "reused_partition_cycles": agent.policy.reused_cycles,
        "clock_step_s": args.clock_step_s, "cycle_s": args.cycle_s,
        "first_cycle_s": times[0], "median_cycle_s": statistics.median(times[1:] or times),
        # (a cycle decided afresh now and then, reused between: the mean shows what it costs)
        "mean_cycle_s": statistics.fmean(times[1:] or times),
        # the cycles after the first: their spread (the shared VM's noise shows here)
        "later_cycles_min_max_s": [min(times[1:] or times), max(times[1:] or times)],
        # the guard's replica shadow (policy/replica.py): its cycles and revisions, all cycles
        "guard_replica_cycles": getattr(shadow, "cycles", None),
        "guard_replica_rewinds": getattr(shadow, "rewinds", None),
        # the guard's own work (its shadow's observe) in the cycles after the first
        "guard_median_s": statistics.median(guard_times[1:] or guard_times)
        if shadow is not None else None,
        "guard_share_of_cycles": sum(guard_times[1:]) / max(1e-9, sum(times[1:]))
        if shadow is not None else None,
        "rss_mib": rss / 2**20, "rss_growth_mib": (rss - rss_start) / 2**20,
    }
    if paired:
        ratios = [g / b for g, b in zip(times[1:], bare_times[1:]) if b > 0]
        result.update({
            # the other agent: --against's profile, or this one without the guard
            "paired_profile": args.against or f"{args.profile} without the guard",
            "paired_decides_first": bool(args.other_first),   # in the first cycle
            "paired_first_cycle_s": bare_times[0],
            "paired_median_cycle_s": statistics.median(bare_times[1:] or bare_times),
            # this run's first cycle over the other's (each the first of its agent)
            "paired_first_ratio": times[0] / bare_times[0] if bare_times[0] > 0 else None,
            # per later cycle, this agent over the other on the same snapshot
            "paired_median_ratio": statistics.median(ratios) if ratios else None,
            "paired_total_ratio": sum(times[1:]) / max(1e-9, sum(bare_times[1:]))})
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v:.3f}" if isinstance(v, float) else f"{k:>22}: {v}")


if __name__ == "__main__":
    main()
