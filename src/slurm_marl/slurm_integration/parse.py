"""Slurm client output -> domain values. Pure functions, tested on recorded output of Slurm
22.05, 24.11 and 26.05 (tests/data/slurm).

Jobs are read here; nodes, partitions and switches in ``parse_nodes`` (re-exported), the
version layouts in ``parse_layout``. One strange job or node never spoils a snapshot: it is
converted as far as possible, and what could not be read is returned as a problem string for
the caller to log. An answer in a layout this layer does not know, or one whose every entry
is unreadable, is refused with ``SlurmOutputError`` instead of read as an empty cluster.
"""

from __future__ import annotations

from slurm_marl.domain import Job, JobState
from slurm_marl.slurm_integration.marker import parse_marker
from slurm_marl.slurm_integration.parse_layout import (Layout, job_state_text, layout_of,
                                                       layout_of_version, num, read_record)
from slurm_marl.slurm_integration.parse_nodes import (SCONTROL_NODES, SINFO, NodesReader,
                                                      gpu_groups_from_gres, node_from_json,
                                                      nodes_from_scontrol, nodes_from_sinfo,
                                                      partitions_from_scontrol,
                                                      switches_from_scontrol)
from slurm_marl.slurm_integration.runner import SlurmOutputError
from slurm_marl.slurm_integration.text import (SlurmTextError, expand_host_field, parse_gpu_request,
                                               parse_gres_indices, single_type, total_gpus)
from slurm_marl.slurm_integration.vocabulary import held, is_agent_reservation

__all__ = ["JobsReader", "Layout", "NodesReader", "SCONTROL_NODES", "SINFO",
           "gpu_groups_from_gres", "job_from_json", "job_held", "job_state", "jobs_from_squeue",
           "layout_of", "layout_of_version", "node_from_json", "nodes_from_scontrol", "nodes_from_sinfo", "num",
           "partitions_from_scontrol", "switches_from_scontrol", "unmodelable_reason"]

SQUEUE = "squeue --json"


# ---------------------------------------------------------------------------------------
# jobs


def job_from_json(raw: dict) -> tuple[Job | None, list[str]]:
    """One job of ``squeue --json``; (None, problems) only if it has no usable id.

    Each field group is read by its own step below; a step that meets something it cannot
    read notes a problem and falls back, so one odd field never loses the whole job. The
    steps run in the order their problems are reported."""
    job_id = num(raw.get("job_id"))
    if job_id is None:
        return None, [f"job without job_id skipped: {str(raw)[:120]}"]
    jid = int(job_id)
    problems: list[str] = []
    per_node, per_job, unparsed = _gpu_request(raw, jid, problems)
    array_job_id = _array_job_id(raw)
    task = num(raw.get("array_task_id")) if array_job_id else None
    left_to_slurm = unmodelable_reason(raw, per_node, per_job, unparsed)
    nodes = _hosts(raw, "nodes", jid, problems)
    state, problem = job_state(raw.get("job_state", ""))
    if problem:
        problems.append(f"job {jid}: {problem}")
    gpu_alloc = _gpu_alloc(raw, nodes, jid, problems)
    node_count = int(num(raw.get("node_count"), 1) or 1)
    cpus = int(num(raw.get("cpus"), 1) or 1)
    job = Job(
        job_id=jid,
        **_texts(raw),
        state=state,
        gpus_per_node=total_gpus(per_node),
        gpus_per_job=total_gpus(per_job),
        gpu_type=single_type(per_node + per_job),
        node_count=node_count,
        cpus=cpus,
        mem_mib=_mem_mib(raw, node_count, cpus),
        **_times(raw, state),
        required_nodes=_hosts(raw, "required_nodes", jid, problems),
        excluded_nodes=_hosts(raw, "excluded_nodes", jid, problems),
        nodes=nodes,
        gpu_alloc=gpu_alloc,
        priority=int(num(raw.get("priority"), 0) or 0),
        restart_count=int(num(raw.get("restart_cnt"), 0) or 0),
        array_job_id=array_job_id,
        array_task_id=None if task is None else int(task),
        left_to_slurm=left_to_slurm,
        cpus_per_gpu=_cpus_per_gpu(raw.get("cpus_per_tres")),
        held=job_held(state, str(raw.get("state_reason") or ""),
                      int(num(raw.get("priority"), 1) or 0)),
        nice=int(num(raw.get("nice"), 0) or 0),
    )
    return job, problems


