"""Learned placement: per-partition agents (hierarchical GNN, actor-critic) pick the GPU group.

Works inside ``run_cycle`` like every place plugin, so the simulator and the daemon use it
unchanged. For each job the framework asks about, the job's agent scores every GPU group of
its partition plus a "defer" action (``agent/observe.py`` says what it sees); a group stands
for the candidate placement that uses it (the one with the fewest groups). The agent's most
probable action is the only feasible candidate (scored with its probability), so other
plugins in the same profile can veto but not re-rank it. If the agent defers, every
candidate on free GPUs is infeasible this cycle and the job stays queued.

What-if questions (the framework planning a preemption or a backfill reservation on an
overlay capacity) are not agent decisions: the ``what_if`` heuristic answers them, as in
training. By default that is least interference on the checkpoint's own interference model,
taking only spots within ``what_if_defer_below`` (0.8) of the job's ideal speed: a job the
agent deferred may still start by preempting lower-priority jobs if that frees such a spot
(what ``las-lif`` does). Measured: with consolidation answering these questions and deferred
jobs barred from preempting, even a perfect copy of ``las-lif``'s decisions lost average JCT
to ``las-lif`` itself on the validation window, and the copy with these rules did not
(docs/benchmarks.md, "2.1 Why the earlier agents lost").

Parameters: ``checkpoint`` (default: the one shipped in ``slurm_marl/data``), ``fallback``
(a heuristic's key, default ``consolidate``), ``what_if`` (a heuristic's key, default
``least_interference``) and ``what_if_defer_below`` (default 0.8; for
``least_interference``), ``allow_defer`` (default true), ``max_defer_s`` (how long a job
may be deferred while placements exist, counted from its first deferral, 0 for no bound;
default: what the checkpoint was trained with), ``max_agent_jobs`` (per agent and cycle,
the jobs its agent decides, the first the framework asks about, i.e. the head of the queue;
default 0: no bound), ``past_depth`` (who places the rest in the same cycle: ``"what_if"``,
the what-if heuristic, the default; or ``"fallback"``, cheaper on a large cluster where
many jobs can start at once) and ``clock_step_s`` (the agents read the clock in steps of
this many seconds, ``agent/observe.py``; default: what the checkpoint was trained with, 0,
the exact clock, for one that does not say) and ``order_window`` (the agents also choose
which waiting job of a 2D-LAS queue starts next, among this many that can start now,
``agent/order_head.py`` and ``policy.plugins.Picker``; default: the checkpoint's order
head's window, 0, the order plugin's order, for a checkpoint without one). A deferral stands,
without asking the agent again, until the job's options (its live features and mask)
change. The checkpoint is loaded with ``weights_only=True``. If it is missing, unreadable
or made for other features, or a job's partition has no agent, the plugin falls back to a
named heuristic (``fallback``, default ``consolidate``) and says so once in the log. With
``Policy.reuse_decisions`` an unchanged cycle is reused where no agent placed a job in the
last one, or, with ``clock_step_s`` > 0, until the agents' clock next moves
(``reuse_horizon``). Only the inference
modules are imported here, never training code.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from slurm_marl.agent.choice import Choice, ModelChooser
from slurm_marl.agent.order_head import OrderHead, order_features, partition_free_gpus
from slurm_marl.colocation import POOR_VS_IDEAL
from slurm_marl.domain import Job
from slurm_marl.policy.plugins import (NodeIdentity, PlacePlugin, PluginError, ReadsColocation,
                                       ReadsHost, accepts, build_plugin, check_params,
                                       validate_plugin)
from slurm_marl.placement_shapes import Candidate, make_candidate
from slurm_marl.policy.state import CycleState

log = logging.getLogger(__name__)

KEY = "learned"
DEFAULT_FALLBACK = "consolidate"
DEFAULT_WHAT_IF = "least_interference"
DEFAULT_WHAT_IF_DEFER_BELOW = POOR_VS_IDEAL


_FALLBACK = Choice()   # sentinel: this job is placed by the fallback heuristic
_PAST_DEPTH = Choice()  # sentinel: past the cycle's agent depth, ``past_depth``'s
PAST_DEPTH = ("what_if", "fallback")   # who places the jobs past an agent's depth


class LearnedPlacement(ReadsColocation, NodeIdentity, ReadsHost):
    """The plugin mechanics; ``chooser(obs, state) -> Choice`` is the agent (the model at
    inference, the environment's caller in training). Filters (only the agent's own
    placement is feasible), knows nodes by identity (a group's score depends on its place
    in the topology; host reading is declared too, conservatively), is not ``Pure`` (keeps
    its observer and standing deferrals across cycles) but says until when a cycle may be
    reused (``reuse_horizon``), proposes and delegates."""

    key = KEY

    def __init__(self, observer, chooser: Callable | None, fallback: PlacePlugin,
                 fallback_key: str = DEFAULT_FALLBACK,
                 what_if: PlacePlugin | None = None, max_agent_jobs: int = 0,
                 past_depth: str = "what_if", order: OrderHead | None = None,
                 order_window: int = 0) -> None:
        self.observer = observer
        self.chooser = chooser
        self.fallback = fallback
        self.fallback_key = fallback_key
        self.what_if = what_if if what_if is not None else fallback
        # At most this many jobs per agent per cycle are looked at by the agent (0: all):
        # the first that can start, in the queue's order (the framework asks only when
        # there is room); ``past_depth`` places the others in the same cycle (the what-if
        # heuristic, or the fallback). Bounds a cycle's cost, as Slurm bounds its own
        # (default_queue_depth), when a burst of jobs can all start at once.
        self.max_agent_jobs = max_agent_jobs
        if past_depth not in PAST_DEPTH:
            raise ValueError(f"past_depth must be one of {', '.join(PAST_DEPTH)}")
        self.past_depth_plugin = self.what_if if past_depth == "what_if" else self.fallback
        self._state: CycleState | None = None
        self._choices: dict[int, Choice] = {}
        self._deferred: set[int] = set()
        self._owned: dict[str, int] = {}        # this cycle: agent -> jobs it looked at
        # Across cycles: when the agent first deferred a job (for max_defer_s), and what the
        # job's options looked like then; a deferral stands, without asking the agent
        # again, until those options change (a new free group, a neighbour gone, ...).
        self._deferred_since: dict[int, float] = {}
        self._standing: dict[int, bytes] = {}
        self._warned: set[str] = set()
        # This cycle's reuse horizon (``reuse_horizon``).
        self._horizon = math.inf
        # The agents' order head (``pick_next``), offered windows of this many jobs.
        self.order = order
        self.pick_window = order_window if order is not None and self.active else 0

    @property
    def active(self) -> bool:
        return self.observer is not None and self.chooser is not None

    def _sync(self, state: CycleState) -> None:
        if state is not self._state:
            self._state = state
            self._choices = {}
            self._deferred = set()
            self._owned = {}
            self._horizon = math.inf
            if len(self._deferred_since) > 4 * max(64, len(state.snapshot.jobs)):
                alive = {j.job_id for j in state.snapshot.jobs}
                for table in (self._deferred_since, self._standing):
                    for job_id in [k for k in table if k not in alive]:
                        del table[job_id]

    def _what_if_for(self, job: Job, state: CycleState) -> PlacePlugin:
        """What-if answers: ``what_if`` for jobs an agent owns, else the fallback."""
        return self.fallback if self.plugin_for(job, state) is self.fallback else self.what_if

    @staticmethod
    def _options(obs) -> bytes:
        return obs.live.numpy().tobytes() + obs.mask.numpy().tobytes()

    def _choice(self, job: Job, state: CycleState) -> Choice:
        hit = self._choices.get(job.job_id)
        if hit is not None:
            return hit
        agent = self._agent_of(job, state) if self.max_agent_jobs else None
        if agent is not None:   # (a job no agent owns is the fallback's, below)
            looked = self._owned.get(agent, 0)
            if looked >= self.max_agent_jobs:
                self._choices[job.job_id] = _PAST_DEPTH
                return _PAST_DEPTH
            self._owned[agent] = looked + 1
        obs = self.observer.observe(job, state, self._deferred_since.get(job.job_id))
        if obs is None:
            self._no_agent(job.partition)
            choice = _FALLBACK
        else:
            options = self._options(obs)
            if self._standing.get(job.job_id) == options:
                choice = Choice(defer=True, action=obs.defer_action, score=0.0)
            else:
                choice = self.chooser(obs, state)
            if choice.defer:
                self._deferred.add(job.job_id)
                since = self._deferred_since.setdefault(job.job_id, state.now_s)
                self._standing[job.job_id] = options
                # it stands on the same options until max_defer_s ends it (the mask changes;
                # a millisecond early, so that rounding never lets a reuse pass the end)
                if self.observer.max_defer_s > 0:
                    self._horizon = min(self._horizon,
                                        since + self.observer.max_defer_s - 1e-3)
            else:
                was_deferred = self._deferred_since.pop(job.job_id, None) is not None
                self._standing.pop(job.job_id, None)
                # the agent placed it on features that move with the clock (its wait): as
                # the agent reads the clock, until its next step (never on the exact clock);
                # not at all where the placement ended a deferral, whose clock it resets
                # (the same inputs may be deferred again: ``max_defer_s`` counts afresh)
                self._horizon = min(self._horizon, -math.inf if was_deferred
                                    else self._next_step(state.now_s))
        self._choices[job.job_id] = choice
        return choice

    def pick_next(self, window, state: CycleState) -> tuple[int, str]:
        """Which of ``window`` (jobs of one partition and 2D-LAS queue that can start now,
        in the order plugin's order) starts first: the partition's agent's order head
        (``agent/order_head.py``); the first where no agent owns the partition or its head
        has no weights for it. Its inputs include the jobs' waits (on the agents' clock),
        so the cycle is reused only until the clock next moves."""
        self._sync(state)
        agent = self._agent_of(window[0], state)
        if agent is None or not self.order.has(agent):
            return 0, ""
        now = self.observer.clock(state.now_s)
        feats = order_features(window, now, partition_free_gpus(window[0], state))
        index, scores = self.order.pick(agent, feats)
        self._horizon = min(self._horizon, self._next_step(state.now_s))
        if index == 0:
            return 0, ""
        picked = window[index]
        left = feats[index, 1]
        return index, (f"agent {agent} scores it {scores[index]:.2f} against "
                       f"{scores[0]:.2f}; {picked.num_gpus} GPU(s), "
                       + (f"predicted {math.expm1(left):.2f} GPU-h left"
                          if feats[index, 2] else "no prediction ahead"))

    def _next_step(self, now_s: float) -> float:
        """When the agents' clock next moves (``Observer.next_clock_s``), a millisecond
        early so that rounding never lets a reuse pass it; -inf on the exact clock."""
        return self.observer.next_clock_s(now_s) - 1e-3

    def reuse_horizon(self, state: CycleState) -> float:
        """Until when the cycle that decided ``state`` would be decided the same on equal
        inputs (``Policy.reuse_decisions``): for ever where no agent was asked or each
        asked agent deferred (a deferral stands while the job's options are unchanged),
        until the first such deferral's ``max_defer_s`` ends (the options change then);
        where an agent placed a job (its features hold its wait, which the clock moves),
        until the agents' clock next moves (``clock_step_s``), never on the exact clock.
        A saturated cluster, where no agent is asked, reuses its cycles."""
        if not self.active or state is not self._state:
            return math.inf
        return self._horizon

    def plugin_for(self, job: Job, state: CycleState) -> PlacePlugin | LearnedPlacement:
        """The plugin whose rules decide this job: this one for jobs an agent places, the
        fallback for the others (the framework then offers their candidates as it would
        to the fallback: one node per class of alike nodes, so an unmatched partition
        costs what the fallback costs)."""
        if not self.active:
            return self.fallback
        agent = self._agent_of(job, state)
        if agent is None:
            self._no_agent(job.partition)
            return self.fallback
        if not self.max_agent_jobs:
            return self
        # Past this cycle's depth (``max_agent_jobs`` jobs its agent has looked at):
        # ``past_depth``'s, unless the agent has already looked at this job this cycle.
        self._sync(state)
        choice = self._choices.get(job.job_id)
        if choice is not None:
            return self._delegate(choice)
        return self if self._owned.get(agent, 0) < self.max_agent_jobs else self.past_depth_plugin

    def handed_note(self, job: Job, state: CycleState) -> str:
        """Why another plugin decided this job, for its decision's reason ("" where an
        agent decided it): asked after the framework placed the job this cycle, so
        ``plugin_for`` answers as it did when the job was decided."""
        plugin = self.plugin_for(job, state)
        if plugin is self:
            return ""
        why = ("no learned checkpoint loaded" if not self.active
               else f"no agent for partition {job.partition}"
               if self._agent_of(job, state) is None
               else f"past the agents' depth this cycle (max_agent_jobs = "
                    f"{self.max_agent_jobs})")
        return f"{why}: placed by {plugin.key}"

    def _no_agent(self, partition: str) -> None:
        if partition not in self._warned:
            self._warned.add(partition)
            log.warning("learned: no agent for partition %r in this checkpoint; jobs "
                        "there are placed by %s", partition, self.fallback_key)

    def _delegate(self, choice: Choice) -> PlacePlugin | LearnedPlacement:
        if choice is _FALLBACK:
            return self.fallback
        return self.past_depth_plugin if choice is _PAST_DEPTH else self

    def _agent_of(self, job: Job, state: CycleState) -> str | None:
        top = self.observer.topology_for(state.snapshot)
        return top.agent_for(job.partition, self.observer.mode)

    def propose(self, job: Job, state: CycleState) -> list[Candidate] | None:
        """The agent's placement as the only candidate on free GPUs ([] if it defers);
        None for jobs the fallback places. Saves the framework generating and scoring
        every group's candidate when only one can win."""
        if not self.active or state.what_if:
            return None
        self._sync(state)
        if job.job_id in self._deferred:
            return []
        choice = self._choice(job, state)
        if choice is _FALLBACK or choice is _PAST_DEPTH:
            return None
        if choice.defer:
            return []
        cand = make_candidate(choice.allocs, state.leaf_of)
        total = cand.gpus
        per_node: dict[int, int] = {}
        for n, g, k in cand.allocs:
            per_node[n] = per_node.get(n, 0) + k
        if cand.allocs != choice.allocs or any(
                not 0 <= n < len(state.free) or not 0 <= g < len(state.free[n])
                or state.free[n][g] < k for n, g, k in cand.allocs) or not all(
                state.fits_host(job, n, k, total) for n, k in per_node.items()):
            # Not a placement the framework would offer (a bug, not a decision): let the
            # framework generate candidates; only the agent's own can pass ``feasible``.
            if "bad-proposal" not in self._warned:
                self._warned.add("bad-proposal")
                log.warning("learned: the agent's placement %s for job %s is not a free "
                            "placement; the job waits", choice.allocs, job.job_id)
            return None
        return [cand]

    def feasible(self, job: Job, cand: Candidate, state: CycleState) -> bool:
        if not self.active:
            return accepts(self.fallback, job, cand, state)
        self._sync(state)
        if state.what_if:       # a what-if question, not an agent decision
            if job.job_id in self._deferred and all(
                    k <= state.free[n][g] for n, g, k in cand.allocs):
                return False   # free GPUs only: the agent has judged those and waits
            return accepts(self._what_if_for(job, state), job, cand, state)
        if job.job_id in self._deferred:
            return False
        choice = self._choice(job, state)
        if choice is _FALLBACK or choice is _PAST_DEPTH:
            return accepts(self._delegate(choice), job, cand, state)
        if choice.defer:
            return False
        return cand.allocs == choice.allocs

    def score(self, job: Job, cand: Candidate, state: CycleState) -> float:
        if not self.active:
            return self.fallback.score(job, cand, state)
        self._sync(state)
        if state.what_if:
            return self._what_if_for(job, state).score(job, cand, state)
        choice = self._choice(job, state)
        if choice is _FALLBACK or choice is _PAST_DEPTH:
            return self._delegate(choice).score(job, cand, state)
        return choice.score if cand.allocs == choice.allocs else 0.0


