"""The two interfaces the rest of slurm-marl sees of Slurm (ports, in the adapters sense)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from slurm_marl.domain import ClusterSnapshot, Decision


class WriteStatus(str, enum.Enum):
    OK = "ok"                    # Slurm took it (or it was already so)
    REFUSED = "refused"          # Slurm said no; message says why
    VANISHED = "vanished"        # the job / reservation no longer exists
    UNAVAILABLE = "unavailable"  # slurmctld did not answer; try again next cycle
    SKIPPED = "skipped"          # nothing to write (not applicable here)


@dataclass(frozen=True)
class WriteResult:
    decision: Decision
    status: WriteStatus
    message: str = ""
    commands: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in (WriteStatus.OK, WriteStatus.SKIPPED)


class ClusterSource(Protocol):
    def snapshot(self) -> ClusterSnapshot:
        """The cluster now. Raises SlurmUnavailable when the controller does not answer."""
        ...


class DecisionSink(Protocol):
    def apply(self, decisions: list[Decision],
              snapshot: ClusterSnapshot | None = None) -> list[WriteResult]:
        """Carry decisions out; one result per decision, never raises for one bad job."""
        ...
