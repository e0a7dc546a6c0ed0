"""Per-partition actor-critic agents over the hierarchical encoder (Zhao & Wu; Harmony).

Each agent owns one partition (or, in the single-agent variant, the whole cluster) and has
its own parameters: a ``HierarchicalEncoder`` over its part of the topology, an actor head
that scores every GPU group of its part for the job at hand, a ``defer`` logit (from the
context and the best live features on offer; valid unless the job waited too long), and a
critic. Agents exchange summary embeddings: each agent's heads see its
own summary (mean of its node embeddings) and the mean of the other agents' summaries.

Action ``a`` of an agent with ``G`` groups: ``0..G-1`` a group (local order), ``G`` defer.
Invalid actions are masked; ``masked_softmax`` never yields NaN, even for rows where every
action is masked (it returns zeros there).

``PlacementPolicy.act`` is the one forward pass from encoded observations to an agent's
masked action distribution and value (``ActOutput``): the learned plugin, PPO's rollouts and
updates and the trainer's greedy evaluation all call it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from slurm_marl.models.gnn import LEVELS, HierarchicalEncoder, mlp

FORMAT = "slurm-marl-policy/2"   # 2: the defer head's linear path


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over ``mask``-ed entries of the last dim; masked entries and all-masked rows
    get probability 0 (never NaN)."""
    mask = mask.bool()
    any_valid = mask.any(-1, keepdim=True)
    z = torch.where(mask, logits, torch.full_like(logits, float("-inf")))
    z = torch.where(any_valid, z, torch.zeros_like(z))
    p = torch.softmax(z, dim=-1)
    return torch.where(mask, p, torch.zeros_like(p))


def masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-probabilities; masked entries get ``-inf`` (all-masked rows: all ``-inf``)."""
    mask = mask.bool()
    any_valid = mask.any(-1, keepdim=True)
    z = torch.where(mask, logits, torch.full_like(logits, float("-inf")))
    z = torch.where(any_valid, z, torch.zeros_like(z))
    logp = torch.log_softmax(z, dim=-1)
    return torch.where(mask, logp, torch.full_like(logp, float("-inf")))


def masked_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    p = masked_softmax(logits, mask)
    logp = masked_log_softmax(logits, mask)
    return -torch.where(mask.bool(), p * logp, torch.zeros_like(p)).sum(-1)


def best_offer(live: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Element-wise max of the live features over the valid groups (``[..., L]``; zeros
    where no group is valid), what the defer head weighs waiting against. One observation
    (``live`` ``[G, L]``) gathers its valid rows first: the same maxima, faster."""
    if live.dim() == 2 and live.device.type == "cpu" and not live.requires_grad:
        valid = mask[:-1].bool().numpy()
        if not valid.any():
            return torch.zeros(live.shape[-1], dtype=live.dtype)
        best = live.numpy()[valid].max(0)
        if not valid.all():
            best = np.maximum(best, np.float32(-1e4))   # as the masked form's fill value
        return torch.from_numpy(best)
    valid = mask[..., :-1].unsqueeze(-1)
    best = torch.where(valid, live, torch.full_like(live, -1e4)).amax(dim=-2)
    return torch.where(valid.any(dim=-2), best, torch.zeros_like(best))


