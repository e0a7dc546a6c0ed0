"""Plugins declare their contract (policy/plugins.py): every place plugin scores; what else
it does it implements (Filtering, ReuseHorizon, Proposer, Delegating) or declares
(LocalFilter, ReadsColocation, NodeIdentity, ReadsHost, Pure). The framework reads those
abilities, never guesses them; the declarations are checked against what the built-in
plugins really read, and a plugin missing a member or contradicting itself is refused by
name when it is built."""

import types
from dataclasses import replace

import pytest

from policy_builders import node, pending, running, snapshot
from slurm_marl.policy import plugins
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.plugins import (Delegating, Filtering, JudgesMany, LocalFilter,
                                       PlacePlugin, PluginError, Proposer, Pure, ReuseHorizon,
                                       abilities, build_plugin)
from slurm_marl.policy.profile import profile_from_mapping
from slurm_marl.policy.state import CycleState


class NoScore:
    key = "noscore"

    def feasible(self, job, cand, state):
        return True


class LocalWithoutFilter(LocalFilter):
    key = "localwithoutfilter"

    def score(self, job, cand, state):
        return 0.0


class PureWithHorizon(Pure):
    key = "purewithhorizon"

    def score(self, job, cand, state):
        return 0.0

    def reuse_horizon(self, state):
        return 0.0


def _fake_module(plugin_cls):
    return types.SimpleNamespace(build=lambda params, **context: plugin_cls())


@pytest.mark.parametrize("cls, message", [
    (NoScore, "place plugin 'noscore' does not declare score"),
    (LocalWithoutFilter, "declares LocalFilter but has no feasible()"),
    (PureWithHorizon, "declares Pure and also has reuse_horizon()"),
])
def test_a_place_plugin_missing_a_member_or_contradicting_itself_is_refused_by_name(
        monkeypatch, cls, message):
    monkeypatch.setattr(plugins, "load_plugin_module", lambda kind, key: _fake_module(cls))
    with pytest.raises(PluginError, match=message):
        build_plugin("place", cls.key)


# What each built-in plugin implements and declares; the tests below check the
# declarations against what the plugins read.
ABILITIES = {
    ("consolidate", ()): {"pure", "judges_many"},
    ("spread", ()): {"pure"},
    ("binpack", ()): {"pure", "reads_host"},
    ("tiresias_skew", ()): {"pure", "filters", "local_filter"},
    ("least_interference", ()): {"pure", "reads_colocation", "judges_many"},
    ("least_interference", (("defer_below", 0.5),)): {"pure", "reads_colocation", "filters",
                                                       "local_filter", "judges_many"},
    ("least_interference", (("include_neighbours", False),)): {"pure", "reads_colocation",
                                                                 "judges_many"},
    ("least_interference", (("defer_below", 0.8), ("include_neighbours", False))): {
        "pure", "reads_colocation", "filters", "local_filter", "judges_many"},   # las-lif's
    ("learned", ()): {"filters", "reads_colocation", "node_identity", "reads_host",
                      "reuse_horizon", "proposes", "delegates", "picks"},
}


@pytest.mark.parametrize("key, params", list(ABILITIES))
def test_each_built_in_plugin_implements_and_declares_what_it_does(key, params):
    plugin = build_plugin("place", key, dict(params))
    ab = abilities(plugin)
    assert {k for k, v in vars(ab).items() if v} == ABILITIES[key, params]
    assert isinstance(plugin, PlacePlugin)
    assert isinstance(plugin, Filtering) == ab.filters
    assert isinstance(plugin, ReuseHorizon) == ab.reuse_horizon
    assert isinstance(plugin, Proposer) == ab.proposes
    assert isinstance(plugin, Delegating) == ab.delegates
    assert not ab.judges_many or isinstance(plugin, JudgesMany)


class Slowdowns:
    """Speeds that differ by neighbour, level and spread (and by job), so candidates and
    jobs score apart and a defer bar rejects some."""

    def predict_speed(self, job, coloc):
        speed = (0.5 if job.model_type == "bert" else 1.0) - 0.01 * (job.job_id % 7)
        for level, cut in (("group", 0.6), ("node", 0.1), ("leaf", 0.05)):
            speed *= (1 - cut) ** len(coloc.get(level, ()))
        return speed * (0.9 ** len(coloc.get("span", ())))


@pytest.mark.parametrize("key, params", [k for k, v in ABILITIES.items()
                                         if "judges_many" in v])
