"""What changed in Slurm since the last snapshot, from two cheap text listings.

At 10,000 nodes and 15,000 jobs, Slurm 24.11's ``squeue --json --states=all`` and
``scontrol show node --json`` take seconds every cycle (a large JSON answer, mostly the
client's own CPU), while the same jobs as text take a small part of that
(docs/benchmarks.md, "Against a real slurmctld with 10,000 nodes"). So from 24.11 on
(``Layout.reads_by_id``) the source lists jobs and node states as text each cycle and reads
as JSON only the records that changed (``squeue --json --jobs=...``,
``scontrol show node --json <names>``); the values always come from the JSON, as in a full
read. The text only says *which* records to read again:

- a job's row holds every field of ``squeue -O`` that a job's record is read from and that
  can change (state, node list, partition, GPU requests, limits, node lists asked for or
  excluded, reservation, features, comment, name, ...). Its last fields, which may hold
  any character, are compared as one text, never split. A pending job's start and end
  time are Slurm's estimates and move every backfill pass: they are not compared (a
  pending job's record ignores them).
- a job's priority and pending reason change often (Slurm's scheduler passes, fair-share
  factors) and are printed as plain words: they are carried into the kept record without
  reading it again.
- so is a waiting job's eligible time when nothing else of its row changed
  (``Changes.eligible``): the agent's lease renewals (``StartTime=now+N``) move it for
  every waiting job every few cycles, and that time is all they change. Read as local time
  (``parse_job_text.local_epoch``); a time a daylight-saving change makes ambiguous is
  read as a change.
- a node is read again when its state word changed (``sinfo --all -o "%T|%N"``, a line per
  state and partition) or a job that runs, ran or starts on it changed. sinfo does not
  list a node in no partition: such a node is kept as last read, and a node removed from
  Slurm's configuration stays until the next full read.

Not seen in text: a job's AdminComment (``squeue -O`` has no such field) and a node's
fields other than its state (features, weight, GRES configuration). The agent's own writes
name the jobs they touch (``CliDecisionSink(on_write=...)``), an admin's are seen at the
next full read (``slurm.full_read_s``).

Pure functions: the source (``source.py``) runs the commands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_marl.slurm_integration.parse_job_text import JobTextError, local_epoch
from slurm_marl.slurm_integration.text import SlurmTextError, expand_host_field

SEP = "|"
# The first fields hold no separator: read one by one. The rest (from ArrayJobID on) is
# compared as one text; fields that may hold any character come last.
JOB_FIELDS = ("JobID", "State", "PriorityLong", "Reason", "NodeList", "StartTime", "EndTime",
              "ArrayJobID", "Partition", "TimeLimit", "EligibleTime", "SubmitTime",
              "tres-per-node", "tres-per-job", "tres-per-task", "tres-per-socket", "ReqNodes",
              "ExcNodes", "Reservation", "NumNodes", "NumCPUs", "MinMemory", "RestartCnt",
              "UserName", "Account", "QOS", "Feature", "Comment", "Name")
_SPLIT = 7
_ELIGIBLE = JOB_FIELDS.index("EligibleTime") - _SPLIT   # its place in the rest
JOB_ROWS = ["squeue", "-h", "--states=all", "-O",
            ",".join(f"{f}:{SEP}" for f in JOB_FIELDS)]
NODE_STATES = ["sinfo", "-h", "--all", "-o", f"%T{SEP}%N"]


@dataclass(frozen=True)
class JobRow:
    """One job's line of ``JOB_ROWS``."""

    state: str
    priority: int | None
    reason: str
    nodes: str            # as Slurm prints it (a hostlist expression)
    key: tuple            # what, changed, means the job's record is read again
    eligible: str = ""    # EligibleTime as printed (not in ``key``: see ``changes``)

    def node_names(self) -> tuple[str, ...]:
        try:
            return expand_host_field(self.nodes)
        except SlurmTextError:
            return ()


