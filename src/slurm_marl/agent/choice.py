"""An agent's answer for one job in one cycle (``Choice``): from the model's action
probabilities, greedily (``choice_from_probs``, inference) or from a sampled action
(``choice_from_action``, training); ``ModelChooser`` gives the greedy answers of a loaded
checkpoint to the learned place plugin (``agent/learned.py``). Only inference modules are
imported here, never training code."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from slurm_marl.policy.state import CycleState


@dataclass
class Choice:
    """An agent's answer for one job in one cycle: defer, or one candidate's allocs."""

    defer: bool = False
    allocs: tuple | None = None
    score: float = 1.0
    action: int | None = None


def choice_from_probs(probs: torch.Tensor, obs, allow_defer: bool = True) -> Choice:
    """The most probable action (defer last; never defer unless allowed)."""
    defer = obs.defer_action
    scored = probs.clone()
    if not allow_defer and bool(obs.mask[:-1].any()):
        scored[defer] = -1.0
    best = int(torch.argmax(scored))
    if best == defer:
        return Choice(defer=True, action=defer, score=float(probs[defer]))
    return Choice(allocs=obs.allocs_for(best), score=float(probs[best]), action=best)


def choice_from_action(action: int, obs) -> Choice:
    """The choice of one sampled action (the training environment's agent step)."""
    action = int(action)
    if action == obs.defer_action:
        if not bool(obs.mask[action]):
            raise ValueError(f"defer is masked for job {obs.job_id}: a good spot is free, or "
                             f"it has been deferred for max_defer_s")
        return Choice(defer=True, action=action)
    return Choice(allocs=obs.allocs_for(action), action=action)


class ModelChooser:
    """Greedy decisions of a loaded checkpoint; GNN embeddings, and the actor's terms that
    depend on them alone, computed once per snapshot (``split_actor``; False: the actor on
    the concatenated inputs, the reference tests/train/test_learned_plugin.py compares
    decisions with)."""

    split_actor = True

    def __init__(self, checkpoint, observer, allow_defer: bool = True) -> None:
        self.checkpoint = checkpoint
        self.policy = checkpoint.policy.eval()
        self.observer = observer
        self.allow_defer = allow_defer
        self._snapshot = None
        self._groups: dict = {}
        self._terms: dict = {}     # per agent: its actor's group terms (AgentNet.heads)
        # Each agent's latest summary. The simulator shows every partition in one snapshot;
        # the daemon decides one partition at a time, so an agent there hears the others'
        # summaries from their latest cycle (this one, or the one before for the
        # partitions decided after it), as the agents exchange them in training.
        self._summaries: dict = {}

    @torch.no_grad()
    def _embed(self, state: CycleState) -> None:
        from slurm_marl.models.policy import AgentInput
        cyc = self.observer.cycle(state.snapshot)
        if self._snapshot is cyc.snapshot:
            return
        views = self.observer.topology.views
        inputs = {name: AgentInput(x=cyc.x[name], parent=views[name].parent, job=None,
                                   live=None, mask=None) for name in views
                  if name in self.policy.index}
        self._groups, summaries = self.policy.encode(inputs)
        self._summaries.update(summaries)
        self._terms = {name: self.policy.agents[self.policy.index[name]].group_terms(groups)
                       for name, groups in self._groups.items()}
        self._snapshot = cyc.snapshot

    @torch.no_grad()
    def __call__(self, obs, state: CycleState) -> Choice:
        from slurm_marl.models.policy import AgentInput
        self._embed(state)
        inp = AgentInput(x=obs.x, parent=obs.parent, job=obs.job, live=obs.live,
                         mask=obs.mask)
        out = self.policy.act(obs.agent, (self._groups, self._summaries), inp,
                              terms=self._terms[obs.agent] if self.split_actor else None)
        return choice_from_probs(out.probs(), obs, self.allow_defer)
