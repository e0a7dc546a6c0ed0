"""Slurm's shared configuration-file syntax, read once for every file kind.

slurm.conf, gres.conf and topology.conf share one syntax (Slurm's ``parse_config.c``):
``Key=Value`` pairs separated by blanks, case-insensitive keys, ``#`` comments (``\\#`` is a
literal ``#``), a trailing backslash continues a line, double quotes protect blanks, and an
``Include <path>`` line pulls in another file. The syntax of one text is read by
``slurm_marl.slurm_integration.text`` (``conf``); this module reads the files, follows the
includes and names ``path:line`` in every error. The per-kind parsers only interpret the
entries this module yields, so every syntax error carries the same ``path:line`` form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from slurm_marl.slurm_integration import text as slurm_text
from slurm_marl.slurm_integration.text import logical_lines
from slurm_marl.topology.errors import TopologyConfigError

_MAX_INCLUDE_DEPTH = 16


@dataclass(frozen=True)
class SourceLine:
    """Where an entry came from, so later checks can point back at it."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class ConfigEntry:
    """One logical line of ``Key=Value`` pairs, keys kept as written and looked up lowercased."""

    source: SourceLine
    pairs: tuple[tuple[str, str], ...]
    _by_key: Mapping[str, str] = field(default=None, init=False, compare=False,
                                       repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key",
                           MappingProxyType({k.lower(): v for k, v in self.pairs}))

    @property
    def first_key(self) -> str:
        return self.pairs[0][0].lower() if self.pairs else ""

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._by_key.get(key.lower(), default)

    def has(self, key: str) -> bool:
        return key.lower() in self._by_key

    def keys_lower(self) -> tuple[str, ...]:
        return tuple(self._by_key)

    def error(self, message: str) -> TopologyConfigError:
        return TopologyConfigError(message, self.source.path, self.source.line)


@dataclass(frozen=True)
class IncludeDirective:
    """An ``Include`` line: reported so an admin sees which extra files were (not) read."""

    source: SourceLine
    target: str
    resolved_path: str | None
    found: bool

    def describe(self) -> str:
        state = "read" if self.found else "NOT FOUND, skipped"
        return f"{self.source}: Include {self.target} -> {self.resolved_path} ({state})"


@dataclass(frozen=True)
class ConfigText:
    """Everything a file (and the files it includes) holds, in reading order."""

    path: str
    entries: tuple[ConfigEntry, ...]
    includes: tuple[IncludeDirective, ...]


def split_pairs(text: str, path: str, line: int) -> tuple[tuple[str, str], ...]:
    """``text.split_conf_pairs`` naming ``path:line`` in its error."""
    try:
        return slurm_text.split_conf_pairs(text)
    except slurm_text.SlurmTextError as exc:
        raise TopologyConfigError(exc.reason, path, line) from None


def _include_target(text: str) -> str | None:
    head, _, rest = text.partition(" ")
    if head.lower() != "include" or "=" in head:
        return None
    return rest.strip().strip('"')


def parse_config_text(text: str, path: str, *, follow_includes: bool = True,
                      _stack: tuple[str, ...] = (), _cluster: list[str] | None = None
                      ) -> ConfigText:
    """Parse ``text`` (the contents of ``path``).

    As in Slurm, a relative ``Include`` path is looked up in the folder of the top file (the
    one slurm.conf lives in), and ``%c`` in it becomes the ``ClusterName`` read so far.
    """
    entries: list[ConfigEntry] = []
    includes: list[IncludeDirective] = []
    top = _stack[0] if _stack else path
    cluster = _cluster if _cluster is not None else []
    for number, joined in logical_lines(text):
        target = _include_target(joined.replace("\t", " "))
        if target is not None:
            if not target:
                raise TopologyConfigError("Include without a file name", path, number)
            if "%c" in target and cluster:
                target = target.replace("%c", cluster[-1])
            resolved = resolve_include(target, top)
            try:
                found = follow_includes and resolved.is_file()
            except OSError as exc:  # e.g. ENAMETOOLONG, EACCES: is_file() only hides ENOENT
                raise TopologyConfigError(
                    f"cannot open Include {_short(str(resolved))}: {exc.strerror or exc}",
                    path, number) from exc
            includes.append(IncludeDirective(SourceLine(path, number), target, str(resolved),
                                             found))
            if found:
                if str(resolved) in _stack or str(resolved) == path:
                    raise TopologyConfigError(f"Include loop through {resolved}", path, number)
                if len(_stack) >= _MAX_INCLUDE_DEPTH:
                    raise TopologyConfigError("Include nested too deeply", path, number)
                child = read_config_file(resolved, follow_includes=True,
                                         _stack=(*_stack, path), _cluster=cluster)
                entries.extend(child.entries)
                includes.extend(child.includes)
            continue
        pairs = split_pairs(joined, path, number)
        cluster.extend(v for k, v in pairs if k.lower() == "clustername")
        entries.append(ConfigEntry(SourceLine(path, number), pairs))
    return ConfigText(path, tuple(entries), tuple(includes))


