"""The agent's state store: SQLite in WAL mode under ``state_dir``.

What must outlive a restart lives here: per-job scheduling state (attained GPU service,
last run length, queue, preemptions), what was last written to Slurm (so only changes are
written), the reservations the agent created, every decision with its reason and Slurm's
answer (for `slurm-marl decisions` / `explain`), cycle reports, and per-job outcomes as
records of each run, the speeds jobs were observed to run at with their co-location
(`slurm-marl train interference --from-store`), and the GPU-time predictions of live jobs
with the prediction-skill gate's last scored pairs, and the history rows of the jobs the
predictor saw end, which its features read (a restarted agent keeps all three).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, is_dataclass
from operator import attrgetter
from pathlib import Path

from slurm_marl.domain import Decision
from slurm_marl.history.features import KEY_FIELDS

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id INTEGER PRIMARY KEY,
    user TEXT, name TEXT, partition TEXT,
    num_gpus INTEGER NOT NULL DEFAULT 0,
    submit_time_s REAL,
    attained_gpu_s REAL NOT NULL DEFAULT 0,     -- service of finished runs
    run_start_s REAL,                           -- start of the current run, if running
    last_run_s REAL NOT NULL DEFAULT 0,         -- length of the last finished run
    queue_since_s REAL,                         -- became pending (submit or requeue)
    queue INTEGER,
    preemptions INTEGER NOT NULL DEFAULT 0,
    restart_count INTEGER NOT NULL DEFAULT 0,
    last_state TEXT,
    last_seen_s REAL,
    last_running_s REAL,                        -- last time seen RUNNING
    nodes TEXT, gpu_alloc TEXT,
    finished_s REAL,
    model_type TEXT                             -- inferred signature (daemon/signature.py)
);
CREATE TABLE IF NOT EXISTS written (
    job_id INTEGER NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL, time_s REAL NOT NULL,
    PRIMARY KEY (job_id, kind)
);
CREATE TABLE IF NOT EXISTS reservations (
    name TEXT PRIMARY KEY, job_id INTEGER, nodes TEXT, created_s REAL, ended_s REAL
);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cycle INTEGER NOT NULL, time_s REAL NOT NULL, job_id INTEGER NOT NULL,
    kind TEXT NOT NULL, plugin TEXT, reason TEXT, payload TEXT,
    status TEXT NOT NULL, message TEXT
);
CREATE INDEX IF NOT EXISTS decisions_job ON decisions (job_id, id);
CREATE TABLE IF NOT EXISTS cycles (
    cycle INTEGER PRIMARY KEY, time_s REAL NOT NULL, duration_s REAL,
    pending INTEGER, running INTEGER, decisions INTEGER, written INTEGER,
    refused INTEGER, error TEXT,
    protected INTEGER,                          -- jobs the guard protected (NULL: no guard)
    warning TEXT                                -- a cycle that ran but warned (daemon/health)
);
CREATE TABLE IF NOT EXISTS outcomes (
    job_id INTEGER NOT NULL, run INTEGER NOT NULL, user TEXT, name TEXT, model_type TEXT,
    num_gpus INTEGER, nodes TEXT, gpu_alloc TEXT, colocated TEXT,
    start_s REAL, end_s REAL, state TEXT,
    PRIMARY KEY (job_id, run)
);
CREATE TABLE IF NOT EXISTS speed_samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_s REAL NOT NULL, job_id INTEGER NOT NULL, run INTEGER NOT NULL,
    sample TEXT NOT NULL                        -- JSON, the interference model's format
);
-- GPU-time predictions (daemon/predictions.py): one row per job the predictor holds (a
-- live GPU job), written when it is first predicted; deleted when the job is scored or
-- gone. A restarted agent gives these jobs their stored prediction, not a new one.
CREATE TABLE IF NOT EXISTS predictions (
    job_id INTEGER PRIMARY KEY, partition TEXT,
    predicted_gpu_s REAL, made_s REAL,
    arrival INTEGER,                            -- the gate's arrival number (SkillGate)
    done_gpu_s REAL                             -- GPU-s of its runs ended so far (requeues)
);
-- The prediction-skill gate's input: (prediction, true GPU-time) of each predicted job
-- that finished, in the order scored (id); finished_s is the job's end, scored_s the
-- cycle that saw it. Only the last gate window of each partition is kept (all the gate
-- reads, pruned as rows are added); a restarted agent rebuilds its gate from them.
CREATE TABLE IF NOT EXISTS scored_predictions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER, partition TEXT,
    predicted_gpu_s REAL, true_gpu_s REAL,
    made_s REAL, finished_s REAL, scored_s REAL, arrival INTEGER
);
-- The predictor's feature history since the history CSV (history/features.py), in the
-- order the predictor learned it (id): a submission row (end_s and gpu_time_s NULL, state
-- SUBMITTED) for each job it predicted, written when predicted, and an end row for each
-- of them it learned the final GPU-time of (what the history CSV would hold of the job:
-- HistoryJob's fields, start_s the last run's start; gpu_time_s the GPU-s it was taught,
-- all runs together, so not gpus x (end_s - start_s) after a requeue). seen_s: the cycle
-- that predicted it / saw it end. A restarted agent replays these rows after the CSV.
-- Kept (pruned as rows are added): end rows among the last ``keep_recent`` end rows of any
-- key the features group by (user + name stem, user + GPUs, user, account + GPUs, account,
-- site: the features read only the last RECENT ended jobs of each key, so an older row
-- cannot change them); submission rows of jobs still in ``predictions`` (a restarted agent
-- takes their request from here); any row submitted less than ``keep_submits_s`` before
-- the newest submission (the features count the submissions of the last hour). Bounded by
-- the site's users, accounts and job names and a few days of submissions (plus up to
-- ``prune_every`` rows added since the last prune), not by time.
CREATE TABLE IF NOT EXISTS feature_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER, name TEXT, user TEXT, account TEXT, partition TEXT, qos TEXT,
    stem TEXT,                                  -- history.features.name_stem(name)
    gpus INTEGER, nodes INTEGER, time_limit_s REAL, submit_s REAL,
    start_s REAL, end_s REAL,                   -- the last run's start, its end
    state TEXT, gpu_time_s REAL, seen_s REAL,
    sacct_id TEXT                               -- "123_4" for an array task (see below)
);
-- Jobs the Slurm-alone guard protects now (policy/guard.py): waiting past the start
-- Slurm's own order would have given them, or running after that; replaced each cycle
-- the set changes (`slurm-marl status`, `queues`).
CREATE TABLE IF NOT EXISTS guard (
    job_id INTEGER PRIMARY KEY, protected_s REAL, shadow_start_s REAL
);
"""
# Columns added to a table of ``_SCHEMA`` after it was first released, without bumping
# the schema version: the daemon adds them to an older store's table (NULL in its rows).
# feature_history.sacct_id: the job's id as sacct and the history CSV write it, "123_4"
# for task 4 of array 123 (its own job id otherwise), as Slurm last listed the job.
# cycles.protected: jobs the Slurm-alone guard protected at that cycle (NULL: no guard).
# cycles.warning: what went wrong in a cycle that still ran (some managed partitions not in
# Slurm); cycles.error says why one failed.
_ADDED_COLUMNS = {"feature_history": ("sacct_id TEXT",),
                  "cycles": ("protected INTEGER", "warning TEXT")}


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


