"""Slurm's GRES and TRES text: GPU configuration, GPU requests and held GPU indices.

Pure functions, no I/O, on top of the index ranges and counts of ``quantities``.

- GRES items and lists (``GresSpec``): node configuration ``gpu:s0:2(S:0)`` and held
  indices ``gpu:s1:2(IDX:2-3)``; the strict readers (``parse_gres_item``,
  ``parse_gres_list``) return None for text that does not parse;
- GPU requests (``GpuRequest``) in the TRES request forms ``gres:gpu:s1:2`` /
  ``gres/gpu:4``, a node's GPU entries and held GPU indices: the readers for squeue / sinfo
  fields never raise and give a problem string the caller can log instead;
- TRES lists (``cpu=8,mem=16000M``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from slurm_marl.domain import GpuGroup
from slurm_marl.slurm_integration.text.quantities import parse_count, parse_index_ranges

# ---------------------------------------------------------------------------------------
# GRES strings


@dataclass(frozen=True)
class GresSpec:
    """One item of a GRES list: ``gpu:s0:2(S:0)`` -> name gpu, type s0, count 2, socket 0.

    ``indices`` comes from ``(IDX:0-1)`` (``GresUsed=``, ``gres_used``, ``gres_detail``).
    """

    name: str
    type: str | None = None
    count: int = 1
    no_consume: bool = False
    sockets: tuple[int, ...] = ()
    indices: tuple[int, ...] = ()

    def __str__(self) -> str:
        parts = [self.name] + ([self.type] if self.type else [])
        parts += (["no_consume"] if self.no_consume else []) + [str(self.count)]
        return ":".join(parts)


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


def _parse_paren(annotation: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``S:0-1`` -> sockets; ``IDX:0,2`` -> indices; ``IDX:N/A`` -> none. None if unreadable."""
    sockets: tuple[int, ...] = ()
    indices: tuple[int, ...] = ()
    for part in annotation.split(")(") if annotation else []:
        key, sep, value = part.partition(":")
        if not sep:
            return None
        key = key.strip().upper()
        value = value.strip()
        if value.upper() in ("N/A", ""):
            continue
        parsed = parse_index_ranges(value)
        if parsed is None:
            return None
        if key == "S":
            sockets = parsed
        elif key == "IDX":
            indices = parsed
    return sockets, indices


@functools.lru_cache(maxsize=8192)
def parse_gres_item(item: str) -> GresSpec | None:
    """One ``name[:type][:no_consume][:count][(S:..)][(IDX:..)]`` item; None when it does not
    parse. The one reader of a GRES item: every other GRES reader here goes through it.
    Cached (a snapshot repeats the same few items thousands of times; the result is frozen)."""
    m = re.fullmatch(r"([^()\s]+)((?:\([^()]*\))*)", item.strip())
    if not m:
        return None
    head, parens = m.group(1), m.group(2)
    annotation = parens[1:-1] if parens else ""
    parsed_paren = _parse_paren(annotation)
    if parsed_paren is None:
        return None
    fields = head.split(":")
    name = fields[0]
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", name):
        return None
    rest = fields[1:]
    no_consume = "no_consume" in (f.lower() for f in rest)
    rest = [f for f in rest if f.lower() != "no_consume"]
    count = 1
    if rest:
        maybe = parse_count(rest[-1])
        if maybe is not None:
            count = maybe
            rest = rest[:-1]
    # A type never holds ``=``: ``gres/gpu:a100=2`` is a TRES count, not a type ``a100=2``.
    if len(rest) > 1 or any(not f or "=" in f for f in rest):
        return None
    gres_type = rest[0] if rest else None
    return GresSpec(name=name, type=gres_type, count=count, no_consume=no_consume,
                    sockets=parsed_paren[0], indices=parsed_paren[1])


def parse_gres_list(text: str) -> tuple[GresSpec, ...] | None:
    """``gpu:s0:2(S:0),gpu:s1:2(S:1)`` -> specs; ``(null)`` and empty -> (); None if any
    item is invalid (the strict reading of slurm.conf and ``scontrol show node``)."""
    stripped = (text or "").strip()
    if stripped.lower() in ("", "(null)", "none", "n/a"):
        return ()
    specs = []
    for item in split_outside_parens(stripped):
        spec = parse_gres_item(item)
        if spec is None:
            return None
        specs.append(spec)
    return tuple(specs)


def gpu_count_of(specs: tuple[GresSpec, ...], name: str = "gpu") -> int:
    return sum(s.count for s in specs if s.name == name)


# The lenient readers below are for squeue / sinfo fields: other GRES (shard, license...)
# are skipped unread, and an odd GPU item gives a problem string, never an exception.


def _gpu_item(item: str) -> str | None:
    """The item without its TRES prefix (``gres:`` / ``gres/``) if it names GPUs, else None."""
    body = item.strip()
    if body.startswith("gres:") or body.startswith("gres/"):
        body = body[5:]
    return body if body.split("(", 1)[0].strip().split(":")[0] == "gpu" else None


