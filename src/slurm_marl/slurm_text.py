"""Slurm's text, read in one place: the Slurm layer and the topology parsers both call this.

Pure functions, no I/O; nothing of the project is imported but ``slurm_marl.domain``.

- ``Key=Value`` records as ``scontrol show <thing> [-o]`` prints them (``split_fields``,
  ``parse_kv_line``, ``scontrol_records``, ``parse_switch_line``);
- hostlists (``n[1-3,7]``), with python-hostlist;
- index ranges (``0-3,5``) and counts with K/M/G/T/P suffixes (``20M``);
- memory sizes and Slurm time limits.

GRES and TRES strings (GPU configuration, requests, held indices) are read by
``slurm_marl.slurm_gres``, on top of the index ranges and counts here.

Strict readers raise ``SlurmTextError`` (a ValueError carrying ``reason`` and, for
multi-line text, ``line``) or return None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import hostlist

from slurm_marl.domain import Switch


class SlurmTextError(ValueError):
    """Text that is not in the form Slurm prints; ``line`` counts from 1 when known."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        super().__init__(reason if line is None else f"line {line}: {reason}")


# ---------------------------------------------------------------------------------------
# Key=Value records

# A key starts a word with a letter and holds letters, digits, ``_`` and also ``/ : .``
# (``scontrol show job`` prints ``NtasksPerN:B:S:C=`` and ``Socks/Node=``).
_FIELD_START = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:.]*)=")
_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def split_fields(line: str, *, to_end: Iterable[str] = ()) -> list[tuple[str, str]]:
    """``Key=Value`` pairs of one line of ``scontrol show`` output, in order.

    Values may hold blanks (``OS=Linux 6.1 #1 SMP``): a value runs to the next word that
    starts ``Key=``. A key named in ``to_end`` (any case; ``Reason`` of a node) takes the rest
    of the line. Text before the first key is dropped."""
    line = line.strip()
    enders = {k.lower() for k in to_end}
    matches = list(_FIELD_START.finditer(line))
    pairs: list[tuple[str, str]] = []
    for i, m in enumerate(matches):
        key = m.group(1)
        if key.lower() in enders:
            pairs.append((key, line[m.end():].strip()))
            break
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        pairs.append((key, line[m.end():end].strip()))
    return pairs


