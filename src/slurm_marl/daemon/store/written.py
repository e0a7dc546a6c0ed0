"""What the daemon last wrote to Slurm for each job (the ``written`` table): a cycle writes
only what differs from it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from slurm_marl.daemon.store.schema import Begin, transaction


class SqliteWrittenState:
    """(job id, kind) -> the value last written, e.g. a priority or a hold."""

    def __init__(self, db: sqlite3.Connection, begin: Begin | None = None) -> None:
        self._db = db
        self._begin = begin or (lambda: transaction(db))

    def get(self, job_ids: Iterable[int]) -> dict[tuple[int, str], str]:
        ids = list(job_ids)
        out = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for r in self._db.execute(
                    f"SELECT job_id, kind, value FROM written WHERE job_id IN "
                    f"({','.join('?' * len(chunk))})", chunk):
                out[(r[0], r[1])] = r[2]
        return out

    def mark(self, items: Iterable[tuple[int, str, str]], now_s: float) -> None:
        with self._begin() as db:
            db.executemany("INSERT INTO written VALUES (?, ?, ?, ?) ON CONFLICT(job_id, kind) "
                           "DO UPDATE SET value=excluded.value, time_s=excluded.time_s",
                           [(j, k, v, now_s) for j, k, v in items])

    def forget(self, job_id: int, kinds: Iterable[str]) -> None:
        self._db.executemany("DELETE FROM written WHERE job_id=? AND kind=?",
                            [(job_id, k) for k in kinds])
