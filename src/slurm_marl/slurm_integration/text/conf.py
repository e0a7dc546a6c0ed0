"""Slurm's configuration-file syntax (``parse_config.c``), shared by slurm.conf, gres.conf
and topology.conf: ``Key=Value`` pairs separated by blanks, ``#`` comments (``\\#`` is a
literal ``#``), a trailing backslash continues a line, double quotes protect blanks.

Pure functions on the text; reading files and following ``Include`` lines is the topology
package's ``confparse``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from slurm_marl.slurm_integration.text.errors import SlurmTextError


def strip_comment(physical_line: str) -> str:
    """Drop a ``#`` comment, keeping ``\\#`` as a literal ``#``."""
    out: list[str] = []
    i = 0
    while i < len(physical_line):
        ch = physical_line[i]
        if ch == "\\" and i + 1 < len(physical_line) and physical_line[i + 1] == "#":
            out.append("#")
            i += 2
            continue
        if ch == "#":
            break
        out.append(ch)
        i += 1
    return "".join(out)


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield ``(first physical line number, joined text)``, comments gone, continuations joined."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = strip_comment(raw).rstrip()
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        joined = " ".join(part.strip() for part in pending).strip()
        pending = []
        if joined:
            yield start, joined
    if pending:
        joined = " ".join(part.strip() for part in pending).strip()
        if joined:
            yield start, joined


def split_conf_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """Split ``A=1 B="x y" C=`` into pairs; a token without ``=`` is an error, as in Slurm."""
    tokens: list[str] = []
    current: list[str] = []
    in_quote = False
    for ch in text:
        if ch == '"':
            in_quote = not in_quote
            continue
        if ch.isspace() and not in_quote:
            if current:
                tokens.append("".join(current))
                current = []
            continue
        current.append(ch)
    if in_quote:
        raise SlurmTextError("unterminated double quote")
    if current:
        tokens.append("".join(current))
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise SlurmTextError(f"expected Key=Value, found {token!r}")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
            raise SlurmTextError(f"invalid key {key!r}")
        if key.lower() in seen:
            raise SlurmTextError(f"key {key!r} given twice on one line")
        seen.add(key.lower())
        pairs.append((key, value))
    return tuple(pairs)


def conf_setting(text: str, key: str) -> str | None:
    """The value the last line setting ``key`` (any case) gives in a configuration text;
    None when no line does. Lenient, as Slurm itself: blanks around ``=`` are allowed
    (``JobSubmitPlugins = lua``), and a line that is not ``Key=Value`` pairs is skipped."""
    value = None
    for _, joined in logical_lines(text):
        try:
            pairs = split_conf_pairs(re.sub(r"\s*=\s*", "=", joined))
        except SlurmTextError:
            continue
        for k, v in pairs:
            if k.lower() == key.lower():
                value = v
    return value
