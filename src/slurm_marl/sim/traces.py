"""Trace loaders: Philly, the Tiresias format, and a documented generic CSV.

Every loader returns ``TraceJob`` values sorted by submit time (ties: trace order), with
submit times in seconds from the first job of the window. Bad rows are errors that name the
file and line: every bad row of a file is collected and one error gives their count and the
first five; ``skip_bad_rows=True`` (``--skip-bad-rows``) skips them with a warning instead.
Window keys ``vc=``, ``from=`` and ``to=`` apply to Philly traces only (an error elsewhere);
``rows=`` applies to every format.

Generic CSV (header required; order of columns free):

=================  ========  ==============================================================
column             required  meaning
=================  ========  ==============================================================
submit_time_s      yes       submit time, seconds (any origin; shifted to start at 0)
duration_s         yes       run time alone on its GPUs, seconds (> 0)
num_gpus           yes       total GPUs (>= 1)
job_id             no        integer id (default: row number)
model_type         no        model name (default: drawn from the Gavel mix with the seed)
gpus_per_node      no        fixed GPUs per node (then num_gpus must be a multiple)
partition          no        partition name (default: the cluster's first)
user               no        user name
gpu_fraction       no        share of one GPU, in (0, 1] (fractions < 1: 1-GPU jobs only;
                             needs a cluster with ``share=K``, see ``sim.jobs``)
=================  ========  ==============================================================
"""

from __future__ import annotations

import csv
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

log = logging.getLogger(__name__)
SHOWN_BAD_ROWS = 5


class TraceError(ValueError):
    pass


class BadRowsError(TraceError):
    """Bad rows of one trace file: ``errors`` holds every row's message (file:line: why)."""

    def __init__(self, path: Path, errors: list[str]) -> None:
        self.path, self.errors = path, errors
        super().__init__(f"{path}: {_count_and_first(errors)} (--skip-bad-rows or "
                         f"skip_bad_rows=True skips them)")


def _count_and_first(errors: list[str]) -> str:
    n = len(errors)
    first = f", first {SHOWN_BAD_ROWS}" if n > SHOWN_BAD_ROWS else ""
    return f"{n} bad row{'s' if n != 1 else ''}{first}: " + "; ".join(errors[:SHOWN_BAD_ROWS])


@dataclass(frozen=True)
class TraceJob:
    job_id: int
    submit_time_s: float
    duration_s: float
    num_gpus: int
    model_type: str | None = None
    gpus_per_node: int = 0
    partition: str = ""
    user: str = ""
    gpu_fraction: float | None = None    # share of one GPU (generic traces); None: whole


@dataclass(frozen=True)
class Window:
    """Which part of a trace: a Philly virtual cluster, a row range of it, a time range."""

    cluster: str | None = None
    first_row: int = 0
    rows: int | None = None
    start: datetime | None = None
    end: datetime | None = None

    @classmethod
    def parse(cls, text: str | None) -> "Window":
        """``vc=6c71a0,rows=1000:2000,from=2017-10-01,to=2017-10-08`` (all optional)."""
        if not text:
            return cls()
        kwargs: dict = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition("=")
            if not sep:
                raise TraceError(f"window {text!r}: {part!r} needs key=value "
                                 f"(vc=, rows=A:B, from=, to=)")
            if key in ("vc", "cluster"):
                kwargs["cluster"] = value
            elif key == "rows":
                a, colon, b = value.partition(":")
                try:
                    first = int(a) if a else 0
                    last = int(b) if b else None
                except ValueError:
                    raise TraceError(f"window {text!r}: rows must be A:B integers") from None
                if not colon:
                    first, last = 0, first
                if first < 0 or (last is not None and last < first):
                    raise TraceError(f"window {text!r}: bad row range {value!r}")
                kwargs["first_row"] = first
                kwargs["rows"] = None if last is None else last - first
            elif key in ("from", "to"):
                try:
                    stamp = datetime.fromisoformat(value).replace(tzinfo=timezone.utc)
                except ValueError:
                    raise TraceError(f"window {text!r}: {key}={value!r} is not an ISO "
                                     f"date/time") from None
                kwargs["start" if key == "from" else "end"] = stamp
            else:
                raise TraceError(f"window {text!r}: unknown key {key!r} "
                                 f"(vc, rows, from, to)")
        return cls(**kwargs)