def parse_kv_line(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value with spaces`` as ``scontrol show -o`` prints it (a key given
    twice keeps its last value)."""
    return dict(split_fields(line))


def scontrol_records(text: str, head: str, *, to_end: Iterable[str] = ()
                     ) -> list[tuple[int, list[tuple[str, str]]]]:
    """Records of ``scontrol show <thing>``, one per ``head=`` (e.g. ``NodeName``): with
    ``-o`` one line each, without it one line and the indented lines after it. Returns
    (line number of the record's first line, its pairs). Raises ``SlurmTextError``."""
    records: list[tuple[int, list[tuple[str, str]]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        pairs = split_fields(raw, to_end=to_end)
        if not pairs:
            raise SlurmTextError(f"expected Key=Value pairs, found {raw.strip()[:40]!r}",
                                 number)
        if pairs[0][0].lower() == head.lower():
            records.append((number, pairs))
        elif records:
            records[-1][1].extend(pairs)
        else:
            raise SlurmTextError(f"expected a {head}= record first", number)
    return records


def _strict_fields(line: str) -> list[tuple[str, str]]:
    """``split_fields`` for output whose values never hold blanks (``scontrol show
    topology``): a word that is not ``Key=Value`` or a key given twice raises."""
    for word in line.split():
        key, sep, _ = word.partition("=")
        if not sep or not key:
            raise SlurmTextError(f"expected Key=Value, found {word!r}")
        if not _PLAIN_KEY.fullmatch(key):
            raise SlurmTextError(f"invalid key {key!r}")
    pairs = split_fields(line)
    seen: set[str] = set()
    for key, _ in pairs:
        if key.lower() in seen:
            raise SlurmTextError(f"key {key!r} given twice on one line")
        seen.add(key.lower())
    return pairs


# ---------------------------------------------------------------------------------------
# hostlists

NULL_WORDS = ("(null)", "None", "N/A")


def expand_hostlist(expression: str) -> tuple[str, ...]:
    """``n[1-3,7]`` / ``gpu-a[01-10]`` -> names, with python-hostlist. Raises
    ``SlurmTextError`` when it is not one (python-hostlist's own error, a stray bracket in a
    name or an empty name)."""
    try:
        names = hostlist.expand_hostlist(expression)
    except (hostlist.BadHostlist, ValueError, IndexError, RecursionError, TypeError) as exc:
        raise SlurmTextError(f"bad hostlist {expression!r}: {exc}") from None
    if any(not n or "[" in n or "]" in n for n in names):
        raise SlurmTextError(f"bad hostlist {expression!r}: stray bracket or empty name")
    return tuple(names)


def expand_host_field(text: str | None) -> tuple[str, ...]:
    """A hostlist field of Slurm's output: ``(null)``, ``None``, ``N/A`` and empty mean no
    host. Raises ``SlurmTextError``."""
    text = (text or "").strip()
    if not text or text in NULL_WORDS:
        return ()
    return expand_hostlist(text)


def collapse_hosts(names: Iterable[str]) -> str:
    """('n1', 'n2', 'n3', 'n7') -> ``n[1-3,7]``."""
    return hostlist.collect_hostlist(list(names))


# ---------------------------------------------------------------------------------------
# index ranges and counts


def parse_index_ranges(text: str, *, limit: int = 1 << 20) -> tuple[int, ...] | None:
    """``0-3,8`` -> (0, 1, 2, 3, 8), sorted without repeats; None when the text is not such
    a list (empty, a reversed range, more than ``limit`` values)."""
    values: list[int] = []
    if not text.strip():
        return None
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d{1,9})\s*(?:-\s*(\d{1,9})\s*)?", part)
        if not m:
            return None
        low = int(m.group(1))
        high = int(m.group(2)) if m.group(2) is not None else low
        if high < low or high - low > limit or len(values) + high - low > limit:
            return None
        values.extend(range(low, high + 1))
    return tuple(sorted(set(values)))


def format_index_ranges(values: Iterable[int]) -> str:
    """(0, 1, 2, 4) -> ``0-2,4``; nothing -> ""."""
    vals = sorted(set(values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)


_COUNT_SUFFIX = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4,
                 "P": 1024 ** 5}


def parse_count(text: str) -> int | None:
    """Slurm counts take an optional K/M/G/T/P suffix (powers of 1024); None when invalid."""
    m = re.fullmatch(r"(\d{1,15})([KMGTPkmgtp]?)", text.strip())
    if not m:
        return None
    return int(m.group(1)) * _COUNT_SUFFIX[m.group(2).upper()]


# ---------------------------------------------------------------------------------------
# memory, time


def memory_mib(text: str) -> int | None:
    """``16000M`` / ``15.62G`` / ``16000`` (MiB) -> MiB; None if unreadable."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", (text or "").strip())
    if not m:
        return None
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
    return int(round(float(m.group(1)) * scale[m.group(2)]))


def parse_time_limit_s(text: str) -> float | None:
    """Slurm time formats -> seconds; INFINITE/UNLIMITED -> None. Raises ValueError if bad.

    Forms: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``, ``days-hours``,
    ``days-hours:minutes``, ``days-hours:minutes:seconds``.
    """
    t = text.strip()
    if t.upper() in ("INFINITE", "UNLIMITED", "NONE", ""):
        return None
    days = 0
    if "-" in t:
        day_text, t = t.split("-", 1)
        if not day_text.isdigit():
            raise ValueError(text)
        days = int(day_text)
        parts = t.split(":")
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            raise ValueError(text)
        nums = [int(p) for p in parts] + [0] * (3 - len(parts))
        hours, minutes, seconds = nums
    else:
        parts = t.split(":")
        if not all(p.isdigit() and len(p) < 12 for p in parts) or len(parts) > 3:
            raise ValueError(text)
        nums = [int(p) for p in parts]
        if len(nums) == 1:
            hours, minutes, seconds = 0, nums[0], 0
        elif len(nums) == 2:
            hours, minutes, seconds = 0, nums[0], nums[1]
        else:
            hours, minutes, seconds = nums
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


# ---------------------------------------------------------------------------------------
# scontrol show topology


@dataclass(frozen=True)
class LiveSwitch:
    """One switch as ``scontrol show topology`` prints it: ``SwitchName=s Level=0
    LinkSpeed=1 Nodes=n[1-2]``; an upper switch prints ``Switches=`` and, as ``Nodes=``,
    every node below it."""

    name: str
    level: int
    link_speed: int | None = None
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()

    def to_domain(self) -> Switch:
        """An upper switch lists every node below it; the domain keeps nodes for leaves only."""
        nodes = () if self.switches else self.nodes
        return Switch(name=self.name, nodes=nodes, switches=self.switches,
                      link_speed=None if self.link_speed is None else float(self.link_speed))


def _int_field(value: str, key: str) -> int:
    if not re.fullmatch(r"\d{1,18}", value.strip()):
        raise SlurmTextError(f"{key}={value!r}: expected an integer")
    return int(value)


def _hosts_field(value: str, key: str) -> tuple[str, ...]:
    try:
        return expand_hostlist(value)
    except SlurmTextError:
        raise SlurmTextError(f"{key}={value!r}: bad hostlist expression") from None


def parse_switch_line(raw: str) -> LiveSwitch | None:
    """One line of ``scontrol show topology``; None for a blank or "no topology" line.
    Raises ``SlurmTextError``."""
    line = raw.strip()
    if not line or line.lower().startswith("no topology information"):
        return None
    pairs = {k.lower(): v for k, v in _strict_fields(line)}
    if not pairs.get("switchname"):
        raise SlurmTextError("expected SwitchName=...")
    level = _int_field(pairs.get("level", "0"), "Level")
    speed = pairs.get("linkspeed")
    nodes = _hosts_field(pairs["nodes"], "Nodes") if pairs.get("nodes") else ()
    children = _hosts_field(pairs["switches"], "Switches") if pairs.get("switches") else ()
    return LiveSwitch(name=pairs["switchname"], level=level,
                      link_speed=_int_field(speed, "LinkSpeed") if speed else None,
                      nodes=nodes, switches=children)