def _texts(raw: dict) -> dict:
    """The job's names and free-text fields as ``Job`` fields ("" where missing)."""
    return {"name": str(raw.get("name") or ""),
            "user": str(raw.get("user_name") or raw.get("user_id") or ""),
            "partition": str(raw.get("partition") or ""),
            "account": str(raw.get("account") or ""),
            "qos": str(raw.get("qos") or ""),
            "reservation": (raw.get("resv_name") or "").strip() or None,
            "pending_reason": str(raw.get("state_reason") or ""),
            "admin_comment": str(raw.get("admin_comment") or ""),
            "comment": str(raw.get("comment") or "")}


def _hosts(raw: dict, key: str, jid: int, problems: list[str]) -> tuple[str, ...]:
    """A host-list field expanded; an unreadable one is no hosts, with a problem."""
    try:
        return expand_host_field(raw.get(key))
    except SlurmTextError as exc:
        problems.append(f"job {jid}: {key}: {exc}")
        return ()


def _gpu_request(raw: dict, jid: int, problems: list[str]) -> tuple[list, list, bool]:
    """(GPUs per node, GPUs per job, whether either could not be parsed). An unparsable
    request reads as no GPU here; ``unmodelable_reason`` then leaves the job to Slurm."""
    per_node, p1 = parse_gpu_request(raw.get("tres_per_node"))
    per_job, p2 = parse_gpu_request(raw.get("tres_per_job"))
    for p in (p1, p2):
        if p:
            problems.append(f"job {jid}: {p}; treated as requesting no GPU")
    return per_node, per_job, bool(p1 or p2)


def _array_job_id(raw: dict) -> int:
    """The array's job id, 0 for a job that is no array task."""
    return int(num(raw.get("array_job_id"), 0) or 0)