def test_a_plugin_judging_many_answers_as_it_does_one_by_one(key, params):
    """On free GPUs and on a what-if overlay, after questions about another job and with
    the candidates in another order: ``feasible_many`` and ``score_many`` give, value for
    value, what ``feasible`` and ``score`` give."""
    snap = _cluster()
    job, other = snap.jobs[-1], replace(snap.jobs[-1], job_id=10, model_type="bert")
    state = CycleState(snap)
    policy = build_policy(profile_from_mapping({"name": "t", "order": {"plugin": "fifo"},
                                                "place": {"consolidate": 1.0}}))
    cands = policy.generate(job, state, state.free, flags=(False, True, True))
    overlay = [[g + 1 for g in row] for row in state.free]
    est = Slowdowns()
    for cap, order in ((state.free, cands), (overlay, cands[::-1])):
        with state.judging(cap):
            one = build_plugin("place", key, dict(params), interference_estimator=est)
            many = build_plugin("place", key, dict(params), interference_estimator=est)
            many.score_many(other, order, state)
            if abilities(many).filters:
                many.feasible_many(other, order, state)
            if abilities(one).filters:
                assert many.feasible_many(job, order, state) == \
                    [one.feasible(job, c, state) for c in order]
            assert many.score_many(job, order, state) == \
                [one.score(job, c, state) for c in order]
            if "least_interference" == key:
                assert len(set(many.score_many(job, order, state))) > 1
            if abilities(one).filters and cap is state.free:
                assert not all(many.feasible_many(job, order, state))


def _cluster():
    """Two alike nodes (a model running on each) and a third with another model and fewer
    free CPUs: candidates differ by node identity, co-location and host."""
    nodes = [node("a1", leaf="l1"), node("a2", leaf="l1"), node("b1", leaf="l2", cpus=64,
                                                                  alloc_cpus=40)]
    jobs = [running(1, {"a1": (0,)}, model_type="resnet50"),
            running(2, {"a2": (0,)}, model_type="resnet50"),
            running(3, {"b1": (4,)}, model_type="bert"),
            pending(9, 2, cpus=8, model_type="vgg16")]
    return snapshot(nodes, jobs)


def _scores(plugin, state, job):
    policy = build_policy(profile_from_mapping({"name": "t", "order": {"plugin": "fifo"},
                                                "place": {"consolidate": 1.0}}))
    cands = policy.generate(job, state, state.free, flags=(False, True, True))
    assert len(cands) > 3
    return [(c.allocs, plugin.score(job, c, state)) for c in cands]


HEURISTICS = [k for k in ABILITIES if k[0] != "learned"]


@pytest.mark.parametrize("key, params", HEURISTICS)
def test_a_plugin_not_declaring_reads_colocation_never_reads_it(key, params):
    plugin = build_plugin("place", key, dict(params))

    class Blind(CycleState):
        def colocated_by_level(self, cand):
            raise AssertionError("read co-location")

    snap = _cluster()
    job = snap.jobs[-1]
    state = Blind(snap)
    if abilities(plugin).reads_colocation:
        with pytest.raises(AssertionError, match="read co-location"):
            _scores(plugin, state, job)
    else:
        _scores(plugin, state, job)


