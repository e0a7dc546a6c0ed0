"""The speeds jobs were observed to run at with their co-location (the ``speed_samples``
table): what `slurm-marl train interference --from-store` learns from."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable

from slurm_marl.daemon.store.schema import Begin, transaction


class SqliteSpeedSamples:
    """Samples in the interference model's format, kept as JSON in the order observed."""

    def __init__(self, db: sqlite3.Connection, begin: Begin | None = None) -> None:
        self._db = db
        self._begin = begin or (lambda: transaction(db))

    def add(self, samples: Iterable[dict]) -> int:
        rows = [(float(s.get("time_s", time.time())), int(s["job_id"]), int(s.get("run", 0)),
                 json.dumps(s, sort_keys=True)) for s in samples]
        if rows:
            with self._begin() as db:
                db.executemany("INSERT INTO speed_samples (time_s, job_id, run, sample) "
                               "VALUES (?, ?, ?, ?)", rows)
        return len(rows)

    def all(self) -> list[dict]:
        """Observed (co-location -> speed) samples, oldest first."""
        return [json.loads(r[0]) for r in
                self._db.execute("SELECT sample FROM speed_samples ORDER BY id")]
