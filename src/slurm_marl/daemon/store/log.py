"""The decision log: every decision with its reason and Slurm's answer, the cycle
reports, and each job run's outcome (`slurm-marl decisions`, `explain`, `status`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict, fields, is_dataclass

from slurm_marl.daemon.store.schema import Begin, transaction
from slurm_marl.domain import Decision

_NOT_IN_PAYLOAD = ("job_id", "plugin", "reason")


def decision_payload(d: Decision) -> dict:
    """The decision's own fields; a flat one (SetPriority, Release, ...) without
    ``asdict``'s deep copy, a noticeable part of a cycle at thousands of pending jobs
    (docs/benchmarks.md, "The cycle's constant costs")."""
    data = {f.name: getattr(d, f.name) for f in fields(d) if f.name not in _NOT_IN_PAYLOAD}
    if any(isinstance(v, (tuple, list, dict)) or is_dataclass(v) for v in data.values()):
        data = asdict(d)
        for key in _NOT_IN_PAYLOAD:
            data.pop(key, None)
    return data


class SqliteDecisionLog:
    """The ``decisions``, ``cycles`` (read; the store writes them) and ``outcomes``
    tables."""

    def __init__(self, db: sqlite3.Connection, begin: Begin | None = None) -> None:
        self._db = db
        self._begin = begin or (lambda: transaction(db))

    def record(self, cycle: int, now_s: float,
               rows: Iterable[tuple[Decision, str, str]]) -> None:
        with self._begin() as db:
            db.executemany(
                "INSERT INTO decisions (cycle, time_s, job_id, kind, plugin, reason, payload, "
                "status, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(cycle, now_s, d.job_id, type(d).__name__, d.plugin, d.reason,
                  json.dumps(decision_payload(d), default=str), status, message)
                 for d, status, message in rows])

    def record_outcome(self, job_id: int, run: int, **values) -> None:
        cols = ["job_id", "run", *values]
        self._db.execute(f"INSERT OR REPLACE INTO outcomes ({','.join(cols)}) VALUES "
                         f"({','.join('?' * len(cols))})", (job_id, run, *values.values()))

    def decisions(self, job_id: int | None = None, limit: int = 50,
                  kind: str | None = None, since_s: float | None = None) -> list[dict]:
        sql, args = "SELECT * FROM decisions WHERE 1=1", []
        if job_id is not None:
            sql += " AND job_id=?"
            args.append(job_id)
        if kind:
            sql += " AND kind=?"
            args.append(kind)
        if since_s is not None:
            sql += " AND time_s>=?"
            args.append(since_s)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        rows = [dict(r) for r in self._db.execute(sql, args)]
        for r in rows:
            r["payload"] = json.loads(r["payload"] or "{}")
        return rows

    def cycles(self, limit: int = 10) -> list[dict]:
        return [dict(r) for r in self._db.execute(
            "SELECT * FROM cycles ORDER BY cycle DESC LIMIT ?", (limit,))]

    def outcomes(self) -> list[dict]:
        return [dict(r) for r in self._db.execute("SELECT * FROM outcomes ORDER BY end_s")]
