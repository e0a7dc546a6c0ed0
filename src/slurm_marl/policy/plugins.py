"""What an order plugin and a place plugin look like, and how the registry finds them.

An order plugin turns a job into (queue, sort key); a place plugin says whether a candidate
placement is allowed and scores it. Each lives in one file whose module name is its registry
key (``order/tiresias_las.py`` is ``"tiresias_las"``) and exposes ``validate(params)`` (the
declared parameters checked without building anything: no model or sample file is read) and
``build(params, **context)``.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from slurm_marl.domain import Job

if TYPE_CHECKING:
    from slurm_marl.policy.state import Candidate, CycleState

_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@runtime_checkable
class OrderPlugin(Protocol):
    key: str
    time_dependent: bool     # keys change with time alone (next_change_s may return a time)
    # Optional, False if absent: between events a job's key changes with time alone only
    # at the times next_change_s gives (or moves a running job ahead, which enables no
    # preemption), so ranks that changed no decision then change none later
    # (``Policy.decides_partitions_apart``).
    #   settles_at_wakes: bool

    def classify(self, job: Job, now_s: float) -> tuple[int, tuple]:
        """(queue index, sort key); smaller sorts first. Ties break by submit time, job id."""

    def describe(self, job: Job, now_s: float, queue: int) -> str:
        """A few words on why the job sits where it does, for `slurm-marl explain`."""

    def next_change_s(self, job: Job, now_s: float) -> float | None:
        """When this job's queue or key changes with no other event (demotion, promotion)."""

    # Optional: the queue within which a place plugin that ``Picker``s may start waiting
    # jobs in another order (a 2D-LAS queue), None where it may not (a promoted job).
    # Without it the order is never changed by a pick.
    #   def pick_group(self, job: Job, now_s: float) -> Hashable | None


@runtime_checkable
class CycleAwareOrder(Protocol):
    """An order plugin that keeps state across cycles (Tiresias' per-queue lists). The
    framework calls ``begin_cycle`` once at the start of every cycle, before ranking, with
    all jobs of the cycle's view; ``classify`` then reads that state. Decisions then depend
    on the sequence of snapshots, not only on the last one: the simulator and the daemon
    still agree when they see the same sequence."""

    def begin_cycle(self, jobs: Sequence[Job], now_s: float) -> None:
        """Bring the state up to ``now_s`` from the jobs seen now."""

    def reset(self) -> None:
        """Forget everything seen (a new run)."""


@runtime_checkable
class PlacePlugin(Protocol):
    """The score extension point, the one member every place plugin implements. What else
    a plugin does it says by the abilities below it implements (``Filtering``,
    ``ReuseHorizon``, ``Proposer``, ``Delegating``) or declares (``LocalFilter``,
    ``ReadsColocation``, ``NodeIdentity``, ``ReadsHost``, ``Pure``); the framework reads
    them through ``abilities(plugin)``. The capacity being judged is ``state.view``: the
    free GPUs, or a tentative overlay while the framework asks a what-if question
    (``state.what_if``: planning a reservation, choosing preemption victims)."""

    key: str

    def score(self, job: Job, cand: "Candidate", state: "CycleState") -> float:
        """Higher is better, roughly in [0, 1] so weights mean something."""


@runtime_checkable
class Filtering(Protocol):
    """A place plugin that may reject candidates the framework offers, on top of the
    framework's own filter (free GPUs, CPUs, memory, partition). Without one, "a job of
    size s found no room, so a larger alike job will not either" holds (a filter may accept
    a larger job's shape)."""

    def feasible(self, job: Job, cand: "Candidate", state: "CycleState") -> bool:
        """Whether the candidate may be taken; asked before ``score`` of the same one."""


@runtime_checkable
class ReuseHorizon(Protocol):
    """A place plugin that keeps state across cycles (or reads the clock) and can still say
    until when the cycle that decided ``state`` would be decided the same on equal inputs,
    so the framework may reuse that cycle's placements (the learned plugin)."""

    def reuse_horizon(self, state: "CycleState") -> float:
        """inf: for ever; -inf: not at all; else a time."""


# Declared abilities: what a plugin's methods read, which no signature shows. A plugin
# declares one by naming it as a base class; the framework asks ``isinstance``.

class LocalFilter:
    """A ``Filtering`` plugin whose ``feasible`` reads only the job, the candidate's nodes
    and their co-location, so a partition's placements depend only on what is in it
    (``Policy.decides_partitions_apart``)."""


class ReadsColocation:
    """Reads ``state.colocated_by_level``: the cycle state tracks the model types on every
    GPU group, and co-located models are part of a class of alike nodes."""


class NodeIdentity:
    """Scores depend on a node's identity (its place in the topology), not only on its
    resources, so the framework must not offer one node per class of alike nodes."""


class ReadsHost:
    """Reads hosts' free CPUs or memory (or their sizes), so those are part of a class of
    alike nodes; otherwise they only filter (the first fitting node of a class is kept)."""


