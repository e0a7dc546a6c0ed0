"""Multi-agent PPO for GPU-group placement, with Harmony's techniques. Reads top to bottom.

1. Roll out whole episodes in the ``PlacementEnv`` (one step = one job decision by the agent
   of the job's partition). Acting: masked softmax over the agent's groups + defer; with
   probability epsilon (decaying) the *job-aware exploration* takes the bin-packing choice
   (best-fit consolidation, preferred for multi-GPU jobs) or the load-balancing choice
   (spread, preferred for 1-GPU jobs) instead, or, when every placement on offer is poor
   for this job (predicted below 80% of its ideal speed), waits. The behaviour probability
   of the taken action, ``(1 - eps) pi(a) + eps mix(a)``, is stored so PPO's ratio is a
   true importance weight.
2. Rewards come from the interference model (the environment computes them).
3. Advantages: GAE per agent over its own decisions in an episode. An episode cut off
   (truncated, the environment's ``max_steps``) rather than run to its end bootstraps from
   the value of each agent's last observation instead of 0.
4. Update: PPO clipped surrogate + value loss - entropy bonus, several epochs of
   minibatches over the new rollout plus the last ``replay`` rollouts kept in a FIFO replay
   buffer (experience replay, Harmony).
5. Log a CSV row per update, checkpoint (``LearnedCheckpoint`` + optimiser and RNG state, so
   a run resumes where it stopped), and every ``eval_every`` updates evaluate the greedy
   policy on a validation window in the simulator (average JCT). The run's files are
   ``train/run_dir.py``'s; the forward pass is ``PlacementPolicy.act`` (as at inference),
   fed by ``train/acting.py``, which also has the greedy and random choosers.

Imitation warm start (optional, ``imitate_updates``): the first updates clone a teacher
heuristic (the environment's ``teacher_action``, by default ``las-lif``'s least-interference
choice, waits included) DAgger-style: episodes are acted by the teacher with a probability
falling from 1 to 0.2 and by the policy otherwise, every visited decision is labelled with the
teacher's action, and the loss is cross-entropy to the label plus the value loss over all
imitation rollouts so far (DAgger's aggregated data, kept in memory: a run resumed inside
the imitation phase starts aggregating again). PPO then starts from a policy that already knows when
waiting pays, which the reward alone did not teach (docs/benchmarks.md). With ``bc_coef`` the
cross-entropy stays in PPO's loss, fading linearly to 0, so fine-tuning starts near the
teacher and may leave it where the reward says so.

The single-agent variant is the same loop with ``mode="single"``: one agent over the whole
cluster, the partition only restricting its mask.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from slurm_marl.agent.checkpoint import policy_config
from slurm_marl.colocation import POOR_VS_IDEAL
from slurm_marl.models.interference import InterferenceModel
from slurm_marl.agent.observe import LIVE_FEATURES
from slurm_marl.models.policy import AgentInput, PlacementPolicy
from slurm_marl.train.acting import act_on_step, agent_inputs, step_xs
from slurm_marl.train.env import PlacementEnv
from slurm_marl.train.run_dir import RunDir, TrainState, env_extra, update_row


@dataclass
class PPOConfig:
    updates: int = 50
    episodes_per_update: int = 4
    lr: float = 1e-3
    gamma: float = 0.8
    gae_lambda: float = 0.95
    clip: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    epochs: int = 4
    minibatch: int = 128
    eps_start: float = 0.3
    eps_end: float = 0.02
    replay: int = 2
    hidden: int = 32
    seed: int = 0
    checkpoint_every: int = 5
    eval_every: int = 0
    imitate_updates: int = 0
    bc_coef: float = 0.0


@dataclass
class Transition:
    agent: str
    x: dict                      # agent -> level -> tensor (all agents: summaries exchange)
    job: torch.Tensor
    live: torch.Tensor
    mask: torch.Tensor
    action: int
    logp_behaviour: float
    value: float
    reward: float
    episode: int
    teacher: int = -1            # the teacher's action here (-1: none)
    truncated: bool = False      # the agent's last decision in an episode that was cut off
    advantage: float = 0.0
    ret: float = 0.0


def epsilon_at(update: int, cfg: PPOConfig) -> float:
    frac = min(1.0, update / max(1, cfg.updates - 1))
    return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start)


def exploration_mix(job_log2_gpus: float, poor: bool) -> tuple[float, float, float]:
    """(bin-packing, load-balancing, wait) weights: pack multi-GPU jobs, spread 1-GPU jobs,
    and when every placement on offer is poor (below ``POOR_VS_IDEAL`` of the job's ideal
    speed) also try waiting for a better one."""
    pack, balance = (0.75, 0.25) if job_log2_gpus > 0 else (0.25, 0.75)
    if poor:
        return pack / 2, balance / 2, 0.5
    return pack, balance, 0.0



def gae(rewards: Sequence[float], values: Sequence[float], dones: Sequence[bool],
        truncations: Sequence[bool], gamma: float, lam: float
        ) -> tuple[list[float], list[float]]:
    """(advantages, returns) of a sequence of steps, CleanRL's loop. ``dones[t]``: the
    episode ended after step ``t``; ``truncations[t]``: it was cut off there rather than
    run to its end, so step ``t`` bootstraps from the value of the last observation,
    ``values[t]`` (the environment hands no later one: ``PlacementEnv`` ends a truncated
    episode with idle observations, whose job the critic never sees in training), instead
    of 0. The last step ends the sequence."""
    n = len(rewards)
    adv = [0.0] * n
    last = 0.0
    for t in reversed(range(n)):
        if t == n - 1 or dones[t]:
            next_value, last = (values[t] if truncations[t] else 0.0), 0.0
        else:
            next_value = values[t + 1]
        delta = rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, [a + v for a, v in zip(adv, values)]


def compute_gae(transitions: list[Transition], gamma: float, lam: float) -> None:
    """In place: advantage and return of each transition, per agent and episode (an agent's
    decisions in one episode are one sequence; ``truncated`` marks a cut-off end)."""
    by_key: dict[tuple, list[Transition]] = {}
    for t in transitions:
        by_key.setdefault((t.episode, t.agent), []).append(t)
    for seq in by_key.values():
        adv, ret = gae([t.reward for t in seq], [t.value for t in seq],
                       [False] * (len(seq) - 1) + [True], [t.truncated for t in seq],
                       gamma, lam)
        for t, a, r in zip(seq, adv, ret):
            t.advantage, t.ret = a, r


def teacher_prob_at(update: int, cfg: PPOConfig) -> float:
    """DAgger's mixing: the share of imitation-phase decisions the teacher acts on."""
    frac = update / max(1, cfg.imitate_updates - 1)
    return 1.0 - 0.8 * min(1.0, frac)


