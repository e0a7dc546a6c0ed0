"""Slurm 22.05 client output -> domain values. Pure functions, tested on recorded output.

One strange job or node never spoils a snapshot: it is converted as far as possible, and
what could not be read is returned as a problem string for the caller to log.
"""

from __future__ import annotations

from typing import Any

from slurm_marl.domain import GpuGroup, Job, JobState, Node, Partition, Switch
from slurm_marl.slurm_integration.runner import SlurmOutputError
from slurm_marl.slurm_gres import (parse_gpu_request, parse_gres_indices, parse_node_gres,
                                   single_type, total_gpus)
from slurm_marl.slurm_text import (SlurmTextError, expand_host_field, parse_kv_line,
                                   parse_switch_line, parse_time_limit_s)


def num(value: Any, default: float | None = None) -> float | None:
    """A number from 22.05 JSON; later openapi versions wrap it as {set, infinite, number}."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return default
        if not value.get("set", True):
            return default
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


# ---------------------------------------------------------------------------------------
# jobs


def job_from_json(raw: dict) -> tuple[Job | None, list[str]]:
    """One job of ``squeue --json``; (None, problems) only if it has no usable id."""
    problems: list[str] = []
    job_id = num(raw.get("job_id"))
    if job_id is None:
        return None, [f"job without job_id skipped: {str(raw)[:120]}"]
    jid = int(job_id)

    def hosts(key: str) -> tuple[str, ...]:
        try:
            return expand_host_field(raw.get(key))
        except SlurmTextError as exc:
            problems.append(f"job {jid}: {key}: {exc}")
            return ()

    per_node, p1 = parse_gpu_request(raw.get("tres_per_node"))
    per_job, p2 = parse_gpu_request(raw.get("tres_per_job"))
    for p in (p1, p2):
        if p:
            problems.append(f"job {jid}: {p}; treated as requesting no GPU")
    gpu_type = single_type(per_node + per_job)
    array_job_id = int(num(raw.get("array_job_id"), 0) or 0)
    left_to_slurm = unmodelable_reason(raw, array_job_id, per_node, per_job, bool(p1 or p2))

    nodes = hosts("nodes")
    state = JobState.parse(str(raw.get("job_state", "")))
    gpu_alloc: tuple[tuple[str, tuple[int, ...]], ...] = ()
    details = raw.get("gres_detail") or []
    if nodes and details:
        if len(details) != len(nodes):
            problems.append(f"job {jid}: {len(details)} gres_detail entries for "
                            f"{len(nodes)} nodes")
        gpu_alloc = tuple((n, parse_gres_indices(d)) for n, d in zip(nodes, details))

    node_count = int(num(raw.get("node_count"), 1) or 1)
    cpus = int(num(raw.get("cpus"), 1) or 1)
    mem_node = num(raw.get("memory_per_node"))
    mem_cpu = num(raw.get("memory_per_cpu"))
    if mem_node:
        mem_mib = int(mem_node * node_count)
    elif mem_cpu:
        mem_mib = int(mem_cpu * cpus)
    else:
        mem_mib = 0

    time_limit_min = num(raw.get("time_limit"))
    submit = num(raw.get("submit_time"), 0.0) or 0.0
    eligible = num(raw.get("eligible_time"))
    start = num(raw.get("start_time")) if state.is_active else None
    end = num(raw.get("end_time")) if state not in (JobState.PENDING,) else None
    resv = (raw.get("resv_name") or "").strip() or None

    job = Job(
        job_id=jid,
        name=str(raw.get("name") or ""),
        user=str(raw.get("user_name") or raw.get("user_id") or ""),
        partition=str(raw.get("partition") or ""),
        state=state,
        gpus_per_node=total_gpus(per_node),
        gpus_per_job=total_gpus(per_job),
        gpu_type=gpu_type,
        node_count=node_count,
        cpus=cpus,
        mem_mib=mem_mib,
        submit_time_s=float(submit),
        eligible_time_s=eligible if eligible else None,
        start_time_s=start if start else None,
        end_time_s=end if end else None,
        time_limit_s=time_limit_min * 60.0 if time_limit_min else None,
        required_nodes=hosts("required_nodes"),
        excluded_nodes=hosts("excluded_nodes"),
        nodes=nodes,
        gpu_alloc=gpu_alloc,
        priority=int(num(raw.get("priority"), 0) or 0),
        reservation=resv,
        pending_reason=str(raw.get("state_reason") or ""),
        restart_count=int(num(raw.get("restart_cnt"), 0) or 0),
        admin_comment=str(raw.get("admin_comment") or ""),
        comment=str(raw.get("comment") or ""),
        array_job_id=array_job_id,
        left_to_slurm=left_to_slurm,
    )
    return job, problems


def unmodelable_reason(raw: dict, array_job_id: int, per_node, per_job,
                       unparsed: bool) -> str:
    """Why a job's request is one the agent cannot model (so it leaves the job to Slurm at
    once and says so), or "" for a request it decides: one partition, GPUs per node or per
    job in one form and of at most one type, not part of an array."""
    if array_job_id:
        return "job array: arrays are left to Slurm (a write to the array id would pin " \
               "every task alike)"
    if unparsed:
        return "GPU request the agent cannot parse"
    for key, option in (("tres_per_task", "--gpus-per-task"),
                        ("tres_per_socket", "--gpus-per-socket")):
        if "gpu" in str(raw.get(key) or ""):
            return f"{option} request: its GPU count depends on tasks/sockets Slurm picks"
    if "," in str(raw.get("partition") or ""):
        return "several partitions (-p a,b): Slurm picks among them"
    if str(raw.get("features") or "").strip():
        return ("node features (--constraint): the agent does not model them and could pin "
                "the job to a node without them")
    if per_node and per_job:
        return "GPUs requested both per node and per job"
    types = {r.gpu_type for r in per_node + per_job}
    if len(types) > 1:
        return "several GPU types in one request"
    if not total_gpus(per_node + per_job):
        return "no GPU request: the agent orders and places GPU jobs only"
    return ""


def jobs_from_squeue(data: dict) -> tuple[list[Job], list[str]]:
    jobs, problems = [], []
    raws = data.get("jobs") or []
    if not isinstance(raws, list):
        raise SlurmOutputError(["squeue", "--json"], 0,
                               f"'jobs' is a {type(raws).__name__}, not a list")
    for raw in raws:
        if not isinstance(raw, dict):
            problems.append(f"unexpected job entry {raw!r:.80}")
            continue
        try:
            job, probs = job_from_json(raw)
        except Exception as exc:  # one strange job must not spoil the snapshot
            problems.append(f"job {raw.get('job_id')!r}: unreadable ({exc!r})")
            continue
        problems.extend(probs)
        if job is not None:
            jobs.append(job)
    return jobs, problems


# ---------------------------------------------------------------------------------------
# nodes


def gpu_groups_from_gres(gres: str | None, cores_per_socket: int
                         ) -> tuple[tuple[GpuGroup, ...], str | None]:
    """GPU groups of a node from its configured GRES, indices in Slurm's order.

    Each typed entry bound to one socket (``gpu:s1:2(S:1)``) is one group; an entry spanning
    several sockets or none is one group whose socket is unknown.
    """
    entries, problem = parse_node_gres(gres)
    groups: list[GpuGroup] = []
    next_index = 0
    for entry in entries:
        indices = tuple(range(next_index, next_index + entry.count))
        next_index += entry.count
        socket = entry.sockets[0] if len(entry.sockets) == 1 else None
        cores: tuple[int, ...] = ()
        if cores_per_socket > 0:
            for s in entry.sockets:
                cores += tuple(range(s * cores_per_socket, (s + 1) * cores_per_socket))
        groups.append(GpuGroup(index=len(groups), gpu_indices=indices, name=entry.type,
                               socket=socket, core_ids=cores))
    return tuple(groups), problem


def node_from_json(raw: dict, leaf_of: dict[str, str] | None = None
                   ) -> tuple[Node | None, list[str]]:
    name = str(raw.get("name") or "").strip()
    if not name:
        return None, [f"node without name skipped: {str(raw)[:120]}"]
    problems: list[str] = []
    state_words = [str(raw.get("state") or "UNKNOWN").upper()]
    state_words += [str(f).upper() for f in raw.get("state_flags") or []]
    cores = int(num(raw.get("cores"), 1) or 1)
    groups, problem = gpu_groups_from_gres(raw.get("gres"), cores)
    if problem:
        problems.append(f"node {name}: {problem}")
    used = frozenset(parse_gres_indices(raw.get("gres_used")))
    features = tuple(f for f in str(raw.get("active_features") or raw.get("features") or "")
                     .split(",") if f)
    node = Node(
        name=name,
        state="+".join(state_words),
        partitions=tuple(raw.get("partitions") or ()),
        sockets=int(num(raw.get("sockets"), 1) or 1),
        cores_per_socket=cores,
        threads_per_core=int(num(raw.get("threads"), 1) or 1),
        cpus=int(num(raw.get("cpus"), 1) or 1),
        alloc_cpus=int(num(raw.get("alloc_cpus"), 0) or 0),
        real_memory_mib=int(num(raw.get("real_memory"), 0) or 0),
        alloc_memory_mib=int(num(raw.get("alloc_memory"), 0) or 0),
        gpu_groups=groups,
        used_gpu_indices=used,
        features=features,
        leaf_switch=(leaf_of or {}).get(name),
        reason=str(raw.get("reason") or ""),
    )
    return node, problems


def nodes_from_sinfo(data: dict, leaf_of: dict[str, str] | None = None
                     ) -> tuple[list[Node], list[str]]:
    nodes, problems, seen = [], [], set()
    for raw in data.get("nodes") or []:
        if not isinstance(raw, dict):
            continue
        try:
            node, probs = node_from_json(raw, leaf_of)
        except Exception as exc:
            problems.append(f"node {raw.get('name')!r}: unreadable ({exc!r})")
            continue
        problems.extend(probs)
        if node is not None and node.name not in seen:  # sinfo repeats per partition
            seen.add(node.name)
            nodes.append(node)
    return nodes, problems


# ---------------------------------------------------------------------------------------
# partitions and switches (scontrol show ... text)


def partitions_from_scontrol(text: str) -> tuple[list[Partition], list[str]]:
    parts, problems = [], []
    for line in text.splitlines():
        if not line.strip().startswith("PartitionName="):
            continue
        kv = parse_kv_line(line)
        try:
            parts.append(Partition(
                name=kv["PartitionName"],
                nodes=expand_host_field(kv.get("Nodes")),
                default=kv.get("Default", "NO").upper() == "YES",
                state=kv.get("State", "UP"),
                max_time_s=(None if kv.get("MaxTime", "") in ("", "N/A")
                            else parse_time_limit_s(kv["MaxTime"])),
            ))
        except (ValueError, KeyError) as exc:
            problems.append(f"partition line unreadable ({exc}): {line[:120]}")
    return parts, problems


def switches_from_scontrol(text: str) -> tuple[list[Switch], dict[str, str], list[str]]:
    """Switches of ``scontrol show topology``; also node -> leaf switch (Level=0).

    The line parser the topology CLI uses too (``slurm_text.parse_switch_line``), but
    lenient as the daemon must be: an unreadable line becomes a problem and the other
    switches are kept."""
    switches, leaf_of, problems = [], {}, []
    for line in text.splitlines():
        if not line.strip().startswith("SwitchName="):
            continue
        try:
            live = parse_switch_line(line)
        except SlurmTextError as exc:
            problems.append(f"switch line unreadable ({exc.reason}): {line[:120]}")
            continue
        if live is None:
            continue
        switches.append(live.to_domain())
        if live.level == 0:
            for n in live.nodes:
                leaf_of.setdefault(n, live.name)
    return switches, leaf_of, problems
