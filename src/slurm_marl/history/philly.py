"""The Philly trace as a history, for measuring the predictor where no site history is
at hand. Philly has no users, names, partitions, QOS or time limits: a job's virtual
cluster stands as its account. It has no start times either: a job counts as ended at
submit + duration, the earliest it can have ended (an assumption, stated wherever these
numbers are reported: real queueing only makes outcomes known later)."""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

from slurm_marl.history.records import HistoryError, HistoryJob


def philly_history(path: str | Path, vc: str | None = None) -> list[HistoryJob]:
    path = Path(path)
    jobs = []
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        reader = csv.DictReader(fh)
        for row in reader:
            if vc is not None and row.get("cluster") != vc:
                continue
            try:
                submit = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S") \
                    .replace(tzinfo=timezone.utc).timestamp()
                duration = max(1.0, float(row["duration"]))
                gpus = int(row["num_gpus"])
            except (KeyError, TypeError, ValueError) as exc:
                raise HistoryError(f"{path}:{reader.line_num}: not a Philly row ({exc})") \
                    from None
            jobs.append(HistoryJob(
                job_id=str(reader.line_num), name="", user=row["cluster"], account=row["cluster"],
                partition="", qos="", gpus=gpus, nodes=1, time_limit_s=None,
                submit_s=submit, start_s=submit, end_s=submit + duration,
                state="COMPLETED"))
    return jobs
