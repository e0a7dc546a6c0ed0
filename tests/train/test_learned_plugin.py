"""The ``learned`` place plugin inside ``run_cycle``: model decisions, defer, fallback."""

import logging
import math
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from slurm_marl.domain import Job, JobState, Place, Preempt
from slurm_marl.agent.checkpoint import LearnedCheckpoint, policy_config
from slurm_marl.models.policy import PlacementPolicy
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.policy.state import CycleState
from slurm_marl.sim.run import simulate
from slurm_marl.train.evaluate import learned_profile
from train_helpers import tiny_workload


@pytest.fixture
def checkpoint(tmp_path, tiny_interference):
    torch.manual_seed(0)
    policy = PlacementPolicy(policy_config(tiny_interference, ("a", "b"), "multi"))
    pt, _ = LearnedCheckpoint(policy, tiny_interference, {"max_defer_s": 1800.0}).save(
        tmp_path / "ckpt.pt")
    return pt


def snapshot_with_pending(cluster, jobs, time_s=100.0):
    from slurm_marl.domain import ClusterSnapshot
    return ClusterSnapshot(time_s=time_s, nodes=cluster.nodes, jobs=tuple(jobs),
                           partitions=cluster.partitions, switches=cluster.switches)


def pending(job_id, gpus, partition, model="lm_bs20", queued_s=0.0):
    return Job(job_id=job_id, partition=partition, gpus_per_job=gpus, cpus=1,
               model_type=model, submit_time_s=queued_s, queue_since_s=queued_s)


def places(decisions):
    return {d.job_id: d for d in decisions if isinstance(d, Place) and d.start_now}


def test_missing_checkpoint_falls_back_to_consolidate_with_a_log_line(tiny_cluster, caplog,
                                                                     tmp_path):
    snap = snapshot_with_pending(tiny_cluster, [pending(1, 2, "a"), pending(2, 1, "b")])
    with caplog.at_level(logging.WARNING):
        learned = build_policy(learned_profile(tmp_path / "missing.pt"))
    assert "missing.json does not exist; placing with consolidate" in caplog.text
    got = places(learned.run_cycle(snap))
    want = places(build_policy(load_profile("las-consolidate")).run_cycle(snap))
    assert {k: v.allocs for k, v in got.items()} == {k: v.allocs for k, v in want.items()}
    assert len(got) == 2
    # each decision says why consolidate placed it (``explain`` shows the reason)
    assert all(d.reason.endswith("; no learned checkpoint loaded: placed by consolidate")
               for d in got.values())


def test_corrupt_or_code_carrying_checkpoints_fall_back(tiny_cluster, checkpoint, caplog):
    checkpoint.write_bytes(b"not a torch file")
    with caplog.at_level(logging.WARNING):
        build_policy(learned_profile(checkpoint))
    assert "cannot load weights" in caplog.text
    caplog.clear()
    torch.save({"x": Job(job_id=1)}, checkpoint)   # a pickled object, not tensors
    with caplog.at_level(logging.WARNING):
        policy = build_policy(learned_profile(checkpoint))
    assert "placing with consolidate" in caplog.text
    assert places(policy.run_cycle(snapshot_with_pending(tiny_cluster, [pending(1, 1, "a")])))


def test_model_places_every_job_on_free_gpus(tiny_cluster, checkpoint):
    jobs = [pending(i, g, p) for i, (g, p) in enumerate(
        [(1, "a"), (2, "a"), (4, "b"), (1, "b"), (1, "a")])]
    policy = build_policy(learned_profile(checkpoint, allow_defer=False))
    got = places(policy.run_cycle(snapshot_with_pending(tiny_cluster, jobs)))
    assert set(got) == {j.job_id for j in jobs}
    used: dict = {}
    for d in got.values():
        assert d.plugin == "learned"
        for a in d.allocs:
            used[(a.node, a.group)] = used.get((a.node, a.group), 0) + a.gpus
            assert a.node.startswith(jobs[d.job_id].partition)
    assert all(v <= 4 for v in used.values())


