"""The error every strict reader of Slurm's text raises."""

from __future__ import annotations


class SlurmTextError(ValueError):
    """Text that is not in the form Slurm prints; ``line`` counts from 1 when known."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        super().__init__(reason if line is None else f"line {line}: {reason}")
