"""One job of ``scontrol show job -d -o N`` (Slurm 22.05) as the record ``squeue --json``
gives for it, for ``job_from_json``: how 22.05, whose ``squeue --json`` ignores every job
filter, reads a few changed jobs without listing them all (``source.py``).

The one-line form is ``Key=value`` pairs separated by spaces, and some values are free text
that may hold spaces and ``Key=``-like words of their own (a job name, a comment, a working
directory, output paths: a user chooses them). So the line is cut only where a key this
reader knows starts, and the cut is trusted only if it cannot have been forged:

- the keys come in Slurm's own order (``ORDER``), each once (the detail keys of an
  allocation, ``Nodes``/``CPU_IDs``/``Mem``/``GRES``, once per group, right after
  ``JOB_GRES``). A free-text value
  that holds ``" Priority=..."`` makes ``Priority`` appear twice; one that holds a key
  Slurm prints elsewhere puts it out of order;
- a value that is not free text holds no space (a key this reader does not know, glued to
  the value before it, would);
- ``JobName`` ends at ``UserId``, which Slurm always prints next: a name cannot fake a
  key that is always present without a duplicate.

What a free-text value could still forge is a key Slurm prints only sometimes, right after
that value and in its place: ``AdminComment`` and ``Comment`` after the working directory.
They are returned as read; the caller accepts them only where they equal what it already
knows (``source.py``), so a forged marker never reaches the agent. Anything else unusual
is ``JobTextError``: the caller reads all jobs as JSON instead.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime

from slurm_marl.slurm_integration.text import (SlurmTextError, expand_host_field, memory_mib,
                                   parse_time_limit_s)


class JobTextError(ValueError):
    """The line cannot be read with certainty (read the job another way)."""


# Slurm 22.05's order of the one-line form (src/api/job_info.c), optional keys included;
# keys after the last one listed here are not read.
ORDER = (
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset",
    "HetJobIdSet", "JobName", "UserId", "GroupId", "MCS_label", "Priority", "Nice",
    "Account", "QOS", "WCKey", "JobState", "Reason", "FailedNode", "Dependency", "Requeue",
    "Restarts", "BatchFlag", "Reboot", "ExitCode", "DerivedExitCode", "RunTime",
    "TimeLimit", "TimeMin", "SubmitTime", "EligibleTime", "AccrueTime", "StartTime",
    "EndTime", "Deadline", "PreemptEligibleTime", "PreemptTime", "SuspendTime",
    "SecsPreSuspend", "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid",
    "ReqNodeList", "ExcNodeList", "NodeList", "BatchHost", "SchedNodeList", "NumNodes",
    "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES", "Socks/Node",
    "NtasksPerN:B:S:C", "CoreSpec", "ThreadSpec", "JOB_GRES", "Nodes", "CPU_IDs", "Mem",
    "GRES", "MinCPUsNode", "MinMemoryCPU", "MinMemoryNode", "MinTmpDiskNode", "Features",
    "DelayBoot", "Reservation", "OverSubscribe", "Contiguous", "Licenses", "Network",
    "Command", "WorkDir", "AdminComment", "Comment", "StdErr", "StdIn", "StdOut", "Power",
    "CpusPerTres", "MemPerTres", "TresBind", "TresFreq", "TresPerJob", "TresPerNode",
    "TresPerSocket", "TresPerTask",
)
_RANK = {k: i for i, k in enumerate(ORDER)}
DETAIL = ("Nodes", "CPU_IDs", "Mem", "GRES")
FREE_TEXT = {"JobName", "Command", "WorkDir", "AdminComment", "Comment", "StdErr", "StdIn",
             "StdOut", "Dependency", "Reason", "Features", "Licenses", "Network"}
_KEY = re.compile(r"(?:^| )(" + "|".join(re.escape(k) for k in
                                         sorted(ORDER, key=len, reverse=True)) + r")=")
_NULL = {"(null)", "None", "N/A", "Unknown", ""}
# Slurm's end time of a running job without a time limit: a year after its start
INFINITE_END_S = 365 * 86400


def _pairs(line: str) -> list[tuple[str, str]]:
    """(key, value) in the order printed, cut where known keys start; the last key's
    value runs to the end of the line (trailing spaces dropped)."""
    line = line.rstrip("\n").rstrip(" ")
    marks = [(m.start(1), m.end(), m.group(1)) for m in _KEY.finditer(line)]
    if not marks or marks[0][2] != "JobId" or marks[0][0] != 0:
        raise JobTextError("not a job line of scontrol show job -o")
    out = []
    for i, (_, value_at, key) in enumerate(marks):
        end = marks[i + 1][0] - 1 if i + 1 < len(marks) else len(line)
        out.append((key, line[value_at:end]))
    return out


def _fields(line: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The line's keys (checked as the module docstring says) and its allocation groups."""
    fields: dict[str, str] = {}
    groups: list[dict[str, str]] = []
    last = -1
    for key, value in _pairs(line):
        if key in DETAIL:
            if last != _RANK["JOB_GRES"]:     # groups follow JOB_GRES, nothing else
                raise JobTextError(f"{key} out of Slurm's order")
            if key == "Nodes":
                groups.append({})
            elif not groups or key in groups[-1]:
                raise JobTextError(f"{key} outside an allocation group")
            value = value.rstrip(" ")
            groups[-1][key] = value
            if " " in value:
                raise JobTextError(f"{key} holds a space")
            continue
        rank = _RANK[key]
        if key in fields:
            raise JobTextError(f"{key} twice")
        if rank < last:
            raise JobTextError(f"{key} out of Slurm's order")
        last = rank
        if key not in FREE_TEXT:
            value = value.rstrip(" ")   # the one-line form joins lines with spaces
        if key not in FREE_TEXT and " " in value:
            raise JobTextError(f"{key} holds a space")
        if key in ("AdminComment", "Comment") and value.endswith(" "):
            value = value[:-1]      # printed on a line of its own: one more space
        fields[key] = value
    if "UserId" not in fields or "JobName" not in fields:
        raise JobTextError("no JobName or UserId")
    return fields, groups