def test_a_job_in_a_partition_without_agent_uses_the_fallback(tiny_cluster,
                                                              tiny_interference, tmp_path,
                                                              caplog):
    policy_a = PlacementPolicy(policy_config(tiny_interference, ("a",), "multi"))
    pt, _ = LearnedCheckpoint(policy_a, tiny_interference).save(tmp_path / "a_only.pt")
    with caplog.at_level(logging.WARNING):
        got = places(build_policy(learned_profile(pt, allow_defer=False)).run_cycle(
            snapshot_with_pending(tiny_cluster, [pending(1, 1, "a"), pending(2, 1, "b")])))
    assert "no agent for partition 'b'" in caplog.text
    assert set(got) == {1, 2}
    assert got[2].reason.endswith("; no agent for partition b: placed by consolidate")
    assert "placed by" not in got[1].reason            # an agent decided job 1
    # what-if questions (an overlay capacity) about b's jobs go to the fallback too
    from slurm_marl.policy.place.least_interference import LeastInterference
    from slurm_marl.placement_shapes import generate_candidates
    from slurm_marl.policy.state import CycleState
    plugin = build_policy(learned_profile(pt, allow_defer=False)).place[0][0]
    assert isinstance(plugin.what_if, LeastInterference)
    snap = snapshot_with_pending(tiny_cluster, [pending(1, 1, "a"), pending(2, 1, "b")])
    state = CycleState(snap, track_colocation=True)
    plugin.feasible(snap.job(1), generate_candidates(snap.job(1), state, state.free)[0],
                    state)
    assert plugin._what_if_for(snap.job(2), state) is plugin.fallback
    assert plugin._what_if_for(snap.job(1), state) is plugin.what_if
    # the framework offers b's jobs candidates as it would to the fallback
    assert plugin.plugin_for(snap.job(2), state) is plugin.fallback
    assert plugin.plugin_for(snap.job(1), state) is plugin


def _always_defer(checkpoint, defer_only_below=1.01):
    """Agents that always wait; ``defer_only_below`` > 1 lets them wait even where a spot
    at the job's ideal speed is free (the default 0.8 would not)."""
    ckpt = LearnedCheckpoint.load(checkpoint)
    for agent in ckpt.policy.agents:
        agent.defer[-1].bias.data.fill_(100.0)
    ckpt.training["defer_only_below"] = defer_only_below
    ckpt.save(checkpoint)


def test_no_agent_can_keep_a_job_off_an_idle_partition(tiny_cluster, checkpoint):
    """Defer is valid only while every spot is poor (below 80% of the job's ideal speed):
    an agent that always wants to wait still places a job on an idle partition."""
    _always_defer(checkpoint, defer_only_below=0.8)
    policy = build_policy(learned_profile(checkpoint))
    got = places(policy.run_cycle(snapshot_with_pending(tiny_cluster, [pending(1, 1, "a")])))
    assert set(got) == {1} and got[1].plugin == "learned"


def test_defer_keeps_the_job_queued_without_preempting_until_max_defer(tiny_cluster,
                                                                       checkpoint):
    _always_defer(checkpoint)
    policy = build_policy(learned_profile(checkpoint))
    fresh = pending(1, 1, "a", queued_s=50.0)
    decisions = policy.run_cycle(snapshot_with_pending(tiny_cluster, [fresh], time_s=100.0))
    assert not places(decisions) and not any(isinstance(d, Preempt) for d in decisions)
    stale = pending(1, 1, "a", queued_s=0.0)
    late = policy.run_cycle(snapshot_with_pending(tiny_cluster, [stale], time_s=2000.0))
    assert set(places(late)) == {1}


