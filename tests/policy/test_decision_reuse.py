"""Reusing a cycle's preemptions and placements while their inputs are unchanged
(``Policy.reuse_decisions``, issue 17) decides exactly what deciding from scratch decides:
over random traces, on the snapshot sequences the simulator hands the policy, with quiet
cycles in between (the clock moves, running jobs attain service, nothing else changes).
The quiet cycles are where reuse happens; a test that never reused would prove nothing."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_marl.domain import ClusterSnapshot
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.sim.cluster import parse_cluster
from slurm_marl.sim.engine import Simulator
from slurm_marl.sim.predictions import FixedPredictor
from slurm_marl.sim.traces import TraceJob

MODELS = ("resnet50_bs64", "vgg19_bs32", "lm_bs20", "transformer_bs32", None)
PROFILES = ("las-consolidate", "fifo-backfill", "las-lif", "las-binpack", "las-spread",
            "gittins-consolidate", "predicted-las", "srtf-consolidate")


class Recorder:
    """The policy the simulator runs, keeping every snapshot it was handed (whole: every
    partition decided at every cycle)."""

    decides_partitions_apart = False

    def __init__(self, policy) -> None:
        self._policy = policy
        self.snapshots: list[ClusterSnapshot] = []

    def run_cycle(self, snap):
        self.snapshots.append(snap)
        return self._policy.run_cycle(snap)

    def __getattr__(self, name):
        return getattr(self._policy, name)


def _trace(rng: random.Random) -> list[TraceJob]:
    t, jobs = 0.0, []
    for i in range(rng.randint(15, 45)):
        t += rng.expovariate(1 / 120)
        gpus = rng.choice([1, 1, 2, 4, 8, 16])
        jobs.append(TraceJob(i, t, rng.choice([60, 300, 1800, 7200, 30_000]) * rng.random()
                             + 30, gpus, rng.choice(MODELS)))
    return jobs


def _quiet(snap: ClusterSnapshot, dt: float) -> ClusterSnapshot:
    """The same cluster ``dt`` later: running jobs attained more service, nothing else."""
    return replace(snap, time_s=snap.time_s + dt, jobs=tuple(
        j.with_(attained_gpu_s=j.attained_gpu_s + j.num_gpus * dt) if j.is_running else j
        for j in snap.jobs))


def _unread_changed(snap: ClusterSnapshot, rng: random.Random) -> ClusterSnapshot:
    """Fields placement does not read (framework.NOT_READ_BY_PLACEMENT) changed at random:
    decisions from scratch must not change, so reuse is right to ignore them."""
    return replace(snap, jobs=tuple(
        j.with_(priority=rng.randrange(10**6), pending_reason=rng.choice(["Priority",
                                                                           "Resources"]),
                comment=f"c{rng.randrange(9)}", admin_comment=f"a{rng.randrange(9)}",
                eligible_time_s=snap.time_s + rng.uniform(0, 60))
        if rng.random() < 0.5 else j for j in snap.jobs))


def _read_changed(snap: ClusterSnapshot, rng: random.Random) -> ClusterSnapshot:
    """One thing placement reads changed: a pending job's request, a running job's GPUs, or
    a node's state (reuse must notice it)."""
    pending = [j for j in snap.jobs if j.is_pending]
    running = [j for j in snap.jobs if j.is_running and j.gpu_alloc]
    what = rng.choice(["request", "exclude", "alloc", "drain"])
    if what in ("request", "exclude") and pending:
        job = rng.choice(pending)
        new = (job.with_(gpus_per_node=max(1, job.gpus_per_node // 2), gpus_per_job=0)
               if what == "request" else
               job.with_(excluded_nodes=(rng.choice(snap.nodes).name,)))
        return replace(snap, jobs=tuple(new if j is job else j for j in snap.jobs))
    if what == "alloc" and running:
        job = rng.choice(running)
        node, gpus = job.gpu_alloc[0]
        moved = ((node, tuple(reversed(gpus))[:1]),) + job.gpu_alloc[1:]
        return replace(snap, jobs=tuple(job.with_(gpu_alloc=moved) if j is job else j
                                        for j in snap.jobs))
    node = rng.choice(snap.nodes)
    return replace(snap, nodes=tuple(replace(n, state="DRAIN") if n is node else n
                                     for n in snap.nodes))


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_reused_decisions_are_the_decisions(profile, rng):
    prof = load_profile(profile)
    cluster = parse_cluster(rng.choice(["4x2x4:leaf=2", "6x2x2:leaf=3", "3x1x8"]))
    trace = _trace(rng)
    predictions = {j.job_id: j.duration_s * j.num_gpus * rng.choice([0.3, 1.0, 3.0])
                   for j in trace}
    recorder = Recorder(build_policy(prof))
    Simulator(cluster, trace, recorder, seed=rng.randrange(100),
              predictor=FixedPredictor(predictions) if prof.order == "predicted_las"
              else None).run()
    assert recorder.snapshots
    full, reusing = build_policy(prof), build_policy(prof)
    reusing.reuse_decisions = True
    cycles = 0
    for snap in recorder.snapshots:
        # the cycle itself, one a second later, fields placement ignores changed, maybe
        # much later (demotions, promotions), and one input placement reads changed
        steps = [snap, _quiet(snap, 1.0), _unread_changed(_quiet(snap, 2.0), rng)]
        steps += [_quiet(snap, rng.choice([60.0, 600.0, 3600.0, 36_000.0]))
                  for _ in range(rng.randint(0, 2))]
        steps += [_read_changed(steps[-1], rng), steps[-1]]
        for step in steps:
            assert reusing.run_cycle(step) == full.run_cycle(step), (profile, step.time_s)
            cycles += 1
    with_pending = sum(1 for s in recorder.snapshots if s.pending)
    assert reusing._reusable and with_pending // 2 <= reusing.reused_cycles < cycles
    assert full.reused_cycles == 0


def _learned_checkpoint():
    """Untrained agents for the test clusters' partition ``gpu`` (fixed seed): they defer
    and place all the same, which is what reuse has to get right."""
    import torch

    from slurm_marl.agent.checkpoint import LearnedCheckpoint, policy_config
    from slurm_marl.models.interference import InterferenceModel, Vocabulary
    from slurm_marl.models.policy import PlacementPolicy

    torch.manual_seed(0)
    interference = InterferenceModel.new(Vocabulary.fit([m for m in MODELS if m]))
    policy = PlacementPolicy(policy_config(interference, ("gpu",), "multi")).eval()
    return LearnedCheckpoint(policy, interference)


def _learned_policy(prof, ckpt, reuse: bool, horizon: bool = True):
    """las-learned whose agent also defers every third job while it may (the untrained
    agents never defer; defer made valid wherever the job would run below 1.01 of its ideal
    speed, i.e. always): deferrals stand across cycles, so reuse has to respect them."""
    import math

    from slurm_marl.agent.choice import Choice

    policy = build_policy(prof, learned_checkpoint=ckpt)
    policy.reuse_decisions = reuse
    plugin = policy.place[0][0]
    plugin.observer.defer_only_below = 1.01
    model = plugin.chooser

    def chooser(obs, state):
        if obs.job_id % 3 == 0 and bool(obs.mask[-1]):
            return Choice(defer=True, action=obs.defer_action, score=0.0)
        return model(obs, state)

    plugin.chooser = chooser
    if not horizon:     # what reuse would do if it ignored the horizon
        plugin.reuse_horizon = lambda state: math.inf
    return policy


@functools.cache
def _learned_reuse(max_defer_s: float, clock_step_s: float, order: bool = False) -> int:
    """Cycles reused by las-learned with these settings over the sequences below, each
    checked against deciding afresh (the asserts); the same seeds give the same sequences.
    ``order``: the agents also pick which job of a queue starts next (an order head whose
    weights read the jobs' waits and sizes), and do pick."""
    from slurm_marl.agent.order_head import OrderHead

    prof = load_profile("las-learned")
    params = {k: dict(v) for k, v in prof.place_params.items()}
    params["learned"]["max_defer_s"] = max_defer_s
    params["learned"]["clock_step_s"] = clock_step_s
    params["learned"]["order_window"] = 4 if order else 0
    prof = replace(prof, place_params=params)
    ckpt = _learned_checkpoint()
    if order:
        ckpt.order = OrderHead.shared(("gpu",), [0.1, 0, 0, 0.3, 0.5, -1, 0.5], 4)
    cycles = reused = naive_wrong = finite = picks = 0
    for seed in range(2):
        rng = random.Random(seed)
        cluster = parse_cluster(rng.choice(["4x2x4:leaf=2", "6x2x2:leaf=3", "3x1x8"]))
        recorder = Recorder(_learned_policy(prof, ckpt, reuse=False))
        Simulator(cluster, _trace(rng), recorder, seed=rng.randrange(100)).run()
        full = _learned_policy(prof, ckpt, reuse=False)
        reusing = _learned_policy(prof, ckpt, reuse=True)
        naive = _learned_policy(prof, ckpt, reuse=True, horizon=False)
        for snap in recorder.snapshots:
            # quiet steps within the clock's step and across it, forward and back (59.9 s:
            # within or across, as the snapshot's own time falls)
            steps = [snap, _quiet(snap, 1.0), _unread_changed(_quiet(snap, 2.0), rng)]
            steps += [_quiet(snap, rng.choice([30.0, 59.9, 60.0, 600.0, 3600.0]))
                      for _ in range(2)]
            steps += [_read_changed(steps[-1], rng), steps[-1]]
            for step in steps:
                decided = full.run_cycle(step)
                picks += any("picked ahead" in getattr(d, "reason", "") for d in decided)
                assert reusing.run_cycle(step) == decided, (seed, step.time_s)
                naive_wrong += naive.run_cycle(step) != decided
                cycles += 1
                finite += any(0 < h[2] < float("inf") for h in reusing._reuse.values())
        reused += reusing.reused_cycles
        assert full.reused_cycles == 0
    assert 0 < reused < cycles and naive_wrong > 0
    # finite horizons: deferrals bounded by max_defer_s, placements by the clock's step
    assert (finite > 0) == (max_defer_s > 0 or clock_step_s > 0)
    assert (picks > 0) == order
    return reused


@pytest.mark.parametrize("max_defer_s,clock_step_s,order", [
    (0, 0, False), (900, 0, False), (0, 60, False), (900, 60, False), (0, 0, True),
    (900, 60, True)])
def test_the_learned_plugin_reuses_only_what_it_would_decide_again(max_defer_s, clock_step_s,
                                                                   order):
    """The learned plugin is not pure (deferrals stand across cycles; a job's features hold
    its wait), but it says until when a cycle would be decided the same
    (``reuse_horizon``): on the same kind of snapshot sequences as above, with agents that
    defer and place, reuse decides exactly what deciding afresh decides, and it does reuse.
    Ignoring the horizon (reuse whenever the inputs are equal) decides differently: the
    horizon is what makes it right. With the agents' clock read in steps (``clock_step_s``)
    a cycle in which an agent placed a job is reused until the next step, and only then.
    With the agents picking which job starts next (``order``), the same holds."""
    assert _learned_reuse(max_defer_s, clock_step_s, order) > 0


def test_the_agents_clock_in_steps_reuses_more():
    """Placements held until the clock's next step are reused where the exact clock
    reused nothing (same seeds: the same snapshots)."""
    assert _learned_reuse(0, 60) > _learned_reuse(0, 0)


def test_a_stateful_place_plugin_without_a_horizon_never_reuses():
    """A place plugin that is not pure and says nothing of a horizon keeps its policy from
    reusing; the learned plugin says one."""
    from slurm_marl.policy.framework import Policy
    from slurm_marl.policy.plugins import build_plugin

    assert build_policy(load_profile("las-consolidate"))._reusable
    assert build_policy(load_profile("las-learned"))._reusable

    class Stateful:                 # neither Pure nor ReuseHorizon
        key = name = "stateful"

        def score(self, job, cand, state):
            return 1.0

    prof = load_profile("las-consolidate")
    policy = Policy(prof, build_plugin("order", prof.order, prof.order_params),
                    [(Stateful(), 1.0)])
    assert not policy._reusable