class Pure:
    """``feasible``/``score`` read only the job, the candidate and the cycle state: no state
    kept across cycles, no clock, none of ``framework.NOT_READ_BY_PLACEMENT``. A cycle's
    placements may then be reused while those inputs and the ranking are unchanged. A
    plugin neither ``Pure`` nor ``ReuseHorizon`` keeps its policy from reusing any."""


@dataclass(frozen=True)
class Abilities:
    """What a place plugin implements and declares, as the framework reads it."""

    filters: bool
    local_filter: bool
    reads_colocation: bool
    node_identity: bool
    reads_host: bool
    pure: bool
    reuse_horizon: bool
    proposes: bool
    delegates: bool
    picks: bool = False
    judges_many: bool = False


@functools.cache
def _class_abilities(cls: type) -> Abilities:
    def has(name: str) -> bool:
        return callable(getattr(cls, name, None))
    return Abilities(filters=has("feasible"), local_filter=issubclass(cls, LocalFilter),
                     reads_colocation=issubclass(cls, ReadsColocation),
                     node_identity=issubclass(cls, NodeIdentity),
                     reads_host=issubclass(cls, ReadsHost), pure=issubclass(cls, Pure),
                     reuse_horizon=has("reuse_horizon"), proposes=has("propose"),
                     delegates=has("plugin_for"), picks=has("pick_next"),
                     judges_many=has("score_many") and (not has("feasible")
                                                        or has("feasible_many")))


def abilities(plugin: object) -> Abilities:
    """The plugin's abilities, read from its class (methods and declared bases are class
    members; cached per class, as the framework asks per job)."""
    return _class_abilities(type(plugin))


def accepts(plugin: PlacePlugin, job: Job, cand: "Candidate", state: "CycleState") -> bool:
    """Whether the plugin lets the candidate be taken: its ``feasible`` if it filters."""
    return not abilities(plugin).filters or plugin.feasible(job, cand, state)


def check_abilities(key: str, plugin: object) -> None:
    """Refuse a place plugin whose declarations contradict each other, naming them."""
    ab = abilities(plugin)
    if ab.local_filter and not ab.filters:
        raise PluginError(f"place plugin {key!r} declares LocalFilter but has no "
                          f"feasible() (see Filtering in slurm_marl.policy.plugins)")
    if ab.pure and ab.reuse_horizon:
        raise PluginError(f"place plugin {key!r} declares Pure and also has "
                          f"reuse_horizon(): one or the other")


@runtime_checkable
class Proposer(Protocol):
    """A place plugin that decides placements itself (the learned plugin)."""

    def propose(self, job: Job, state: "CycleState") -> "list[Candidate] | None":
        """The only candidates worth scoring on free GPUs ([]: none, the job waits), or
        None to let the framework generate them. Asked only for jobs a ``NodeIdentity``
        plugin decides, and only when the framework's generator would find room."""


@runtime_checkable
class Picker(Protocol):
    """A place plugin that also chooses which waiting job starts next (the learned agents'
    order head): while the cycle walks the ranked jobs, a job that can start now on free
    GPUs is offered together with the next jobs of its partition in the same queue
    (the order plugin's ``pick_group``: a 2D-LAS queue) that can start now too, up to
    ``pick_window`` jobs, none protected by the Slurm-alone guard and none past one
    (``allocation.py``); the plugin names the one to try first. So a pick never moves a
    job to another queue, never passes a protected job, and changes nothing where the
    order plugin has no ``pick_group`` (FIFO, SRTF)."""

    pick_window: int      # at most this many jobs offered at once; 0 or 1: never asked

    def pick_next(self, window: Sequence[Job], state: "CycleState") -> tuple[int, str]:
        """(index into ``window``, a few words on why for ``explain``); index 0 keeps the
        order plugin's order. ``window[0]`` is the job the walk reached."""


@runtime_checkable
class Delegating(Protocol):
    """A place plugin that hands some jobs to another plugin (the learned plugin's fallback
    for partitions it has no agent for): the framework offers such a job's candidates as
    the plugin returned here needs them, and outside what-if questions asks that plugin's
    ``feasible`` and ``score`` directly, so the delegating plugin's own answers for such a
    job must be the delegate's. It may also say why it handed a placed job on
    (``handed_note(job, state) -> str``, "" where it decided itself): the decision's reason
    then ends with it, so ``explain`` shows why another plugin placed the job."""

    def plugin_for(self, job: Job, state: "CycleState") -> PlacePlugin:
        """The plugin whose rules decide this job (``self`` or another)."""


@runtime_checkable
class JudgesMany(Protocol):
    """A place plugin that answers for all of a job's candidates at once, with exactly the
    values its ``score`` (and, if it filters, ``feasible``) gives one by one. Where every
    plugin deciding a job does, the framework asks each once per job (``policy/scoring.py``)
    instead of once per candidate: on a large cluster the calls, not the work, were most of
    a heuristic's cost per candidate."""

    def score_many(self, job: Job, cands: Sequence["Candidate"], state: "CycleState"
                   ) -> list[float]:
        """``[score(job, c, state) for c in cands]``."""

    # and, for a ``Filtering`` plugin:
    #   def feasible_many(self, job, cands, state) -> list[bool]   # feasible() of each