def test_profile_file_with_the_learned_key_runs_in_the_simulator(tiny_cluster, checkpoint,
                                                                 tmp_path):
    toml = tmp_path / "las-learned.toml"
    toml.write_text(f'''name = "las-learned"
preemption = true
backfill = true
backfill_reserve = false

[order]
plugin = "tiresias_las"
thresholds_gpu_s = [3250, 7200, 18000]

[place]
learned = 1.0

[place_params.learned]
checkpoint = "{checkpoint}"
fallback = "consolidate"
''')
    profile = load_profile(toml)
    run = simulate(tiny_workload(30, 4), tiny_cluster, profile, interference="high",
                   drop_oversized=True)
    assert run.summary["unfinished"] == 0 and run.summary["finished"] == 30


def test_bad_plugin_parameters_are_clear_errors(checkpoint):
    from slurm_marl.policy.plugins import PluginError, build_plugin
    with pytest.raises(PluginError, match="unknown parameter"):
        build_plugin("place", "learned", {"checkpoint": str(checkpoint), "bogus": 1})
    with pytest.raises(PluginError, match="fallback must be a heuristic"):
        build_plugin("place", "learned", {"fallback": "learned"})
    with pytest.raises(PluginError, match="past_depth must be one of what_if, fallback, "
                                          "got 'spread'"):
        build_plugin("place", "learned", {"past_depth": "spread"})
    with pytest.raises(PluginError, match="no place plugin"):
        build_plugin("place", "learned", {"fallback": "nope"})
    with pytest.raises(PluginError, match="clock_step_s must be >= 0"):
        build_plugin("place", "learned", {"clock_step_s": -60})
    with pytest.raises(PluginError, match="clock_step_s"):
        build_plugin("place", "learned", {"clock_step_s": "1m"})


def test_inference_never_imports_training_code(checkpoint):
    code = ("import sys; from slurm_marl.agent.learned import build; "
            f"p = build({{'checkpoint': {str(checkpoint)!r}}}); assert p.active; "
            "bad = [m for m in sys.modules if m.startswith('slurm_marl.train')]; "
            "assert not bad, bad; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_learned_profile_is_las_consolidate_with_the_learned_plugin(tiny_cluster,
                                                                     checkpoint):
    prof = learned_profile(checkpoint)
    assert prof.place == (("learned", 1.0),) and prof.order == "tiresias_las"
    assert replace(prof, name="x").place_params["learned"]["checkpoint"] == str(checkpoint)


def test_incremental_cycles_equal_a_fresh_observer(tiny_cluster, tiny_interference):
    """Through a whole simulation, the observer that re-featurises only changed nodes and
    recounts claimed groups sees exactly what a fresh one (full rebuild) sees. (The level
    tensors are those of the cycle's first decision, so they are compared there.) Among
    them, incremental cycles whose first placement comes after a preemption of the same
    cycle: the preempted job's groups are recounted although its nodes did not change (they
    were not, until the 1 us later wake-up made this sequence appear here)."""
    from slurm_marl.agent.observe import Observer
    from slurm_marl.policy.framework import Policy
    from slurm_marl.agent.choice import Choice
    from slurm_marl.agent.learned import LearnedPlacement
    from slurm_marl.policy.plugins import build_plugin
    from slurm_marl.sim.engine import Simulator

    observer = Observer(tiny_interference, ("a", "b"))
    checked = {"n": 0, "incremental": 0, "first": 0, "state": None, "after_preempt": 0}

    def choose(obs, state):
        fresh = Observer(tiny_interference, ("a", "b")).observe(
            state.snapshot.job(obs.job_id), state)
        if state is not checked["state"]:
            checked["state"] = state
            checked["first"] += 1
            checked["after_preempt"] += bool(state.colocation_changed) and \
                observer._cycle.incremental_nodes is not None
            for level, x in obs.x.items():
                assert torch.allclose(x, fresh.x[level]), level
        assert torch.allclose(obs.live, fresh.live) and torch.equal(obs.mask, fresh.mask)
        assert torch.allclose(obs.job, fresh.job)
        checked["n"] += 1
        checked["incremental"] += observer._cycle.incremental_nodes is not None
        group = obs.valid_groups()[-1]          # spread-ish, so claims land everywhere
        return Choice(allocs=obs.allocs_for(group), action=group)

    plugin = LearnedPlacement(observer, choose, build_plugin("place", "consolidate"))
    profile = load_profile("las-consolidate")
    policy = Policy(profile, build_plugin("order", profile.order, profile.order_params),
                    [(plugin, 1.0)])
    Simulator(tiny_cluster, tiny_workload(40, 9, mean_gap_s=60.0), policy,
              interference="high").run()
    assert checked["n"] >= 40 and checked["incremental"] >= 10 and checked["first"] >= 20
    assert checked["after_preempt"] >= 1


