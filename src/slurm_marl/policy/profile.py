"""Scheduling profiles: which order plugin, which weighted place plugins, which actions.

A profile is data, so an admin can read and change a policy without touching code. It is a
small TOML file::

    name = "las-consolidate"
    description = "Tiresias 2D-LAS order, cons_tres-like best fit"
    preemption = true        # Tiresias demotion: running jobs yield to higher queues
    backfill = true          # later jobs may start past a blocked one
    backfill_reserve = false # false: Tiresias fit-first; true: hold the blocked job's GPUs

    [order]
    plugin = "tiresias_las"
    thresholds_gpu_s = [3250, 7200, 18000]

    [place]                  # plugin key = weight, in this order
    consolidate = 1.0

    [place_params.consolidate]

The actions a cycle runs (as Volcano lists its actions in configuration) may be listed
instead of the three flags: ``actions = ["allocate", "preempt", "backfill", "reserve"]``.
``allocate`` comes first (the walk over the ranked jobs, starting each on free GPUs);
``preempt`` and ``reserve`` are tried in the listed order for a job that cannot start on
free GPUs, until one places it (``preempt``: now, on GPUs of lower-ranked running jobs;
``reserve``: later, on the GPUs it will wait for, once per partition); ``backfill`` lets the
walk go on past a blocked job (without it the partition's walk ends there), and ``reserve``
needs it. Without ``actions`` the flags say it: ``allocate``, then ``preempt`` with
``preemption``, ``backfill`` with ``backfill``, ``reserve`` with both ``backfill`` and
``backfill_reserve``; a profile gives either ``actions`` or the flags, not both.

Built-in profiles live next to this module in ``profiles/*.toml`` and are loaded by name.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from slurm_marl.policy.guard import DEFAULT_GUARD, guard_settings
from slurm_marl.policy.plugins import registered_keys, validate_plugin

PROFILES_DIR = Path(__file__).with_name("profiles")

_TOP_KEYS = {"name", "description", "order", "place", "place_params", "preemption",
             "backfill", "backfill_reserve", "guard", "actions"}
_FLAGS = (("preemption", False), ("backfill", False), ("backfill_reserve", True))
# The actions a profile may list (module docstring); ``allocate`` first.
ACTIONS = ("allocate", "preempt", "backfill", "reserve")


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the offending key."""


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType({k: _freeze_value(v) for k, v in mapping.items()})


def _freeze_value(value):
    if isinstance(value, Mapping):
        return _frozen(value)
    if isinstance(value, list):
        return tuple(_freeze_value(v) for v in value)
    return value


@dataclass(frozen=True)
class Profile:
    """One scheduling policy as data.

    ``place`` is a tuple of (place plugin key, weight); ``place_params`` maps a plugin key to
    its parameters. ``backfill_reserve`` (an addition to the agreed interface, default True)
    chooses what backfill means: hold the first blocked job's resources (Slurm-like) or let
    any later job that fits start (Tiresias' fit-first, order then enforced by preemption).
    """

    name: str
    order: str
    order_params: Mapping = field(default_factory=lambda: MappingProxyType({}))
    place: tuple[tuple[str, float], ...] = (("consolidate", 1.0),)
    place_params: Mapping = field(default_factory=lambda: MappingProxyType({}))
    preemption: bool = False
    backfill: bool = False
    description: str = ""
    backfill_reserve: bool = True
    # The Slurm-alone guard's settings (``policy/guard.py``); empty: no guard.
    guard: Mapping = field(default_factory=lambda: MappingProxyType({}))
    source: str = field(default="<profile>", compare=False)   # the file it came from
    # The actions as the profile listed them (``ACTIONS``); empty: from the flags.
    actions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A profile that lists its actions carries the flags they imply (the allocation
        # walk reads the flags); one built in code whose flags disagree is refused, never
        # run with one of the two silently ignored.
        if self.actions and (self.preemption, self.backfill, self.backfill_reserve) != (
                "preempt" in self.actions, "backfill" in self.actions,
                "reserve" in self.actions):
            raise ProfileError(f"{self.source}: 'actions' {list(self.actions)} disagree with "
                               f"preemption={self.preemption}, backfill={self.backfill}, "
                               f"backfill_reserve={self.backfill_reserve}")

    @property
    def action_order(self) -> tuple[str, ...]:
        """The actions the cycle runs, in order (module docstring)."""
        if self.actions:
            return self.actions
        return (("allocate",) + (("preempt",) if self.preemption else ())
                + (("backfill",) if self.backfill else ())
                + (("reserve",) if self.backfill and self.backfill_reserve else ()))

    def __hash__(self) -> int:
        return hash((self.name, self.order, self.place, self.preemption, self.backfill,
                     self.backfill_reserve))

    def __reduce__(self):
        """Pickled as plain data and rebuilt frozen (a mappingproxy cannot be pickled), so
        a profile crosses process boundaries (``report --backend local``)."""
        return (_rebuild_profile, ({f.name: _thaw(getattr(self, f.name))
                                    for f in fields(self)},))


_MAPPING_FIELDS = ("order_params", "place_params", "guard")


def _thaw(value):
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_thaw(v) for v in value)
    return value


