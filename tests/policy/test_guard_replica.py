"""The guard's replica shadow (``policy/replica.py``): a replica of the cluster scheduled by
``fifo-backfill`` in lockstep with what is observed. Watching a ``fifo-backfill`` run, it
starts every job when that run did; runs are ended when they are known to have ended, a job
that has not run in reality after the mean run length seen."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node, Partition
from slurm_marl.policy.framework import _slurm_alone_cycle, build_policy
from slurm_marl.policy.guard import GuardSettings
from slurm_marl.policy.profile import load_profile
from slurm_marl.policy.replica import ReplicaShadow
from slurm_marl.sim.cluster import parse_cluster
from slurm_marl.sim.engine import Simulator
from slurm_marl.sim.traces import TraceJob


class Watched(ReplicaShadow):
    """A replica that keeps every start it made (the shadow forgets ended jobs)."""

    def __init__(self, settings: GuardSettings) -> None:
        super().__init__(settings, _slurm_alone_cycle())
        self.made: dict[int, float] = {}

    def _start(self, job, place, t):
        super()._start(job, place, t)
        self.made[job.job_id] = t


class Watching:
    """``fifo-backfill`` as the simulator runs it, with a replica observing each cycle's
    snapshot first (as the guard's shadow observes the agent's cycles)."""

    watches_ends = True     # the simulator shows it each end, as it shows a guard

    def __init__(self, shadow: ReplicaShadow) -> None:
        self._policy = build_policy(load_profile("fifo-backfill"))
        self.shadow = shadow

    def run_cycle(self, snap, partitions=None):
        self.shadow.see_cluster(snap)
        self.shadow.observe(snap.jobs, snap.time_s)
        return self._policy.run_cycle(snap, partitions)

    def __getattr__(self, name):
        return getattr(self._policy, name)


def _trace(rng: random.Random, partitions: tuple[str, ...]) -> list[TraceJob]:
    t, jobs = 0.0, []
    for i in range(rng.randint(15, 45)):
        t += rng.expovariate(1 / 120)
        gpus = rng.choice([1, 1, 2, 3, 4, 8])
        jobs.append(TraceJob(i, t, rng.choice([60, 300, 1800, 7200]) * rng.random() + 30,
                             gpus, partition=rng.choice(partitions)))
    return jobs


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), step_s=st.sampled_from([0.0, 60.0]), two=st.booleans())
def test_watching_fifo_backfill_the_replica_starts_every_job_when_it_did(seed, step_s, two):
    """Reality is ``fifo-backfill`` itself (one partition, or two of different shapes):
    every job the run started, the replica started at the same time, whether it moves at
    each observation or once a step (events are taken at their own times); with the true
    lengths a replica's starts would be ``fifo-backfill``'s, here it learns each length
    when the run ends, no later than the replica needs it."""
    spec, parts = (("2x2x4:name=a+3x2x2:name=b", ("a", "b")) if two
                   else ("2x2x4", ("gpu",)))
    shadow = Watched(GuardSettings(step_s=step_s))
    policy = Watching(shadow)
    run = Simulator(parse_cluster(spec), _trace(random.Random(seed), parts), policy,
                    seed=1).run()
    # (the replica moves once a step: a job started after its last move is not made yet)
    started = {j.job_id: j.first_start_s for j in run.jobs
               if j.first_start_s is not None and j.first_start_s <= shadow.clock}
    assert started and shadow.cycles > 0
    made = {j: t for j, t in shadow.made.items() if j in started}
    # a known end is the start plus the run time seen: equal up to rounding
    assert made == pytest.approx(started, abs=1e-6)


NODE = Node(name="n1", partitions=("p",), cpus=8, real_memory_mib=16000,
            gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
VIEW = ClusterSnapshot(0.0, (NODE,), (), (Partition("p", ("n1",)),))


def _job(jid, submit, gpus=4, running=False, attained=0.0):
    return Job(jid, partition="p", gpus_per_node=gpus, submit_time_s=submit,
               state=JobState.RUNNING if running else JobState.PENDING,
               attained_gpu_s=attained, start_time_s=submit if running else None)


def _replica() -> ReplicaShadow:
    shadow = ReplicaShadow(GuardSettings(step_s=0.0), _slurm_alone_cycle())
    shadow.see_cluster(VIEW)
    # one run of 100 s seen first: the mean run length is 100 s
    shadow.observe([_job(9, 0.0, 1, running=True)], 0.0)
    shadow.observe([], 100.0)
    return shadow


def test_a_job_that_never_ran_frees_its_replica_gpus_after_the_mean_run():
    """Job 1 (all 4 GPUs) starts in the replica at 200 and never runs in reality: after
    the mean run (100 s) its replica run ends and job 2 starts there at 300."""
    shadow = _replica()
    shadow.observe([_job(1, 200.0)], 200.0)
    assert shadow.starts == {1: 200.0}
    shadow.observe([_job(1, 200.0), _job(2, 201.0)], 250.0)
    assert 2 not in shadow.starts
    shadow.observe([_job(1, 200.0), _job(2, 201.0)], 350.0)
    assert shadow.starts[2] == 300.0


def test_a_job_running_in_reality_holds_its_replica_gpus_until_it_ends():
    """The same, but job 1 runs in reality: its length is unknown until it ends (at 1,000,
    after 800 s), so job 2 waits in the replica until 200 + 800."""
    shadow = _replica()
    shadow.observe([_job(1, 200.0)], 200.0)
    shadow.observe([_job(1, 200.0, running=True, attained=4 * 50.0), _job(2, 201.0)], 250.0)
    shadow.observe([_job(1, 200.0, running=True, attained=4 * 700.0), _job(2, 201.0)], 900.0)
    assert 2 not in shadow.starts
    shadow.observe([_job(2, 201.0)], 1000.0)
    assert shadow.starts[2] == 200.0 + 800.0
    # job 1 ended in reality and in the replica: forgotten
    assert 1 not in shadow.seen and 1 not in shadow.running


def test_without_any_run_seen_a_job_that_never_ran_holds_its_gpus():
    shadow = ReplicaShadow(GuardSettings(step_s=0.0), _slurm_alone_cycle())
    shadow.see_cluster(VIEW)
    shadow.observe([_job(1, 0.0)], 0.0)
    shadow.observe([_job(1, 0.0), _job(2, 1.0)], 10_000.0)
    assert shadow.starts == {1: 0.0}


def test_without_nodes_the_replica_starts_nothing_and_ticks_bound_its_cycles():
    shadow = ReplicaShadow(GuardSettings(step_s=0.0), _slurm_alone_cycle())
    shadow.observe([_job(1, 0.0, 1)], 0.0)
    assert shadow.starts == {} and shadow.cycles == 0
    # begun at 0, 1-GPU arrivals at 1, 2, ..., 9 s on 4 GPUs: with tick_s 5 the replica
    # decides at 5 (jobs 1-5 arrived: 1-4 start) and at 10 (6-9 arrived, no GPU free) only
    ticked = ReplicaShadow(GuardSettings(step_s=0.0, tick_s=5.0), _slurm_alone_cycle())
    ticked.see_cluster(VIEW)
    ticked.observe([], 0.0)
    ticked.observe([_job(i, float(i), 1) for i in range(1, 10)], 10.0)
    assert ticked.cycles == 2
    assert ticked.starts == {1: 5.0, 2: 5.0, 3: 5.0, 4: 5.0}


class WatchingOther(Watching):
    """Another policy's run (the agent's), with the replica observing each cycle first."""

    def __init__(self, shadow: ReplicaShadow, profile: str) -> None:
        super().__init__(shadow)
        self._policy = build_policy(load_profile(profile))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), two=st.booleans(),
       profile=st.sampled_from(["las-consolidate", "fifo-consolidate"]))
def test_revising_its_past_the_replica_ends_with_fifo_backfills_starts(seed, two, profile):
    """Reality is another policy, which starts jobs earlier or later than ``fifo-backfill``
    (and, under 2D-LAS, preempts them): the replica learns each length when reality ends
    the run, after its own run should have ended. Revising its past (``rewind_s``), its
    starts once every length is known are those of a ``fifo-backfill`` run of the same
    trace: the replica's error is then only what is not known yet."""
    spec, parts = (("2x2x4:name=a+3x2x2:name=b", ("a", "b")) if two
                   else ("2x2x4", ("gpu",)))
    trace = _trace(random.Random(seed), parts)
    # a last job long after every other has ended: the run observes them all gone
    last = TraceJob(len(trace), trace[-1].submit_time_s + 10**7, 60.0, 1, partition=parts[0])
    shadow = Watched(GuardSettings(step_s=0.0, rewind_s=10**9))
    # (no restart delay: a preempted run takes no longer than its length)
    Simulator(parse_cluster(spec), [*trace, last], WatchingOther(shadow, profile),
              seed=1, restart_delay_s=0.0).run()
    fifo = Simulator(parse_cluster(spec), [*trace, last],
                     build_policy(load_profile("fifo-backfill")), seed=1).run()
    started = {j.job_id: j.first_start_s for j in fifo.jobs if j.job_id != last.job_id}
    made = {j: t for j, t in shadow.made.items() if j != last.job_id}
    assert made == pytest.approx(started, abs=1e-6)


