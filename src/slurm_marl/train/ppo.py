"""Multi-agent PPO for GPU-group placement, with Harmony's techniques. Reads top to bottom.

1. Roll out whole episodes in the ``PlacementEnv`` (one step = one job decision by the agent
   of the job's partition). Acting: masked softmax over the agent's groups + defer; with
   probability epsilon (decaying) the *job-aware exploration* takes the bin-packing choice
   (best-fit consolidation, preferred for multi-GPU jobs) or the load-balancing choice
   (spread, preferred for 1-GPU jobs) instead, or, when every placement on offer is poor
   for this job (predicted below 80% of its ideal speed), waits. The behaviour probability of the taken
   action, ``(1 - eps) pi(a) + eps mix(a)``, is stored so PPO's ratio is a true importance
   weight.
2. Rewards come from the interference model (the environment computes them).
3. Advantages: GAE per agent over its own decisions in an episode.
4. Update: PPO clipped surrogate + value loss - entropy bonus, several epochs of
   minibatches over the new rollout plus the last ``replay`` rollouts kept in a FIFO replay
   buffer (experience replay, Harmony).
5. Log a CSV row per update, checkpoint (``LearnedCheckpoint`` + optimiser and RNG state, so
   a run resumes where it stopped), and every ``eval_every`` updates evaluate the greedy
   policy on a validation window in the simulator (average JCT).

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

import csv
import json
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from slurm_marl.models.checkpoint import LearnedCheckpoint, policy_config
from slurm_marl.models.interference import InterferenceModel
from slurm_marl.models.policy import (AgentInput, PlacementPolicy, masked_entropy,
                                      masked_log_softmax, masked_softmax)
from slurm_marl.models.observe import LIVE_FEATURES
from slurm_marl.train.env import PlacementEnv

CSV_COLUMNS = ["update", "env_steps", "episodes", "wall_s", "epsilon", "episode_reward",
               "step_reward", "defer_rate", "train_avg_jct_s", "policy_loss", "value_loss",
               "entropy", "approx_kl", "clipfrac", "phase", "teacher_agreement",
               "imitation_loss", "eval_avg_jct_s"]


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
    advantage: float = 0.0
    ret: float = 0.0


@dataclass
class TrainState:
    update: int = 0
    env_steps: int = 0
    episodes: int = 0
    wall_s: float = 0.0
    best_eval_jct_s: float | None = None
    history: list = field(default_factory=list)


def epsilon_at(update: int, cfg: PPOConfig) -> float:
    frac = min(1.0, update / max(1, cfg.updates - 1))
    return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start)


def exploration_mix(job_log2_gpus: float, poor: bool) -> tuple[float, float, float]:
    """(bin-packing, load-balancing, wait) weights: pack multi-GPU jobs, spread 1-GPU jobs,
    and when every placement on offer is poor (below ``POOR_SPEED`` of the job's ideal
    speed) also try waiting for a better one."""
    pack, balance = (0.75, 0.25) if job_log2_gpus > 0 else (0.25, 0.75)
    if poor:
        return pack / 2, balance / 2, 0.5
    return pack, balance, 0.0


POOR_SPEED = 0.8


def compute_gae(transitions: list[Transition], gamma: float, lam: float) -> None:
    """In place: advantage and return of each transition, per agent and episode."""
    by_key: dict[tuple, list[Transition]] = {}
    for t in transitions:
        by_key.setdefault((t.episode, t.agent), []).append(t)
    for seq in by_key.values():
        gae, next_value = 0.0, 0.0
        for t in reversed(seq):
            delta = t.reward + gamma * next_value - t.value
            gae = delta + gamma * lam * gae
            t.advantage, t.ret = gae, gae + t.value
            next_value = t.value


def _inputs(env: PlacementEnv, batch: list[Transition]) -> dict[str, AgentInput]:
    """Every agent's level tensors for the batch (for the summary exchange); job, live and
    mask are filled where the agent acted and zero elsewhere."""
    out = {}
    for agent, view in env.views.items():
        x = {lvl: torch.stack([t.x[agent][lvl] for t in batch]) for lvl in view.rows}
        out[agent] = AgentInput(x=x, parent=view.parent, job=None, live=None, mask=None)
    return out


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
    inputs = _inputs(env, batch)
    groups, summaries = policy.encode(inputs)
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
        net = policy.agents[policy.index[agent]]
        logits, v = net.heads(groups[agent][sel], summaries[agent][sel],
                              policy.others_summary(summaries, agent)[sel], inp)
        chosen = torch.tensor([(actions[i] if actions is not None else batch[i].action)
                               for i in idx])
        lp = masked_log_softmax(logits, inp.mask).gather(1, chosen[:, None]).squeeze(1)
        logp = logp.index_put((sel,), lp)
        ent = ent.index_put((sel,), masked_entropy(logits, inp.mask))
        value = value.index_put((sel,), v)
    return logp, ent, value


@torch.no_grad()
def act(policy: PlacementPolicy, env: PlacementEnv, infos: dict, eps: float,
        gen: torch.Generator, rng: random.Random, teacher_prob: float = 0.0):
    """(agent, action, behaviour log-prob, value, raw observation, teacher's action,
    whether the policy's most probable action is the teacher's) for the active agent.
    With ``teacher_prob`` the teacher acts (imitation phase; no exploration then)."""
    active = next(a for a, i in infos.items() if i["active"])
    raw = infos[active]["raw"]
    probe = Transition(active, {a: infos[a]["raw"].x for a in env.views}, raw.job, raw.live,
                       raw.mask, 0, 0.0, 0.0, 0.0, 0)
    inputs = _inputs(env, [probe])
    groups, summaries = policy.encode(inputs)
    net = policy.agents[policy.index[active]]
    inp = AgentInput(x=None, parent=None, job=raw.job[None], live=raw.live[None],
                     mask=raw.mask[None])
    logits, value = net.heads(groups[active], summaries[active],
                              policy.others_summary(summaries, active), inp)
    probs = masked_softmax(logits, inp.mask)[0]
    pack, balance = infos[active]["pack_action"], infos[active]["balance_action"]
    defer = raw.defer_action
    valid = raw.mask[:-1]
    best_vs_ideal = float(raw.live[valid, LIVE_FEATURES.index("speed_vs_ideal")].max()) \
        if bool(valid.any()) else 1.0
    poor = bool(raw.mask[defer]) and best_vs_ideal < POOR_SPEED
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
        while env.agents:
            agent, action, logp, value, raw, teacher, agrees = act(
                policy, env, infos, eps, gen, rng, teacher_prob)
            _, rewards, _, _, infos_next = env.step({agent: action})
            transitions.append(Transition(
                agent, {a: infos[a]["raw"].x for a in env.views}, raw.job, raw.live,
                raw.mask, action, logp, value, rewards[agent], episode_base + k, teacher))
            defers += action == raw.defer_action
            agree += agrees
            labelled += teacher >= 0
            steps += 1
            infos = infos_next
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


# -- the run: checkpoints, resume, CSV, plot ------------------------------------------------

def _save(out: Path, policy, interference, cfg: PPOConfig, state: TrainState, optimizer,
          gen: torch.Generator, rng: random.Random, env: PlacementEnv, extra: dict) -> None:
    training = {"ppo": asdict(cfg), "env_steps": state.env_steps, "update": state.update,
                "wall_s": round(state.wall_s, 1), **extra}
    LearnedCheckpoint(policy, interference, training).save(out / "policy.pt")
    torch.save({"optimizer": optimizer.state_dict(), "torch_rng": gen.get_state()},
               out / "train_state.pt")
    doc = {"state": asdict(state), "config": asdict(cfg), "extra": extra,
           "python_rng": _rng_to_json(rng.getstate()),
           "env_rng": _rng_to_json(env._rng.getstate())}
    tmp = out / "train_state.json.tmp"
    tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    tmp.replace(out / "train_state.json")


def _rng_to_json(state) -> list:
    return [state[0], list(state[1]), state[2]]


def _rng_from_json(doc) -> tuple:
    return (doc[0], tuple(doc[1]), doc[2])


def write_curve(csv_path: Path, png_path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(csv_path, encoding="utf-8")))
    if not rows:
        return
    steps = [int(r["env_steps"]) for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    axes[0].plot(steps, [float(r["step_reward"]) for r in rows])
    axes[0].set_xlabel("environment steps")
    axes[0].set_ylabel("mean reward per decision")
    axes[0].grid(alpha=0.3)
    ev = [(s, float(r["eval_avg_jct_s"])) for s, r in zip(steps, rows) if r["eval_avg_jct_s"]]
    tr = [(s, float(r["train_avg_jct_s"])) for s, r in zip(steps, rows) if r["train_avg_jct_s"]]
    if ev:   # one fixed validation window: comparable across updates
        axes[1].plot(*zip(*ev), marker="o", label="validation window (greedy)")
    elif tr:  # training episodes differ in workload: only a rough trend
        axes[1].plot(*zip(*tr), alpha=0.6, label="training episodes (sampled)")
        axes[1].set_yscale("log")
    axes[1].set_xlabel("environment steps")
    axes[1].set_ylabel("average JCT (s)")
    axes[1].grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def train(env: PlacementEnv, interference: InterferenceModel, cfg: PPOConfig, out: Path, *,
          resume: bool = False, evaluate: Callable[[Path], float] | None = None,
          extra: dict | None = None,
          progress: Callable[[TrainState, dict], None] | None = None
          ) -> tuple[TrainState, PlacementPolicy]:
    """Train (or resume) into ``out``: policy.pt/json (always at the end), train_state.*,
    train_log.csv, training_curve.png; returns the final state and policy. ``evaluate(checkpoint_path) -> avg JCT`` runs every
    ``cfg.eval_every`` updates."""
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    extra = {**(extra or {}), "max_defer_s": env.observer.max_defer_s,
             "defer_only_below": env.observer.defer_only_below,
             "defer_cost": env.defer_cost, "speed_threshold": env.speed_threshold}
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    env.reseed(cfg.seed)
    agents = tuple(env.possible_agents)
    policy = PlacementPolicy(policy_config(interference, agents, env.mode, cfg.hidden))
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5)
    state = TrainState()
    csv_path = out / "train_log.csv"
    if resume:
        if not (out / "train_state.json").is_file():
            raise FileNotFoundError(f"nothing to resume in {out} (no train_state.json)")
        ckpt = LearnedCheckpoint.load(out / "policy.pt")
        if ckpt.config.agents != agents or ckpt.config.mode != env.mode:
            raise ValueError(f"{out}: the saved run has agents {ckpt.config.agents} "
                             f"({ckpt.config.mode}); this run has {agents} ({env.mode})")
        policy = ckpt.policy.train()
        optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5)
        saved = torch.load(out / "train_state.pt", weights_only=True)
        optimizer.load_state_dict(saved["optimizer"])
        gen.set_state(saved["torch_rng"])
        doc = json.loads((out / "train_state.json").read_text(encoding="utf-8"))
        state = TrainState(**doc["state"])
        rng.setstate(_rng_from_json(doc["python_rng"]))
        env._rng.setstate(_rng_from_json(doc["env_rng"]))
    elif csv_path.exists():
        csv_path.unlink()
    if not csv_path.exists():
        with open(csv_path, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerow(CSV_COLUMNS)

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
                                      [t for run in imitation for t in run], cfg, gen)
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
        jcts = [s["avg_jct_s"] for s in stats if s["avg_jct_s"] is not None]
        row = {"update": state.update, "env_steps": state.env_steps,
               "episodes": state.episodes, "wall_s": round(state.wall_s, 2),
               "epsilon": round(eps, 4),
               "episode_reward": round(float(np.mean([s["reward"] for s in stats])), 5),
               "step_reward": round(float(np.mean([t.reward for t in transitions]))
                                    if transitions else 0.0, 5),
               "defer_rate": round(sum(s["defers"] for s in stats)
                                   / max(1, sum(s["steps"] for s in stats)), 4),
               "train_avg_jct_s": round(float(np.mean(jcts)), 1) if jcts else "",
               **{k: round(v, 5) for k, v in losses.items()},
               "phase": "imitate" if imitating else "ppo",
               "teacher_agreement": (round(sum(s["agree"] for s in stats)
                                           / sum(s["labelled"] for s in stats), 4)
                                     if sum(s["labelled"] for s in stats) else ""),
               "eval_avg_jct_s": ""}
        last = state.update == cfg.updates
        if evaluate is not None and cfg.eval_every and (state.update % cfg.eval_every == 0
                                                        or last):
            policy.eval()
            _save(out, policy, interference, cfg, state, optimizer, gen, rng, env, extra)
            jct = evaluate(out / "policy.pt")
            row["eval_avg_jct_s"] = round(jct, 1)
            if state.best_eval_jct_s is None or jct < state.best_eval_jct_s:
                state.best_eval_jct_s = jct
                LearnedCheckpoint(policy, interference, {
                    "ppo": asdict(cfg), "env_steps": state.env_steps,
                    "update": state.update, "wall_s": round(state.wall_s, 1),
                    "eval_avg_jct_s": round(jct, 1), **extra}).save(out / "best.pt")
        state.history.append(row)
        if last or row["eval_avg_jct_s"] != "" or (
                cfg.checkpoint_every and state.update % cfg.checkpoint_every == 0):
            _save(out, policy, interference, cfg, state, optimizer, gen, rng, env, extra)
        with open(csv_path, "a", newline="", encoding="utf-8") as fh:
            csv.DictWriter(fh, CSV_COLUMNS).writerow(row)
        if progress is not None:
            progress(state, row)
    write_curve(csv_path, out / "training_curve.png",
                f"{env.mode}-agent PPO on {env.cluster.spec} ({env.strength})")
    return state, policy.eval()


# -- evaluation in the environment ------------------------------------------------------------

def greedy_chooser(policy: PlacementPolicy, env: PlacementEnv) -> Callable[[dict], int]:
    """The trained agents' most probable action (what the learned plugin does)."""
    def choose(infos: dict) -> int:
        active = next(a for a, i in infos.items() if i["active"])
        raw = infos[active]["raw"]
        probe = Transition(active, {a: infos[a]["raw"].x for a in env.views}, raw.job,
                           raw.live, raw.mask, 0, 0.0, 0.0, 0.0, 0)
        with torch.no_grad():
            logp, _, _ = _all_logits(policy, env, [probe])
        return int(torch.argmax(logp[0]))
    return choose


def random_chooser(seed: int, allow_defer: bool = False) -> Callable[[dict], int]:
    """Uniform over the valid groups (and defer, if allowed): the random placement baseline."""
    rng = random.Random(seed)

    def choose(infos: dict) -> int:
        active = next(a for a, i in infos.items() if i["active"])
        mask = infos[active]["raw"].mask.clone()
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
            active = next(a for a, i in infos.items() if i["active"])
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


def _all_logits(policy: PlacementPolicy, env: PlacementEnv, batch: list[Transition]):
    """Masked log-probabilities of every action of each transition's acting agent."""
    inputs = _inputs(env, batch)
    groups, summaries = policy.encode(inputs)
    out = []
    for i, t in enumerate(batch):
        net = policy.agents[policy.index[t.agent]]
        inp = AgentInput(x=None, parent=None, job=t.job[None], live=t.live[None],
                         mask=t.mask[None])
        logits, value = net.heads(groups[t.agent][i:i + 1], summaries[t.agent][i:i + 1],
                                  policy.others_summary(summaries, t.agent)[i:i + 1], inp)
        out.append(masked_log_softmax(logits, inp.mask)[0])
    return out, None, None