def _number(path: Path, line: int, column: str, value, kind=float, minimum=None,
            positive: bool = False):
    try:
        out = kind(float(value)) if kind is int else kind(value)
    except (TypeError, ValueError):
        raise TraceError(f"{path}:{line}: {column}={value!r} is not a number") from None
    if kind is int and float(value) != int(float(value)):
        raise TraceError(f"{path}:{line}: {column}={value!r} must be an integer")
    if isinstance(out, float) and not math.isfinite(out):
        raise TraceError(f"{path}:{line}: {column}={value!r} is not finite")
    if minimum is not None and out < minimum:
        raise TraceError(f"{path}:{line}: {column}={value!r} must be >= {minimum}")
    if positive and out <= 0:
        raise TraceError(f"{path}:{line}: {column}={value!r} must be > 0")
    return out


class _Rows:
    """Collects the bad rows of one file; ``check`` raises or skips them at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.errors: list[tuple[int, str]] = []   # (line, "file:line: why")

    def add(self, line: int, error: TraceError | str) -> None:
        self.errors.append((line, str(error)))

    def check(self, skip: bool, on_skip: Callable[[str], None] | None) -> None:
        if not self.errors:
            return
        errors = [message for _, message in sorted(self.errors, key=lambda e: e[0])]
        if not skip:
            raise BadRowsError(self.path, errors)
        (on_skip or log.warning)(f"{self.path}: skipped {_count_and_first(errors)}")


def _open_csv(path: Path, required: set[str]):
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc}") from None
    reader = csv.DictReader(fh)
    fields = set(reader.fieldnames or [])
    missing = required - fields
    if missing:
        fh.close()
        raise TraceError(f"{path}:1: missing column(s) {sorted(missing)}; header has "
                         f"{sorted(fields)}")
    return fh, reader


def detect_format(path: Path) -> str:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), [])
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc}") from None
    cols = set(header)
    if {"timestamp", "duration", "num_gpus", "cluster"} <= cols:
        return "philly"
    if {"job_id", "num_gpu", "submit_time", "duration"} <= cols:
        return "tiresias"
    if {"submit_time_s", "duration_s", "num_gpus"} <= cols:
        return "generic"
    raise TraceError(f"{path}:1: unknown trace format (header {header}); expected Philly "
                     f"(timestamp,duration,num_gpus,cluster), Tiresias "
                     f"(job_id,num_gpu,submit_time,duration) or generic "
                     f"(submit_time_s,duration_s,num_gpus)")


def load_trace(path: str | Path, window: Window | str | None = None,
               fmt: str | None = None, *, skip_bad_rows: bool = False,
               on_skip: Callable[[str], None] | None = None) -> list[TraceJob]:
    """Load a trace's window. Bad rows are one error (count and the first five) unless
    ``skip_bad_rows``: then they are left out and ``on_skip`` (default: a logged warning)
    gets one line naming their count and the first five."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist")
    win = window if isinstance(window, Window) else Window.parse(window)
    fmt = fmt or detect_format(path)
    if fmt not in ("philly", "tiresias", "generic"):
        raise TraceError(f"unknown trace format {fmt!r} (philly, tiresias, generic)")
    if fmt != "philly":
        philly_only = [key for key, value in (("vc", win.cluster), ("from", win.start),
                                              ("to", win.end)) if value is not None]
        if philly_only:
            raise TraceError(f"window key {philly_only[0]}= applies to Philly traces only; "
                             f"{path} is a {fmt} trace (rows=A:B works for every format)")
    if fmt == "philly":
        return load_philly(path, win, skip_bad_rows=skip_bad_rows, on_skip=on_skip)
    loader = load_tiresias if fmt == "tiresias" else load_generic
    return _apply_rows(loader(path, skip_bad_rows=skip_bad_rows, on_skip=on_skip), win)


