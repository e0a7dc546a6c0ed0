"""A site's finished jobs, as accounting knows them: the history the ordering learns from.

``HistoryJob`` holds what ``sacct`` tells of one job allocation: who submitted it (user,
account), what it was called, where it asked to run (partition, QOS), what it asked for
(GPUs, nodes, time limit) and what happened (submit, start, end, state). Times are Unix
seconds. The history file is a CSV with one column per field (``write_history`` /
``read_history``), so a site can look at it, cut it and re-import it.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, fields
from pathlib import Path


class HistoryError(ValueError):
    """A history that cannot be read (one line: the file, the row, why)."""


class ModelError(ValueError):
    """A predictor model folder that cannot be read (one line: which file, why). Here, not
    in ``predictor``, so callers can catch it without importing LightGBM."""


@dataclass(frozen=True)
class HistoryJob:
    job_id: str                  # "123", or "123_4" for an array task
    name: str
    user: str
    account: str
    partition: str
    qos: str
    gpus: int                    # GPUs allocated (requested, if it never got any)
    nodes: int
    time_limit_s: float | None   # None: no limit
    submit_s: float
    start_s: float | None        # None: never started
    end_s: float | None          # None: not ended
    state: str                   # base state word (COMPLETED, FAILED, CANCELLED, ...)

    @property
    def ran_s(self) -> float:
        if self.start_s is None or self.end_s is None:
            return 0.0
        return max(0.0, self.end_s - self.start_s)

    @property
    def gpu_time_s(self) -> float:
        """GPU-seconds received: what the ordering ranks by."""
        return self.gpus * self.ran_s


FIELDS = [f.name for f in fields(HistoryJob)]
_FLOATS = {"time_limit_s", "submit_s", "start_s", "end_s"}
_INTS = {"gpus", "nodes"}


def write_history(path: str | Path, jobs: list[HistoryJob]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(FIELDS)
        for j in jobs:
            w.writerow(["" if getattr(j, k) is None else getattr(j, k) for k in FIELDS])


def read_history(path: str | Path) -> list[HistoryJob]:
    """Jobs of a history CSV; a bad row is a ``HistoryError`` naming the file and line."""
    path = Path(path)
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read ({exc.strerror})") from None
    jobs = []
    with fh:
        reader = csv.DictReader(fh)
        missing = set(FIELDS) - set(reader.fieldnames or ())
        if missing:
            raise HistoryError(f"{path}: not a history file (missing columns: "
                               f"{', '.join(sorted(missing))})")
        for row in reader:
            try:
                jobs.append(_row(row))
            except ValueError as exc:
                raise HistoryError(f"{path}:{reader.line_num}: {exc}") from None
    return jobs


def _row(row: dict) -> HistoryJob:
    values: dict = {}
    for k in FIELDS:
        text = (row.get(k) or "").strip()
        if k in _FLOATS:
            if not text:
                if k == "submit_s":
                    raise ValueError("submit_s is empty")
                values[k] = None
                continue
            v = float(text)
            if not math.isfinite(v):
                raise ValueError(f"{k}={text!r} is not a finite number")
            values[k] = v
        elif k in _INTS:
            v = int(text)
            if v < 0:
                raise ValueError(f"{k}={text!r} is negative")
            values[k] = v
        else:
            values[k] = text
    return HistoryJob(**values)
