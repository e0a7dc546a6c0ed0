"""Job records: each job's scheduling state as the daemon last folded Slurm's view into it
(the ``jobs`` table), with the caches that let a cycle at thousands of jobs read and write
only what changed."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, fields
from operator import attrgetter

from slurm_marl.daemon.store.schema import Begin, transaction


@dataclass
class JobRecord:
    job_id: int
    user: str = ""
    name: str = ""
    partition: str = ""
    num_gpus: int = 0
    submit_time_s: float | None = None
    attained_gpu_s: float = 0.0
    run_start_s: float | None = None
    last_run_s: float = 0.0
    queue_since_s: float | None = None
    queue: int | None = None
    preemptions: int = 0
    restart_count: int = 0
    last_state: str | None = None
    last_seen_s: float | None = None
    last_running_s: float | None = None
    nodes: str = ""
    gpu_alloc: str = ""
    finished_s: float | None = None
    model_type: str | None = None


JOB_COLUMNS = tuple(f.name for f in fields(JobRecord))
_COLUMN_LIST = ",".join(JOB_COLUMNS)
_SAVED_CACHE_MAX = 200_000
# Times every cycle moves (when a job was last seen / seen running) are written when they
# move by SEEN_STEP_S: they only date a run that ended unseen (daemon down, job gone),
# where a minute is noise, and rewriting every record every cycle was most of a cycle's
# store cost at 15,000 jobs.
SEEN_STEP_S = 60.0
_SEEN_COLUMNS = tuple(JOB_COLUMNS.index(c) for c in ("last_seen_s", "last_running_s"))
_ROW = attrgetter(*JOB_COLUMNS)


def _change_key(row: tuple) -> tuple:
    out = list(row)
    for i in _SEEN_COLUMNS:
        if out[i] is not None:
            out[i] = int(out[i] // SEEN_STEP_S)
    return tuple(out)


class SqliteJobRecords:
    """The ``jobs`` table. This object is the table's one writer in the daemon: it keeps
    what it last saved (to write only changes) and the records the last cycle folded its
    snapshot into (to hand them back without reading them again)."""

    def __init__(self, db: sqlite3.Connection, begin: Begin | None = None) -> None:
        self._db = db
        self._begin = begin or (lambda: transaction(db))
        self._saved: dict[int, tuple] = {}     # job id -> the record row last saved
        # job id -> exact seen times, of the records of the last save (the daemon
        # saves every record it keeps each cycle, so this holds all it will read back)
        self._seen: dict[int, tuple] = {}
        # The records the last cycle folded its snapshot into (unfinished, or listed by
        # Slurm), kept between cycles: this object is the jobs table's one writer, so
        # they are what a read would give, without reading 15,000 rows a cycle.
        # ``forget_live`` drops them (a cycle that failed half-way reads the file again).
        self._live: dict[int, JobRecord] | None = None

    def forget_saved(self) -> None:
        """Write every record again when next saved (retention may have deleted rows)."""
        self._saved.clear()

    def get(self, job_ids: Iterable[int] | None = None) -> dict[int, JobRecord]:
        rows = (self._db.execute(f"SELECT {_COLUMN_LIST} FROM jobs").fetchall()
                if job_ids is None else self._rows_of(list(job_ids)))
        return {r[0]: self._exact(JobRecord(*r)) for r in rows}

    def _rows_of(self, job_ids: list[int]) -> list:
        """The rows of these jobs (``JOB_COLUMNS``), 500 ids a query."""
        rows = []
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i:i + 500]
            rows += self._db.execute(f"SELECT {_COLUMN_LIST} FROM jobs WHERE job_id IN "
                                    f"({','.join('?' * len(chunk))})", chunk).fetchall()
        return rows

    def _exact(self, rec: JobRecord) -> JobRecord:
        """The record with the seen times this store object last saved, which the file
        may hold up to ``SEEN_STEP_S`` older: within one daemon they stay exact (a run
        that ends between two cycles is dated by them)."""
        seen = self._seen.get(rec.job_id)
        if seen is not None:
            rec.last_seen_s, rec.last_running_s = seen
        return rec

    def live(self, job_ids: Iterable[int]) -> dict[int, JobRecord]:
        """Every unfinished record and the records of ``job_ids`` (the jobs Slurm lists):
        what a cycle folds its snapshot into. The first call reads the unfinished rows and
        the listed jobs' rows; later calls hand back the records of the last call (the same
        objects, as the caller left them, with the records it added to the dict: a new
        job's) and read only jobs not seen before. Finished records no longer listed are
        let go."""
        ids = list(job_ids)
        kept = self._live
        if kept is None:
            out = {rec.job_id: rec for rec in self.unfinished()}
        else:
            listed = set(ids)
            out = {i: rec for i, rec in kept.items()
                   if rec.finished_s is None or i in listed}
        for r in self._rows_of([i for i in ids if i not in out]):
            out[r[0]] = self._exact(JobRecord(*r))
        self._live = out        # the caller adds new jobs' records to it: kept too
        return out

    def forget_live(self) -> None:
        """Read the records from the file next cycle (after a cycle that failed half-way,
        whose changes to them may not all be saved)."""
        self._live = None

    def unfinished(self) -> list[JobRecord]:
        rows = self._db.execute(f"SELECT {_COLUMN_LIST} FROM jobs WHERE finished_s IS NULL"
                               ).fetchall()
        return [self._exact(JobRecord(*r)) for r in rows]

    def signatures(self) -> dict[tuple[str, str], str]:
        """(user, job name) -> model type, newest job first wins."""
        rows = self._db.execute("SELECT user, name, model_type FROM jobs WHERE model_type IS "
                               "NOT NULL ORDER BY job_id").fetchall()
        return {(r[0], r[1]): r[2] for r in rows}

    def save(self, records: Iterable[JobRecord]) -> None:
        """Insert or update job records; a record equal to what this store object last
        saved for that job (its seen times within ``SEEN_STEP_S``) is not written again:
        most of them, cycle after cycle."""
        saved = self._saved
        rows, keys = [], []
        seen = {}
        for r in records:
            seen[r.job_id] = (r.last_seen_s, r.last_running_s)
            row = _ROW(r)
            key = _change_key(row)
            if saved.get(r.job_id) != key:
                rows.append(row)
                keys.append(key)
        self._seen = seen
        if not rows:
            return
        cols = JOB_COLUMNS
        sql = (f"INSERT INTO jobs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))}) "
               f"ON CONFLICT(job_id) DO UPDATE SET "
               + ",".join(f"{c}=excluded.{c}" for c in cols if c != "job_id"))
        with self._begin() as db:
            db.executemany(sql, rows)
        if len(saved) + len(rows) > _SAVED_CACHE_MAX:
            saved.clear()
        for key in keys:
            saved[key[0]] = key

    def set_queues(self, items: Iterable[tuple[int, int]]) -> None:
        """Each job's 2D-LAS queue, in the file and in the kept live records (a kept record
        that already says so is not written again)."""
        live = self._live or {}
        items = [(j, q) for j, q in items if (rec := live.get(j)) is None or rec.queue != q]
        if not items:
            return
        with self._begin() as db:
            db.executemany("UPDATE jobs SET queue=? WHERE job_id=?",
                           [(q, j) for j, q in items])
        for j, q in items:
            self._saved.pop(j, None)    # the row changed under the cache: write it next time
            rec = live.get(j)
            if rec is not None:
                rec.queue = q