def local_epoch(text: str) -> int:
    """Slurm's local time (``2026-11-27T17:21:14``) as seconds since the epoch; 0 for
    Unknown/None. A wall time that names no instant or two (the hour a daylight-saving
    change skips or repeats) is JobTextError: the JSON's epoch is exact."""
    if text in _NULL:
        return 0
    try:
        parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError as exc:
        raise JobTextError(f"time {text!r}") from exc
    epoch = int(time.mktime(parsed.timetuple()))
    if datetime.fromtimestamp(epoch) != parsed or any(
            datetime.fromtimestamp(epoch + d) == parsed for d in (-3600, 3600)):
        raise JobTextError(f"time {text!r}: not one instant in this time zone")
    return epoch


def _minutes(text: str) -> int | None:
    """A time limit in whole minutes (``text.parse_time_limit_s``, seconds rounded
    up), as squeue's JSON has it; None without a limit."""
    if text == "Partition_Limit" or text in _NULL:
        return None
    try:
        seconds = parse_time_limit_s(text)
    except ValueError as exc:
        raise JobTextError(f"time limit {text!r}") from exc
    return None if seconds is None else math.ceil(seconds / 60)


def _mib(text: str) -> int:
    """A memory size in MiB (``text.memory_mib``); a rounded one (``15.62G``) is not
    the exact value JSON has, so it is not certain."""
    mib = None if "." in text else memory_mib(text)
    if mib is None:
        raise JobTextError(f"memory {text!r}")
    return mib


def _int(text: str, what: str, default: int | None = 0) -> int | None:
    head = text.split("-", 1)[0].split("(", 1)[0]
    if head in _NULL:
        return default
    try:
        return int(head)
    except ValueError as exc:
        raise JobTextError(f"{what} {text!r}") from exc


