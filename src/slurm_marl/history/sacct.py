"""``sacct`` output -> ``HistoryJob``: the JSON of Slurm 22.05 (openapi dbv0.0.38) and of
24.11+ (data_parser v0.0.4x: states as lists, numbers as {set, infinite, number}), and the
``sacct -P`` text of the columns in ``TEXT_FIELDS``.

Nothing is dropped silently. Every row ends in one of: a job (``jobs``), a skip with a
reason counted in ``skipped`` (still pending or running, no GPUs, job steps), or a bad row
named in ``bad`` (what could not be read, with the job id or line).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from slurm_marl.history.records import HistoryJob
from slurm_marl.slurm_integration.text import parse_time_limit_s, parse_tres

# The text columns read (``sacct -a -X -P -n --format=`` + these, joined with commas).
TEXT_FIELDS = ("JobID", "JobName", "User", "Account", "Partition", "QOS", "AllocTRES",
               "ReqTRES", "Timelimit", "Submit", "Start", "End", "State", "NNodes")


@dataclass
class Import:
    """What one import read: jobs kept, skips by reason, bad rows by name."""

    jobs: list[HistoryJob] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.jobs) + sum(self.skipped.values()) + len(self.bad)

    def summary(self) -> dict:
        return {"rows": self.rows, "jobs": len(self.jobs), "skipped": dict(self.skipped),
                "bad_rows": len(self.bad), "bad_first": self.bad[:5]}


def num(value) -> float | None:
    """A number of sacct's JSON: plain in 22.05, {set, infinite, number} from 23.x on."""
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    raise ValueError(f"{value!r} is not a number")


def base_state(value) -> str:
    """``COMPLETED`` from 22.05's word, 24.11's list (``["CANCELLED", ...]``) or the text
    form (``CANCELLED by 0``)."""
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").split()[0].upper() if str(value or "").strip() else ""


def _gpus_json(tres: dict | None, key: str) -> int | None:
    for item in (tres or {}).get(key) or []:
        if item.get("type") == "gres" and str(item.get("name") or "").split(":")[0] == "gpu":
            count = num(item.get("count"))
            return int(count) if count is not None else None
    return None


def _job_id_json(raw: dict) -> str:
    jid = int(num(raw.get("job_id")) or 0)
    array = raw.get("array") or {}
    array_id = int(num(array.get("job_id")) or 0)
    task = array.get("task_id")
    task_num = num(task) if not isinstance(task, str) else None
    if array_id and task_num is not None:
        return f"{array_id}_{int(task_num)}"
    return str(jid)


def from_json(data: dict) -> Import:
    """Jobs of ``sacct --json`` (any supported version)."""
    out = Import()
    raws = data.get("jobs")
    if not isinstance(raws, list):
        raise ValueError("sacct --json output has no 'jobs' list")
    for raw in raws:
        _keep(out, _job_json, raw, lambda r: f"job {r.get('job_id')!r}" if isinstance(r, dict)
              else f"entry {str(r)[:40]!r}")
    return out


def _job_json(raw: dict) -> HistoryJob | str:
    t = raw.get("time") or {}
    state = base_state((raw.get("state") or {}).get("current"))
    gpus = _gpus_json(raw.get("tres"), "allocated")
    if not gpus:
        gpus = _gpus_json(raw.get("tres"), "requested") or 0
    submit = num(t.get("submission"))
    if submit is None:
        raise ValueError("no submission time")
    limit_min = num(t.get("limit"))
    start, end = num(t.get("start")), num(t.get("end"))
    assoc = raw.get("association") or {}
    return _checked(HistoryJob(
        job_id=_job_id_json(raw), name=str(raw.get("name") or ""),
        user=str(raw.get("user") or assoc.get("user") or ""),
        account=str(raw.get("account") or assoc.get("account") or ""),
        partition=str(raw.get("partition") or ""),
        qos=str(raw.get("qos") or ""), gpus=int(gpus),
        nodes=int(num(raw.get("allocation_nodes")) or 1),
        time_limit_s=None if limit_min is None else limit_min * 60.0,
        submit_s=submit, start_s=start or None, end_s=end or None, state=state))