def test_the_shipped_demo_checkpoint_drives_the_demo_cluster(caplog):
    """The checkpoint in slurm_marl/data is the plugin's default and has an agent for the
    demo cluster's partition (4 nodes x 2 sockets x 2 GPUs, partition ``gpu``)."""
    from slurm_marl.agent.checkpoint import shipped_checkpoint
    from slurm_marl.sim.cluster import parse_cluster
    ckpt = LearnedCheckpoint.load(shipped_checkpoint())
    assert ckpt.config.agents == ("gpu",)
    assert ckpt.training["cluster"] == "4x2x2:name=gpu"
    demo = parse_cluster("4x2x2:name=gpu")
    with caplog.at_level(logging.WARNING):
        policy = build_policy(learned_profile(shipped_checkpoint(), allow_defer=False))
        got = places(policy.run_cycle(snapshot_with_pending(
            demo, [pending(1, 1, "gpu"), pending(2, 2, "gpu"), pending(3, 4, "gpu")])))
    assert "placing with" not in caplog.text and "no agent" not in caplog.text
    assert set(got) == {1, 2, 3} and all(d.plugin == "learned" for d in got.values())


def test_a_deferral_stands_until_the_options_change_and_is_bounded_from_the_first(
        tiny_cluster, tiny_interference):
    """The agent is not asked again about a job it deferred while the job's options are
    unchanged; ``max_defer_s`` counts from the first deferral, not from queueing."""
    from slurm_marl.agent.observe import Observer
    from slurm_marl.policy.framework import Policy
    from slurm_marl.agent.choice import Choice
    from slurm_marl.agent.learned import LearnedPlacement
    from slurm_marl.policy.plugins import build_plugin

    asked = []

    def choose(obs, state):
        asked.append(state.now_s)
        if bool(obs.mask[obs.defer_action]):
            return Choice(defer=True, action=obs.defer_action)
        group = obs.valid_groups()[0]
        return Choice(allocs=obs.allocs_for(group), action=group)

    observer = Observer(tiny_interference, ("a", "b"), max_defer_s=1000.0,
                        defer_only_below=1.01)
    plugin = LearnedPlacement(observer, choose, build_plugin("place", "consolidate"))
    profile = load_profile("las-consolidate")
    policy = Policy(profile, build_plugin("order", profile.order, profile.order_params),
                    [(plugin, 1.0)])
    job = pending(1, 1, "a", queued_s=-5000.0)      # queued long before: irrelevant now
    for now in (100.0, 500.0, 900.0):
        assert not places(policy.run_cycle(snapshot_with_pending(tiny_cluster, [job], now)))
    assert asked == [100.0]                         # the deferral stood at 500 and 900
    got = places(policy.run_cycle(snapshot_with_pending(tiny_cluster, [job], 1100.0)))
    assert asked == [100.0, 1100.0] and set(got) == {1}   # 1000 s after the first defer