def _signed(text: str) -> int:
    """A signed integer field (``Nice=-100``); 0 where empty or unreadable."""
    try:
        return int(text)
    except ValueError:
        return 0


def _text(value: str | None) -> str:
    return "" if value is None or value == "(null)" else value


def job_raw_from_scontrol(line: str) -> dict:
    """The ``squeue --json`` job record (22.05's keys, those ``job_from_json`` reads) of
    one line of ``scontrol show job -d -o``; ``JobTextError`` where the line is not
    certain (module docstring)."""
    f, groups = _fields(line)
    job_id = _int(f["JobId"], "JobId", None)
    if job_id is None:
        raise JobTextError("no job id")
    state = f.get("JobState", "")
    nodes_text = _text(f.get("NodeList"))
    try:
        nodes = expand_host_field(nodes_text) if nodes_text else ()
        by_node: dict[str, str] = {}
        for g in groups:
            for n in expand_host_field(g.get("Nodes", "")):
                by_node[n] = g.get("GRES", "")
    except SlurmTextError as exc:
        raise JobTextError(str(exc)) from exc
    user = f["UserId"]
    user_name = user.split("(", 1)[0] if "(" in user else user
    start = local_epoch(f.get("StartTime", ""))
    end = local_epoch(f.get("EndTime", ""))
    limit = _minutes(f.get("TimeLimit", ""))
    if state in ("RUNNING", "SUSPENDED", "COMPLETING") and not end and start and limit is None:
        end = start + INFINITE_END_S
    mem_cpu = f.get("MinMemoryCPU")
    mem_node = f.get("MinMemoryNode")
    array_job = _int(f.get("ArrayJobId", ""), "ArrayJobId")
    task_text = f.get("ArrayTaskId", "")
    task = int(task_text) if task_text.isdigit() else None
    return {
        "job_id": job_id,
        "name": f["JobName"],
        "user_name": user_name,
        "partition": _text(f.get("Partition")),
        "job_state": state,
        "account": _text(f.get("Account")),
        "qos": _text(f.get("QOS")),
        "tres_per_node": _text(f.get("TresPerNode")),
        "tres_per_job": _text(f.get("TresPerJob")),
        "tres_per_task": _text(f.get("TresPerTask")),
        "tres_per_socket": _text(f.get("TresPerSocket")),
        "cpus_per_tres": _text(f.get("CpusPerTres")),
        "het_job_id": _int(f.get("HetJobId", ""), "HetJobId"),
        "features": _text(f.get("Features")),
        "array_job_id": array_job,
        "array_task_id": task,
        "nodes": nodes_text,
        # JSON lists no GRES detail for a job holding none (an ended job's groups remain)
        "gres_detail": [by_node.get(n, "") for n in nodes] if any(by_node.values()) else [],
        "node_count": _int(f.get("NumNodes", ""), "NumNodes", 1),
        "cpus": _int(f.get("NumCPUs", ""), "NumCPUs", 1),
        "memory_per_cpu": _mib(mem_cpu) if mem_cpu else None,
        "memory_per_node": _mib(mem_node) if mem_node else None,
        "time_limit": limit,
        "submit_time": local_epoch(f.get("SubmitTime", "")),
        "eligible_time": local_epoch(f.get("EligibleTime", "")),
        "start_time": start,
        "end_time": end,
        "resv_name": _text(f.get("Reservation")),
        "required_nodes": _text(f.get("ReqNodeList")),
        "excluded_nodes": _text(f.get("ExcNodeList")),
        "priority": _int(f.get("Priority", ""), "Priority"),
        "nice": _signed(f.get("Nice", "")),
        "state_reason": f.get("Reason", ""),
        "restart_cnt": _int(f.get("Restarts", ""), "Restarts"),
        "admin_comment": f.get("AdminComment", ""),
        "comment": f.get("Comment", ""),
    }


__all__ = ["JobTextError", "job_raw_from_scontrol", "ORDER"]
