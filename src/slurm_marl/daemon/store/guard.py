"""The jobs the Slurm-alone guard protects now (the ``guard`` table), for `slurm-marl
status` and `queues`."""

from __future__ import annotations

import sqlite3

from slurm_marl.daemon.store.schema import Begin, transaction


class SqliteGuardSet:
    """Replaced as a whole when the set changes; this object remembers what it last wrote
    so an unchanged set costs no write."""

    def __init__(self, db: sqlite3.Connection, begin: Begin | None = None) -> None:
        self._db = db
        self._begin = begin or (lambda: transaction(db))
        self._last: dict | None = None    # the guard set last written

    def set(self, protected: dict[int, tuple[float, float | None]]) -> None:
        """The jobs the Slurm-alone guard protects now: job id -> (protected since, its
        Slurm-alone start estimate); written only when the set changed."""
        if protected == self._last:
            return
        with self._begin() as db:
            db.execute("DELETE FROM guard")
            db.executemany("INSERT INTO guard VALUES (?, ?, ?)",
                           [(j, since, start) for j, (since, start) in protected.items()])
        self._last = dict(protected)

    def get(self) -> dict[int, dict]:
        """The jobs the guard protects, as last recorded ({} from a store older than it)."""
        try:
            rows = self._db.execute("SELECT * FROM guard").fetchall()
        except sqlite3.OperationalError:
            return {}
        return {r["job_id"]: dict(r) for r in rows}