def test_the_clock_read_in_steps():
    from slurm_marl.agent.observe import clocked, next_step_s
    assert clocked(119.9, 60) == 60 and clocked(120.0, 60) == 120 and clocked(-1, 60) == -60
    assert next_step_s(119.9, 60) == 120 and next_step_s(120.0, 60) == 180
    assert clocked(119.9, 0) == 119.9 and next_step_s(119.9, 0) == -math.inf
    assert clocked(math.inf, 60) == math.inf


def test_the_agents_read_a_jobs_wait_on_their_clock(tiny_cluster, tiny_interference,
                                                    tmp_path):
    """With ``clock_step_s`` the job's wait feature (its only input the clock moves) is
    the same within a step and moves at the next; the exact clock moves it every second.
    The step comes from the checkpoint unless the profile says otherwise."""
    from slurm_marl.agent.learned import build
    from slurm_marl.agent.observe import JOB_FEATURES

    torch.manual_seed(0)
    policy = PlacementPolicy(policy_config(tiny_interference, ("a", "b"), "multi"))
    pt, _ = LearnedCheckpoint(policy, tiny_interference, {"clock_step_s": 60.0}).save(
        tmp_path / "clocked.pt")
    wait = JOB_FEATURES.index("log_wait_10min")
    job = pending(1, 1, "a", queued_s=0.0)

    def waits(params):
        plugin = build({"checkpoint": str(pt), **params})
        out = []
        for now in (130.0, 170.0, 179.9, 180.0, 200.0):
            state = CycleState(snapshot_with_pending(tiny_cluster, [job], now))
            out.append(float(plugin.observer.observe(job, state).job[wait]))
        return plugin.observer.clock_step_s, out

    step, w = waits({})
    assert step == 60.0 and w[0] == w[1] == w[2] < w[3] == w[4]
    assert w[0] == pytest.approx(math.log1p(120 / 600)) and w[3] == pytest.approx(
        math.log1p(180 / 600))
    step, w = waits({"clock_step_s": 0})
    assert step == 0.0 and len(set(w)) == 5


def test_what_if_parameters(checkpoint):
    from slurm_marl.policy.place.least_interference import LeastInterference
    from slurm_marl.policy.plugins import PluginError, build_plugin
    plugin = build_plugin("place", "learned", {"checkpoint": str(checkpoint)})
    assert isinstance(plugin.what_if, LeastInterference)
    assert plugin.what_if.defer_below == 0.8
    assert plugin.what_if.estimator is plugin.observer.model
    plugin = build_plugin("place", "learned", {"checkpoint": str(checkpoint),
                                               "what_if": "consolidate"})
    assert plugin.what_if.key == "consolidate"
    with pytest.raises(PluginError, match="what_if must be a heuristic"):
        build_plugin("place", "learned", {"what_if": "learned"})
    with pytest.raises(PluginError, match=r"what_if_defer_below must be in \[0, 1\]"):
        build_plugin("place", "learned", {"what_if_defer_below": 1.5})


def test_jobs_of_a_partition_without_agent_get_exactly_the_fallbacks_placements(
        tiny_cluster, tiny_interference, tmp_path):
    """Jobs the fallback places are offered candidates as the fallback's own profile offers
    them (one node per class of alike nodes), and land where that profile puts them."""
    policy_a = PlacementPolicy(policy_config(tiny_interference, ("a",), "multi"))
    pt, _ = LearnedCheckpoint(policy_a, tiny_interference).save(tmp_path / "a_only.pt")
    running = Job(job_id=50, partition="b", state=JobState.RUNNING, gpus_per_job=3, cpus=1,
                  gpu_alloc=(("b0", (0, 1, 4)),), nodes=("b0",), model_type="a3c",
                  start_time_s=0.0)
    jobs = [running] + [pending(i, g, "b", queued_s=float(i))
                        for i, g in enumerate((1, 2, 1, 4, 1), start=1)]
    snap = snapshot_with_pending(tiny_cluster, jobs)
    learned = build_policy(learned_profile(pt, allow_defer=False))
    plugin = learned.place[0][0]
    state = CycleState(snap, track_colocation=True)
    assert plugin.plugin_for(jobs[1], state) is plugin.fallback
    got = places(learned.run_cycle(snap))
    want = places(build_policy(load_profile("las-consolidate")).run_cycle(snap))
    assert {k: v.allocs for k, v in got.items()} == {k: v.allocs for k, v in want.items()}
    assert len(got) == 5


