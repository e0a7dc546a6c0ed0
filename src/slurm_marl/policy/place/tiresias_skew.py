"""Tiresias' skew-aware placement: consolidate only the jobs that need it.

Models with large, skewed tensors (VGG, AlexNet; see ``colocation.CONSOLIDATION_SENSITIVE``
for the list and its source) slow down badly when spread, so they may only take a placement
on the fewest nodes possible and otherwise wait; other models may take any placement and
prefer to fill fragments (best fit at node level), leaving whole nodes to the sensitive.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_marl.domain import Job
from slurm_marl.colocation import CONSOLIDATION_SENSITIVE, model_family
from slurm_marl.policy.place._common import fill_stats, min_groups
from slurm_marl.policy.place.consolidate import consolidate_score
from slurm_marl.policy.plugins import LocalFilter, PluginError, Pure, check_params
from slurm_marl.policy.state import Candidate, CycleState

KEY = "tiresias_skew"


def fragment_fill_score(node_left: int, node_cap: int) -> float:
    """In [0, 1]: how full the chosen nodes end up (fill the holes first)."""
    return 1.0 - node_left / node_cap if node_cap else 1.0


class TiresiasSkew(LocalFilter, Pure):
    key = KEY

    def __init__(self, sensitive: frozenset[str]) -> None:
        self.sensitive = sensitive

    def is_sensitive(self, job: Job) -> bool:
        return model_family(job.model_type) in self.sensitive

    def feasible(self, job: Job, cand: Candidate, state: CycleState) -> bool:
        return not self.is_sensitive(job) or len(cand.nodes) <= state.min_nodes(job)

    def score(self, job: Job, cand: Candidate, state: CycleState) -> float:
        group_left, group_cap, node_left, node_cap = fill_stats(cand, state)
        if self.is_sensitive(job):
            return consolidate_score(len(cand.nodes), state.min_nodes(job), cand.groups,
                                     min_groups(cand, state, cand.gpus), cand.leaves,
                                     group_left, group_cap, node_left, node_cap)
        return fragment_fill_score(node_left, node_cap)


def validate(params: Mapping) -> None:
    _sensitive_models(params)


def _sensitive_models(params: Mapping):
    check_params(KEY, params, {"sensitive_models": (list, tuple)})
    models = params.get("sensitive_models", CONSOLIDATION_SENSITIVE)
    if not all(isinstance(m, str) and m for m in models):
        raise PluginError(f"plugin {KEY!r}: sensitive_models must be a list of names")
    return models


def build(params: Mapping, **context) -> TiresiasSkew:
    return TiresiasSkew(frozenset(model_family(m) for m in _sensitive_models(params)))