def _rebuild_profile(values: dict) -> Profile:
    return Profile(**{k: _frozen(v) if k in _MAPPING_FIELDS else v for k, v in values.items()})


def plugin_keys(kind: str) -> tuple[str, ...]:
    """Registry keys of the ``order`` or ``place`` plugins: built in and out of tree."""
    return registered_keys(kind)


def builtin_profiles() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in PROFILES_DIR.glob("*.toml")))


def load_profile(name_or_path: str | Path) -> Profile:
    """A built-in profile by name (``las-consolidate``) or a TOML file by path."""
    text_name = str(name_or_path)
    path = Path(name_or_path)
    try:
        if not (text_name.endswith(".toml") or path.is_file()):
            candidate = PROFILES_DIR / f"{text_name}.toml"
            if not candidate.is_file():
                raise ProfileError(f"unknown profile {text_name!r}: not a file and not a "
                                   f"built-in ({', '.join(builtin_profiles())})")
            path = candidate
        if not path.is_file():
            raise ProfileError(f"profile file {path} does not exist")
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:  # unreadable, a name too long, ...
        raise ProfileError(f"profile {text_name[:200]!r}: cannot read: "
                           f"{exc.strerror or exc}") from None
    return profile_from_mapping(data, source=str(path), default_name=path.stem)