def _short(name: str, limit: int = 200) -> str:
    """A file name for a one-line message: an overlong one is cut, with its length."""
    if len(name) <= limit:
        return name
    return f"{name[:limit]}... ({len(name)} characters)"


def resolve_include(target: str, top_path: str) -> Path:
    """Slurm looks a relative Include up in the folder of slurm.conf (the top file)."""
    candidate = Path(target)
    if candidate.is_absolute():
        return candidate
    return Path(top_path).parent / candidate


def read_config_file(path: str | Path, *, follow_includes: bool = True,
                     _stack: tuple[str, ...] = (), _cluster: list[str] | None = None
                     ) -> ConfigText:
    """Read and parse one file; unreadable or non-UTF-8 files raise the one error type."""
    path_text = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TopologyConfigError(f"not UTF-8 text ({exc.reason})", path_text) from exc
    except OSError as exc:
        raise TopologyConfigError(f"cannot read: {exc.strerror or exc}", path_text) from exc
    return parse_config_text(text, path_text, follow_includes=follow_includes, _stack=_stack,
                             _cluster=_cluster)


# ---------------------------------------------------------------------------------------
# Value parsers shared by the file kinds. ``entry`` gives the place to blame; the Slurm text
# itself (hostlists, counts, index ranges) is read by ``slurm_marl.slurm_integration.text``.


def expand_hosts(expression: str, entry: ConfigEntry, key: str) -> tuple[str, ...]:
    try:
        return slurm_text.expand_hostlist(expression)
    except slurm_text.SlurmTextError:
        raise entry.error(f"{key}={expression!r}: bad hostlist expression") from None


def parse_int(text: str, entry: ConfigEntry, key: str, *, minimum: int = 0) -> int:
    if not re.fullmatch(r"[+-]?\d{1,18}", text.strip()):
        raise entry.error(f"{key}={text!r}: expected an integer")
    value = int(text)
    if value < minimum:
        raise entry.error(f"{key}={text!r}: must be at least {minimum}")
    return value


def parse_count(text: str, entry: ConfigEntry, key: str) -> int:
    value = slurm_text.parse_count(text)
    if value is None:
        raise entry.error(f"{key}={text!r}: expected a count such as 4 or 20M")
    return value


def parse_index_ranges(text: str, entry: ConfigEntry, key: str) -> tuple[int, ...]:
    values = slurm_text.parse_index_ranges(text)
    if values is None:
        raise entry.error(f"{key}={text!r}: expected a list such as 0-3,8")
    return values


def parse_bool(text: str, entry: ConfigEntry, key: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("yes", "true", "1", "on"):
        return True
    if lowered in ("no", "false", "0", "off"):
        return False
    raise entry.error(f"{key}={text!r}: expected YES or NO")


_NATURAL_PART = re.compile(r"(\d+)|(\D+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts ``nvidia2`` before ``nvidia10`` and never compares int with str."""
    return tuple((0, int(d)) if d else (1, s) for d, s in _NATURAL_PART.findall(text))
