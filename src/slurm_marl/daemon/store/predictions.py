"""GPU-time predictions of live jobs, the prediction-skill gate's last scored pairs, and the
feature history of the jobs the predictor saw end (the ``predictions``,
``scored_predictions`` and ``feature_history`` tables): a restarted agent keeps all three."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from slurm_marl.daemon.store.schema import Begin, transaction
from slurm_marl.history.features import KEY_FIELDS

# The history rows no feature can read any more (see the feature_history table): an end row
# not among the last ? end rows of any of its keys, or a submission row of a job no longer
# in ``predictions``; and submitted more than ? s before the newest submission. Ranked
# among the end rows alone (submission rows teach no key).
_RANKS = ", ".join(
    "ROW_NUMBER() OVER (PARTITION BY " + ", ".join(("end_s IS NULL", *key))
    + f" ORDER BY id DESC) AS r{k}" for k, key in enumerate(KEY_FIELDS.values()))
_PRUNE_HISTORY = (
    "DELETE FROM feature_history WHERE id IN (SELECT id FROM (SELECT id, end_s, submit_s, "
    f"job_id, {_RANKS} FROM feature_history) WHERE (CASE WHEN end_s IS NULL THEN job_id "
    "NOT IN (SELECT job_id FROM predictions) ELSE "
    + " AND ".join(f"r{k} > ?" for k in range(len(KEY_FIELDS)))
    + " END) AND NOT submit_s >= (SELECT MAX(submit_s) FROM feature_history) - ?)")


class SqlitePredictions:
    """The predictor's stored state; rows go in and out as tuples of the ``*_COLUMNS``
    below, which daemon/predictions.py builds and checks."""

    # Tables added after schema version 1 without bumping it: ``SCHEMA`` creates them in
    # an older store when the daemon opens it (CREATE TABLE IF NOT EXISTS), and an older
    # daemon never reads them. Rows are read as they are; daemon/predictions.py checks them.
    PREDICTION_COLUMNS = ("job_id", "partition", "predicted_gpu_s", "made_s", "arrival",
                          "done_gpu_s")
    SCORED_COLUMNS = ("id", "job_id", "partition", "predicted_gpu_s", "true_gpu_s",
                      "made_s", "finished_s", "scored_s", "arrival")
    HISTORY_COLUMNS = ("id", "job_id", "name", "user", "account", "partition", "qos", "stem",
                       "gpus", "nodes", "time_limit_s", "submit_s", "start_s", "end_s",
                       "state", "gpu_time_s", "seen_s", "sacct_id")

    def __init__(self, db: sqlite3.Connection, begin: Begin | None = None) -> None:
        self._db = db
        self._begin = begin or (lambda: transaction(db))
        self._added = 0             # feature_history rows added since its prune

    def live(self) -> list[tuple]:
        """Every stored prediction (``PREDICTION_COLUMNS``), by job id."""
        return [tuple(r) for r in self._db.execute(
            f"SELECT {','.join(self.PREDICTION_COLUMNS)} FROM predictions ORDER BY job_id")]

    def scored(self, window: int) -> list[tuple]:
        """The last ``window`` scored pairs of each partition (``SCORED_COLUMNS``), all
        partitions together in the order they were scored."""
        return [tuple(r)[:-1] for r in self._db.execute(
            f"SELECT * FROM (SELECT {','.join(self.SCORED_COLUMNS)}, ROW_NUMBER() OVER "
            f"(PARTITION BY partition ORDER BY id DESC) AS k FROM scored_predictions) "
            f"WHERE k <= ? ORDER BY id", (window,))]

    def history(self) -> list[tuple]:
        """Every stored history row (``HISTORY_COLUMNS``), in the order they were added."""
        return [tuple(r) for r in self._db.execute(
            f"SELECT {','.join(self.HISTORY_COLUMNS)} FROM feature_history ORDER BY id")]

    def save(self, made: Iterable[tuple], scored: Iterable[tuple],
             dropped: Iterable[int], window: int,
             dropped_scored: Iterable[int] = (), history: Iterable[tuple] = (),
             dropped_history: Iterable[int] = (), keep_recent: int = 10,
             keep_submits_s: float = 2 * 86400.0,
             prune_every: int = 1000) -> None:
        """One transaction: upsert ``made`` (``PREDICTION_COLUMNS``), append ``scored``
        (``SCORED_COLUMNS`` but the id) and ``history`` (``HISTORY_COLUMNS`` but the id),
        delete the predictions of ``dropped`` jobs and the scored and history rows
        ``dropped_scored`` and ``dropped_history`` (ids), then keep only the last ``window``
        scored rows of each partition that got one and, once ``prune_every`` history rows
        were added since the last time, the history rows the features can read
        (``keep_recent``, ``keep_submits_s``: see the table's comment; not every cycle, as
        it takes time on a large table: docs/benchmarks.md, "Cost of predicting and
        ordering 5,000 pending jobs")."""
        made, scored, history = list(made), list(scored), list(history)
        dropped, dropped_scored = list(dropped), list(dropped_scored)
        dropped_history = list(dropped_history)
        if not (made or scored or dropped or dropped_scored or history or dropped_history):
            return
        cols = self.PREDICTION_COLUMNS
        with self._begin() as db:
            db.executemany(
                f"INSERT INTO predictions ({','.join(cols)}) VALUES "
                f"({','.join('?' * len(cols))}) ON CONFLICT(job_id) DO UPDATE SET "
                + ",".join(f"{c}=excluded.{c}" for c in cols if c != "job_id"), made)
            db.executemany("DELETE FROM predictions WHERE job_id=?", [(j,) for j in dropped])
            db.executemany("DELETE FROM scored_predictions WHERE id=?",
                           [(i,) for i in dropped_scored])
            cols = self.SCORED_COLUMNS[1:]
            db.executemany(f"INSERT INTO scored_predictions ({','.join(cols)}) VALUES "
                           f"({','.join('?' * len(cols))})", scored)
            for part in {row[1] for row in scored}:
                db.execute("DELETE FROM scored_predictions WHERE partition IS ? AND id <= "
                           "(SELECT id FROM scored_predictions WHERE partition IS ? "
                           "ORDER BY id DESC LIMIT 1 OFFSET ?)", (part, part, window))
            db.executemany("DELETE FROM feature_history WHERE id=?",
                           [(i,) for i in dropped_history])
            cols = self.HISTORY_COLUMNS[1:]
            db.executemany(f"INSERT INTO feature_history ({','.join(cols)}) VALUES "
                           f"({','.join('?' * len(cols))})", history)
            self._added += len(history)
            if history and self._added >= prune_every:
                db.execute(_PRUNE_HISTORY, (keep_recent,) * len(KEY_FIELDS) + (keep_submits_s,))
                self._added = 0