def _gpu_alloc(raw: dict, nodes: tuple[str, ...], jid: int, problems: list[str]
               ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The GPU indices the job holds on each of its nodes, from ``gres_detail`` (one entry
    per node, in the nodes' order; a count that does not match is a problem, the pairs
    that match are still read)."""
    details = raw.get("gres_detail") or []
    if not (nodes and details):
        return ()
    if len(details) != len(nodes):
        problems.append(f"job {jid}: {len(details)} gres_detail entries for "
                        f"{len(nodes)} nodes")
    return tuple((n, parse_gres_indices(d)) for n, d in zip(nodes, details))


def _mem_mib(raw: dict, node_count: int, cpus: int) -> int:
    """The job's whole memory: per node times nodes, else per CPU times CPUs, else 0."""
    mem_node = num(raw.get("memory_per_node"))
    mem_cpu = num(raw.get("memory_per_cpu"))
    if mem_node:
        return int(mem_node * node_count)
    if mem_cpu:
        return int(mem_cpu * cpus)
    return 0


def _times(raw: dict, state: JobState) -> dict:
    """The job's times as ``Job`` fields: a 0 or missing time is None, a start read only
    for an active job, an end only for a job that is not pending."""
    time_limit_min = num(raw.get("time_limit"))
    submit = num(raw.get("submit_time"), 0.0) or 0.0
    eligible = num(raw.get("eligible_time"))
    start = num(raw.get("start_time")) if state.is_active else None
    end = num(raw.get("end_time")) if state not in (JobState.PENDING,) else None
    return {"submit_time_s": float(submit),
            "eligible_time_s": eligible if eligible else None,
            "start_time_s": start if start else None,
            "end_time_s": end if end else None,
            "time_limit_s": time_limit_min * 60.0 if time_limit_min else None}


def job_held(state: JobState, pending_reason: str, priority: int) -> bool:
    """``Job.held`` from what Slurm shows: a pending job held by anyone (``vocabulary.held``);
    the one rule for a job read whole and for one whose priority and reason alone changed
    (``source``)."""
    return state is JobState.PENDING and held(pending_reason, priority)


def _cpus_per_gpu(value: object) -> int:
    """``--cpus-per-gpu`` from ``cpus_per_tres`` (``gres:gpu:4``, ``gres/gpu:4``), 0 if none
    or unreadable."""
    for item in str(value or "").split(","):
        if "gpu" in item:
            count = item.rsplit(":", 1)[-1].strip()
            return int(count) if count.isdigit() else 0
    return 0


def _user_asked_untyped(admin_comment) -> bool:
    """The gate's marker says the user asked for untyped GPUs per node."""
    marker = parse_marker(admin_comment if isinstance(admin_comment, str) else "")
    if marker is None or not marker.per_node_request:
        return False
    reqs, _ = parse_gpu_request(marker.tres_per_node)
    return all(r.gpu_type is None for r in reqs)


def unmodelable_reason(raw: dict, per_node, per_job, unparsed: bool) -> str:
    """Why a job's request is one the agent cannot model (so it leaves the job to Slurm at
    once and says so), or "" for a request it decides: one partition, GPUs per node or per
    job in one form and of at most one type, not part of an array. The one place that
    answers it for a job record; ``per_node``/``per_job``/``unparsed`` are its GPU request
    as ``_gpu_request`` read it."""
    if _array_job_id(raw):
        return "job array: arrays are left to Slurm (a write to the array id would pin " \
               "every task alike)"
    if num(raw.get("het_job_id"), 0):
        return ("heterogeneous job (hetjob): Slurm starts its components together; the "
                "agent decides single jobs")
    if unparsed:
        return "GPU request the agent cannot parse"
    for key, option in (("tres_per_task", "--gpus-per-task"),
                        ("tres_per_socket", "--gpus-per-socket")):
        if "gpu" in str(raw.get(key) or ""):
            return f"{option} request: its GPU count depends on tasks/sockets Slurm picks"
    if "," in str(raw.get("partition") or ""):
        return "several partitions (-p a,b): Slurm picks among them"
    reservation = str(raw.get("resv_name") or "").strip()
    if reservation and not is_agent_reservation(reservation):
        return (f"in reservation {reservation}: Slurm starts it on the reservation's nodes "
                "within its time, which the agent does not model")
    if str(raw.get("features") or "").strip():
        return ("node features (--constraint): the agent does not model them and could pin "
                "the job to a node without them")
    if per_node and per_job:
        return "GPUs requested both per node and per job"
    types = {r.gpu_type for r in per_node + per_job}
    if len(types) > 1:
        if None not in types and _user_asked_untyped(raw.get("admin_comment")):
            return ("several GPU types: the agent widened its request over GPU groups after "
                    "its narrowing left the job BadConstraints (Slurm 22.05 takes a typed "
                    "request no longer back to untyped)")
        return "several GPU types in one request"
    if not total_gpus(per_node + per_job):
        return "no GPU request: the agent orders and places GPU jobs only"
    return ""


def job_state(value: object) -> tuple[JobState, str | None]:
    """The job's state as 22.05 shows it: its one word there; from the later list of base
    state and flags, the flag 22.05 would have printed (a requeued job still cleaning up,
    ``["PENDING", "COMPLETING"]``, is COMPLETING as on 22.05), else the base state.
    A value holding no Slurm state word is OTHER, with a problem."""
    text = job_state_text(value)
    if text is None:
        fallback = value if isinstance(value, str) else ""
        return (JobState.parse(fallback),
                f"state {value!r:.60} is no Slurm job state; read as OTHER")
    return JobState.parse(text), None


class JobsReader:
    """The jobs of one ``squeue --json`` answer, read one job record at a time (``add``) so
    that a streamed answer (``SlurmRunner.run_json_streamed``) never holds every record;
    ``finish`` with the rest of the answer refuses what ``jobs_from_squeue`` refuses."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.problems: list[str] = []
        self.records = 0
        self.with_state = 0

    def add(self, raw: object) -> None:
        self.records += 1
        if isinstance(raw, dict) and job_state_text(raw.get("job_state")) is not None:
            self.with_state += 1
        job = read_record(raw, "job", "job_id", job_from_json, self.problems)
        if job is not None:
            self.jobs.append(job)

    def finish(self, rest: dict) -> tuple[list[Job], list[str]]:
        """Refused: an unknown layout (``rest`` holds ``meta``), a 'jobs' that is not a
        list (left in ``rest``), and records none of which has a readable id or state."""
        layout_of(rest, SQUEUE)
        if rest.get("jobs"):
            raise SlurmOutputError(SQUEUE.split(), 0,
                                   f"'jobs' is a {type(rest['jobs']).__name__}, not a list")
        if self.records and not self.with_state:
            raise SlurmOutputError(SQUEUE.split(), 0, (
                f"none of {self.records} jobs has a Slurm job state (unknown layout?): "
                f"{'; '.join(self.problems[:3])}"))
        if self.records and not self.jobs:
            raise SlurmOutputError(SQUEUE.split(), 0, (
                f"{self.records} job records but none readable (unknown layout?): "
                f"{'; '.join(self.problems[:3])}"))
        return self.jobs, self.problems


def jobs_from_squeue(data: dict) -> tuple[list[Job], list[str]]:
    """Jobs of a whole ``squeue --json`` answer (22.05: also finished ones; later versions
    list those only with ``--states=all``); refused as ``JobsReader.finish`` says."""
    layout_of(data, SQUEUE)
    reader = JobsReader()
    raws = data.get("jobs") or []
    rest = {k: v for k, v in data.items() if k != "jobs" or not isinstance(v, list)}
    for raw in raws if isinstance(raws, list) else ():
        reader.add(raw)
    return reader.finish(rest)
