"""The PettingZoo environment over the simulator."""

import pytest
from pettingzoo.test import parallel_api_test

from slurm_marl.agent.observe import JOB_FEATURES, LIVE_FEATURES
from slurm_marl.train.env import PlacementEnv
from train_helpers import tiny_workload


@pytest.fixture
def env(tiny_cluster, tiny_interference):
    e = PlacementEnv(tiny_cluster, [tiny_workload(30, 7), tiny_workload(30, 8)],
                     tiny_interference, seed=0)
    yield e
    e.close()


def test_parallel_api_test_multi_agent(env):
    parallel_api_test(env, num_cycles=400)


def test_parallel_api_test_single_agent(tiny_cluster, tiny_interference):
    env = PlacementEnv(tiny_cluster, [tiny_workload(20, 3)], tiny_interference,
                       mode="single")
    assert env.possible_agents == ["cluster"]
    assert env.action_space("cluster").n == 8 + 1
    parallel_api_test(env, num_cycles=400)
    env.close()


def _play(env, seed, pick):
    obs, infos = env.reset(seed=seed)
    trace = []
    while env.agents:
        active = [a for a in env.agents if infos[a]["active"]]
        assert len(active) == 1
        agent = active[0]
        for other in env.agents:
            mask = obs[other]["action_mask"]
            assert mask[-1] == 1 or other == agent   # defer always valid when idle
            if other != agent:
                assert mask[:-1].sum() == 0
        action = pick(obs[agent], infos[agent])
        assert obs[agent]["action_mask"][action] == 1
        obs, rewards, term, trunc, infos = env.step({agent: action})
        trace.append((agent, action, round(rewards[agent], 6)))
    return trace, term, trunc


def test_one_active_agent_per_step_and_deterministic_runs(env):
    pack = lambda o, i: i["pack_action"]  # noqa: E731
    first, term, trunc = _play(env, 5, pack)
    second, _, _ = _play(env, 5, pack)
    assert first == second and len(first) >= 30
    assert all(term.values()) and not any(trunc.values())
    assert {a for a, _, _ in first} == {"a", "b"}
    assert env.outcome is not None and all(j.finish_s for j in env.outcome.jobs)


def test_balance_and_pack_differ_and_rewards_come_from_the_model(env):
    balance, _, _ = _play(env, 5, lambda o, i: i["balance_action"])
    pack, _, _ = _play(env, 5, lambda o, i: i["pack_action"])
    assert balance != pack
    obs, infos = env.reset(seed=5)
    ideal_col = JOB_FEATURES.index("ideal_speed")
    while env.agents:
        agent = next(a for a in env.agents if infos[a]["active"])
        raw = infos[agent]["raw"]
        action = infos[agent]["pack_action"]
        ideal = float(raw.job[ideal_col])
        speed, imposed = (float(raw.live[action, LIVE_FEATURES.index(k)])
                          for k in ("pred_speed", "imposed_slowdown"))
        obs, rewards, _, _, infos = env.step({agent: action})
        assert 0.0 < speed <= 1.0 and 0.0 < ideal <= 1.0 and imposed >= 0.0
        assert rewards[agent] == pytest.approx(speed - imposed - 0.8 * ideal, abs=1e-5)


def test_defer_costs_and_masked_actions_are_refused(env, tiny_cluster, tiny_interference):
    # the first job meets an idle cluster: a spot at its ideal speed is free, so no waiting
    obs, infos = env.reset(seed=1)
    agent = next(a for a in env.agents if infos[a]["active"])
    defer = len(obs[agent]["action_mask"]) - 1
    assert obs[agent]["action_mask"][defer] == 0
    with pytest.raises(ValueError, match="defer is masked"):
        env.step({agent: defer})
    lenient = PlacementEnv(tiny_cluster, [tiny_workload(30, 7)], tiny_interference,
                           defer_only_below=1.01)
    obs, infos = lenient.reset(seed=1)
    agent = next(a for a in lenient.agents if infos[a]["active"])
    assert obs[agent]["action_mask"][defer] == 1
    _, rewards, _, _, _ = lenient.step({agent: defer})
    assert rewards[agent] == pytest.approx(-lenient.defer_cost)
    lenient.close()


def test_truncation_stops_the_simulator(tiny_cluster, tiny_interference):
    env = PlacementEnv(tiny_cluster, [tiny_workload(30, 7)], tiny_interference,
                       max_steps=5)
    obs, infos = env.reset(seed=0)
    steps = 0
    while env.agents:
        agent = next(a for a in env.agents if infos[a]["active"])
        obs, _, term, trunc, infos = env.step({agent: infos[agent]["pack_action"]})
        steps += 1
    assert steps == 5 and all(trunc.values()) and not any(term.values())
    env.reset(seed=0)   # a fresh episode after a truncated one
    assert env.agents
    env.close()