@dataclass(frozen=True)
class GpuRequest:
    """``count`` GPUs of ``gpu_type`` (None = any type)."""

    count: int
    gpu_type: str | None = None


@functools.lru_cache(maxsize=8192)
def parse_gpu_request(text: str | None) -> tuple[tuple[GpuRequest, ...], str | None]:
    """GPU parts of a TRES request (``tres_per_node``, ``TresPerJob=``): ``gres:gpu:2``,
    ``gres:gpu:s1:2``, ``gres/gpu:4``, ``gres:gpu`` (one), ``gres:gpu:a100`` (one of type
    a100), mixed with other GRES. Returns (requests, problem or None). Cached, as
    ``parse_gres_item``."""
    if not text:
        return (), None
    specs, problem = _gpu_specs(text, "")
    if problem is not None:
        return (), problem
    return tuple(GpuRequest(spec.count, spec.type) for spec in specs), None


def _gpu_specs(text: str, where: str) -> tuple[list[GresSpec], str | None]:
    """The GPU items of a GRES list, in order, up to the first unreadable one (then a
    problem naming it)."""
    out: list[GresSpec] = []
    for item in split_outside_parens(text):
        body = _gpu_item(item)
        if body is None:
            continue
        spec = parse_gres_item(body)
        if spec is None:
            return out, f"cannot read GPU count in {where}{item!r}"
        out.append(spec)
    return out, None


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
    """GPU indices held, from ``gres_detail`` / ``gres_used`` / ``GRES=`` strings
    (``gpu:s0:2(IDX:0-1),gpu:s1:0(IDX:N/A)`` -> (0, 1)); an unreadable item holds none.
    The indexed part of ``parse_gres_used`` (cached there)."""
    return parse_gres_used(text)[0]


@functools.lru_cache(maxsize=8192)
def parse_gres_used(text: str | None) -> tuple[tuple[int, ...], tuple[tuple[str | None, int], ...]]:
    """A node's used GPUs from ``gres_used`` / ``GresUsed=``: (indices given by ``(IDX:..)``,
    (type, count) of items in use without indices). Slurm gives a count alone for GRES
    configured without device files, and for a node that never registered (its GRES as
    slurm.conf states it): ``gpu:s1:2`` is 2 GPUs of type s1 in use, which ones unknown.
    An unreadable item holds none. Cached, as ``parse_gres_item``."""
    if not text:
        return (), ()
    held: set[int] = set()
    counted: list[tuple[str | None, int]] = []
    for item in split_outside_parens(text):
        body = _gpu_item(item)
        spec = parse_gres_item(body) if body is not None else None
        if spec is None:
            continue
        if spec.indices:
            held.update(spec.indices)
        elif spec.count > 0 and "IDX" not in item.upper():
            counted.append((spec.type, spec.count))
    return tuple(sorted(held)), tuple(counted)


def parse_node_gres(text: str | None) -> tuple[tuple[GresSpec, ...], str | None]:
    """The GPU entries of a node's configured GRES (``gpu:s0:2(S:0),gpu:s1:2(S:1)``) in
    Slurm's index order; an unreadable GPU entry ends the list with a problem."""
    if not text or text.strip() in ("(null)", "N/A"):
        return (), None
    specs, problem = _gpu_specs(text, "node GRES ")
    return tuple(specs), problem


def gpu_groups(entries: Iterable[GresSpec], cores_per_socket: int = 0) -> tuple[GpuGroup, ...]:
    """GPU groups of a node, one per GPU entry of its GRES, GPU indices numbered in the
    entries' order (Slurm's index order). An entry bound to one socket (``gpu:s1:2(S:1)``)
    gives its group that socket; one spanning several sockets or none leaves it unknown.
    With ``cores_per_socket``, a group's cores are all the cores of its entry's sockets."""
    groups: list[GpuGroup] = []
    next_index = 0
    for entry in entries:
        indices = tuple(range(next_index, next_index + entry.count))
        next_index += entry.count
        socket = entry.sockets[0] if len(entry.sockets) == 1 else None
        cores: tuple[int, ...] = ()
        if cores_per_socket > 0:
            for s in entry.sockets:
                cores += tuple(range(s * cores_per_socket, (s + 1) * cores_per_socket))
        groups.append(GpuGroup(index=len(groups), gpu_indices=indices, name=entry.type,
                               socket=socket, core_ids=cores))
    return tuple(groups)


# ---------------------------------------------------------------------------------------
# TRES


def parse_tres(text: str) -> tuple[tuple[str, str], ...]:
    """``cpu=8,mem=16000M,gres/gpu=4`` -> (("cpu", "8"), ...); empty or (null) -> ()."""
    if not text or text.strip() in ("(null)", "N/A"):
        return ()
    pairs = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs.append((key.strip(), value.strip()))
    return tuple(pairs)
