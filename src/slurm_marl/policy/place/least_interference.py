"""Least interference (LIF): the GPU group whose neighbours slow the job down least.

Scores a candidate by the speeds an interference estimator predicts: the job's own, given
the model types it would share a GPU group, a node and (for multi-node jobs) a leaf with and
its own spread, times the speed each of those neighbours would keep with the job added
(pairwise, ``include_neighbours``). With ``defer_below`` > 0 a candidate is not taken if the
job's predicted speed there is below that fraction of its speed on an ideal placement (the
fewest nodes and groups, no neighbours): the job waits for a better spot, as Tiresias' skew
rule does for consolidation-sensitive models, but learned.

The estimator comes from the context (``build_policy(profile, interference_estimator=...)``),
or is a trained interference model (``model_path``: the ``.pt`` of `slurm-marl train
interference`, loaded with ``weights_only=True``; e.g. refreshed from the agent's own observed
speeds with ``--from-store``), or is fitted from a samples file (``samples_path``), else a
neutral one predicts no interference.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

from slurm_marl.colocation import ideal_span, span_tags
from slurm_marl.domain import Job
from slurm_marl.policy.interference import (FittedEstimator, InterferenceEstimator,
                                            NeutralEstimator)
from slurm_marl.policy.plugins import (LocalFilter, PluginError, Pure, ReadsColocation,
                                       check_params, load_model_estimator)
from slurm_marl.policy.state import Candidate, CycleState, job_shape

KEY = "least_interference"


def combined_speed(own: float, neighbours: list[float]) -> float:
    """The job's predicted speed times the speeds its new neighbours keep."""
    out = own
    for s in neighbours:
        out *= s
    return out


class LeastInterference(ReadsColocation, Pure):
    """Scores only; ``DeferringLeastInterference`` (``defer_below`` > 0) also filters."""

    key = KEY

    defer_below = 0.0

    def __init__(self, estimator: InterferenceEstimator,
                 include_neighbours: bool = True) -> None:
        self.estimator = estimator
        self.include_neighbours = include_neighbours
        self._last: tuple | None = None
        self._last_ideal: tuple | None = None
        self._neighbour_memo: dict[tuple[str, str, str], float] = {}
        self._kept: tuple | None = None     # feasible_many's answer for score_many

    def _query(self, job: Job, cand: Candidate, state: CycleState) -> tuple[float, dict]:
        """(predicted own speed, co-location by level with the candidate's span)."""
        coloc = dict(state.colocated_by_level(cand))   # (the state's answer is shared)
        coloc["span"] = span_tags(cand.groups, len(cand.nodes), cand.leaves)
        return float(self.estimator.predict_speed(job, coloc)), coloc

    def _evaluate(self, job: Job, cand: Candidate, state: CycleState) -> tuple[float, dict]:
        """``_query``; the framework asks feasible() then score() of the same candidate,
        so the last answer is kept."""
        last = self._last
        if last is not None and last[0] is cand and last[1] is job:
            return last[2], last[3]
        speed, coloc = self._query(job, cand, state)
        self._last = (cand, job, speed, coloc)
        return speed, coloc

    def own_speed(self, job: Job, cand: Candidate, state: CycleState) -> float:
        return self._evaluate(job, cand, state)[0]

    def ideal_speed(self, job: Job, state: CycleState) -> float:
        """The job's predicted speed on an ideal placement in this cycle's cluster; the
        framework asks for every candidate of a job in turn, so the last answer is kept."""
        last = self._last_ideal
        if last is not None and last[0] is job and last[1]() is state:
            return last[2]
        groups, nodes = ideal_span(job_shape(job)[0], state.min_nodes(job),
                                   state.largest_group_cap)
        speed = float(self.estimator.predict_speed(job, {"span": span_tags(groups, nodes, 1)}))
        # the state by weak reference: kept, it would live on into the next cycle
        self._last_ideal = (job, weakref.ref(state), speed)
        return speed

    def _neighbour_speed(self, neighbour_model: str, level: str, model: str) -> float:
        key = (neighbour_model, level, model)
        hit = self._neighbour_memo.get(key)
        if hit is None:
            probe = Job(job_id=-1, model_type=neighbour_model)
            hit = float(self.estimator.predict_speed(probe, {level: (model,)}))
            self._neighbour_memo[key] = hit
        return hit

    def own_speeds(self, job: Job, cands: Sequence[Candidate], state: CycleState,
                   keep: bool = False) -> list[float]:
        """``own_speed`` of each candidate, asked in one loop. ``keep``: the answer is kept
        for the next call, which takes it if it asks about the same job, state and
        candidates with no claim or release since (the framework asks ``feasible_many``,
        then ``score_many`` of those that passed), and forgets it either way."""
        kept, self._kept = self._kept, None
        if kept is not None and kept[0] is job and kept[1]() is state \
                and kept[3] == state.colocation_moves:
            hits = kept[2]
            found = [hits.get(id(c)) for c in cands]
            if all(h is not None and h[0] is c for h, c in zip(found, cands)):
                return [h[1] for h in found]
        query = self._query
        speeds = [query(job, c, state)[0] for c in cands]
        if keep:
            self._kept = (job, weakref.ref(state),
                          {id(c): (c, s) for c, s in zip(cands, speeds)},
                          state.colocation_moves)
        return speeds

    def score_many(self, job: Job, cands: Sequence[Candidate], state: CycleState
                   ) -> list[float]:
        """``score`` of each (``JudgesMany``)."""
        if self.include_neighbours:
            return [self.score(job, c, state) for c in cands]
        return self.own_speeds(job, cands, state)

    def score(self, job: Job, cand: Candidate, state: CycleState) -> float:
        own, coloc = self._evaluate(job, cand, state)
        if not self.include_neighbours:
            return own
        model = job.model_type or "unknown"
        hurt = [self._neighbour_speed(m, level, model)
                for level in ("group", "node") for m in coloc.get(level, ())]
        return combined_speed(own, hurt)