def bc_coef_at(update: int, cfg: PPOConfig) -> float:
    """Weight of the teacher cross-entropy during PPO: ``bc_coef`` fading to 0."""
    ppo_updates = cfg.updates - cfg.imitate_updates
    done = update - cfg.imitate_updates
    return cfg.bc_coef * max(0.0, 1.0 - done / max(1, ppo_updates))


def evaluate_batch(policy: PlacementPolicy, env: PlacementEnv, batch: list[Transition],
                   actions: list[int] | None = None):
    """(log-prob of the taken actions, or of ``actions``, entropy, value), in batch
    order."""
    encoded = policy.encode(agent_inputs(env, [t.x for t in batch]))
    logp = torch.zeros(len(batch))
    ent = torch.zeros(len(batch))
    value = torch.zeros(len(batch))
    for agent in env.views:
        idx = [i for i, t in enumerate(batch) if t.agent == agent]
        if not idx:
            continue
        sel = torch.tensor(idx)
        inp = AgentInput(x=None, parent=None,
                         job=torch.stack([batch[i].job for i in idx]),
                         live=torch.stack([batch[i].live for i in idx]),
                         mask=torch.stack([batch[i].mask for i in idx]))
        out = policy.act(agent, encoded, inp, rows=sel)
        chosen = torch.tensor([(actions[i] if actions is not None else batch[i].action)
                               for i in idx])
        logp = logp.index_put((sel,), out.log_prob(chosen))
        ent = ent.index_put((sel,), out.entropy())
        value = value.index_put((sel,), out.value)
    return logp, ent, value


