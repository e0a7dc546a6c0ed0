"""A PettingZoo ``ParallelEnv`` over the simulator: one placement agent per partition.

The simulator runs unchanged (``sim.engine.Simulator`` with a ``Policy`` whose order plugin
and actions come from a profile, default ``las-consolidate``: Tiresias 2D-LAS, preemption,
fit-first backfill) and its only place plugin is the learned plugin's mechanics
(``agent/learned.py``) with this environment as the agent. The simulator runs as a
coroutine (``train/coroutine.py``, a worker thread) that stops inside ``run_cycle``
whenever a job needs a placement decision and waits for ``step``; only one side runs at a
time, so runs are deterministic.

Steps: each step decides one job (the one the cycle is walking, in the order plugin's
order). The agent owning the job's partition is *active*: its action mask allows every GPU
group some candidate uses, plus defer. The other agents see an idle observation (only
defer valid) and their actions are ignored; every agent gets an observation each step, so
agents exchange summaries through the shared model (``models/policy.py``).

Multi-GPU jobs: the agent chooses a *group set* in one step. A group action stands for the
candidate placement (from the framework's generator) that anchors on that group: the one
with the fewest groups among those that use it (``agent/observe.py``). So one action
places all workers of a job, consolidated or split exactly as the framework would allow.

Reward of the active agent (Harmony): for a placement, the interference model's predicted
speed of the job there minus the slowdown it predicts the job imposes on its new
neighbours, minus ``speed_threshold`` x the job's predicted ideal speed (alone, on the
tightest placement); for defer, ``-defer_cost``. So a placement far below the job's ideal
earns less than waiting for a better one (what ``least_interference``'s ``defer_below``
hand-codes); the agents learn when waiting pays. The episode ends when the window has run.

``infos[agent]`` carries ``active``, ``job_id``, ``time_s`` and, for the active agent, the
bin-packing (``pack_action``: best-fit consolidation) and load-balancing (``balance_action``:
spread) choices, which the trainer's job-aware exploration mixes in.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from slurm_marl.colocation import POOR_VS_IDEAL
from slurm_marl.domain import ClusterSnapshot
from slurm_marl.models.interference import InterferenceModel
from slurm_marl.agent.observe import (DEFAULT_CLOCK_STEP_S, DEFAULT_DEFER_ONLY_BELOW,
                                      DEFAULT_MAX_DEFER_S, JOB_FEATURES, LIVE_FEATURES,
                                      SINGLE_AGENT, Observation, Observer, job_dim)
from slurm_marl.models.gnn import LEVELS
from slurm_marl.policy.framework import Policy, build_policy
from slurm_marl.agent.choice import Choice, choice_from_action
from slurm_marl.agent.learned import DEFAULT_WHAT_IF, LearnedPlacement, build_what_if
from slurm_marl.policy.plugins import build_plugin
from slurm_marl.policy.profile import Profile, load_profile
from slurm_marl.placement_shapes import generate_candidates
from slurm_marl.policy.state import CycleState
from slurm_marl.sim.cluster import SimCluster, parse_cluster
from slurm_marl.sim.engine import Simulator
from slurm_marl.sim.traces import TraceJob
from slurm_marl.train.coroutine import ThreadRunner


class PlacementEnv(ParallelEnv):
    metadata = {"name": "slurm_marl_placement_v0", "render_modes": []}

    def __init__(self, cluster: SimCluster | str, workloads: Sequence[list[TraceJob]],
                 interference: InterferenceModel, *, mode: str = "multi",
                 profile: Profile | str = "las-consolidate", strength: str = "high",
                 defer_cost: float = 0.05, speed_threshold: float = POOR_VS_IDEAL,
                 max_steps: int = 0, seed: int = 0,
                 restart_delay_s: float = 30.0,
                 max_defer_s: float = DEFAULT_MAX_DEFER_S,
                 defer_only_below: float = DEFAULT_DEFER_ONLY_BELOW,
                 teacher: Profile | str | None = "las-lif",
                 clock_step_s: float = DEFAULT_CLOCK_STEP_S) -> None:
        self.cluster = cluster if isinstance(cluster, SimCluster) else parse_cluster(cluster)
        self.workloads = [list(w) for w in workloads if w]
        if not self.workloads:
            raise ValueError("PlacementEnv needs at least one non-empty workload")
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self.strength = strength
        self.defer_cost = defer_cost
        self.speed_threshold = speed_threshold
        self.max_steps = max_steps
        self.restart_delay_s = restart_delay_s
        self.mode = mode
        names = [p.name for p in self.cluster.partitions]
        self.possible_agents = list(names) if mode == "multi" else [SINGLE_AGENT]
        self.agents: list[str] = []
        self.observer = Observer(interference, self.possible_agents, mode, max_defer_s,
                                 defer_only_below, clock_step_s)
        self._empty = ClusterSnapshot(time_s=0.0, nodes=self.cluster.nodes,
                                      partitions=self.cluster.partitions,
                                      switches=self.cluster.switches)
        self.observer.cycle(self._empty)
        self.views = self.observer.topology.views
        missing = [a for a in self.possible_agents if a not in self.views]
        if missing:
            raise ValueError(f"partitions without nodes: {missing}")
        self._pack = build_plugin("place", "consolidate")
        self._balance = build_plugin("place", "spread")
        # What-if questions (preemption, backfill planning) get the learned plugin's
        # default answerer, so training sees what inference will do.
        self._what_if = build_what_if(DEFAULT_WHAT_IF, interference)
        self.teacher = None
        if teacher is not None:
            prof = teacher if isinstance(teacher, Profile) else load_profile(teacher)
            self.teacher = build_policy(prof, interference_estimator=interference)
        self._rng = random.Random(seed)
        self._runner = ThreadRunner()
        self._pending: tuple[Observation, CycleState, dict] | None = None
        self._steps = 0
        self.outcome = None
        self.episode_rewards: dict[str, float] = {}
        self._obs_spaces = {a: self._make_obs_space(a) for a in self.possible_agents}
        self._act_spaces = {a: spaces.Discrete(self.views[a].n_groups + 1)
                            for a in self.possible_agents}

    # -- spaces ----------------------------------------------------------------------------
    def _make_obs_space(self, agent: str) -> spaces.Dict:
        view = self.views[agent]
        dims = self.observer.cycle(self._empty).x[agent]
        inner = {level: spaces.Box(-np.inf, np.inf, shape=tuple(dims[level].shape),
                                   dtype=np.float32) for level in LEVELS}
        g = view.n_groups
        inner["job"] = spaces.Box(-np.inf, np.inf, shape=(job_dim(self.observer.n_vocab),),
                                  dtype=np.float32)
        inner["live"] = spaces.Box(-np.inf, np.inf, shape=(g, len(LIVE_FEATURES)),
                                   dtype=np.float32)
        inner["action_mask"] = spaces.Box(0, 1, shape=(g + 1,), dtype=np.int8)
        return spaces.Dict(inner)

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    # -- the paused simulator -------------------------------------------------------------
    def _choose(self, obs: Observation, state: CycleState) -> Choice:
        """Runs inside the simulator: hand the decision to ``step`` and wait for it."""
        return self._runner.pause((obs, state, self._heuristics(obs, state)))

    def _heuristics(self, obs: Observation, state: CycleState) -> dict:
        """The group actions standing for the bin-packing and the load-balancing choice,
        and the teacher's (defer if it would wait; its placement's group action, or the
        bin-packing one when no group action stands for exactly that placement)."""
        job = state.snapshot.job(obs.job_id)
        cands = generate_candidates(job, state, state.view)
        out = {}
        for key, plugin in (("pack_action", self._pack), ("balance_action", self._balance)):
            best, best_score = None, None
            for cand in cands:
                if obs.group_for(cand.allocs) is None:
                    continue
                s = plugin.score(job, cand, state)
                if best_score is None or s > best_score + 1e-12:
                    best, best_score = cand, s
            out[key] = obs.group_for(best.allocs) if best is not None else obs.defer_action
        if self.teacher is not None:
            best = self.teacher.best_candidate(job, cands, state)
            if best is None:
                action = obs.defer_action if bool(obs.mask[obs.defer_action]) \
                    else out["pack_action"]
            else:
                action = obs.group_for(best.allocs)
                if action is None:
                    action = out["pack_action"]
            out["teacher_action"] = action
        return out

    def _handle(self, msg: tuple[str, object]) -> bool:
        """True while the simulator waits for a decision; False once the run has ended."""
        kind, payload = msg
        if kind == "error":
            self._pending = None
            raise RuntimeError(f"simulation failed: {payload}") from payload
        if kind == "pause":
            self._pending = payload
            return True
        self._pending = None
        self.outcome = payload if kind == "done" else None
        return False

    # -- observations ------------------------------------------------------------------------
    @staticmethod
    def to_numpy(obs: Observation) -> dict[str, np.ndarray]:
        out = {level: obs.x[level].numpy() for level in LEVELS}
        out["job"] = obs.job.numpy()
        out["live"] = obs.live.numpy()
        out["action_mask"] = obs.mask.numpy().astype(np.int8)
        return out

    def _observations(self, snapshot: ClusterSnapshot):
        raw: dict[str, Observation] = {}
        active = self._pending[0].agent if self._pending is not None else None
        for agent in self.agents:
            if agent == active:
                raw[agent] = self._pending[0]
            else:
                raw[agent] = self.observer.idle(agent, snapshot)
        infos = {}
        for agent in self.agents:
            info = {"active": agent == active, "raw": raw[agent], "time_s": snapshot.time_s}
            if agent == active:
                info.update(self._pending[2])
                info["job_id"] = self._pending[0].job_id
            infos[agent] = info
        return {a: self.to_numpy(o) for a, o in raw.items()}, infos

    def placement_reward(self, obs: Observation, group: int) -> float:
        """Predicted speed - threshold x ideal speed - predicted slowdown of neighbours."""
        ideal = float(obs.job[JOB_FEATURES.index("ideal_speed")])
        return float(obs.reward[group]) - self.speed_threshold * ideal

    def reseed(self, seed: int) -> None:
        """Seed the choice of workloads and model-type draws without starting an episode."""
        self._rng = random.Random(seed)

    # -- the API -----------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        self._runner.stop()
        if seed is not None:
            self._rng = random.Random(seed)
        options = options or {}
        index = options.get("workload")
        if index is None:
            index = self._rng.randrange(len(self.workloads))
        sim_seed = options.get("sim_seed", self._rng.randrange(2 ** 31))
        plugin = LearnedPlacement(self.observer, self._choose, self._pack, "consolidate",
                                  self._what_if)
        order = build_plugin("order", self.profile.order, self.profile.order_params)
        policy = Policy(self.profile, order, [(plugin, 1.0)])
        sim = Simulator(self.cluster, self.workloads[index], policy,
                        interference=self.strength, seed=sim_seed,
                        restart_delay_s=self.restart_delay_s, drop_oversized=True)
        self.agents = list(self.possible_agents)
        self._steps = 0
        self.outcome = None
        self.episode_rewards = dict.fromkeys(self.possible_agents, 0.0)
        if not self._handle(self._runner.start(sim.run)):
            self.agents = []
            return {}, {}
        return self._observations(self._pending[1].snapshot)

    def step(self, actions: dict):
        if self._pending is None:
            raise RuntimeError("step() before reset() or after the episode ended")
        obs, state, _ = self._pending
        agent = obs.agent
        action = int(actions.get(agent, obs.defer_action))
        choice = choice_from_action(action, obs)
        reward = -self.defer_cost if choice.defer else self.placement_reward(obs, action)
        rewards = dict.fromkeys(self.agents, 0.0)
        rewards[agent] = reward
        self.episode_rewards[agent] += reward
        self._steps += 1
        last_snapshot = state.snapshot
        running = self._handle(self._runner.resume(choice))
        truncate = bool(running and self.max_steps and self._steps >= self.max_steps)
        if running and not truncate:
            observations, infos = self._observations(self._pending[1].snapshot)
            done = dict.fromkeys(self.agents, False)
            return observations, rewards, done, dict(done), infos
        if truncate:
            self._runner.stop()
            self._pending = None
        observations, infos = self._observations(last_snapshot)
        terminations = dict.fromkeys(self.agents, not truncate)
        truncations = dict.fromkeys(self.agents, truncate)
        self.agents = []
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        self._runner.stop()
        self._pending = None
