"""Acting in the ``PlacementEnv``: the policy's forward pass on the environment's
observations, the greedy and random choosers, and playing whole episodes with a chooser.

The forward pass is ``PlacementPolicy.act`` (``models/policy.py``), the same one the learned
plugin runs at inference; this module only builds its inputs from the environment's
``infos`` (every agent's observation, for the summary exchange). PPO's exploration and
behaviour probabilities are in ``train/ppo.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import torch

from slurm_marl.agent.observe import Observation
from slurm_marl.models.policy import ActOutput, AgentInput, PlacementPolicy
from slurm_marl.agent.choice import choice_from_probs
from slurm_marl.train.env import PlacementEnv


def agent_inputs(env: PlacementEnv, xs: Sequence[dict]) -> dict[str, AgentInput]:
    """Every agent's level tensors for a batch of steps (``xs[i]``: agent -> level ->
    tensor), for ``PlacementPolicy.encode``; job, live and mask are left out."""
    out = {}
    for agent, view in env.views.items():
        x = {lvl: torch.stack([step[agent][lvl] for step in xs]) for lvl in view.rows}
        out[agent] = AgentInput(x=x, parent=view.parent, job=None, live=None, mask=None)
    return out


def step_xs(env: PlacementEnv, infos: dict) -> dict:
    """One step's level tensors of every agent (what a ``Transition`` keeps)."""
    return {a: infos[a]["raw"].x for a in env.views}


def active_agent(infos: dict) -> str:
    return next(a for a, i in infos.items() if i["active"])


@torch.no_grad()
def act_on_step(policy: PlacementPolicy, env: PlacementEnv, infos: dict
                ) -> tuple[str, Observation, ActOutput]:
    """(active agent, its raw observation, the policy's forward pass on it as a batch of
    one) for one environment step."""
    active = active_agent(infos)
    raw = infos[active]["raw"]
    encoded = policy.encode(agent_inputs(env, [step_xs(env, infos)]))
    inp = AgentInput(x=None, parent=None, job=raw.job[None], live=raw.live[None],
                     mask=raw.mask[None])
    return active, raw, policy.act(active, encoded, inp)


def greedy_chooser(policy: PlacementPolicy, env: PlacementEnv) -> Callable[[dict], int]:
    """The trained agents' most probable action (the learned plugin's rule,
    ``choice_from_probs``)."""
    def choose(infos: dict) -> int:
        _, raw, out = act_on_step(policy, env, infos)
        return choice_from_probs(out.probs()[0], raw).action
    return choose


def random_chooser(seed: int, allow_defer: bool = False) -> Callable[[dict], int]:
    """Uniform over the valid groups (and defer, if allowed): the random placement baseline."""
    rng = random.Random(seed)

    def choose(infos: dict) -> int:
        mask = infos[active_agent(infos)]["raw"].mask.clone()
        if not allow_defer and mask[:-1].any():
            mask[-1] = False
        return rng.choice(torch.nonzero(mask).flatten().tolist())
    return choose


def run_episodes(env: PlacementEnv, choose: Callable[[dict], int], workloads: list[int],
                 seed: int = 0) -> dict:
    """Play the given workloads (indices) with ``choose``; same sim seeds for every chooser."""
    rewards, defers, steps, jcts, unfinished = [], 0, 0, [], 0
    for k, index in enumerate(workloads):
        _, infos = env.reset(options={"workload": index, "sim_seed": seed + k})
        while env.agents:
            action = choose(infos)
            active = active_agent(infos)
            defers += action == infos[active]["raw"].defer_action
            _, r, _, _, infos = env.step({active: action})
            rewards.append(r[active])
            steps += 1
        done = [j.finish_s - j.submit_s for j in env.outcome.jobs if j.finish_s is not None]
        unfinished += len(env.outcome.jobs) - len(done)
        if done:
            jcts.append(sum(done) / len(done))
    return {"reward_per_decision": float(np.mean(rewards)), "defer_rate": defers / steps,
            "avg_jct_s": float(np.mean(jcts)) if jcts else None, "decisions": steps,
            "unfinished": unfinished}