@torch.no_grad()
def act(policy: PlacementPolicy, env: PlacementEnv, infos: dict, eps: float,
        gen: torch.Generator, rng: random.Random, teacher_prob: float = 0.0):
    """(agent, action, behaviour log-prob, value, raw observation, teacher's action,
    whether the policy's most probable action is the teacher's) for the active agent.
    With ``teacher_prob`` the teacher acts (imitation phase; no exploration then)."""
    active, raw, out = act_on_step(policy, env, infos)
    probs, value = out.probs()[0], out.value
    pack, balance = infos[active]["pack_action"], infos[active]["balance_action"]
    defer = raw.defer_action
    valid = raw.mask[:-1]
    best_vs_ideal = float(raw.live[valid, LIVE_FEATURES.index("speed_vs_ideal")].max()) \
        if bool(valid.any()) else 1.0
    poor = bool(raw.mask[defer]) and best_vs_ideal < POOR_VS_IDEAL
    w_pack, w_balance, w_wait = exploration_mix(float(raw.job[0]), poor)
    teacher = int(infos[active].get("teacher_action", -1))
    if teacher >= 0 and not bool(raw.mask[teacher]):
        teacher = -1
    agrees = teacher >= 0 and int(torch.argmax(probs)) == teacher
    if teacher_prob > 0:
        action = teacher if teacher >= 0 and rng.random() < teacher_prob else \
            int(torch.multinomial(probs, 1, generator=gen))
        return active, action, 0.0, float(value[0]), raw, teacher, agrees
    if rng.random() < eps:
        u = rng.random()
        action = pack if u < w_pack else balance if u < w_pack + w_balance else defer
    else:
        action = int(torch.multinomial(probs, 1, generator=gen))
    behaviour = (1 - eps) * float(probs[action]) + eps * (
        w_pack * (action == pack) + w_balance * (action == balance)
        + w_wait * (action == defer))
    return (active, action, math.log(max(behaviour, 1e-12)), float(value[0]), raw, teacher,
            agrees)


def rollout(policy, env, n_episodes, eps, gen, rng, episode_base, teacher_prob=0.0):
    """Whole episodes; returns transitions and per-episode stats."""
    transitions: list[Transition] = []
    stats = []
    for k in range(n_episodes):
        _, infos = env.reset()
        defers = steps = agree = labelled = 0
        truncated, first = False, len(transitions)
        while env.agents:
            agent, action, logp, value, raw, teacher, agrees = act(
                policy, env, infos, eps, gen, rng, teacher_prob)
            _, rewards, _, truncations, infos_next = env.step({agent: action})
            transitions.append(Transition(
                agent, step_xs(env, infos), raw.job, raw.live,
                raw.mask, action, logp, value, rewards[agent], episode_base + k, teacher))
            defers += action == raw.defer_action
            agree += agrees
            labelled += teacher >= 0
            steps += 1
            truncated = any(truncations.values())
            infos = infos_next
        if truncated:   # each agent's last decision of the episode bootstraps
            ends = {t.agent: t for t in transitions[first:]}
            for t in ends.values():
                t.truncated = True
        jct = None
        if env.outcome is not None:
            done = [j.finish_s - j.submit_s for j in env.outcome.jobs if j.finish_s is not None]
            jct = sum(done) / len(done) if done else None
        stats.append({"steps": steps, "defers": defers, "avg_jct_s": jct,
                      "agree": agree, "labelled": labelled,
                      "reward": sum(env.episode_rewards.values())})
    return transitions, stats


def _imitation_loss(policy, env, batch: list[Transition]) -> torch.Tensor | None:
    """Cross-entropy of the policy to the teacher's actions (labelled transitions)."""
    labelled = [t for t in batch if t.teacher >= 0]
    if not labelled:
        return None
    logp, _, _ = evaluate_batch(policy, env, labelled, [t.teacher for t in labelled])
    return -logp.mean()


def imitation_update(policy, env, optimizer, batch_all: list[Transition], cfg: PPOConfig,
                     gen: torch.Generator) -> dict:
    """Behaviour cloning of the teacher (DAgger's aggregated data) plus the value loss."""
    n = len(batch_all)
    out = {"imitation_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
    count = 0
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=gen).tolist()
        for start in range(0, n, cfg.minibatch):
            batch = [batch_all[i] for i in order[start:start + cfg.minibatch]
                     if batch_all[i].teacher >= 0]
            if len(batch) < 2:
                continue
            logp, ent, value = evaluate_batch(policy, env, batch,
                                              [t.teacher for t in batch])
            ce = -logp.mean()
            v_loss = 0.5 * ((value - torch.tensor([t.ret for t in batch])) ** 2).mean()
            loss = ce + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            optimizer.step()
            out["imitation_loss"] += float(ce.detach())
            out["value_loss"] += float(v_loss.detach())
            out["entropy"] += float(ent.mean().detach())
            count += 1
    return {k: v / max(1, count) for k, v in out.items()}


