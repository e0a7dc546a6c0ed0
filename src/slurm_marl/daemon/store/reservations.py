"""The reservations the agent created in Slurm (the ``reservations`` table), so that a
restarted agent ends the ones it no longer needs."""

from __future__ import annotations

import sqlite3


class SqliteReservations:
    """Reservation name -> the job it holds nodes for; ``ended_s`` NULL while active."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def active(self) -> dict[str, dict]:
        rows = self._db.execute("SELECT * FROM reservations WHERE ended_s IS NULL").fetchall()
        return {r["name"]: dict(r) for r in rows}

    def add(self, name: str, job_id: int, nodes: str, now_s: float) -> None:
        self._db.execute("INSERT INTO reservations VALUES (?, ?, ?, ?, NULL) ON CONFLICT(name) "
                        "DO UPDATE SET job_id=excluded.job_id, nodes=excluded.nodes, "
                        "ended_s=NULL", (name, job_id, nodes, now_s))

    def end(self, name: str, now_s: float) -> None:
        self._db.execute("UPDATE reservations SET ended_s=? WHERE name=?", (now_s, name))
