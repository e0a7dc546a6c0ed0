"""Reading a site's history from ``sacct``, a time slice at a time.

``sacct -a -X -P -n`` (``slurm_integration.clients.sacct_argv``) with the columns of
``sacct.TEXT_FIELDS`` and ``SLURM_TIME_FORMAT=%s`` (Unix seconds: no time-zone guessing),
one call per slice so a long history shows progress and never sits whole in one pipe. A
job that spans two slices is listed in both; the later listing wins (it is the more
complete one).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from slurm_marl.history.sacct import TEXT_FIELDS, Import, from_text
from slurm_marl.slurm_integration.clients import accounting_lines
from slurm_marl.slurm_integration.runner import SlurmRunner

DAY_S = 86400.0


def sacct_runner(slurm_conf: str | Path | None, timeout_s: float = 120.0,
                 bin_dir: str | Path | None = None) -> SlurmRunner:
    return SlurmRunner(slurm_conf, timeout_s=timeout_s, bin_dir=bin_dir,
                       extra_env={"SLURM_TIME_FORMAT": "%s"})


def slices(start_s: float, end_s: float, slice_s: float) -> list[tuple[float, float]]:
    if end_s <= start_s:
        raise ValueError("the history's end must come after its start")
    out, t = [], start_s
    while t < end_s:
        out.append((t, min(end_s, t + slice_s)))
        t += slice_s
    return out


def fetch(runner: SlurmRunner, start_s: float, end_s: float, slice_s: float = 7 * DAY_S,
          on_slice: Callable[[int, int], None] | None = None) -> Import:
    """Every job sacct knows between ``start_s`` and ``end_s``; ``on_slice(done, total)``
    after each call. A failing call raises ``SlurmError`` with sacct's own message."""
    parts = slices(start_s, end_s, slice_s)
    lines: dict[str, str] = {}
    for k, (a, b) in enumerate(parts, 1):
        for line in accounting_lines(runner, TEXT_FIELDS, a, b):
            if line.strip():
                lines[line.split("|", 1)[0]] = line
        if on_slice:
            on_slice(k, len(parts))
    return from_text(list(lines.values()), header=False)