def _late_run(rewind_s: float, third: bool = True) -> ReplicaShadow:
    """A run of 1,000 s seen first (the mean run: 1,000 s). Job 1 (all 4 GPUs) arrives at
    1,100 and starts in the replica then; the agent starts it at 1,400 and it runs 300 s
    (seen gone at 1,700). Job 2 (4 GPUs) waits behind it from 1,101; job 3 (4 GPUs)
    arrives at 1,500."""
    shadow = ReplicaShadow(GuardSettings(step_s=0.0, rewind_s=rewind_s), _slurm_alone_cycle())
    shadow.see_cluster(VIEW)
    shadow.observe([_job(9, 0.0, 1, running=True)], 0.0)
    shadow.observe([], 1000.0)
    shadow.observe([_job(1, 1100.0)], 1100.0)
    shadow.observe([_job(1, 1100.0), _job(2, 1101.0)], 1200.0)
    shadow.observe([_job(1, 1100.0, running=True, attained=4 * 100.0), _job(2, 1101.0)], 1500.0)
    shadow.observe([_job(1, 1100.0, running=True, attained=4 * 200.0), _job(2, 1101.0),
                    _job(3, 1500.0)], 1600.0)
    shadow.observe([_job(2, 1101.0), _job(3, 1500.0)], 1700.0)
    return shadow