@dataclass
class ActOutput:
    """An agent's forward pass on a batch (or on one observation, unbatched): ``logits``
    ``[..., G + 1]`` (defer last), the action ``mask`` and the critic's ``value`` ``[...]``."""

    logits: torch.Tensor
    mask: torch.Tensor
    value: torch.Tensor

    def probs(self) -> torch.Tensor:
        """The masked action distribution (what greedy and sampled actions come from)."""
        return masked_softmax(self.logits, self.mask)

    def log_probs(self) -> torch.Tensor:
        return masked_log_softmax(self.logits, self.mask)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of ``actions`` (one per row)."""
        return self.log_probs().gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return masked_entropy(self.logits, self.mask)


@dataclass(frozen=True)
class PolicyConfig:
    """Dimensions and agents of a placement policy; stored in the checkpoint's metadata."""

    level_dims: Mapping[str, int]
    job_dim: int
    live_dim: int
    agents: tuple[str, ...]
    mode: str = "multi"                 # "multi": one agent per partition; "single"
    hidden: int = 32
    vocab: tuple[str, ...] = ()
    feature_names: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["level_dims"] = dict(self.level_dims)
        d["agents"] = list(self.agents)
        d["vocab"] = list(self.vocab)
        d["feature_names"] = {k: list(v) for k, v in self.feature_names.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "PolicyConfig":
        return cls(level_dims={k: int(v) for k, v in d["level_dims"].items()},
                   job_dim=int(d["job_dim"]), live_dim=int(d["live_dim"]),
                   agents=tuple(d["agents"]), mode=str(d.get("mode", "multi")),
                   hidden=int(d.get("hidden", 32)), vocab=tuple(d.get("vocab", ())),
                   feature_names={k: tuple(v) for k, v in d.get("feature_names", {}).items()})


@dataclass
class AgentInput:
    """One agent's observation batch: ``x[level]`` ``[B, rows, dim]``, ``job`` ``[B, J]``,
    ``live`` ``[B, G, L]``, ``mask`` ``[B, G + 1]`` (bool); ``parent`` is static."""

    x: Mapping[str, torch.Tensor]
    parent: Mapping[str, torch.Tensor]
    job: torch.Tensor
    live: torch.Tensor
    mask: torch.Tensor


class AgentNet(nn.Module):
    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        h = config.hidden
        self.encoder = HierarchicalEncoder(config.level_dims, h)
        self.job = mlp(config.job_dim, h)
        context = 3 * h
        self.actor = mlp(h + config.live_dim + context, 1, 2 * h)
        # Wide-and-deep: a linear path from the live what-if features straight to the logit,
        # so the obvious (more predicted speed, less imposed slowdown) is quick to learn.
        self.actor_linear = nn.Linear(config.live_dim, 1)
        # Defer is weighed against the best of what is on offer: the defer head also sees
        # the element-wise max of the live features over the valid groups.
        self.defer = mlp(context + config.live_dim, 1, h)
        # ... and, as for the groups, a linear path from that best offer straight to the
        # defer logit: "wait when even the best spot is poor" then holds in states whose
        # context (long queues, long waits) training rarely saw (docs/benchmarks.md).
        self.defer_linear = nn.Linear(config.live_dim, 1)
        self.critic = mlp(context, 1, h)

    def encode(self, inp: AgentInput) -> tuple[torch.Tensor, torch.Tensor]:
        """(group embeddings ``[B, G, H]``, summary ``[B, H]``)."""
        emb = self.encoder(inp.x, inp.parent)
        return emb["gpu_group"], emb["node"].mean(-2)

    def group_terms(self, groups: torch.Tensor) -> torch.Tensor:
        """The actor's first layer on the group embeddings alone, with its bias
        (``[..., G, 2H]``): the part of every group's score that only the snapshot moves,
        computed once per snapshot for ``heads(..., terms=)``."""
        first = self.actor[0]
        return nn.functional.linear(groups, first.weight[:, :groups.shape[-1]], first.bias)

    def heads(self, groups: torch.Tensor, own: torch.Tensor, others: torch.Tensor,
              inp: AgentInput, terms: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits ``[B, G + 1]`` with defer last, value ``[B]``).

        ``terms``: ``group_terms(groups)``, cached across the jobs of one snapshot. The
        actor's first layer is then summed from its three parts (groups, live features,
        context; the context's once per job, not once per group) instead of applied to
        their concatenation: the same function, about 1e-7 apart in float32
        (tests/models/test_policy.py), with a tenth of the work per job."""
        context = torch.cat([own, others, torch.relu(self.job(inp.job))], dim=-1)
        n_groups = groups.shape[-2]
        if terms is None:
            per_group = torch.cat([groups, inp.live,
                                   context.unsqueeze(-2).expand(*context.shape[:-1],
                                                                n_groups,
                                                                context.shape[-1])], dim=-1)
            actor = self.actor(per_group)
        else:
            w = self.actor[0].weight
            h, live_dim = groups.shape[-1], inp.live.shape[-1]
            hidden = (terms + nn.functional.linear(inp.live, w[:, h:h + live_dim])
                      + nn.functional.linear(context, w[:, h + live_dim:]).unsqueeze(-2))
            actor = self.actor[2](torch.relu(hidden))
        group_logits = (actor + self.actor_linear(inp.live)).squeeze(-1)
        best = best_offer(inp.live, inp.mask)
        defer = self.defer(torch.cat([context, best], dim=-1)) + self.defer_linear(best)
        logits = torch.cat([group_logits, defer], dim=-1)
        return logits, self.critic(context).squeeze(-1)


class PlacementPolicy(nn.Module):
    """All agents of one cluster; ``forward`` takes a batch per agent (same batch size)."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        if not config.agents:
            raise ValueError("a placement policy needs at least one agent")
        missing = [lvl for lvl in LEVELS if lvl not in config.level_dims]
        if missing:
            raise ValueError(f"policy config lacks level dims {missing}")
        self.config = config
        self.agents = nn.ModuleList(AgentNet(config) for _ in config.agents)
        self.index = {name: i for i, name in enumerate(config.agents)}

    def encode(self, inputs: Mapping[str, AgentInput]
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        groups, summaries = {}, {}
        for name, inp in inputs.items():
            groups[name], summaries[name] = self.agents[self.index[name]].encode(inp)
        return groups, summaries

    @staticmethod
    def others_summary(summaries: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
        """Mean summary of the other agents (zeros when alone): the exchanged message."""
        others = [s for n, s in summaries.items() if n != name]
        if not others:
            return torch.zeros_like(summaries[name])
        return torch.stack(others).mean(0)

    def act(self, name: str, encoded: tuple[Mapping[str, torch.Tensor],
                                            Mapping[str, torch.Tensor]],
            inp: AgentInput, rows: torch.Tensor | slice | None = None,
            terms: torch.Tensor | None = None) -> ActOutput:
        """Agent ``name``'s forward pass for the jobs in ``inp`` (``job``, ``live``,
        ``mask``): its heads on ``encoded`` (``encode``'s group embeddings and summaries of
        every agent, which may be cached across jobs of one snapshot), hearing the other
        agents' mean summary. ``rows`` picks the batch rows of ``encoded`` that ``inp``
        holds (all when None). ``terms``: ``AgentNet.group_terms`` of ``name``'s group
        embeddings (inference caches it per snapshot; see ``AgentNet.heads``)."""
        groups, summaries = encoded
        own, others = summaries[name], self.others_summary(summaries, name)
        mine = groups[name]
        if rows is not None:
            mine, own, others = mine[rows], own[rows], others[rows]
            terms = None if terms is None else terms[rows]
        logits, value = self.agents[self.index[name]].heads(mine, own, others, inp, terms)
        return ActOutput(logits, inp.mask, value)

    def forward(self, inputs: Mapping[str, AgentInput]
                ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        encoded = self.encode(inputs)
        out = {}
        for name, inp in inputs.items():
            step = self.act(name, encoded, inp)
            out[name] = step.logits, step.value
        return out
