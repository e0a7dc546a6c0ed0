"""Plugins declare their contract (policy/plugins.py Protocols); the framework reads the
declared flags and capabilities, never guesses them, and a plugin missing a member is
refused by name when it is built."""

import types

import pytest

from policy_builders import node, pending, snapshot
from slurm_marl.policy import plugins
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.plugins import (Delegating, PlacePlugin, PluginError, Proposer,
                                       build_plugin)
from slurm_marl.policy.profile import profile_from_mapping
from slurm_marl.policy.state import CycleState


class NoFlags:
    key = "noflags"

    def feasible(self, job, cand, state):
        return True

    def score(self, job, cand, state):
        return 0.0


def _fake_module(plugin_cls):
    return types.SimpleNamespace(build=lambda params, **context: plugin_cls())


def test_a_place_plugin_missing_a_declared_flag_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(plugins, "load_plugin_module", lambda kind, key: _fake_module(NoFlags))
    with pytest.raises(PluginError, match="does not declare filters, needs_colocation, "
                                          "node_specific"):
        build_plugin("place", "noflags")


@pytest.mark.parametrize("key", ["consolidate", "binpack", "spread", "tiresias_skew",
                                 "least_interference"])
def test_heuristics_honour_the_contract_and_decide_nothing_themselves(key):
    plugin = build_plugin("place", key)
    assert isinstance(plugin, PlacePlugin)
    assert not isinstance(plugin, Proposer) and not isinstance(plugin, Delegating)
    assert plugin.node_specific is False


def test_the_learned_plugin_declares_what_it_does():
    plugin = build_plugin("place", "learned")
    assert isinstance(plugin, PlacePlugin) and isinstance(plugin, Proposer) \
        and isinstance(plugin, Delegating)
    assert plugin.node_specific and plugin.filters and plugin.needs_colocation


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


def test_framework_reads_declared_flags():
    prof = profile_from_mapping({"name": "t", "order": {"plugin": "fifo"},
                                 "place": {"consolidate": 1.0, "tiresias_skew": 0.5}})
    policy = build_policy(prof)
    assert policy._dedupe_nodes and not policy._needs_colocation
    assert not policy._monotone          # tiresias_skew filters
    assert policy._proposers == () and not policy._delegating


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
