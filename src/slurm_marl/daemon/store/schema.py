"""The state store's schema: its tables, the columns added since it was first released,
and opening a connection to it (WAL, the read-only URI, adding those columns)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

SCHEMA_VERSION = 1

SCHEMA = """
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
# Columns added to a table of ``SCHEMA`` after it was first released, without bumping
# the schema version: the daemon adds them to an older store's table (NULL in its rows).
# feature_history.sacct_id: the job's id as sacct and the history CSV write it, "123_4"
# for task 4 of array 123 (its own job id otherwise), as Slurm last listed the job.
# cycles.protected: jobs the Slurm-alone guard protected at that cycle (NULL: no guard).
# cycles.warning: what went wrong in a cycle that still ran (some managed partitions not in
# Slurm); cycles.error says why one failed.
ADDED_COLUMNS = {"feature_history": ("sacct_id TEXT",),
                  "cycles": ("protected INTEGER", "warning TEXT")}


# How an adapter opens a transaction: the unit of work's, so that whatever wraps the
# store's transactions (a test counting writes) sees every adapter's too.
Begin = Callable[[], AbstractContextManager[sqlite3.Connection]]


class StoreError(RuntimeError):
    """The state store cannot be opened or is from an incompatible version."""


def connect(path: Path, readonly: bool) -> sqlite3.Connection:
    """A connection to the store at ``path``; a writable one puts the file in WAL mode and
    creates or completes the schema, a read-only one never writes the file."""
    if readonly:
        db = sqlite3.connect(readonly_uri(path), uri=True, timeout=10,
                             isolation_level=None, check_same_thread=False)
        db.row_factory = sqlite3.Row
        return db
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=10, isolation_level=None,
                         check_same_thread=False)
    db.row_factory = sqlite3.Row
    wal(db)
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    add_columns(db)
    return db


def add_columns(db: sqlite3.Connection) -> None:
    """``ADDED_COLUMNS`` that a table of an older store lacks."""
    for table, columns in ADDED_COLUMNS.items():
        have = {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}
        for column in columns:
            if column.split()[0] not in have:
                try:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
                except sqlite3.OperationalError as exc:
                    # another process (the daemon, an admin command) added it between
                    # our look and our ALTER: measured on CI as "duplicate column name"
                    if "duplicate column" not in str(exc):
                        raise


def readonly_uri(path: Path) -> str:
    """``mode=ro``; and ``immutable=1`` when there is no ``-wal`` file. A read-only
    connection to a WAL database must otherwise create the ``-wal``/``-shm`` files
    itself (and leaves them behind), which an admin who may read but not write the
    state directory cannot: the read then fails. No ``-wal`` means no daemon has the
    store open (a WAL connection keeps one); a daemon that opens it meanwhile writes to
    its new ``-wal``, not to the file this connection reads, until a checkpoint."""
    uri = path.resolve().as_uri() + "?mode=ro"
    if not Path(str(path) + "-wal").exists():
        uri += "&immutable=1"
    return uri


def wal(db: sqlite3.Connection, wait_s: float = 10.0) -> None:
    """Put the database in WAL mode (readers never block the daemon's writes). Only
    when it is not already: switching needs a lock that SQLite does not wait for (no
    busy handler), so a reader opening the store while the daemon creates it got
    "database is locked" at once (a CI run of the daemon tests did). Retried briefly."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            mode = db.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` on the shared connection, rolled back on any
    exception."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