class DeferringLeastInterference(LeastInterference, LocalFilter):
    """Least interference with ``defer_below`` > 0: a candidate where the job's predicted
    speed is below that fraction of its ideal speed is not taken (the job waits)."""

    def __init__(self, estimator: InterferenceEstimator, defer_below: float,
                 include_neighbours: bool = True) -> None:
        if not defer_below > 0:
            raise ValueError("DeferringLeastInterference needs defer_below > 0")
        super().__init__(estimator, include_neighbours)
        self.defer_below = defer_below

    def feasible(self, job: Job, cand: Candidate, state: CycleState) -> bool:
        return self.own_speed(job, cand, state) >= \
            self.defer_below * self.ideal_speed(job, state) - 1e-12

    def feasible_many(self, job: Job, cands: Sequence[Candidate], state: CycleState
                      ) -> list[bool]:
        """``feasible`` of each (``JudgesMany``)."""
        bar = self.defer_below * self.ideal_speed(job, state) - 1e-12
        return [s >= bar for s in self.own_speeds(job, cands, state, keep=True)]


def validate(params: Mapping) -> None:
    _defer_below(params)


def _defer_below(params: Mapping) -> float:
    check_params(KEY, params, {"samples_path": str, "model_path": str,
                               "defer_below": (int, float), "include_neighbours": bool})
    defer = float(params.get("defer_below", 0.0))
    if not 0.0 <= defer <= 1.0:
        raise PluginError(f"plugin {KEY!r}: defer_below must be in [0, 1], got {defer}")
    return defer


def build(params: Mapping, interference_estimator: InterferenceEstimator | None = None,
          **context) -> LeastInterference:
    defer = _defer_below(params)
    estimator = interference_estimator
    if estimator is None and "model_path" in params:
        try:
            estimator = load_model_estimator(params["model_path"])
        except ValueError as exc:
            raise PluginError(f"plugin {KEY!r}: {exc}") from None
    if estimator is None and "samples_path" in params:
        try:
            estimator = FittedEstimator.from_file(params["samples_path"])
        except ValueError as exc:
            raise PluginError(f"plugin {KEY!r}: {exc}") from None
    if estimator is None:
        estimator = NeutralEstimator()
    if not hasattr(estimator, "predict_speed"):
        raise PluginError(f"plugin {KEY!r}: interference_estimator must have "
                          f"predict_speed(job, colocated_by_level)")
    include = params.get("include_neighbours", True)
    if defer > 0:
        return DeferringLeastInterference(estimator, defer, include)
    return LeastInterference(estimator, include)