def ppo_update(policy, env, optimizer, batch_all: list[Transition], cfg: PPOConfig,
               gen: torch.Generator, bc_coef: float = 0.0) -> dict:
    n = len(batch_all)
    out = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0,
           "clipfrac": 0.0, "imitation_loss": 0.0}
    count = 0
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=gen).tolist()
        for start in range(0, n, cfg.minibatch):
            batch = [batch_all[i] for i in order[start:start + cfg.minibatch]]
            if len(batch) < 2:
                continue
            logp, ent, value = evaluate_batch(policy, env, batch)
            old = torch.tensor([t.logp_behaviour for t in batch])
            adv = torch.tensor([t.advantage for t in batch])
            ret = torch.tensor([t.ret for t in batch])
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            ratio = torch.exp(logp - old)
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)).mean()
            v_loss = 0.5 * ((value - ret) ** 2).mean()
            loss = pg + cfg.vf_coef * v_loss - cfg.ent_coef * ent.mean()
            ce = _imitation_loss(policy, env, batch) if bc_coef > 0 else None
            if ce is not None:
                loss = loss + bc_coef * ce
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                out["policy_loss"] += float(pg)
                out["value_loss"] += float(v_loss)
                out["entropy"] += float(ent.mean())
                out["approx_kl"] += float(((ratio - 1) - torch.log(ratio)).mean())
                out["clipfrac"] += float(((ratio - 1).abs() > cfg.clip).float().mean())
                out["imitation_loss"] += float(ce) if ce is not None else 0.0
            count += 1
    return {k: v / max(1, count) for k, v in out.items()}


# -- the run ---------------------------------------------------------------------------------

def train(env: PlacementEnv, interference: InterferenceModel, cfg: PPOConfig, out: Path, *,
          resume: bool = False, evaluate: Callable[[Path], float] | None = None,
          extra: dict | None = None,
          progress: Callable[[TrainState, dict], None] | None = None
          ) -> tuple[TrainState, PlacementPolicy]:
    """Train (or resume) into ``out``: policy.pt/json (always at the end), train_state.*,
    train_log.csv, training_curve.png (``train/run_dir.py``); returns the final state and
    policy. ``evaluate(checkpoint_path) -> avg JCT`` runs every ``cfg.eval_every``
    updates."""
    torch.set_num_threads(1)
    run = RunDir(out, cfg, interference, {**(extra or {}), **env_extra(env)})
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    env.reseed(cfg.seed)
    agents = tuple(env.possible_agents)
    policy = PlacementPolicy(policy_config(interference, agents, env.mode, cfg.hidden))
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5)
    state = TrainState()
    if resume:
        policy = run.load_policy(agents, env.mode)
        optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5)
        state = run.restore(optimizer, gen, rng, env)
    run.open_log(resume)

    if cfg.imitate_updates and env.teacher is None:
        raise ValueError("imitate_updates needs an environment with a teacher profile")
    if cfg.imitate_updates >= cfg.updates:
        raise ValueError(f"imitate_updates ({cfg.imitate_updates}) must be fewer than "
                         f"updates ({cfg.updates}): PPO needs some")
    replay: deque[list[Transition]] = deque(maxlen=max(0, cfg.replay))
    # DAgger aggregates every imitation rollout; PPO's buffer holds the last ``replay``.
    imitation: list[list[Transition]] = []
    while state.update < cfg.updates:
        t0 = time.perf_counter()
        imitating = state.update < cfg.imitate_updates
        eps = 0.0 if imitating else epsilon_at(state.update - cfg.imitate_updates,
                                               replace(cfg, updates=cfg.updates
                                                       - cfg.imitate_updates))
        policy.eval()
        transitions, stats = rollout(
            policy, env, cfg.episodes_per_update, eps, gen, rng, state.episodes,
            teacher_prob_at(state.update, cfg) if imitating else 0.0)
        compute_gae(transitions, cfg.gamma, cfg.gae_lambda)
        policy.train()
        if imitating:
            imitation.append(transitions)
            losses = imitation_update(policy, env, optimizer,
                                      [t for past in imitation for t in past], cfg, gen)
        else:
            batch = transitions + [t for old in replay for t in old]
            losses = ppo_update(policy, env, optimizer, batch, cfg, gen,
                                bc_coef_at(state.update, cfg))
            if cfg.replay > 0:
                replay.append(transitions)
        state.update += 1
        state.env_steps += len(transitions)
        state.episodes += len(stats)
        state.wall_s += time.perf_counter() - t0
        row = update_row(state, eps, stats, [t.reward for t in transitions], losses,
                         imitating)
        last = state.update == cfg.updates
        if evaluate is not None and cfg.eval_every and (state.update % cfg.eval_every == 0
                                                        or last):
            policy.eval()
            run.save(state, policy, optimizer, gen, rng, env)
            run.record_eval(state, policy, evaluate(run.checkpoint), row)
        state.history.append(row)
        if last or row["eval_avg_jct_s"] != "" or (
                cfg.checkpoint_every and state.update % cfg.checkpoint_every == 0):
            run.save(state, policy, optimizer, gen, rng, env)
        run.append(row)
        if progress is not None:
            progress(state, row)
    run.finish(f"{env.mode}-agent PPO on {env.cluster.spec} ({env.strength})")
    return state, policy.eval()