def test_partition_views_keep_their_topology_and_hear_the_other_agents(tiny_cluster,
                                                                      checkpoint):
    """The daemon runs one cycle per partition on that partition's view: the plugin keeps
    one topology per view (no rebuild as it alternates) and each agent hears the others'
    latest summaries, as in training where every snapshot shows all partitions."""
    from slurm_marl.slurm_integration.admission import partition_view
    policy = build_policy(learned_profile(checkpoint, allow_defer=False))
    plugin = policy.place[0][0]
    snap = snapshot_with_pending(tiny_cluster, [pending(1, 1, "a"), pending(2, 1, "b")])
    assert places(policy.run_cycle(partition_view(snap, "a")))
    top_a = plugin.observer.topology
    assert set(top_a.views) == {"a"}
    assert set(plugin.chooser._summaries) == {"a"}
    assert places(policy.run_cycle(partition_view(snap, "b")))
    top_b = plugin.observer.topology
    assert top_b is not top_a and set(top_b.views) == {"b"}
    summaries = plugin.chooser._summaries
    assert set(summaries) == {"a", "b"}
    heard = PlacementPolicy.others_summary(summaries, "b")
    assert torch.equal(heard, summaries["a"]) and heard.abs().sum() > 0
    later = snapshot_with_pending(tiny_cluster, [pending(3, 2, "a")], time_s=200.0)
    assert places(policy.run_cycle(partition_view(later, "a")))
    assert plugin.observer.topology is top_a      # the same layout: reused, not rebuilt


def test_an_agent_placement_that_is_not_free_is_refused_not_claimed(tiny_cluster,
                                                                   checkpoint, caplog):
    """A proposal the framework would not offer (a bug, never a decision) cannot
    over-allocate: the job waits and the log says why."""
    from slurm_marl.agent.choice import Choice
    policy = build_policy(learned_profile(checkpoint, allow_defer=False))
    plugin = policy.place[0][0]
    plugin.chooser = lambda obs, state: Choice(allocs=((0, 0, 99),), action=0)
    snap = snapshot_with_pending(tiny_cluster, [pending(1, 1, "a")])
    with caplog.at_level(logging.WARNING):
        got = places(policy.run_cycle(snap))
    assert got == {}
    assert "is not a free placement; the job waits" in caplog.text


def test_fast_inference_decides_every_job_as_the_reference_path():
    """The shipped (trained) checkpoint through a busy simulation on its cluster: at every
    agent decision, the inference path (actor terms cached per snapshot, predictions once
    per distinct candidate row) takes the action the reference path (concatenated actor,
    a prediction per candidate) takes on the same state, with the same probability to
    float rounding. Also holds for every decision of the run it steers."""
    from slurm_marl.agent.checkpoint import shipped_checkpoint
    from slurm_marl.agent.choice import ModelChooser
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.engine import Simulator

    policy = build_policy(learned_profile(shipped_checkpoint()))
    plugin = policy.place[0][0]
    fast = plugin.chooser
    reference = ModelChooser(fast.checkpoint, fast.observer, fast.allow_defer)
    reference.split_actor = False
    predictor = plugin.observer.predictor
    seen = {"n": 0, "defer": 0}

    def choose(obs, state):
        predictor.dedupe = False
        ref_obs = plugin.observer.observe(state.snapshot.job(obs.job_id), state)
        predictor.dedupe = True
        want = reference(ref_obs, state)
        got = fast(obs, state)
        assert torch.equal(obs.mask, ref_obs.mask)
        assert torch.allclose(obs.live, ref_obs.live, atol=1e-6, rtol=0)
        assert (got.action, got.defer, got.allocs) == (want.action, want.defer, want.allocs)
        assert abs(got.score - want.score) < 1e-5
        seen["n"] += 1
        seen["defer"] += got.defer
        return got

    plugin.chooser = choose
    Simulator(parse_cluster("4x2x2:name=gpu"),
              tiny_workload(80, 5, partitions=("gpu",), mean_gap_s=60.0), policy,
              interference="high").run()
    assert seen["n"] >= 80


