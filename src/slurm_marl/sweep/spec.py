"""A sweep: the cross product windows x interference strengths x profiles x seeds (x prediction
errors) over one trace and one simulated cluster, read from a TOML file.

    trace = "traces/tiresias_60_job.csv"   # absolute, beside this file, or a bundled one
    cluster = "2x1x4"                      # as `slurm-marl simulate --cluster`
    windows = ["rows=0:30", "rows=30:60"]  # optional; default: the whole trace
    strengths = ["none", "high"]
    seeds = [0, 1, 2, 3]
    profiles = ["las-consolidate", "fifo-backfill"]   # built-in names or TOML files
    prediction_errors = ["helios"]         # optional; default: none given (learned in the run)
    baseline = "las-consolidate"           # optional; default: the first profile
    drop_oversized = true                  # optional; default true

Every problem is one line naming the file and the key (``SweepSpecError``); the CLI exits 2.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from slurm_marl.policy.profile import ProfileError, load_profile
from slurm_marl.shared_data import DataNotFound, data_dir
from slurm_marl.sim.cluster import ClusterSpecError, parse_cluster
from slurm_marl.sim.perf import STRENGTHS
from slurm_marl.sim.predictions import predicted_gpu_s
from slurm_marl.sim.traces import TraceError, Window

LISTS = ("windows", "strengths", "seeds", "profiles", "prediction_errors")
REQUIRED = ("trace", "cluster", "strengths", "seeds", "profiles")
KEYS = frozenset(("trace", "cluster", "baseline", "drop_oversized", *LISTS))


class SweepSpecError(ValueError):
    """A bad sweep file: one line naming the file and the key."""


@dataclass(frozen=True)
class SweepCell:
    """One simulation of a sweep; ``trace`` and file paths are absolute, so any host that
    shares the file system can run it."""

    trace: str
    cluster: str
    window: str | None
    interference: str
    profile: str
    seed: int
    prediction_error: str | None = None
    drop_oversized: bool = True

    @property
    def key(self) -> str:
        """Stable and unique within a sweep (trace and cluster are the sweep's own)."""
        parts = [f"window={self.window or 'all'}", f"strength={self.interference}",
                 f"profile={self.profile}", f"seed={self.seed}"]
        if self.prediction_error is not None:
            parts.append(f"prediction_error={self.prediction_error}")
        return "/".join(parts)

    def fields(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Sweep:
    """A parsed sweep file: its cells in a fixed order and the baseline profile of reports."""

    source: str
    cells: tuple[SweepCell, ...]
    baseline: str


def cross_product(trace: str, cluster: str, *, windows=(None,), strengths=("none",),
                  profiles=("las-consolidate",), seeds=(0,), prediction_errors=(None,),
                  drop_oversized: bool = True) -> tuple[SweepCell, ...]:
    """All cells, ordered window, strength, profile, prediction error, seed."""
    return tuple(SweepCell(trace, cluster, w, s, p, seed, e, drop_oversized)
                 for w, s, p, e, seed in itertools.product(
                     windows, strengths, profiles, prediction_errors, seeds))


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file (see the module docstring)."""
    path = Path(path)
    data = _read_toml(path)
    where = _Where(path)
    unknown = sorted(set(data) - KEYS)
    if unknown:
        where.fail(unknown[0], f"unknown key (known: {', '.join(sorted(KEYS))})")
    for key in REQUIRED:
        if key not in data:
            where.fail(key, "missing")
    lists = {key: _list(where, data, key) for key in LISTS if key in data}
    folder = path.parent
    trace = _trace(where, data["trace"], folder)
    cluster = _cluster(where, data["cluster"], folder)
    profiles = [_profile(where, p, folder) for p in _strs(where, "profiles", lists["profiles"])]
    baseline = _baseline(where, data.get("baseline"), profiles, folder)
    cells = cross_product(
        trace, cluster,
        windows=[_window(where, w) for w in _strs(where, "windows", lists.get("windows", [""]))],
        strengths=[_strength(where, s) for s in _strs(where, "strengths", lists["strengths"])],
        profiles=profiles, seeds=_seeds(where, lists["seeds"]),
        prediction_errors=[_prediction_error(where, e) for e in
                           _strs(where, "prediction_errors", lists.get("prediction_errors",
                                                                        [None]))],
        drop_oversized=_bool(where, data, "drop_oversized", True))
    return Sweep(source=str(path), cells=cells, baseline=baseline)


class _Where:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> None:
        line = " ".join(str(problem).split())
        raise SweepSpecError(f"{self.path}: {key}: {line}")


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SweepSpecError(f"{path}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SweepSpecError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}"
                             ) from None


def _list(where: _Where, data: dict, key: str) -> list:
    value = data[key]
    if not isinstance(value, list):
        where.fail(key, f"must be a list, got {type(value).__name__}")
    if not value:
        where.fail(key, "is empty: a sweep needs at least one value")
    if len(set(map(repr, value))) != len(value):
        where.fail(key, "has a value twice")
    return value


def _strs(where: _Where, key: str, values: list) -> list:
    for v in values:
        if v is not None and not isinstance(v, str):
            where.fail(key, f"values must be strings, got {v!r}")
    return values


def _local_file(text: str, folder: Path) -> Path | None:
    """An absolute path, or one relative to the sweep file's folder, when that file exists."""
    path = Path(text).expanduser()
    candidate = path if path.is_absolute() else folder / path
    return candidate.resolve() if candidate.is_file() else None


def _trace(where: _Where, value, folder: Path) -> str:
    if not isinstance(value, str) or not value:
        where.fail("trace", "must be a file name")
    found = _local_file(value, folder)
    if found is None and not Path(value).is_absolute():
        try:
            shared = data_dir() / value
        except DataNotFound as exc:
            where.fail("trace", f"{value} is not beside the sweep file ({exc})")
        found = shared.resolve() if shared.is_file() else None
    if found is None:
        where.fail("trace", f"{value} not found (absolute, beside the sweep file, or under "
                            "a name in the data folder such as traces/philly.csv)")
    return str(found)


def _cluster(where: _Where, value, folder: Path) -> str:
    if not isinstance(value, str) or not value:
        where.fail("cluster", "must be a cluster text such as 2x1x4, or a TOML file")
    found = _local_file(value, folder)
    text = str(found) if found is not None else value
    try:
        parse_cluster(text)
    except (ClusterSpecError, OSError) as exc:
        where.fail("cluster", str(exc))
    return text


def _profile(where: _Where, value: str, folder: Path) -> str:
    found = _local_file(value, folder) if value.endswith(".toml") else None
    text = str(found) if found is not None else value
    try:
        load_profile(text)
    except ProfileError as exc:
        where.fail("profiles", str(exc))
    return text


def _baseline(where: _Where, value, profiles: list[str], folder: Path) -> str:
    if value is None:
        return profiles[0]
    text = str(_local_file(value, folder) or value) if isinstance(value, str) else value
    if text not in profiles:
        where.fail("baseline", f"{value!r} is not one of the sweep's profiles")
    return text


def _window(where: _Where, value: str) -> str | None:
    try:
        Window.parse(value)
    except TraceError as exc:
        where.fail("windows", str(exc))
    return value or None


def _strength(where: _Where, value: str) -> str:
    if value not in STRENGTHS:
        where.fail("strengths", f"{value!r} is not one of {', '.join(STRENGTHS)}")
    return value


def _seeds(where: _Where, values: list) -> list[int]:
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            where.fail("seeds", f"seeds are integers >= 0, got {v!r}")
    return values


def _prediction_error(where: _Where, value: str | None) -> str | None:
    if value is not None:
        try:
            predicted_gpu_s([], value)
        except ValueError as exc:
            where.fail("prediction_errors", str(exc))
    return value


def _bool(where: _Where, data: dict, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        where.fail(key, f"must be true or false, got {value!r}")
    return value