def _apply_rows(jobs: list[TraceJob], win: Window) -> list[TraceJob]:
    end = None if win.rows is None else win.first_row + win.rows
    jobs = jobs[win.first_row:end]
    return _rebase(jobs)


def _rebase(jobs: list[TraceJob]) -> list[TraceJob]:
    if not jobs:
        return jobs
    t0 = jobs[0].submit_time_s
    return [replace(j, submit_time_s=j.submit_time_s - t0) for j in jobs]


def load_philly(path: Path, win: Window, *, skip_bad_rows: bool = False,
                on_skip: Callable[[str], None] | None = None) -> list[TraceJob]:
    """Philly (Pollux preprocessing): one virtual cluster's jobs, sorted by submit time,
    then rows [first_row, first_row + rows) of that cluster and/or a time range (bad rows
    of other virtual clusters are not looked at)."""
    fh, reader = _open_csv(path, {"timestamp", "duration", "num_gpus", "cluster"})
    rows = []
    bad = _Rows(path)
    with fh:
        for row in reader:
            if win.cluster is not None and row["cluster"] != win.cluster:
                continue
            line = reader.line_num
            try:
                try:
                    stamp = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S") \
                        .replace(tzinfo=timezone.utc)
                except (TypeError, ValueError):
                    raise TraceError(f"{path}:{line}: timestamp={row['timestamp']!r} is not "
                                     f"YYYY-MM-DD HH:MM:SS") from None
                if (win.start and stamp < win.start) or (win.end and stamp >= win.end):
                    continue
                duration = _number(path, line, "duration", row["duration"], float, 0)
                gpus = _number(path, line, "num_gpus", row["num_gpus"], int, 1)
            except TraceError as exc:
                bad.add(line, exc)
                continue
            rows.append((stamp.timestamp(), line, duration, gpus, row["cluster"]))
    bad.check(skip_bad_rows, on_skip)
    if win.cluster is not None and not rows:
        raise TraceError(f"{path}: no jobs for virtual cluster {win.cluster!r} in that window")
    rows = philly_window_rows(rows, win)
    jobs = [TraceJob(job_id=i, submit_time_s=t, duration_s=max(1.0, d), num_gpus=g,
                     partition="", user=vc)
            for i, (t, _, d, g, vc) in enumerate(rows)]
    return _rebase(jobs)


def philly_window_rows(rows: list, win: Window) -> list:
    """A Philly window's rows, each starting (submit time in Unix seconds, file line):
    those submitted in [from, to), by time then line, then rows [first_row, first_row +
    rows). The one definition of a Philly window (the simulator's predictor finds a
    window's start with it too)."""
    lo = win.start.timestamp() if win.start else -math.inf
    hi = win.end.timestamp() if win.end else math.inf
    kept = sorted((r for r in rows if lo <= r[0] < hi), key=lambda r: (r[0], r[1]))
    end = None if win.rows is None else win.first_row + win.rows
    return kept[win.first_row:end]


def load_tiresias(path: Path, *, skip_bad_rows: bool = False,
                  on_skip: Callable[[str], None] | None = None) -> list[TraceJob]:
    fh, reader = _open_csv(path, {"job_id", "num_gpu", "submit_time", "duration"})
    jobs = []
    bad = _Rows(path)
    with fh:
        for row in reader:
            line = reader.line_num
            try:
                job = TraceJob(
                    job_id=_number(path, line, "job_id", row["job_id"], int, 0),
                    submit_time_s=_number(path, line, "submit_time", row["submit_time"],
                                          float, 0),
                    duration_s=_number(path, line, "duration", row["duration"], float, 0),
                    num_gpus=_number(path, line, "num_gpu", row["num_gpu"], int, 1),
                    model_type=(row.get("model_name") or None))
            except TraceError as exc:
                bad.add(line, exc)
                continue
            jobs.append((job.submit_time_s, line, job))
    return _finish(path, jobs, bad, skip_bad_rows, on_skip)


