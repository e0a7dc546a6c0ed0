"""A policy profile for compressed time.

The agent measures attained service in wall seconds; a replay runs ``speedup`` times faster
than the trace. A profile's service thresholds (``*_gpu_s``, ``*_s`` parameters such as
2D-LAS queue limits or the Gittins delta) are divided by the speedup, so the agent demotes a
job after the same trace-time service as in the simulator. Written as a TOML file the agent
loads like any profile.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from slurm_marl.policy.guard import DEFAULT_GUARD
from slurm_marl.policy.profile import PROFILES_DIR


def _scale(value, factor: float):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value / factor
    if isinstance(value, list):
        return [_scale(v, factor) for v in value]
    return value


def _scale_params(params: dict, factor: float) -> dict:
    return {k: (_scale(v, factor) if k.endswith("_s") else v) for k, v in params.items()}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(data: dict) -> str:
    """TOML for a profile's shape: scalars and lists at the top, tables of those, and one
    more level of tables (``[place_params.x]``)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, table in data.items():
        if not isinstance(table, dict):
            continue
        lines += ["", f"[{key}]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
        for sub, inner in table.items():
            if isinstance(inner, dict):
                lines += ["", f"[{key}.{sub}]"]
                lines += [f"{k} = {_toml_value(v)}" for k, v in inner.items()]
    return "\n".join(lines) + "\n"


def time_scaled_profile(name_or_path: str, speedup: float, out_dir: Path,
                        place_params: dict | None = None, guard: bool = True) -> Path:
    """The profile with its ``*_s`` parameters divided by ``speedup``, written to
    ``out_dir``; ``place_params`` (plugin -> {key: value}) are merged in unscaled (e.g. a
    least_interference ``model_path``). ``guard``: a profile without a ``[guard]`` table
    gets the daemon's default one (``agent.guard``), scaled with the rest (the daemon would
    add it unscaled)."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PROFILES_DIR / f"{name_or_path}.toml"
    data = tomllib.loads(path.read_text())
    data["name"] = f"{data.get('name', path.stem)}-x{speedup:g}"
    data["description"] = (f"{data.get('description', '')} (service thresholds divided by "
                           f"{speedup:g} for a time-compressed replay)").strip()
    if isinstance(data.get("order"), dict):
        data["order"] = _scale_params(data["order"], speedup)
    if guard and not data.get("guard"):
        data["guard"] = dict(DEFAULT_GUARD)
    if isinstance(data.get("guard"), dict):
        data["guard"] = _scale_params(data["guard"], speedup)
    if isinstance(data.get("place_params"), dict):
        data["place_params"] = {k: _scale_params(v, speedup) if isinstance(v, dict) else v
                                for k, v in data["place_params"].items()}
    for plugin, extra in (place_params or {}).items():
        if plugin not in (data.get("place") or {}):
            raise ValueError(f"profile {data['name']} does not use the {plugin} placement "
                             f"plugin, so {', '.join(extra)} would be ignored")
        data.setdefault("place_params", {}).setdefault(plugin, {}).update(extra)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{data['name']}.toml"
    target.write_text(dump_toml(data))
    return target