@pytest.mark.parametrize("key, params", HEURISTICS)
def test_a_plugin_not_declaring_reads_host_scores_alike_whatever_hosts_have_free(key,
                                                                                 params):
    plugin = build_plugin("place", key, dict(params))
    snap = _cluster()
    job = snap.jobs[-1]
    before = _scores(plugin, CycleState(snap), job)
    moved = CycleState(snap)
    moved.free_cpus = [c // 2 + 1 for c in moved.free_cpus]
    moved.free_mem = [m // 3 + 1 for m in moved.free_mem]
    after = _scores(plugin, moved, job)
    assert (before != after) == abilities(plugin).reads_host


@pytest.mark.parametrize("key, params", HEURISTICS)
def test_plugins_without_node_identity_score_alike_nodes_alike(key, params):
    """a1 and a2 are alike (same resources, same model running): a plugin that does not
    declare NodeIdentity gives a candidate on one the score of its twin on the other."""
    plugin = build_plugin("place", key, dict(params))
    snap = _cluster()
    job = snap.jobs[-1]
    state = CycleState(snap)
    scores = dict(_scores(plugin, state, job))
    a1, a2 = (state.index[n] for n in ("a1", "a2"))
    twins = [(allocs, tuple((a2, g, k) for _, g, k in allocs)) for allocs in scores
             if all(n == a1 for n, _, _ in allocs)]
    assert twins and not abilities(plugin).node_identity
    assert all(scores[x] == scores[y] for x, y in twins)


@pytest.mark.parametrize("key, params", HEURISTICS)
def test_pure_plugins_answer_the_same_whatever_they_were_asked_before(key, params):
    plugin = build_plugin("place", key, dict(params))
    assert abilities(plugin).pure
    snap = _cluster()
    job = snap.jobs[-1]
    first = _scores(plugin, CycleState(snap), job)
    _scores(plugin, CycleState(snapshot(snap.nodes, snap.jobs[:1] + snap.jobs[-1:])), job)
    assert _scores(build_plugin("place", key, dict(params)), CycleState(snap), job) == first
    assert _scores(plugin, CycleState(snap), job) == first


def test_what_if_is_a_flag_set_while_judging_an_overlay():
    state = CycleState(snapshot([node("n1")], [pending(1, 1)]))
    assert state.view is state.free and not state.what_if
    overlay = [row[:] for row in state.free]
    with state.judging(overlay):
        assert state.view is overlay and state.what_if
        with state.judging(state.free):
            assert not state.what_if
        assert state.what_if
    assert state.view is state.free and not state.what_if


def test_framework_reads_declared_abilities():
    prof = profile_from_mapping({"name": "t", "order": {"plugin": "fifo"},
                                 "place": {"consolidate": 1.0, "tiresias_skew": 0.5}})
    policy = build_policy(prof)
    assert policy._dedupe_nodes and not policy._needs_colocation
    assert not policy._monotone          # tiresias_skew filters
    assert policy._proposers == () and not policy._delegating
    assert policy.decides_partitions_apart and not policy.reads_leaves
    lif = build_policy(profile_from_mapping({
        "name": "t", "order": {"plugin": "fifo"}, "place": {"least_interference": 1.0},
        "place_params": {"least_interference": {"defer_below": 0.5}}}))
    assert lif._needs_colocation and not lif._monotone and lif.reads_leaves
    learned = build_policy(profile_from_mapping({"name": "t", "order": {"plugin": "fifo"},
                                                 "place": {"learned": 1.0}}))
    assert not learned._dedupe_nodes and learned._delegating and learned._proposers
    assert not learned.decides_partitions_apart and learned._reusable


def test_out_of_tree_plugins_join_the_registry_by_module_path(monkeypatch):
    monkeypatch.setattr(plugins, "_OUT_OF_TREE", dict(plugins._OUT_OF_TREE))
    # The package root registers the learned agents' plugin; policy never imports it.
    assert "learned" in plugins.registered_keys("place")
    assert "learned" not in plugins.builtin_keys("place")
    assert plugins.load_plugin_module("place", "learned").__name__ == "slurm_marl.agent.learned"
    plugins.register_plugin("place", "mine", "slurm_marl.policy.place.spread")
    assert "mine" in plugins.registered_keys("place")
    assert plugins.load_plugin_module("place", "mine").__name__ == \
        "slurm_marl.policy.place.spread"
    with pytest.raises(PluginError, match="built in and cannot be replaced"):
        plugins.register_plugin("place", "consolidate", "slurm_marl.policy.place.spread")
    with pytest.raises(PluginError, match="not a valid name"):
        plugins.register_plugin("place", "Bad-Key", "x")


LOADED: list[str] = []


def _fake_loader(path: str):
    from slurm_marl.policy.interference import NeutralEstimator
    LOADED.append(path)
    return NeutralEstimator()


def test_least_interference_loads_model_path_through_the_registered_loader(monkeypatch,
                                                                          tmp_path):
    monkeypatch.setattr(plugins, "_MODEL_LOADER", f"{__name__}:_fake_loader")
    LOADED.clear()
    build_plugin("place", "least_interference", {"model_path": str(tmp_path / "m.pt")})
    assert LOADED == [str(tmp_path / "m.pt")]
    monkeypatch.setattr(plugins, "_MODEL_LOADER", None)
    with pytest.raises(PluginError, match="no interference-model loader is registered"):
        build_plugin("place", "least_interference", {"model_path": "x.pt"})
    # The package root registers the torch model's loader.
    monkeypatch.undo()
    assert plugins._MODEL_LOADER == \
        "slurm_marl.models.interference:InterferenceModel.load"


# -- profiles are validated from declared parameters, without building plugins -------------

def test_every_plugin_module_declares_validate():
    from slurm_marl.policy.plugins import load_plugin_module, registered_keys
    for kind in ("order", "place"):
        for key in registered_keys(kind):
            assert callable(getattr(load_plugin_module(kind, key), "validate", None)), key


def test_loading_a_profile_reads_no_model_and_building_names_its_file(tmp_path):
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import ProfileError, load_profile
    model = tmp_path / "model.pt"
    model.write_bytes(b"not torch weights")
    path = tmp_path / "lif.toml"
    path.write_text('[order]\nplugin = "fifo"\n[place]\nleast_interference = 1\n'
                    f'[place_params.least_interference]\nmodel_path = "{model}"\n')
    profile = load_profile(path)          # parameters fine: the model is not read here
    with pytest.raises(ProfileError) as err:
        build_policy(profile)
    assert str(err.value).startswith(f"{path}: plugin 'least_interference': ")
    assert str(tmp_path / "model") in str(err.value)


def test_a_bad_parameter_is_still_a_profile_error_at_load(tmp_path):
    from slurm_marl.policy.profile import ProfileError, load_profile
    path = tmp_path / "learned.toml"
    path.write_text('[order]\nplugin = "tiresias_las"\n[place]\nlearned = 1\n'
                    '[place_params.learned]\nfallback = "nope"\n')
    with pytest.raises(ProfileError, match="no place plugin 'nope'"):
        load_profile(path)


def test_the_learned_checkpoint_is_loaded_once_when_a_daemon_builds_its_policy(monkeypatch):
    import slurm_marl.agent.learned as learned
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import load_profile
    calls = []
    real = learned.load_learned
    monkeypatch.setattr(learned, "load_learned",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    policy = build_policy(load_profile("las-learned"))
    assert len(calls) == 1
    assert policy.place[0][0].key == "learned"


class HandsEvenJobsOn:
    """A Delegating plugin: even job ids go to consolidate; its own answers for those are
    refused outside what-if questions, so the test sees whether the framework asks it."""

    key = "hands_on"
    filters = False
    needs_colocation = False
    node_specific = False
    reads_host = False
    pure = True

    def __init__(self) -> None:
        self.delegate = build_plugin("place", "consolidate")
        self.asked: list[int] = []

    def plugin_for(self, job, state):
        return self.delegate if job.job_id % 2 == 0 else self

    def feasible(self, job, cand, state):
        assert job.job_id % 2 or state.what_if, "asked for a job it hands on"
        self.asked.append(job.job_id)
        return True

    def score(self, job, cand, state):
        assert job.job_id % 2 or state.what_if, "asked for a job it hands on"
        return 0.5


def test_a_delegated_job_is_decided_by_asking_the_delegate_itself():
    from slurm_marl.domain import Place
    from slurm_marl.policy.framework import Policy
    prof = profile_from_mapping({"name": "t", "order": {"plugin": "fifo"},
                                 "place": {"consolidate": 1.0}})
    plugin = HandsEvenJobsOn()
    policy = Policy(prof, build_policy(prof).order, [(plugin, 1.0)])
    decisions = policy.run_cycle(snapshot([node("n1"), node("n2")],
                                          [pending(1, 1), pending(2, 2), pending(3, 1)]))
    places = {d.job_id: d for d in decisions if isinstance(d, Place)}
    assert set(places) == {1, 2, 3}
    assert set(plugin.asked) == {1, 3}
    # the decision names the plugin that decided it, with its own score
    assert [k for k, _ in places[2].scores] == ["consolidate"]
    assert places[1].scores == (("hands_on", 0.5),)


def test_least_interference_judging_many_never_answers_from_before_a_claim():
    """Its answer kept from ``feasible_many`` for ``score_many`` is not taken for the same
    job and candidates once a claim has changed co-location."""
    snap = _cluster()
    job = snap.jobs[-1]
    state = CycleState(snap, track_colocation=True)
    policy = build_policy(profile_from_mapping({"name": "t", "order": {"plugin": "fifo"},
                                                "place": {"consolidate": 1.0}}))
    cands = policy.generate(job, state, state.free, flags=(False, True, True))
    lif = build_plugin("place", "least_interference",
                       {"defer_below": 0.8, "include_neighbours": False},
                       interference_estimator=Slowdowns())
    before = lif.feasible_many(job, cands, state)
    state.claim(replace(job, job_id=11), cands[0])
    after = lif.score_many(job, cands, state)
    fresh = build_plugin("place", "least_interference",
                         {"defer_below": 0.8, "include_neighbours": False},
                         interference_estimator=Slowdowns())
    assert after == [fresh.score(job, c, state) for c in cands]
    assert after[0] < lif.own_speeds(job, cands[:1], CycleState(snap, track_colocation=True))[0]
    assert any(before)