def load_generic(path: Path, *, skip_bad_rows: bool = False,
                 on_skip: Callable[[str], None] | None = None) -> list[TraceJob]:
    fh, reader = _open_csv(path, {"submit_time_s", "duration_s", "num_gpus"})
    jobs = []
    bad = _Rows(path)
    with fh:
        for i, row in enumerate(reader):
            line = reader.line_num
            try:
                jobs.append(_generic_row(path, line, i, row))
            except TraceError as exc:
                bad.add(line, exc)
    return _finish(path, jobs, bad, skip_bad_rows, on_skip)


def _generic_row(path: Path, line: int, i: int, row: dict) -> tuple[float, int, TraceJob]:
    gpus = _number(path, line, "num_gpus", row["num_gpus"], int, 1)
    per_node = 0
    if row.get("gpus_per_node"):
        per_node = _number(path, line, "gpus_per_node", row["gpus_per_node"], int, 1)
        if gpus % per_node:
            raise TraceError(f"{path}:{line}: num_gpus={gpus} is not a multiple of "
                             f"gpus_per_node={per_node}")
    partition = row.get("partition") or ""
    if partition and not re.match(r"^[A-Za-z][A-Za-z0-9_-]*$", partition):
        raise TraceError(f"{path}:{line}: partition={partition!r} is not a name")
    job_id = (_number(path, line, "job_id", row["job_id"], int, 0)
              if row.get("job_id") else i)
    submit = _number(path, line, "submit_time_s", row["submit_time_s"], float)
    duration = _number(path, line, "duration_s", row["duration_s"], float, 0, positive=True)
    fraction = None
    if row.get("gpu_fraction"):
        fraction = _number(path, line, "gpu_fraction", row["gpu_fraction"], float)
        if not 0 < fraction <= 1:
            raise TraceError(f"{path}:{line}: gpu_fraction={row['gpu_fraction']!r} must be "
                             f"in (0, 1]")
        if fraction < 1 and gpus != 1:
            raise TraceError(f"{path}:{line}: gpu_fraction={row['gpu_fraction']!r} with "
                             f"num_gpus={gpus}: fractions are for 1-GPU jobs only")
    return submit, line, TraceJob(
        job_id=job_id, submit_time_s=submit, duration_s=duration, num_gpus=gpus,
        model_type=row.get("model_type") or None, gpus_per_node=per_node,
        partition=partition, user=row.get("user") or "", gpu_fraction=fraction)


def _finish(path: Path, jobs: list[tuple[float, int, TraceJob]], bad: _Rows,
            skip_bad_rows: bool, on_skip: Callable[[str], None] | None) -> list[TraceJob]:
    """Repeated job ids are bad rows too (the later row); then sort by submit time."""
    first_line: dict[int, int] = {}
    kept = []
    for submit, line, job in jobs:
        if job.job_id in first_line:
            bad.add(line, f"{path}:{line}: job_id {job.job_id} appears twice (first at line "
                          f"{first_line[job.job_id]})")
            continue
        first_line[job.job_id] = line
        kept.append((submit, line, job))
    bad.check(skip_bad_rows, on_skip)
    kept.sort(key=lambda t: (t[0], t[1]))
    return [j for _, _, j in kept]


def write_generic(path: Path, jobs: list[TraceJob]) -> None:
    """Write jobs in the generic format (used to cut small test slices)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "submit_time_s", "duration_s", "num_gpus", "model_type",
                    "gpus_per_node", "partition", "user", "gpu_fraction"])
        for j in jobs:
            w.writerow([j.job_id, j.submit_time_s, j.duration_s, j.num_gpus,
                        j.model_type or "", j.gpus_per_node or "", j.partition, j.user,
                        "" if j.gpu_fraction is None else j.gpu_fraction])
