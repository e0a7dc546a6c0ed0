"""Hostlists (``n[1-3,7]``) read and written with python-hostlist: the one module of the
project that imports it.
"""

from __future__ import annotations

from collections.abc import Iterable

import hostlist

from slurm_marl.slurm_integration.text.errors import SlurmTextError

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
