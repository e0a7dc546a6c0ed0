"""Numbers as Slurm prints them: index ranges (``0-3,5``), counts with K/M/G/T/P suffixes
(``20M``), memory sizes and time limits.

Pure functions, no I/O; lenient readers return None, ``parse_time_limit_s`` raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

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