def test_agent_depth_bounds_the_jobs_an_agent_looks_at_a_cycle(tiny_cluster, tiny_interference):
    """``max_agent_jobs``: each agent looks at the first jobs with room in the queue's order
    (a job with no room does not count), the what-if heuristic places the rest in the same
    cycle (or, with ``past_depth = "fallback"``, the fallback), and every job still
    starts; 0 is no bound."""
    from slurm_marl.agent.choice import Choice
    from slurm_marl.agent.learned import LearnedPlacement
    from slurm_marl.agent.observe import Observer
    from slurm_marl.policy.framework import Policy
    from slurm_marl.policy.plugins import build_plugin

    class Spy:
        """A heuristic that notes the jobs it scores."""

        def __init__(self, key):
            self.inner, self.scored = build_plugin("place", key), set()

        def score(self, job, cand, state):
            self.scored.add(job.job_id)
            return self.inner.score(job, cand, state)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    def run(depth, agents=("a", "b"), past_depth="what_if"):
        asked = []

        def choose(obs, state):
            asked.append(obs.job_id)
            group = obs.valid_groups()[0]
            return Choice(allocs=obs.allocs_for(group), action=group)

        fallback, what_if = Spy("consolidate"), Spy("spread")
        plugin = LearnedPlacement(Observer(tiny_interference, agents), choose, fallback,
                                  "consolidate", what_if=what_if, max_agent_jobs=depth,
                                  past_depth=past_depth)
        run.fallback, run.what_if = fallback.scored, what_if.scored
        profile = load_profile("las-consolidate")
        policy = Policy(profile, build_plugin("order", profile.order, profile.order_params),
                        [(plugin, 1.0)])
        # job 1 asks for more GPUs than partition a has: no room, never looked at
        jobs = [pending(1, 64, "a", queued_s=-10.0)] + [
            pending(i, 1, "a" if i % 2 else "b", queued_s=float(i)) for i in range(2, 10)]
        return asked, places(policy.run_cycle(snapshot_with_pending(tiny_cluster, jobs)))

    asked, got = run(2)
    assert sorted(asked) == [2, 3, 4, 5]        # two per agent, the head of each queue
    assert set(got) == set(range(2, 10))
    assert run.what_if >= {6, 7, 8, 9} and not run.what_if & {2, 3, 4, 5}
    # each decision names the plugin that really placed the job (explain shows it)
    assert {j: d.plugin for j, d in got.items()} == {
        **{j: "learned" for j in (2, 3, 4, 5)}, **{j: "spread" for j in (6, 7, 8, 9)}}
    asked, got = run(0)
    assert sorted(asked) == list(range(2, 10)) and set(got) == set(range(2, 10))
    # a partition without an agent is the fallback's, whatever the depth
    asked, got = run(2, agents=("a",))
    assert sorted(asked) == [3, 5] and set(got) == set(range(2, 10))
    assert {2, 4, 6, 8} <= run.fallback and not {2, 4, 6, 8} & run.what_if
    assert all(got[j].plugin == "consolidate" for j in (2, 4, 6, 8))
    # ``past_depth = "fallback"``: the fallback places the jobs past the depth instead
    asked, got = run(2, past_depth="fallback")
    assert sorted(asked) == [2, 3, 4, 5] and set(got) == set(range(2, 10))
    assert run.fallback >= {6, 7, 8, 9} and not run.what_if & {6, 7, 8, 9}
    assert {j: d.plugin for j, d in got.items()} == {
        **{j: "learned" for j in (2, 3, 4, 5)}, **{j: "consolidate" for j in (6, 7, 8, 9)}}
    with pytest.raises(ValueError, match="past_depth must be one of what_if, fallback"):
        run(2, past_depth="spread")


