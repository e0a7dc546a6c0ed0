"""The state store as one unit of work: a SQLite connection in WAL mode, the schema and its
migration, cycle numbering and retention, and one adapter per concern sharing the
connection (``store.records``, ``.written``, ``.reservations``, ``.log``, ``.guard``,
``.predictions``, ``.samples``; their ports are in ports.py).

Callers use the adapters (``store.log.decisions(...)``); the unit itself keeps only what
spans them: the schema version, cycle numbering and reports, retention.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import AbstractContextManager
from pathlib import Path

from slurm_marl.daemon.store.guard import SqliteGuardSet
from slurm_marl.daemon.store.log import SqliteDecisionLog
from slurm_marl.daemon.store.predictions import SqlitePredictions
from slurm_marl.daemon.store.records import SqliteJobRecords
from slurm_marl.daemon.store.reservations import SqliteReservations
from slurm_marl.daemon.store.samples import SqliteSpeedSamples
from slurm_marl.daemon.store.schema import (SCHEMA_VERSION, StoreError, add_columns, connect,
                                            transaction)
from slurm_marl.daemon.store.written import SqliteWrittenState


class Store:
    """The unit of work of one process: the adapters share its connection, and
    ``transaction`` groups their writes."""

    PREDICTION_COLUMNS = SqlitePredictions.PREDICTION_COLUMNS
    SCORED_COLUMNS = SqlitePredictions.SCORED_COLUMNS
    HISTORY_COLUMNS = SqlitePredictions.HISTORY_COLUMNS

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        try:
            self.db = connect(self.path, readonly)
            version = self.meta("schema_version")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open state store {self.path}: {exc}") from exc
        begin = lambda: self.transaction()    # noqa: E731 (looked up when called)
        self.records = SqliteJobRecords(self.db, begin)
        self.written = SqliteWrittenState(self.db, begin)
        self.reservations = SqliteReservations(self.db)
        self.log = SqliteDecisionLog(self.db, begin)
        self.guard = SqliteGuardSet(self.db, begin)
        self.predictions = SqlitePredictions(self.db, begin)
        self.samples = SqliteSpeedSamples(self.db, begin)
        self._check_version(version)

    def _check_version(self, version: str | None) -> None:
        """A new store gets this version; an existing one must have it."""
        if version is None:
            if self.readonly:
                raise StoreError(f"{self.path}: not a slurm-marl state store (no schema "
                                 "version)")
            self.set_meta("schema_version", str(SCHEMA_VERSION))
            return
        try:
            number = int(version)
        except ValueError:
            raise StoreError(f"{self.path}: unreadable schema version {version[:40]!r} "
                             f"(this slurm-marl expects {SCHEMA_VERSION})") from None
        if number != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version}, this slurm-marl "
                             f"expects {SCHEMA_VERSION}")

    def _add_columns(self) -> None:
        add_columns(self.db)

    @classmethod
    def open_readonly(cls, path: str | Path) -> "Store":
        """The store for reading only (the admin commands): never creates, migrates or
        writes the file."""
        path = Path(path)
        if path.is_dir():
            raise StoreError(f"{path} is a directory; the state store is "
                             f"{path / 'state.sqlite'}")
        if not path.is_file():
            raise StoreError(f"no state store at {path} (has the agent run yet?)")
        return cls(path, readonly=True)

    def close(self) -> None:
        self.db.close()

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.db)

    # ---- meta ---------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                        "value=excluded.value", (key, value))

    def next_cycle(self) -> int:
        row = self.db.execute("SELECT MAX(cycle) FROM cycles").fetchone()
        return (row[0] or 0) + 1

    def record_cycle(self, cycle: int, now_s: float, duration_s: float, pending: int,
                     running: int, decisions: int, written: int, refused: int,
                     error: str | None = None, protected: int | None = None,
                     warning: str | None = None) -> None:
        self.db.execute("INSERT OR REPLACE INTO cycles (cycle, time_s, duration_s, pending, "
                        "running, decisions, written, refused, error, protected, warning) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (cycle, now_s, duration_s, pending, running, decisions, written,
                         refused, error, protected, warning))

    def prune(self, keep_days: float = 30.0, now_s: float | None = None,
              max_rows: int = 0, batch: int = 20_000,
              deadline: float | None = None, clock=time.monotonic) -> dict[str, int]:
        """Forget what is older than ``keep_days``: decisions, cycle reports, finished jobs
        (and what was written for them), ended reservations. With ``max_rows`` > 0, also
        keep at most that many decisions and cycle reports (the newest). The newest cycle
        report is always kept (cycle numbers continue from it).

        Deletes in transactions of ``batch`` rows, so the daemon's cycles are not blocked
        long; stops once ``clock()`` passes ``deadline``. Returns the rows deleted per table
        and ``"done"`` (1, or 0 when the deadline cut it short: call again)."""
        cutoff = (now_s if now_s is not None else time.time()) - keep_days * 86400
        steps: list[tuple[str, str, tuple]] = [
            ("decisions", "DELETE FROM decisions WHERE id IN (SELECT id FROM decisions "
             "WHERE time_s < ? ORDER BY id LIMIT ?)", (cutoff,)),
            ("cycles", "DELETE FROM cycles WHERE cycle IN (SELECT cycle FROM cycles WHERE "
             "time_s < ? AND cycle < (SELECT MAX(cycle) FROM cycles) ORDER BY cycle "
             "LIMIT ?)", (cutoff,)),
        ]
        if max_rows > 0:
            steps += [
                ("decisions", "DELETE FROM decisions WHERE id IN (SELECT id FROM decisions "
                 "WHERE id <= (SELECT id FROM decisions ORDER BY id DESC LIMIT 1 OFFSET ?) "
                 "ORDER BY id LIMIT ?)", (max_rows,)),
                ("cycles", "DELETE FROM cycles WHERE cycle IN (SELECT cycle FROM cycles "
                 "WHERE cycle <= (SELECT cycle FROM cycles ORDER BY cycle DESC LIMIT 1 "
                 "OFFSET ?) ORDER BY cycle LIMIT ?)", (max_rows,)),
            ]
        steps += [
            ("written", "DELETE FROM written WHERE rowid IN (SELECT w.rowid FROM written w "
             "JOIN jobs j ON j.job_id = w.job_id WHERE j.finished_s IS NOT NULL AND "
             "j.finished_s < ? LIMIT ?)", (cutoff,)),
            ("jobs", "DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs WHERE "
             "finished_s IS NOT NULL AND finished_s < ? LIMIT ?)", (cutoff,)),
            ("reservations", "DELETE FROM reservations WHERE name IN (SELECT name FROM "
             "reservations WHERE ended_s IS NOT NULL AND ended_s < ? LIMIT ?)", (cutoff,)),
        ]
        self.records.forget_saved()     # rows may go: save them again if they are seen again
        counts = {"decisions": 0, "cycles": 0, "written": 0, "jobs": 0, "reservations": 0,
                  "done": 1}
        for table, sql, args in steps:
            while True:
                if deadline is not None and clock() >= deadline:
                    counts["done"] = 0
                    return counts
                with self.transaction() as db:
                    n = db.execute(sql, (*args, batch)).rowcount
                counts[table] += n
                if n < batch:
                    break
        return counts
