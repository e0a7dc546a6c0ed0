"""The sink's commands and Slurm's answers to them: what an answer means for a write
(``classify``), which jobs a write names, and the GPU request fields of an ``squeue -O``
read. Pure functions over argument lists and ``CommandResult``s.
"""

from __future__ import annotations

import re
from collections import defaultdict

from slurm_marl.slurm_integration.text import gres as G
from slurm_marl.slurm_integration.ports import WriteStatus
from slurm_marl.slurm_integration.runner import CommandResult, looks_unavailable


def classify(res: CommandResult) -> WriteStatus:
    if res.ok:
        return WriteStatus.OK
    msg = res.message.lower()
    if looks_unavailable(msg):
        return WriteStatus.UNAVAILABLE
    if ("invalid job id" in msg or "job has already finished" in msg
            or "reservation not found" in msg or "invalid reservation" in msg
            or "requested reservation is invalid" in msg):
        return WriteStatus.VANISHED
    return WriteStatus.REFUSED


def jobs_written(args: list[str]) -> list[int]:
    """The jobs a write names: ``jobid=a,b,c`` of an update, the ids of a requeue."""
    ids: list[int] = []
    for arg in args[2:]:
        if arg.lower().startswith("jobid="):
            ids += [int(x) for x in arg.split("=", 1)[1].split(",") if x.strip().isdigit()]
        elif args[1] == "requeue" and arg.isdigit():
            ids.append(int(arg))
    return ids


def moves_eligible_time_only(args: list[str]) -> bool:
    """Whether a write is ``scontrol update jobid=... StartTime=now[+N]`` and nothing else
    (a lease renewal, a release): all it changes is the jobs' eligible time, which the
    source's text listing shows, so the jobs need not be read again."""
    return (len(args) == 4 and args[:2] == ["scontrol", "update"]
            and args[2].lower().startswith("jobid=")
            and re.fullmatch(r"StartTime=now(\+\d+)?", args[3]) is not None)


def request_rows(res: CommandResult | None, job_ids: list[int]) -> dict[int, dict | None]:
    """Each job's GPU request fields from an ``squeue -h -O JobID|tres-per-node|tres-per-job``
    answer; None for a job whose row is missing, repeated or odd, all None for a failed
    read."""
    out: dict[int, dict | None] = dict.fromkeys(job_ids)
    if res is None or not res.ok:
        return out
    rows: dict[str, list[list[str]]] = defaultdict(list)
    for ln in res.stdout.splitlines():
        r = ln.split("|")
        if ln.strip() and len(r) >= 3:
            rows[r[0].strip()].append(r)
    for job_id in job_ids:
        found = rows.get(str(job_id), [])
        if len(found) != 1:
            continue
        values = [v.strip() for v in found[0][1:3]]
        values = ["" if v in ("N/A", "(null)") else v for v in values]
        per_node, bad1 = G.parse_gpu_request(values[0])
        per_job, bad2 = G.parse_gpu_request(values[1])
        if bad1 or bad2:
            continue
        live = tuple(r for r in per_node + per_job if r.count)
        out[job_id] = {"gpus_per_node": G.total_gpus(per_node),
                       "gpus_per_job": G.total_gpus(per_job), "gpu_type": G.single_type(live)}
    return out