def test_without_rewind_a_run_started_late_in_reality_holds_the_replica_too_long():
    """Job 1's replica run should have ended at 1,100 + 300. Without ``rewind_s`` it ends
    when its length is known, at the earliest time the replica can still act (1,600, the
    last it moved to), and job 2 starts then; revising its past, the replica starts job 2
    at 1,400 (and job 3 waits behind it: job 2's length is not known)."""
    held = _late_run(0.0)
    assert held.starts[2] == 1600.0 and held.rewinds == 0
    revised = _late_run(3600.0)
    assert revised.starts[2] == 1400.0 and revised.rewinds == 1
    assert 3 not in revised.starts and revised.clock == 1700.0
    # what it did is logged no further back than rewind_s, and ended jobs it can no
    # longer revise are forgotten
    assert all(d.t >= 1700.0 - 3600.0 for d in revised._log)


def test_the_undo_log_keeps_rewind_s_and_a_change_older_is_applied_at_its_oldest():
    """The same with a log of 100 s: at 1,700 (the replica at 1,600) the log goes back to
    1,500, so job 2 starts at 1,500 (not 1,400, not 1,600), and after the replica moved to
    1,700 nothing older than 1,600 stays in the log."""
    shadow = _late_run(100.0)
    assert shadow.starts[2] == 1500.0 and shadow.rewinds == 1
    assert all(d.t >= 1600.0 for d in shadow._log)
    assert 1 not in shadow.seen      # ended, its end out of the log: forgotten