def load_learned(path: str | Path, fallback_key: str):
    """The checkpoint, or None with a log line saying why and what places jobs instead."""
    from slurm_marl.agent.checkpoint import LearnedCheckpoint
    from slurm_marl.models.interference import ModelFileError
    try:
        return LearnedCheckpoint.load(path)
    except ModelFileError as exc:
        log.warning("learned: %s; placing with %s instead", exc, fallback_key)
        return None


def validate(params: Mapping) -> None:
    """The parameters checked, and the fallback and what-if plugins named; the checkpoint is
    not read (a missing or unreadable one makes the plugin place with its fallback)."""
    _settings(params)


def _settings(params: Mapping) -> tuple[str, str, float]:
    check_params(KEY, params, {"checkpoint": str, "fallback": str, "allow_defer": bool,
                               "max_defer_s": (int, float), "what_if": str,
                               "what_if_defer_below": (int, float), "max_agent_jobs": int,
                               "past_depth": str, "clock_step_s": (int, float),
                               "order_window": int})
    if params.get("order_window", 0) < 0:
        raise PluginError(f"plugin {KEY!r}: order_window must be >= 0 (0 or 1: the order "
                          f"plugin's order)")
    if params.get("past_depth", "what_if") not in PAST_DEPTH:
        raise PluginError(f"plugin {KEY!r}: past_depth must be one of "
                          f"{', '.join(PAST_DEPTH)}, got {params['past_depth']!r}")
    if params.get("max_agent_jobs", 0) < 0:
        raise PluginError(f"plugin {KEY!r}: max_agent_jobs must be >= 0 (0: no bound)")
    fallback_key = params.get("fallback", DEFAULT_FALLBACK)
    what_if_key = params.get("what_if", DEFAULT_WHAT_IF)
    for name, key in (("fallback", fallback_key), ("what_if", what_if_key)):
        if key == KEY:
            raise PluginError(f"plugin {KEY!r}: the {name} must be a heuristic plugin")
        validate_plugin("place", key, {})
    what_if_defer = float(params.get("what_if_defer_below", DEFAULT_WHAT_IF_DEFER_BELOW))
    if not 0.0 <= what_if_defer <= 1.0:
        raise PluginError(f"plugin {KEY!r}: what_if_defer_below must be in [0, 1], got "
                          f"{what_if_defer}")
    if params.get("max_defer_s", 0) < 0:
        raise PluginError(f"plugin {KEY!r}: max_defer_s must be >= 0")
    if not params.get("clock_step_s", 0) >= 0:
        raise PluginError(f"plugin {KEY!r}: clock_step_s must be >= 0 (0: the exact clock)")
    return fallback_key, what_if_key, what_if_defer