class PluginError(ValueError):
    pass


# Out-of-tree plugins (Kubernetes' registry with out-of-tree entries): key -> module path,
# registered by the code that composes the scheduler (the package root registers the learned
# agents' plugin), so ``policy`` never imports them.
_OUT_OF_TREE: dict[tuple[str, str], str] = {}


# How a saved interference model (``model_path`` of least_interference) is loaded: a
# "module:attribute" registered by the package root (the torch model lives in ``models``,
# which policy does not import).
_MODEL_LOADER: str | None = None


def register_model_loader(target: str) -> None:
    """``target`` is "package.module:callable" taking a path and returning an estimator."""
    global _MODEL_LOADER
    if ":" not in target:
        raise ValueError(f"model loader {target!r} must be 'module:attribute'")
    _MODEL_LOADER = target


def load_model_estimator(path: str):
    """The interference model saved at ``path``, through the registered loader (errors are
    ValueErrors that name the file)."""
    if _MODEL_LOADER is None:
        raise ValueError("no interference-model loader is registered (slurm_marl registers "
                         "the models' one on import)")
    module, _, attribute = _MODEL_LOADER.partition(":")
    target = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target(path)


def register_plugin(kind: str, key: str, module: str) -> None:
    """Make ``module`` (a dotted path, imported when first built) the ``kind`` plugin
    ``key``; built-in keys cannot be replaced."""
    _check_name(kind, key)
    if key in builtin_keys(kind):
        raise PluginError(f"{kind} plugin {key!r} is built in and cannot be replaced")
    _OUT_OF_TREE[(kind, key)] = module


def builtin_keys(kind: str) -> tuple[str, ...]:
    """The plugins shipped in ``policy/<kind>/`` (one module per key)."""
    package = importlib.import_module(f"slurm_marl.policy.{kind}")
    return tuple(sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                        if not m.name.startswith("_")))


def registered_keys(kind: str) -> tuple[str, ...]:
    """Every plugin key of ``kind``: built in and registered out of tree."""
    return tuple(sorted(set(builtin_keys(kind))
                        | {k for (kd, k) in _OUT_OF_TREE if kd == kind}))


def _check_name(kind: str, key: str) -> None:
    if kind not in ("order", "place"):
        raise PluginError(f"plugin kind must be 'order' or 'place', got {kind!r}")
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise PluginError(f"{kind} plugin key {key!r} is not a valid name")


def load_plugin_module(kind: str, key: str):
    _check_name(kind, key)
    out_of_tree = _OUT_OF_TREE.get((kind, key))
    if out_of_tree is not None:
        return importlib.import_module(out_of_tree)
    try:
        return importlib.import_module(f"slurm_marl.policy.{kind}.{key}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.endswith(f"{kind}.{key}"):
            raise PluginError(f"no {kind} plugin {key!r}") from None
        raise


def validate_plugin(kind: str, key: str, params: Mapping | None = None) -> None:
    """Check a plugin's parameters as its module declares them, without building the plugin
    (a profile is validated this way; building may load models, done once by its user)."""
    module = load_plugin_module(kind, key)
    validate = getattr(module, "validate", None)
    if not callable(validate):
        raise PluginError(f"{kind} plugin module {key!r} declares no validate(params)")
    validate(dict(params or {}))


def build_plugin(kind: str, key: str, params: Mapping | None = None, **context):
    """Build a plugin and check it honours its contract (``OrderPlugin`` or
    ``PlacePlugin``, every member declared; a place plugin's declared abilities agreeing
    with each other)."""
    module = load_plugin_module(kind, key)
    plugin = module.build(dict(params or {}), **context)
    contract = OrderPlugin if kind == "order" else PlacePlugin
    if not isinstance(plugin, contract):
        missing = [m for m in _members(contract) if not hasattr(plugin, m)]
        raise PluginError(f"{kind} plugin {key!r} does not declare {', '.join(missing)} "
                          f"(see {contract.__name__} in slurm_marl.policy.plugins)")
    if plugin.key != key:
        raise PluginError(f"{kind} plugin module {key!r} built a plugin with key "
                          f"{plugin.key!r}")
    if kind == "place":
        check_abilities(key, plugin)
    return plugin


def _members(protocol: type) -> list[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")}
    return sorted(names)


def check_params(key: str, params: Mapping, allowed: Mapping[str, type | tuple]) -> None:
    """Reject unknown or ill-typed plugin parameters with a message naming the plugin."""
    unknown = set(params) - set(allowed)
    if unknown:
        raise PluginError(f"plugin {key!r}: unknown parameter(s) {sorted(unknown)}; "
                          f"allowed: {sorted(allowed)}")
    for name, value in params.items():
        types = allowed[name]
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple)
                                                    else (types,)):
            raise PluginError(f"plugin {key!r}: parameter {name!r} must be {types}, "
                              f"got {value!r}")
        if not isinstance(value, types):
            raise PluginError(f"plugin {key!r}: parameter {name!r} has the wrong type "
                              f"({type(value).__name__}: {value!r})")
