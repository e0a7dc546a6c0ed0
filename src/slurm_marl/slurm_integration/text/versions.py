"""Slurm's version as ``scontrol --version`` prints it (``slurm 24.11.5``, ``slurm-wlm
24.11.5``) or as an admin gives it (``24.11.5``, ``24.11``).

The release series (``24.11``) is what the callers compare: the JSON layout a Slurm prints
and the features it has change per series, not per patch release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\..*)?")


@dataclass(frozen=True)
class SlurmVersion:
    """``release`` as printed (``24.11.5``), ``series`` its first two numbers (``24.11``)."""

    release: str
    series: str


def _release(word: str) -> SlurmVersion | None:
    m = _RELEASE.fullmatch(word)
    return SlurmVersion(word, f"{m.group(1)}.{m.group(2)}") if m else None


def version_of_answer(text: str | None) -> SlurmVersion | None:
    """``scontrol --version``'s answer, two words (``slurm 24.11.5``, ``slurm-wlm
    24.11.5``); None for anything else."""
    words = (text or "").split()
    if len(words) != 2 or not words[0].startswith("slurm"):
        return None
    return _release(words[1])


def parse_slurm_version(text: str | None) -> SlurmVersion | None:
    """``scontrol --version``'s answer or a bare release (``24.11.5``, ``24.11``); None
    for anything else."""
    words = (text or "").split()
    if len(words) == 1:
        return _release(words[0])
    return version_of_answer(text)