def build(params: Mapping, learned_checkpoint=None, **context) -> LearnedPlacement:
    fallback_key, what_if_key, what_if_defer = _settings(params)
    fallback = build_plugin("place", fallback_key, {}, **context)
    allow_defer = bool(params.get("allow_defer", True))
    torch.set_num_threads(1)
    ckpt = learned_checkpoint
    if ckpt is None:
        from slurm_marl.agent.checkpoint import shipped_checkpoint
        ckpt = load_learned(params.get("checkpoint") or str(shipped_checkpoint()),
                            fallback_key)
    if ckpt is None:
        return LearnedPlacement(None, None, fallback, fallback_key)
    from slurm_marl.agent.observe import (DEFAULT_CLOCK_STEP_S, DEFAULT_DEFER_ONLY_BELOW,
                                           DEFAULT_MAX_DEFER_S, Observer)
    max_defer_s = float(params.get("max_defer_s",
                                   ckpt.training.get("max_defer_s", DEFAULT_MAX_DEFER_S)))
    if max_defer_s < 0:
        raise PluginError(f"plugin {KEY!r}: max_defer_s must be >= 0")
    observer = Observer(ckpt.interference, ckpt.config.agents, ckpt.config.mode, max_defer_s,
                        float(ckpt.training.get("defer_only_below",
                                                DEFAULT_DEFER_ONLY_BELOW)),
                        float(params.get("clock_step_s", ckpt.training.get(
                            "clock_step_s", DEFAULT_CLOCK_STEP_S))))
    what_if = build_what_if(what_if_key, ckpt.interference, what_if_defer, context)
    order_window = int(params.get("order_window", ckpt.order.window if ckpt.order else 0))
    if order_window > 1 and ckpt.order is None:
        log.warning("learned: order_window = %d but checkpoint %s has no order head; the "
                    "order plugin's order stands", order_window, ckpt.source)
    return LearnedPlacement(observer, ModelChooser(ckpt, observer, allow_defer), fallback,
                            fallback_key, what_if, int(params.get("max_agent_jobs", 0)),
                            params.get("past_depth", "what_if"), ckpt.order, order_window)


def build_what_if(key: str, interference, defer_below: float = DEFAULT_WHAT_IF_DEFER_BELOW,
                  context: Mapping | None = None) -> PlacePlugin:
    """The heuristic answering what-if questions; least interference gets the checkpoint's
    interference model and ``defer_below`` (the training environment builds the same)."""
    context = dict(context or {})
    if key == DEFAULT_WHAT_IF:
        context["interference_estimator"] = interference
        return build_plugin("place", key, {"defer_below": defer_below,
                                           "include_neighbours": False}, **context)
    return build_plugin("place", key, {}, **context)