def test_the_replica_begins_with_the_cluster_as_it_is():
    """First view at 5,000: job 1 has run on GPUs 0-1 since 1,000, job 2 (2 GPUs) waits
    since 0 and job 3 (4 GPUs) since 10. The replica does not replay history (it would
    start jobs 2 and 3 at 0 and 10 on GPUs Slurm had busy then): job 1 runs there on its
    own GPUs from its real start, job 2 starts at 5,000 beside it, job 3 waits for job 1;
    job 1's end (at 6,000, after 5,000 s) is its replica end too: no revision."""
    shadow = ReplicaShadow(GuardSettings(step_s=0.0, rewind_s=86_400.0),
                           _slurm_alone_cycle())
    shadow.see_cluster(VIEW)
    one = Job(1, partition="p", gpus_per_node=2, submit_time_s=900.0,
              state=JobState.RUNNING, start_time_s=1000.0, attained_gpu_s=2 * 4000.0,
              nodes=("n1",), gpu_alloc=(("n1", (0, 1)),))
    shadow.observe([one, _job(2, 0.0, 2), _job(3, 10.0)], 5000.0)
    assert shadow.starts == {1: 1000.0, 2: 5000.0}
    assert shadow.running[1].holds == (("n1", (0, 1), one.cpus, one.mem_mib),)
    assert shadow.cycles == 1 and shadow.clock == 5000.0
    shadow.observe([_job(2, 0.0, 2), _job(3, 10.0)], 6000.0)
    assert shadow.rewinds == 0 and 3 not in shadow.starts
    # job 2 never runs in reality: its replica run ends after the mean run seen (job 1's
    # 5,000 s), and job 3 starts then; the log reaches back no further than the beginning
    shadow.observe([_job(2, 0.0, 2), _job(3, 10.0)], 11_000.0)
    assert shadow.starts[3] == 10_000.0 and min(d.t for d in shadow._log) >= 5000.0


def test_a_job_running_on_nodes_the_replica_lacks_waits_in_its_queue():
    """A running job whose nodes the view does not have (it says none) enters the
    replica's queue at its first view, as a waiting one does."""
    shadow = ReplicaShadow(GuardSettings(step_s=0.0), _slurm_alone_cycle())
    shadow.see_cluster(VIEW)
    shadow.observe([_job(1, 0.0, 4, running=True, attained=4 * 100.0)], 100.0)
    assert shadow.starts == {1: 100.0}


def test_a_revision_never_reaches_back_before_the_replica_began():
    """Job 1, running at the first view (5,000) since 1,000, has run 1,000 s of that (it
    was suspended): seen gone at 6,000 after 2,000 s of run, its replica run should have
    ended at 3,000, before the replica began. The replica revises back to its beginning,
    not further: nothing is placed before 5,000."""
    shadow = Watched(GuardSettings(step_s=0.0, rewind_s=86_400.0))
    shadow.see_cluster(VIEW)
    one = Job(1, partition="p", gpus_per_node=4, submit_time_s=900.0,
              state=JobState.RUNNING, start_time_s=1000.0, attained_gpu_s=4 * 1000.0,
              nodes=("n1",), gpu_alloc=(("n1", (0, 1, 2, 3)),))
    shadow.observe([one, _job(2, 0.0, 2)], 5000.0)
    assert 2 not in shadow.starts
    shadow.observe([_job(2, 0.0, 2)], 6000.0)
    assert shadow.rewinds == 1 and shadow.starts[2] == 5000.0
    assert min(shadow.made.values()) == 5000.0


def test_a_running_job_gone_before_the_replica_has_nodes_is_not_lost():
    """Seen running before any view's nodes, and gone before them: when the nodes come the
    replica begins with it ended (its GPUs free), without losing track of it."""
    shadow = ReplicaShadow(GuardSettings(step_s=0.0), _slurm_alone_cycle())
    one = Job(1, partition="p", gpus_per_node=4, submit_time_s=0.0, state=JobState.RUNNING,
              start_time_s=0.0, attained_gpu_s=4 * 50.0, nodes=("n1",))
    shadow.observe([one], 50.0)
    shadow.observe([], 100.0)
    shadow.see_cluster(VIEW)
    shadow.observe([_job(2, 150.0)], 150.0)
    assert shadow.starts.get(2) == 150.0 and not shadow.running.keys() - {2}
