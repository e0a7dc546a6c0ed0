"""The agent's TOML configuration (``/etc/slurm-marl/config.toml``), validated at start.

Every key is documented in ``src/slurm_marl/data/systemd/config.example.toml`` (shipped in
the package too); an unknown key, a wrong type or an out-of-range value is an error naming
the file and the key, never a silent default.
"""

from __future__ import annotations

import logging

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from slurm_marl.slurm_integration.vocabulary import bad_partition_name

DEFAULT_PATH = Path("/etc/slurm-marl/config.toml")


class ConfigError(ValueError):
    """The configuration file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class SlurmSection:
    slurm_conf: str = "/etc/slurm/slurm.conf"
    command_timeout_s: float = 30.0
    write_retries: int = 2
    # Slurm 24.11 on: between full reads at most this far apart, read as JSON only the jobs
    # and nodes that changed (slurm_integration/changes.py); 0 = a full read every cycle
    full_read_s: float = 300.0


@dataclass(frozen=True)
class AgentSection:
    interval_s: float = 5.0
    # between cycles, probe the managed partitions' queue this often (one light squeue)
    # and run a cycle at once when a job arrived, started or ended, so that freed GPUs
    # wait at most about this long for the agent's next start (0 = cycles only every
    # interval_s)
    react_s: float = 1.0
    profile: str = "las-consolidate"
    managed_partitions: tuple[str, ...] = ("gpu",)
    preempt_partitions: tuple[str, ...] = ()
    shadow: bool = False
    grace_s: int = 30
    lease: bool = True
    # the policy's first waiting jobs, up to this many GPUs per partition, are kept eligible
    # (priorities in the policy's order) so that Slurm starts them the moment GPUs free,
    # between the agent's cycles, where Slurm places them (0 = none: every start waits for
    # a cycle and gets the agent's placement)
    eligible_ahead_gpus: int = 0
    priority_base: int = 1_000_000
    state_dir: str = "/var/lib/slurm-marl"
    # one active agent per cluster (daemon/leader.py): the file every agent of this cluster
    # locks ("" = slurm-marl.lock in slurm.conf's StateSaveLocation, shared by the primary
    # and backup controllers); a second agent waits as a standby
    lock_file: str = ""
    retention_days: float = 14.0    # store: decisions/cycles/finished jobs older are pruned
    retention_max_rows: int = 1_000_000  # store: newest decisions/cycles kept (0 = no cap)
    watchdog: bool = True
    progress_dir: str = ""          # jobs' progress reports -> observed speeds ("" = off)
    sample_min_s: float = 5.0       # shortest stretch of one co-location that makes a sample
    # GPU-time predictor (`slurm-marl history train` folder; "" = no predictions) and the
    # history CSV (`slurm-marl history import`) its features start from ("" = none)
    gpu_time_model: str = ""
    history: str = ""
    # use a partition's predictions only while they have ordered its ended jobs well
    # (history/skill.py); false: every prediction is used
    prediction_gate: bool = True
    # partitions whose order is written as SiteFactor (added to Slurm's multifactor
    # priority) instead of Priority (which overrides every factor), and the agent's range
    # for it: [1, site_factor_max]; size it against `slurm-marl check-slurm`'s
    # PriorityWeight* sum (above it the agent's order dominates, below it only nudges)
    site_factor_partitions: tuple[str, ...] = ()
    site_factor_max: int = 1_000_000
    # reuse the last cycle's placements while their inputs are unchanged (policy/framework.py)
    reuse_decisions: bool = True
    # the Slurm-alone guard (policy/guard.py) in front of every profile that has no [guard]
    # table of its own, at its default (guard.DEFAULT_GUARD): a job waiting (or running)
    # past the start Slurm alone would have given it ranks first and is never preempted;
    # false: profiles as written
    guard: bool = True
    # a profile of its own for some managed partitions (TOML table [agent.partition_profiles],
    # partition = built-in name or profile file, e.g. knobs from `slurm-marl train
    # thresholds`); the others use `profile`. Kept as (partition, profile) pairs.
    partition_profiles: tuple[tuple[str, str], ...] = ()

    def profile_for(self, partition: str) -> str:
        return dict(self.partition_profiles).get(partition, self.profile)


@dataclass(frozen=True)
class MetricsSection:
    enabled: bool = True
    address: str = "127.0.0.1"
    port: int = 9798


@dataclass(frozen=True)
class LogSection:
    level: str = "INFO"


@dataclass(frozen=True)
class Config:
    slurm: SlurmSection = field(default_factory=SlurmSection)
    agent: AgentSection = field(default_factory=AgentSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    log: LogSection = field(default_factory=LogSection)
    source: str = "<defaults>"

    @property
    def store_path(self) -> Path:
        return Path(self.agent.state_dir) / "state.sqlite"


_RANGES: dict[tuple[str, str], tuple[float, float]] = {
    ("slurm", "command_timeout_s"): (1, 600),
    ("slurm", "write_retries"): (0, 10),
    ("slurm", "full_read_s"): (0, 86400),
    ("agent", "interval_s"): (0.5, 3600),
    ("agent", "react_s"): (0, 3600),
    ("agent", "grace_s"): (1, 3600),
    ("agent", "priority_base"): (0, 4_000_000_000),
    ("agent", "eligible_ahead_gpus"): (0, 1_000_000),
    ("agent", "site_factor_max"): (2, 2_000_000_000),
    ("agent", "sample_min_s"): (0.5, 86400),
    ("agent", "retention_days"): (0.01, 3650),
    ("agent", "retention_max_rows"): (0, 1_000_000_000),
    ("metrics", "port"): (0, 65535),
}
_SECTIONS = {"slurm": SlurmSection, "agent": AgentSection, "metrics": MetricsSection,
             "log": LogSection}
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _coerce(where: str, name: str, default: Any, value: Any) -> Any:
    if name == "partition_profiles":
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v.strip()
                for k, v in value.items()):
            raise ConfigError(f"{where}.{name}: expected a table of partition = \"profile\" "
                              f"(a built-in name or a profile file), got {value!r}")
        return tuple(sorted(value.items()))
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{name}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}.{name}: expected a whole number, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}.{name}: expected a number, got {value!r}")
        return float(value)
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}.{name}: expected a list of strings, got {value!r}")
        return tuple(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{name}: expected a string, got {value!r}")
    return value


def parse_config(data: dict, source: str = "<string>") -> Config:
    sections = {}
    if isinstance(data.get("agent"), dict) and "reservation_minutes" in data["agent"]:
        # Older configs still load: a reservation now lasts one grace, extended while
        # its job waits, so that a dead agent's reservation never blocks nodes for long.
        logging.getLogger(__name__).warning(
            "%s: agent.reservation_minutes is no longer used: a reservation lasts one grace "
            "(grace_s) and is extended while its job waits", source)
        data = {**data, "agent": {k: v for k, v in data["agent"].items()
                                  if k != "reservation_minutes"}}
    for key in data:
        if key not in _SECTIONS:
            raise ConfigError(f"{source}: unknown section [{key}] "
                              f"(known: {', '.join(sorted(_SECTIONS))})")
    for name, cls in _SECTIONS.items():
        raw = data.get(name, {})
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        defaults = cls()
        known = {f.name: f for f in fields(cls)}
        values = {}
        for key, value in raw.items():
            if key not in known:
                raise ConfigError(f"{source}: unknown key {name}.{key} "
                                  f"(known: {', '.join(sorted(known))})")
            coerced = _coerce(f"{source}: {name}", key, getattr(defaults, key), value)
            bounds = _RANGES.get((name, key))
            if bounds and not bounds[0] <= coerced <= bounds[1]:
                raise ConfigError(f"{source}: {name}.{key} = {value!r} is outside "
                                  f"{bounds[0]:g}..{bounds[1]:g}")
            values[key] = coerced
        sections[name] = cls(**values)
    cfg = Config(**sections, source=source)
    if cfg.log.level.upper() not in _LEVELS:
        raise ConfigError(f"{source}: log.level must be one of {', '.join(_LEVELS)}")
    if not cfg.agent.managed_partitions:
        raise ConfigError(f"{source}: agent.managed_partitions is empty: nothing to manage")
    for name in cfg.agent.managed_partitions:
        why = bad_partition_name(name)
        if why is not None:   # the same rule as install-plugin's (the gate's Lua table)
            raise ConfigError(f"{source}: agent.managed_partitions: {why}")
    stray = set(cfg.agent.preempt_partitions) - set(cfg.agent.managed_partitions)
    if stray:
        raise ConfigError(f"{source}: agent.preempt_partitions {sorted(stray)} are not in "
                          "agent.managed_partitions")
    for key in ("site_factor_partitions", "partition_profiles"):
        listed = getattr(cfg.agent, key)
        stray = set(p if isinstance(p, str) else p[0] for p in listed) \
            - set(cfg.agent.managed_partitions)
        if stray:
            raise ConfigError(f"{source}: agent.{key} {sorted(stray)} are not in "
                              "agent.managed_partitions")
    return cfg


def check_slurm_conf(cfg: Config) -> None:
    """``slurm.slurm_conf`` is a file the agent can read (``slurm-marl run`` checks it at
    start): without it every Slurm command would wait for it, a cycle at a time."""
    path = Path(cfg.slurm.slurm_conf)
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except IsADirectoryError:
        raise ConfigError(f"{cfg.source}: slurm.slurm_conf {path} is a directory, not "
                          "slurm.conf") from None
    except FileNotFoundError:
        raise ConfigError(f"{cfg.source}: slurm.slurm_conf {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{cfg.source}: slurm.slurm_conf {path} cannot be read: "
                          f"{exc.strerror or exc}") from None


def load_config(path: str | Path | None = None) -> Config:
    path = Path(path) if path else DEFAULT_PATH
    if not path.exists():
        raise ConfigError(f"{path}: configuration file not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    return parse_config(data, str(path))