class StoreError(RuntimeError):
    """The state store cannot be opened or is from an incompatible version."""


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


class Store:
    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._saved: dict[int, tuple] = {}     # job id -> the record row last saved
        self._protected: dict | None = None    # the guard set last written
        # job id -> exact seen times, of the records of the last save_jobs (the daemon
        # saves every record it keeps each cycle, so this holds all it will read back)
        self._seen: dict[int, tuple] = {}
        # The records the last cycle folded its snapshot into (unfinished, or listed by
        # Slurm), kept between cycles: this store object is the jobs table's one writer,
        # so they are what a read would give, without reading 15,000 rows a cycle.
        # ``forget_live`` drops them (a cycle that failed half-way reads the file again).
        self._live: dict[int, JobRecord] | None = None
        self._history_added = 0             # feature_history rows added since its prune
        try:
            if readonly:
                self.db = sqlite3.connect(self._readonly_uri(), uri=True, timeout=10,
                                          isolation_level=None, check_same_thread=False)
                self.db.row_factory = sqlite3.Row
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(str(self.path), timeout=10, isolation_level=None,
                                          check_same_thread=False)
                self.db.row_factory = sqlite3.Row
                self._wal()
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(_SCHEMA)
                self._add_columns()
            version = self.meta("schema_version")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open state store {self.path}: {exc}") from exc
        if version is None:
            if readonly:
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
        """``_ADDED_COLUMNS`` that a table of an older store lacks."""
        for table, columns in _ADDED_COLUMNS.items():
            have = {r["name"] for r in self.db.execute(f"PRAGMA table_info({table})")}
            for column in columns:
                if column.split()[0] not in have:
                    try:
                        self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
                    except sqlite3.OperationalError as exc:
                        # another process (the daemon, an admin command) added it between
                        # our look and our ALTER: measured on CI as "duplicate column name"
                        if "duplicate column" not in str(exc):
                            raise

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

    def _readonly_uri(self) -> str:
        """``mode=ro``; and ``immutable=1`` when there is no ``-wal`` file. A read-only
        connection to a WAL database must otherwise create the ``-wal``/``-shm`` files
        itself (and leaves them behind), which an admin who may read but not write the
        state directory cannot: the read then fails. No ``-wal`` means no daemon has the
        store open (a WAL connection keeps one); a daemon that opens it meanwhile writes to
        its new ``-wal``, not to the file this connection reads, until a checkpoint."""
        uri = self.path.resolve().as_uri() + "?mode=ro"
        if not Path(str(self.path) + "-wal").exists():
            uri += "&immutable=1"
        return uri

    def close(self) -> None:
        self.db.close()

    def _wal(self, wait_s: float = 10.0) -> None:
        """Put the database in WAL mode (readers never block the daemon's writes). Only
        when it is not already: switching needs a lock that SQLite does not wait for (no
        busy handler), so a reader opening the store while the daemon creates it got
        "database is locked" at once (a CI run of the daemon tests did). Retried briefly."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                mode = self.db.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() != "wal":
                    self.db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

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

    # ---- jobs ---------------------------------------------------------------------------
    def job_records(self, job_ids: Iterable[int] | None = None) -> dict[int, JobRecord]:
        rows = (self.db.execute(f"SELECT {_COLUMN_LIST} FROM jobs").fetchall()
                if job_ids is None else self._rows_of(list(job_ids)))
        return {r[0]: self._exact(JobRecord(*r)) for r in rows}

    def _rows_of(self, job_ids: list[int]) -> list:
        """The rows of these jobs (``JOB_COLUMNS``), 500 ids a query."""
        rows = []
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i:i + 500]
            rows += self.db.execute(f"SELECT {_COLUMN_LIST} FROM jobs WHERE job_id IN "
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

    def live_records(self, job_ids: Iterable[int]) -> dict[int, JobRecord]:
        """Every unfinished record and the records of ``job_ids`` (the jobs Slurm lists):
        what a cycle folds its snapshot into. The first call reads the unfinished rows and
        the listed jobs' rows; later calls hand back the records of the last call (the same
        objects, as the caller left them, with the records it added to the dict: a new
        job's) and read only jobs not seen before. Finished records no longer listed are
        let go."""
        ids = list(job_ids)
        kept = self._live
        if kept is None:
            out = {rec.job_id: rec for rec in self.unfinished_records()}
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

    def unfinished_records(self) -> list[JobRecord]:
        rows = self.db.execute(f"SELECT {_COLUMN_LIST} FROM jobs WHERE finished_s IS NULL"
                               ).fetchall()
        return [self._exact(JobRecord(*r)) for r in rows]

    def signature_history(self) -> dict[tuple[str, str], str]:
        """(user, job name) -> model type, newest job first wins."""
        rows = self.db.execute("SELECT user, name, model_type FROM jobs WHERE model_type IS "
                               "NOT NULL ORDER BY job_id").fetchall()
        return {(r[0], r[1]): r[2] for r in rows}

    def save_jobs(self, records: Iterable[JobRecord]) -> None:
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
        with self.transaction() as db:
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
        with self.transaction() as db:
            db.executemany("UPDATE jobs SET queue=? WHERE job_id=?",
                           [(q, j) for j, q in items])
        for j, q in items:
            self._saved.pop(j, None)    # the row changed under the cache: write it next time
            rec = live.get(j)
            if rec is not None:
                rec.queue = q

    # ---- what was written ---------------------------------------------------------------
    def written(self, job_ids: Iterable[int]) -> dict[tuple[int, str], str]:
        ids = list(job_ids)
        out = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for r in self.db.execute(
                    f"SELECT job_id, kind, value FROM written WHERE job_id IN "
                    f"({','.join('?' * len(chunk))})", chunk):
                out[(r[0], r[1])] = r[2]
        return out

    def mark_written(self, items: Iterable[tuple[int, str, str]], now_s: float) -> None:
        with self.transaction() as db:
            db.executemany("INSERT INTO written VALUES (?, ?, ?, ?) ON CONFLICT(job_id, kind) "
                           "DO UPDATE SET value=excluded.value, time_s=excluded.time_s",
                           [(j, k, v, now_s) for j, k, v in items])

    def forget_written(self, job_id: int, kinds: Iterable[str]) -> None:
        self.db.executemany("DELETE FROM written WHERE job_id=? AND kind=?",
                            [(job_id, k) for k in kinds])

    # ---- reservations -------------------------------------------------------------------
    def active_reservations(self) -> dict[str, dict]:
        rows = self.db.execute("SELECT * FROM reservations WHERE ended_s IS NULL").fetchall()
        return {r["name"]: dict(r) for r in rows}

    def add_reservation(self, name: str, job_id: int, nodes: str, now_s: float) -> None:
        self.db.execute("INSERT INTO reservations VALUES (?, ?, ?, ?, NULL) ON CONFLICT(name) "
                        "DO UPDATE SET job_id=excluded.job_id, nodes=excluded.nodes, "
                        "ended_s=NULL", (name, job_id, nodes, now_s))

    def end_reservation(self, name: str, now_s: float) -> None:
        self.db.execute("UPDATE reservations SET ended_s=? WHERE name=?", (now_s, name))

    # ---- decisions, cycles, outcomes ----------------------------------------------------
    def record_decisions(self, cycle: int, now_s: float,
                         rows: Iterable[tuple[Decision, str, str]]) -> None:
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO decisions (cycle, time_s, job_id, kind, plugin, reason, payload, "
                "status, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(cycle, now_s, d.job_id, type(d).__name__, d.plugin, d.reason,
                  json.dumps(decision_payload(d), default=str), status, message)
                 for d, status, message in rows])

    def record_cycle(self, cycle: int, now_s: float, duration_s: float, pending: int,
                     running: int, decisions: int, written: int, refused: int,
                     error: str | None = None, protected: int | None = None,
                     warning: str | None = None) -> None:
        self.db.execute("INSERT OR REPLACE INTO cycles (cycle, time_s, duration_s, pending, "
                        "running, decisions, written, refused, error, protected, warning) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (cycle, now_s, duration_s, pending, running, decisions, written,
                         refused, error, protected, warning))

    def set_protected(self, protected: dict[int, tuple[float, float | None]]) -> None:
        """The jobs the Slurm-alone guard protects now: job id -> (protected since, its
        Slurm-alone start estimate); written only when the set changed."""
        if protected == self._protected:
            return
        with self.transaction() as db:
            db.execute("DELETE FROM guard")
            db.executemany("INSERT INTO guard VALUES (?, ?, ?)",
                           [(j, since, start) for j, (since, start) in protected.items()])
        self._protected = dict(protected)

    def protected(self) -> dict[int, dict]:
        """The jobs the guard protects, as last recorded ({} from a store older than it)."""
        try:
            rows = self.db.execute("SELECT * FROM guard").fetchall()
        except sqlite3.OperationalError:
            return {}
        return {r["job_id"]: dict(r) for r in rows}

    def record_outcome(self, job_id: int, run: int, **values) -> None:
        cols = ["job_id", "run", *values]
        self.db.execute(f"INSERT OR REPLACE INTO outcomes ({','.join(cols)}) VALUES "
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
        rows = [dict(r) for r in self.db.execute(sql, args)]
        for r in rows:
            r["payload"] = json.loads(r["payload"] or "{}")
        return rows

    def cycles(self, limit: int = 10) -> list[dict]:
        return [dict(r) for r in self.db.execute(
            "SELECT * FROM cycles ORDER BY cycle DESC LIMIT ?", (limit,))]

    def add_speed_samples(self, samples: Iterable[dict]) -> int:
        rows = [(float(s.get("time_s", time.time())), int(s["job_id"]), int(s.get("run", 0)),
                 json.dumps(s, sort_keys=True)) for s in samples]
        if rows:
            with self.transaction() as db:
                db.executemany("INSERT INTO speed_samples (time_s, job_id, run, sample) "
                               "VALUES (?, ?, ?, ?)", rows)
        return len(rows)

    def speed_samples(self) -> list[dict]:
        """Observed (co-location -> speed) samples, oldest first."""
        return [json.loads(r[0]) for r in
                self.db.execute("SELECT sample FROM speed_samples ORDER BY id")]

    # ---- GPU-time predictions and the skill gate's scored pairs ------------------------
    # Tables added after schema version 1 without bumping it: ``_SCHEMA`` creates them in
    # an older store when the daemon opens it (CREATE TABLE IF NOT EXISTS), and an older
    # daemon never reads them. Rows are read as they are; daemon/predictions.py checks them.
    PREDICTION_COLUMNS = ("job_id", "partition", "predicted_gpu_s", "made_s", "arrival",
                          "done_gpu_s")
    SCORED_COLUMNS = ("id", "job_id", "partition", "predicted_gpu_s", "true_gpu_s",
                      "made_s", "finished_s", "scored_s", "arrival")
    HISTORY_COLUMNS = ("id", "job_id", "name", "user", "account", "partition", "qos", "stem",
                     "gpus", "nodes", "time_limit_s", "submit_s", "start_s", "end_s",
                     "state", "gpu_time_s", "seen_s", "sacct_id")

    def predictions(self) -> list[tuple]:
        """Every stored prediction (``PREDICTION_COLUMNS``), by job id."""
        return [tuple(r) for r in self.db.execute(
            f"SELECT {','.join(self.PREDICTION_COLUMNS)} FROM predictions ORDER BY job_id")]

    def scored_predictions(self, window: int) -> list[tuple]:
        """The last ``window`` scored pairs of each partition (``SCORED_COLUMNS``), all
        partitions together in the order they were scored."""
        return [tuple(r)[:-1] for r in self.db.execute(
            f"SELECT * FROM (SELECT {','.join(self.SCORED_COLUMNS)}, ROW_NUMBER() OVER "
            f"(PARTITION BY partition ORDER BY id DESC) AS k FROM scored_predictions) "
            f"WHERE k <= ? ORDER BY id", (window,))]

    def feature_history(self) -> list[tuple]:
        """Every stored history row (``HISTORY_COLUMNS``), in the order they were added."""
        return [tuple(r) for r in self.db.execute(
            f"SELECT {','.join(self.HISTORY_COLUMNS)} FROM feature_history ORDER BY id")]

    def save_predictions(self, made: Iterable[tuple], scored: Iterable[tuple],
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
        with self.transaction() as db:
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
            self._history_added += len(history)
            if history and self._history_added >= prune_every:
                db.execute(_PRUNE_HISTORY, (keep_recent,) * len(KEY_FIELDS) + (keep_submits_s,))
                self._history_added = 0

    def outcomes(self) -> list[dict]:
        return [dict(r) for r in self.db.execute("SELECT * FROM outcomes ORDER BY end_s")]

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
        self._saved.clear()     # rows may go: save them again if they are seen again
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