@pytest.mark.parametrize("seed", range(4))
def test_jobs_past_the_agent_depth_decide_alike_with_the_node_class_index(tiny_interference,
                                                                          seed):
    """Past the agents' depth, jobs go to the what-if heuristic, least interference, whose
    single-node candidates come from the node-class index with co-location in a class
    (issue 17): the cycle decides exactly as with the index off (every node scanned)."""
    import random
    from unittest import mock
    from slurm_marl.topology.synthetic import synthetic_snapshot
    rng = random.Random(seed)
    snap = synthetic_snapshot(40, busy_fraction=rng.choice([0.3, 0.6]), seed=seed,
                              gpus_per_node=8, sockets=2, partitions=2, nodes_per_leaf=10)
    models = ("lm_bs20", "a3c", "resnet50_bs32", None)
    parts = tuple(p.name for p in snap.partitions)
    jobs = tuple(replace(j, model_type=rng.choice(models)) for j in snap.jobs) + tuple(
        replace(pending(800_000 + i, rng.choice([1, 1, 2, 3, 4, 8]), rng.choice(parts),
                        rng.choice(models), queued_s=float(i)), state=JobState.PENDING)
        for i in range(30))
    snap = replace(snap, jobs=jobs, time_s=100.0)
    torch.manual_seed(seed)
    ckpt = LearnedCheckpoint(PlacementPolicy(policy_config(tiny_interference, parts, "multi")),
                             tiny_interference)
    profile = load_profile("las-learned")
    profile = replace(profile, place_params={"learned": {**profile.place_params["learned"],
                                                         "max_agent_jobs": 2,
                                                         "past_depth": "what_if"}})

    def decide():
        return build_policy(profile, learned_checkpoint=ckpt).run_cycle(snap)

    from slurm_marl.policy.node_classes import NodeClasses
    with mock.patch.object(NodeClasses, "SCANS_BEFORE_INDEX", 0):   # from the first job on
        indexed = decide()
    assert any(isinstance(d, Place) and d.plugin == "least_interference" for d in indexed)
    with mock.patch.object(CycleState, "node_class_fits", lambda *args, **kw: None):
        assert decide() == indexed


def test_a_job_past_the_agents_depth_says_so_in_its_reason():
    """The shipped profile on the shipped checkpoint's cluster: a burst of 12 one-GPU jobs
    on 16 free GPUs; the agent decides the first ``max_agent_jobs`` (8), consolidate the
    rest, and each of those decisions says why in its reason (what ``explain`` prints)."""
    from slurm_marl.sim.cluster import parse_cluster
    cluster = parse_cluster("4x2x2:name=gpu")
    profile = load_profile("las-learned")
    depth = profile.place_params["learned"]["max_agent_jobs"]
    assert depth == 8 and profile.place_params["learned"]["past_depth"] == "fallback"
    jobs = [pending(i, 1, "gpu", queued_s=float(i)) for i in range(1, 13)]
    got = places(build_policy(profile).run_cycle(snapshot_with_pending(cluster, jobs)))
    assert set(got) == set(range(1, 13))
    by_agent = sorted(i for i, d in got.items() if d.plugin == "learned")
    past = sorted(i for i, d in got.items() if d.plugin != "learned")
    assert by_agent == list(range(1, depth + 1)) and past == list(range(depth + 1, 13))
    for i in past:
        assert got[i].plugin == "consolidate"
        assert got[i].reason.endswith("; past the agents' depth this cycle "
                                      "(max_agent_jobs = 8): placed by consolidate")
    assert not any("placed by" in got[i].reason for i in by_agent)
