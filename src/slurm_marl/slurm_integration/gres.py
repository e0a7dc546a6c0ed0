"""GRES / TRES strings as Slurm 22.05 prints and accepts them. Pure functions.

Shapes seen on 22.05 (``squeue --json``, ``sinfo --json``, ``scontrol show``):
- request (``tres_per_node`` / ``tres_per_job``): ``gres:gpu:2``, ``gres:gpu:s1:2``,
  ``gres:gpu:s0:1,gres:gpu:s1:2``, ``gres:gpu`` (one), ``gres/gpu:2`` (TRES form),
  mixed with other GRES (``gres:gpu:2,gres:shard:1``);
- node configuration: ``gpu:s0:2(S:0),gpu:s1:2(S:1)``, ``gpu:4(S:0-1)``, ``gpu:a100:8``;
- held indices: ``gpu:s0:2(IDX:0-1),gpu:s1:0(IDX:)``, ``gpu:2(IDX:0,2)``, ``gpu(IDX:N/A)``.
Odd strings never raise: they give zero GPUs and a reason the caller can log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDX_RE = re.compile(r"IDX:([^)]*)\)")
_SOCK_RE = re.compile(r"\(S:([^)]*)\)")


@dataclass(frozen=True)
class GpuRequest:
    """``count`` GPUs of ``gpu_type`` (None = any type)."""

    count: int
    gpu_type: str | None = None


def split_outside_parens(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:2(S:0-1),gpu:k80:1``)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_int_ranges(text: str) -> tuple[int, ...]:
    """``0-1,4`` -> (0, 1, 4). Empty, ``N/A`` or malformed -> ()."""
    out: list[int] = []
    text = (text or "").strip()
    if not text or text.upper() == "N/A":
        return ()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if hi else a
        except ValueError:
            return ()
        if b < a or b - a > 65536:
            return ()
        out.extend(range(a, b + 1))
    return tuple(sorted(set(out)))


def format_int_ranges(values: tuple[int, ...] | list[int]) -> str:
    vals = sorted(set(values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)


def _gpu_fields(item: str) -> list[str] | None:
    """``gres:gpu:s1:2`` / ``gres/gpu:2`` / ``gpu:s0:2(S:0)`` -> ['gpu', 's1', '2'] etc."""
    item = item.split("(", 1)[0].strip()
    if item.startswith("gres:") or item.startswith("gres/"):
        item = item[5:]
    fields = item.split(":")
    if not fields or fields[0] != "gpu":
        return None
    return fields


def parse_gpu_request(text: str | None) -> tuple[tuple[GpuRequest, ...], str | None]:
    """GPU parts of a TRES request string; returns (requests, problem or None)."""
    if not text:
        return (), None
    reqs: list[GpuRequest] = []
    for item in split_outside_parens(text):
        fields = _gpu_fields(item)
        if fields is None:
            continue  # another GRES (shard, license...) is not ours to read
        if len(fields) == 1:
            reqs.append(GpuRequest(1))
            continue
        count_text = fields[-1]
        gpu_type = ":".join(fields[1:-1]) or None
        if not count_text.isdigit():
            # ``gpu:a100`` means one GPU of type a100
            if len(fields) == 2 and re.fullmatch(r"[A-Za-z][\w.-]*", count_text):
                reqs.append(GpuRequest(1, count_text))
                continue
            return (), f"cannot read GPU count in {item!r}"
        reqs.append(GpuRequest(int(count_text), gpu_type))
    return tuple(reqs), None


def total_gpus(reqs: tuple[GpuRequest, ...]) -> int:
    return sum(r.count for r in reqs)


def single_type(reqs: tuple[GpuRequest, ...]) -> str | None:
    types = {r.gpu_type for r in reqs}
    return types.pop() if len(types) == 1 else None


def format_gpu_request(counts_by_type: dict[str | None, int]) -> str:
    """{'s1': 2} -> ``gres:gpu:s1:2``; {None: 2} -> ``gres:gpu:2``. Always the ``gres:``
    prefix: 22.05 silently ignores the ``gres/`` form on updates."""
    parts = []
    for gpu_type in sorted(counts_by_type, key=lambda t: (t is not None, t or "")):
        n = counts_by_type[gpu_type]
        if n <= 0:
            continue
        parts.append(f"gres:gpu:{gpu_type}:{n}" if gpu_type else f"gres:gpu:{n}")
    return ",".join(parts)


def parse_gres_indices(text: str | None) -> tuple[int, ...]:
    """GPU indices held, from ``gres_detail`` / ``gres_used`` / ``GRES=`` strings."""
    if not text:
        return ()
    held: set[int] = set()
    for item in split_outside_parens(text):
        if _gpu_fields(item) is None:
            continue
        m = _IDX_RE.search(item)
        if m:
            held.update(parse_int_ranges(m.group(1)))
    return tuple(sorted(held))


@dataclass(frozen=True)
class NodeGpuType:
    """One entry of a node's configured GRES: ``count`` GPUs of ``gpu_type`` on ``sockets``."""

    gpu_type: str | None
    count: int
    sockets: tuple[int, ...] = ()


def parse_node_gres(text: str | None) -> tuple[tuple[NodeGpuType, ...], str | None]:
    """``gpu:s0:2(S:0),gpu:s1:2(S:1)`` -> entries in Slurm's index order."""
    if not text or text.strip() in ("(null)", "N/A"):
        return (), None
    out: list[NodeGpuType] = []
    for item in split_outside_parens(text):
        fields = _gpu_fields(item)
        if fields is None:
            continue
        sockets = ()
        m = _SOCK_RE.search(item)
        if m:
            sockets = parse_int_ranges(m.group(1))
        if len(fields) == 1:
            out.append(NodeGpuType(None, 1, sockets))
            continue
        count_text = fields[-1]
        if not count_text.isdigit():
            return tuple(out), f"cannot read GPU count in node GRES {item!r}"
        out.append(NodeGpuType(":".join(fields[1:-1]) or None, int(count_text), sockets))
    return tuple(out), None