def _checked(job: HistoryJob) -> HistoryJob | str:
    """The job, or why it is not history (yet): a skip reason."""
    if job.state in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "RESIZING") \
            or job.end_s is None:
        return "not ended"
    if job.start_s is None:
        return "never started"
    if job.gpus <= 0:
        return "no GPUs"
    if job.end_s < job.start_s or job.start_s < job.submit_s - 1:
        raise ValueError(f"times out of order (submit {job.submit_s:.0f}, start "
                         f"{job.start_s:.0f}, end {job.end_s:.0f})")
    return job


def _keep(out: Import, convert, raw, name) -> None:
    try:
        got = convert(raw)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        out.bad.append(f"{name(raw)}: {exc}")
        return
    if isinstance(got, str):
        out.skipped[got] += 1
    else:
        out.jobs.append(got)


# ---------------------------------------------------------------------------------------
# sacct -P text


def parse_when(text: str) -> float | None:
    """A time column: Unix seconds (``SLURM_TIME_FORMAT=%s``, what the importer asks for) or
    ISO local time (sacct's default); Unknown/None/empty -> None."""
    t = text.strip()
    if t in ("", "Unknown", "None", "N/A"):
        return None
    if t.isdigit():
        return float(t)
    try:
        return datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise ValueError(f"time {text!r} is neither Unix seconds nor ISO") from None


def from_text(lines: Iterable[str], header: bool | None = None) -> Import:
    """Jobs of ``sacct -P`` text with the columns ``TEXT_FIELDS`` (a header line, if there
    is one, may name them in another order)."""
    out = Import()
    columns = list(TEXT_FIELDS)
    for n, line in _numbered(lines):
        cells = line.rstrip("\n").split("|")
        if n == 1 and header is not False and "JobID" in cells:
            missing = set(TEXT_FIELDS) - set(cells)
            if missing:
                raise ValueError(f"sacct text lacks columns {', '.join(sorted(missing))} "
                                 f"(export with --format={','.join(TEXT_FIELDS)})")
            columns = cells
            continue
        if len(cells) != len(columns):
            out.bad.append(f"line {n}: {len(cells)} columns, expected {len(columns)}")
            continue
        row = dict(zip(columns, cells))
        if "." in row["JobID"]:  # a job step (batch, extern, 0): the allocation line counts
            out.skipped["job step"] += 1
            continue
        _keep(out, _job_text, row, lambda r, n=n: f"line {n} (job {r['JobID']})")
    return out


def _numbered(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(lines, 1):
        if line.strip():
            yield n, line


def _job_text(row: dict) -> HistoryJob | str:
    gpus = _gpus_text(row["AllocTRES"]) or _gpus_text(row["ReqTRES"])
    limit = row["Timelimit"].strip()
    submit = parse_when(row["Submit"])
    if submit is None:
        raise ValueError("no submit time")
    return _checked(HistoryJob(
        job_id=row["JobID"].strip(), name=row["JobName"], user=row["User"],
        account=row["Account"], partition=row["Partition"], qos=row["QOS"], gpus=gpus,
        nodes=int(row["NNodes"] or 1),
        time_limit_s=(None if limit in ("Partition_Limit", "") else parse_time_limit_s(limit)),
        submit_s=submit, start_s=parse_when(row["Start"]), end_s=parse_when(row["End"]),
        state=base_state(row["State"])))


def _gpus_text(tres: str) -> int:
    """GPUs of a TRES list (``cpu=1,gres/gpu=2,mem=1000M``); 0 without a count."""
    count = dict(parse_tres(tres)).get("gres/gpu", "")
    return int(count) if count.isdigit() else 0
