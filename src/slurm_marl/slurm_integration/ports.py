"""The two interfaces the rest of slurm-marl sees of Slurm (ports, in the adapters sense),
and the errors that cross them.

- ``ClusterSource``: what Slurm holds now, as a ``ClusterSnapshot``. A failed read raises a
  ``SlurmError`` (``SlurmUnavailable`` when slurmctld does not answer, ``SlurmOutputError``
  when an answer cannot be read); the daemon logs it and tries again at the next cycle.
- ``DecisionSink``: carries decisions out and answers one ``WriteResult`` per decision;
  a bad job, a refusal or an unreachable controller is a result, never an exception.

The adapters over Slurm's CLIs are ``source.CliClusterSource`` and ``sink.CliDecisionSink``;
the tests share one fake of each (``tests/fakes.py``). The errors are defined with the code
that raises them (``runner``) and re-exported here, so that a user of the ports needs this
module only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from slurm_marl.domain import ClusterSnapshot, Decision
from slurm_marl.slurm_integration.runner import SlurmError, SlurmOutputError, SlurmUnavailable

__all__ = ["ClusterSource", "DecisionSink", "SlurmError", "SlurmOutputError",
           "SlurmUnavailable", "WriteResult", "WriteStatus"]


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


@runtime_checkable
class ClusterSource(Protocol):
    def snapshot(self) -> ClusterSnapshot:
        """The cluster now. Raises SlurmUnavailable when the controller does not answer,
        SlurmOutputError when an answer cannot be read, SlurmError when a read fails
        otherwise."""
        raise NotImplementedError

    def queue_fingerprint(self, partitions: tuple[str, ...]) -> str | None:
        """A digest of the ids and states of the jobs of ``partitions`` that are pending,
        running or completing, from one light read (the daemon probes it between cycles
        and runs one early when it changes: a job arrived, started or ended). None when the
        read failed; never raises."""
        raise NotImplementedError


@runtime_checkable
class DecisionSink(Protocol):
    def apply(self, decisions: list[Decision],
              snapshot: ClusterSnapshot | None = None) -> list[WriteResult]:
        """Carry decisions out; one result per decision, never raises for one bad job.
        ``snapshot`` is the cluster the decisions were made on (jobs' current requests)."""
        raise NotImplementedError

    def repair_half_done(self, snapshot: ClusterSnapshot) -> list[int]:
        """Give pending marked jobs whose GPU request a half-done re-pin emptied (by an
        older agent) their original request back, and widen back a narrowing that left a
        job never runnable (BadConstraints); the ids of the jobs repaired. The daemon
        calls it after every snapshot unless in shadow mode; a failed repair is logged and
        tried again later, never raised."""
        raise NotImplementedError

    def starts_done(self) -> float | None:
        """When (``time.monotonic()``) the last ``apply``'s writes before its lease
        renewals (``Defer``) ended, or None if not known. The daemon paces its early cycles
        on the time up to it, so a batch of renewals does not delay the next start."""
        raise NotImplementedError