def job_rows(text: str) -> tuple[dict[int, JobRow], list[str]]:
    """The rows of ``JOB_ROWS`` by job id, and problems. A line that does not start with a
    job id continues the line before (a comment or name holding a newline)."""
    lines: list[str] = []
    problems: list[str] = []
    for line in text.splitlines():
        head = line.split(SEP, 1)[0].strip()
        if head.isdigit() and line.count(SEP) >= _SPLIT:
            lines.append(line)
        elif lines:
            lines[-1] += "\n" + line
        elif line.strip():
            problems.append(f"squeue row without a job id skipped: {line[:120]!r}")
    rows: dict[int, JobRow] = {}
    for line in lines:
        jid, state, prio, reason, nodes, start, end, rest = line.split(SEP, _SPLIT)
        state = state.strip()
        pending = state == "PENDING"
        prio = prio.strip()
        # ArrayJobID, Partition, TimeLimit, EligibleTime hold no separator
        head = rest.split(SEP, _ELIGIBLE + 1)
        eligible = ""
        if len(head) == _ELIGIBLE + 2:
            eligible = head[_ELIGIBLE].strip()
            head[_ELIGIBLE] = ""
        rows[int(jid)] = JobRow(
            state=state, priority=int(prio) if prio.isdigit() else None,
            reason=reason.strip(), nodes=nodes.strip(),
            key=(state, nodes.strip(), "" if pending else start, "" if pending else end,
                 SEP.join(head)), eligible=eligible)
    return rows, problems


def node_states(text: str) -> tuple[dict[str, str], list[str]]:
    """Each node's state word from ``NODE_STATES`` (a line per state and partition)."""
    states: dict[str, str] = {}
    problems: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        state, sep, hosts = line.partition(SEP)
        try:
            names = expand_host_field(hosts.strip()) if sep else ()
        except SlurmTextError as exc:
            problems.append(f"sinfo: {exc}")
            continue
        if not sep:
            problems.append(f"sinfo line without a node list skipped: {line[:120]!r}")
        for name in names:
            states[name] = state.strip()
    return states, problems


@dataclass(frozen=True)
class Changes:
    """What to read again: jobs by id, nodes by name; ``gone_jobs``: kept jobs Slurm no
    longer lists (nodes are never taken as gone: sinfo does not list every node);
    ``eligible``: waiting jobs not read again whose eligible time moved, to that time
    (seconds since the epoch, None for none)."""

    jobs: frozenset[int]
    nodes: frozenset[str]
    gone_jobs: frozenset[int]
    eligible: dict[int, int | None] = field(default_factory=dict)


def changes(rows: dict[int, JobRow], states: dict[str, str],
            kept_rows: dict[int, JobRow], kept_states: dict[str, str],
            kept_jobs: dict, kept_nodes: dict, dirty_jobs: set[int]) -> Changes:
    """Jobs whose row is new or changed (or that the agent wrote to, ``dirty_jobs``);
    nodes whose state is new or changed, and the nodes (known ones) of every such job,
    before and after, and of jobs gone. ``kept_jobs`` maps id -> Job (its ``nodes``), ``kept_nodes``
    name -> Node: a record not kept is read (it was listed but not readable last time).
    A waiting job whose row changed only in its eligible time is not read: its new time
    is in ``eligible``."""
    jobs: set[int] = set()
    eligible: dict[int, int | None] = {}
    for jid, row in rows.items():
        old = kept_rows.get(jid)
        if jid in dirty_jobs or jid not in kept_jobs or old is None or old.key != row.key:
            jobs.add(jid)
        elif old.eligible != row.eligible:
            if row.state != "PENDING":
                jobs.add(jid)
                continue
            try:
                eligible[jid] = local_epoch(row.eligible) or None
            except JobTextError:        # not one instant in this time zone
                jobs.add(jid)
    gone_jobs = frozenset(jid for jid in kept_jobs if jid not in rows)
    nodes = {name for name, state in states.items()
             if name not in kept_nodes or kept_states.get(name) != state}
    for jid in jobs | gone_jobs:
        old_job = kept_jobs.get(jid)
        if old_job is not None:
            nodes.update(old_job.nodes)
        if jid in rows:
            nodes.update(rows[jid].node_names())
    known = states.keys() | kept_nodes.keys()
    return Changes(frozenset(jobs), frozenset(n for n in nodes if n in known), gone_jobs,
                   eligible)