def profile_from_mapping(data: Mapping, source: str = "<profile>",
                         default_name: str = "profile") -> Profile:
    """Validate a parsed profile; every error names ``source`` and the key at fault."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"{source}: a profile must be a table")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ProfileError(f"{source}: unknown key(s) {sorted(unknown)}; "
                           f"allowed: {sorted(_TOP_KEYS)}")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{source}: 'name' must be a non-empty string")

    order_table = data.get("order")
    if not isinstance(order_table, Mapping) or "plugin" not in order_table:
        raise ProfileError(f"{source}: missing [order] table with a 'plugin' key")
    order_key = order_table["plugin"]
    if order_key not in plugin_keys("order"):
        raise ProfileError(f"{source}: [order] plugin {order_key!r} is unknown; "
                           f"available: {', '.join(plugin_keys('order'))}")
    order_params = {k: v for k, v in order_table.items() if k != "plugin"}

    place_table = data.get("place", {"consolidate": 1.0})
    if not isinstance(place_table, Mapping) or not place_table:
        raise ProfileError(f"{source}: [place] must map at least one plugin key to a weight")
    known_place = plugin_keys("place")
    place: list[tuple[str, float]] = []
    for key, weight in place_table.items():
        if key not in known_place:
            raise ProfileError(f"{source}: [place] plugin {key!r} is unknown; "
                               f"available: {', '.join(known_place)}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not math.isfinite(weight) or weight < 0:
            raise ProfileError(f"{source}: [place] weight of {key!r} must be a number >= 0, "
                               f"got {weight!r}")
        place.append((key, float(weight)))

    place_params = data.get("place_params", {})
    if not isinstance(place_params, Mapping):
        raise ProfileError(f"{source}: [place_params] must be a table of tables")
    for key, params in place_params.items():
        if key not in place_table:
            raise ProfileError(f"{source}: [place_params.{key}] given but {key!r} is not in "
                               f"[place]")
        if not isinstance(params, Mapping):
            raise ProfileError(f"{source}: [place_params.{key}] must be a table")

    flags = _action_flags(data, source)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ProfileError(f"{source}: 'description' must be a string")

    guard = data.get("guard", {})
    if not isinstance(guard, Mapping):
        raise ProfileError(f"{source}: [guard] must be a table")
    try:
        guard_settings(guard)
    except ValueError as exc:
        raise ProfileError(f"{source}: {exc}") from None

    profile = Profile(name=name, order=order_key, order_params=_frozen(order_params),
                      place=tuple(place), place_params=_frozen(place_params),
                      description=description, source=source, guard=_frozen(guard), **flags)
    # Plugins check their own declared parameters (nothing is built, no model read); their
    # complaint is surfaced with the source.
    try:
        validate_plugin("order", order_key, profile.order_params)
        for key, _ in profile.place:
            validate_plugin("place", key, profile.place_params.get(key, {}))
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{source}: {exc}") from None
    return profile


def _action_flags(data: Mapping, source: str) -> dict:
    """The profile's ``actions`` (if listed) and the flags they imply, or the flags."""
    if "actions" not in data:
        flags = {}
        for flag, default in _FLAGS:
            value = data.get(flag, default)
            if not isinstance(value, bool):
                raise ProfileError(f"{source}: {flag!r} must be true or false, got {value!r}")
            flags[flag] = value
        return flags
    given = sorted(flag for flag, _ in _FLAGS if flag in data)
    if given:
        raise ProfileError(f"{source}: 'actions' and {given} both given; list the actions "
                           f"only")
    actions = _check_actions(data["actions"], source)
    return {"actions": actions, "preemption": "preempt" in actions,
            "backfill": "backfill" in actions, "backfill_reserve": "reserve" in actions}


def _check_actions(actions, source: str) -> tuple[str, ...]:
    """A valid ``actions`` list (module docstring) as a tuple; a ProfileError otherwise."""
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise ProfileError(f"{source}: 'actions' must be a list of action names, got "
                           f"{actions!r}")
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise ProfileError(f"{source}: 'actions': unknown action(s) {unknown}; allowed: "
                           f"{list(ACTIONS)}")
    if len(set(actions)) != len(actions):
        raise ProfileError(f"{source}: 'actions' lists an action twice: {actions}")
    if not actions or actions[0] != "allocate":
        raise ProfileError(f"{source}: 'actions' must start with \"allocate\", got "
                           f"{actions}")
    if "reserve" in actions and "backfill" not in actions:
        raise ProfileError(f"{source}: 'actions': \"reserve\" needs \"backfill\"")
    return tuple(actions)


def with_default_guard(profile: Profile) -> Profile:
    """The profile with the daemon's default Slurm-alone guard (``guard.DEFAULT_GUARD``)
    where it has no ``[guard]`` table of its own; a profile with one keeps it."""
    if profile.guard:
        return profile
    return replace(profile, guard=_frozen(DEFAULT_GUARD))


SLURM_ALONE_PROFILE = "fifo-backfill"   # Slurm's own FIFO with backfill, as simulated


def decides_as_slurm_alone(profile: Profile) -> bool:
    """Whether the profile decides what the guard's reference (``fifo-backfill``, Slurm's
    own policy as the simulator has it) decides: the same order, place plugins and
    actions. The guard keeps no job later than under that policy, so around it the guard
    is the identity by construction and is not built at all (its shadow, estimated
    without hindsight, would otherwise reorder and hold jobs the policy itself decides)."""
    ref = _reference_profile()
    return (profile.order, profile.order_params, profile.place, profile.place_params,
            profile.preemption, profile.backfill, profile.backfill_reserve,
            profile.action_order) == (
        ref.order, ref.order_params, ref.place, ref.place_params, ref.preemption,
        ref.backfill, ref.backfill_reserve, ref.action_order)


@lru_cache(maxsize=1)
def _reference_profile() -> Profile:
    return load_profile(SLURM_ALONE_PROFILE)
