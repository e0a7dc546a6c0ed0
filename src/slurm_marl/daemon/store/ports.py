"""The state store's ports: one Protocol per concern the daemon keeps across restarts.

The SQLite adapters beside this module implement them on one shared connection (the
``Store`` unit of work hands them out as attributes); tests/fakes.py holds in-memory fakes
whose signatures are checked against these, and a contract test runs the same checks on
both. Code that needs one concern takes its port, not the whole store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from slurm_marl.daemon.store.records import JobRecord
from slurm_marl.domain import Decision


class JobRecords(Protocol):
    """Each job's scheduling state (attained service, runs, queue, preemptions)."""

    def get(self, job_ids: Iterable[int] | None = None) -> dict[int, JobRecord]:
        """The records of these jobs (all with None), by job id."""

    def live(self, job_ids: Iterable[int]) -> dict[int, JobRecord]:
        """Every unfinished record and those of ``job_ids``: what a cycle folds its
        snapshot into; the same objects cycle after cycle until ``forget_live``."""

    def forget_live(self) -> None:
        """Read the records afresh at the next ``live``."""

    def unfinished(self) -> list[JobRecord]:
        """The records of jobs not finished."""

    def signatures(self) -> dict[tuple[str, str], str]:
        """(user, job name) -> model type, the newest job's."""

    def save(self, records: Iterable[JobRecord]) -> None:
        """Insert or update these records."""

    def set_queues(self, items: Iterable[tuple[int, int]]) -> None:
        """(job id, 2D-LAS queue) for each job."""


class WrittenState(Protocol):
    """What was last written to Slurm for each job, so only changes are written."""

    def get(self, job_ids: Iterable[int]) -> dict[tuple[int, str], str]:
        """(job id, kind) -> value last written, for these jobs."""

    def mark(self, items: Iterable[tuple[int, str, str]], now_s: float) -> None:
        """(job id, kind, value) were written now."""

    def forget(self, job_id: int, kinds: Iterable[str]) -> None:
        """Nothing of these kinds is known written for the job any more."""


class Reservations(Protocol):
    """The reservations the agent created."""

    def active(self) -> dict[str, dict]:
        """Name -> row of each reservation not ended."""

    def add(self, name: str, job_id: int, nodes: str, now_s: float) -> None:
        """A reservation created (or re-created) for a job."""

    def end(self, name: str, now_s: float) -> None:
        """The reservation ended."""


class DecisionLog(Protocol):
    """Every decision with Slurm's answer, the cycle reports, and each run's outcome."""

    def record(self, cycle: int, now_s: float,
               rows: Iterable[tuple[Decision, str, str]]) -> None:
        """(decision, status, message) of a cycle."""

    def record_outcome(self, job_id: int, run: int, **values) -> None:
        """A job run's outcome (the ``outcomes`` columns as keywords)."""

    def decisions(self, job_id: int | None = None, limit: int = 50,
                  kind: str | None = None, since_s: float | None = None) -> list[dict]:
        """The newest decisions first, filtered."""

    def cycles(self, limit: int = 10) -> list[dict]:
        """The newest cycle reports first."""

    def outcomes(self) -> list[dict]:
        """Every recorded run, by end time."""


class GuardSet(Protocol):
    """The jobs the Slurm-alone guard protects now."""

    def set(self, protected: dict[int, tuple[float, float | None]]) -> None:
        """Job id -> (protected since, Slurm-alone start estimate): the whole set."""

    def get(self) -> dict[int, dict]:
        """The set as last recorded."""


class Predictions(Protocol):
    """The GPU-time predictor's state: live predictions, the skill gate's scored pairs
    and the feature history (rows as tuples of ``SqlitePredictions``' columns)."""

    def live(self) -> list[tuple]:
        """Every stored prediction, by job id."""

    def scored(self, window: int) -> list[tuple]:
        """The last ``window`` scored pairs of each partition, in the order scored."""

    def history(self) -> list[tuple]:
        """Every stored history row, in the order added."""

    def save(self, made: Iterable[tuple], scored: Iterable[tuple],
             dropped: Iterable[int], window: int,
             dropped_scored: Iterable[int] = (), history: Iterable[tuple] = (),
             dropped_history: Iterable[int] = (), keep_recent: int = 10,
             keep_submits_s: float = 2 * 86400.0,
             prune_every: int = 1000) -> None:
        """One cycle's changes, together."""


class SpeedSamples(Protocol):
    """Observed (co-location -> speed) samples, the interference model's training data."""

    def add(self, samples: Iterable[dict]) -> int:
        """Append these samples; how many were added."""

    def all(self) -> list[dict]:
        """Every sample, oldest first."""
