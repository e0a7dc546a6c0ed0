"""What the sink writes to a job's GPU request: the narrowing to the GPU group a placement
chose (``plan_gpu_pin``) and, for a job that narrowing left never runnable, the request
given back (``plan_unstick``). Pure functions over domain values; ``sink``'s module
docstring says why each change of a request is ONE update that moves it across fields.
"""

from __future__ import annotations

from collections import defaultdict

from slurm_marl.slurm_integration.text import gres as G
from slurm_marl.domain import ClusterSnapshot, Job, Node, Place
from slurm_marl.slurm_integration.marker import (marker_gpus_per_node, parse_marker,
                                                 user_gpu_request)
from slurm_marl.slurm_integration.vocabulary import NEVER_RUNNABLE


def desired_gpu_request(place: Place, snapshot: ClusterSnapshot | None, job: Job | None
                        ) -> tuple[str | None, str, str]:
    """(TRES string of the chosen group or None, field it would go to, why not) for a
    placement. The field is the one the job's request does NOT live in now: a re-pin moves
    the request across fields in one update (module docstring)."""
    if snapshot is None or job is None or not place.allocs:
        return None, "", "no snapshot or no GPU allocation to pin"
    if job.cpus_per_gpu:
        # Slurm takes such a job's CPUs beside its GPUs: narrowed to one group, a job
        # wanting more CPUs than that socket has free is left BadConstraints, pending
        # forever (measured on 22.05.8: --cpus-per-gpu=4 --gres=gpu:2 on 4-core sockets),
        # although it runs under Slurm alone over both sockets. Decided before the fresh
        # read of the request (``_plan_pin``): no Slurm call for a pin never written.
        return None, "", (f"--cpus-per-gpu={job.cpus_per_gpu}: its CPUs must sit beside "
                          "its GPUs, which one GPU group may not allow; nodes pinned only")
    per_node: dict[str, dict[str | None, int]] = defaultdict(lambda: defaultdict(int))
    for alloc in place.allocs:
        node = snapshot.node(alloc.node)
        group = None
        if node is not None:
            group = next((g for g in node.gpu_groups if g.index == alloc.group), None)
        if group is None:
            return None, "", f"GPU group {alloc.group} unknown on {alloc.node}"
        if not group.name:
            return None, "", f"GPU group {alloc.group} on {alloc.node} has no GRES type"
        per_node[alloc.node][group.name] += alloc.gpus
    if any(len(d) > 1 for d in per_node.values()):
        # With enforce-binding a job's GPUs follow its cores; one CPU cannot sit on two
        # sockets, so a typed request over two groups leaves the job unstartable.
        return None, "", "spans GPU groups inside a node; binding left to Slurm"
    if len(per_node) != 1 or job.node_count > 1:
        return None, "", ("multi-node job: nodes pinned, GPU groups left to Slurm (a "
                          "per-node request cannot be moved across fields in one update)")
    counts = dict(next(iter(per_node.values())))
    return G.format_gpu_request(counts), _other_field(request_field(job)), ""


def request_field(job: Job) -> str:
    """Where the job's GPU request lives now: per job (``--gpus``, or an earlier pin) or
    per node (``--gres``, ``--gpus-per-node``)."""
    return "TresPerJob" if job.gpus_per_job and not job.gpus_per_node else "TresPerNode"


def _other_field(field: str) -> str:
    return "TresPerNode" if field == "TresPerJob" else "TresPerJob"


def plan_gpu_pin(job: Job, place: Place, snapshot: ClusterSnapshot | None
                 ) -> tuple[dict[str, str], str]:
    """The fields of the ONE update that narrows ``job``'s GPU request to the group chosen
    by ``place``, or ({}, why the request is left as it is).

    Safe by construction: the update names both request fields, clears the one the request
    lives in and writes the same count, typed, into the other, and fixes the job to one
    node. Slurm applies it whole or not at all, so before and after it the job asks for
    exactly its GPUs on one node. Never written:
    a type the user chose (kept), a count other than the job's, a second write to the same
    field (22.05 would add GPUs), anything for multi-node jobs.
    """
    request, field, why = desired_gpu_request(place, snapshot, job)
    if request is None:
        return {}, why
    total = job.num_gpus
    user_total, user_type = user_gpu_request(job)
    if user_type is not None:
        return {}, f"explicit GPU type gpu:{user_type} kept: nodes pinned only"
    if total <= 0 or total != user_total:
        return {}, (f"asks for {total} GPU(s) now but {user_total} at submission: GPU "
                    "request left as it is")
    wanted, _ = G.parse_gpu_request(request)
    if G.total_gpus(wanted) != total:
        return {}, f"chosen group holds {G.total_gpus(wanted)} of the job's {total} GPU(s)"
    if job.gpu_type == G.single_type(wanted):
        return {}, ""  # already on that group's type: nodes decide the rest
    # NumNodes=1-1: a request moved to TresPerJob may otherwise be spread over nodes
    # (measured on 22.05.8: `--gres=gpu:2` pinned to `TresPerJob=gres:gpu:s1:2` with one s1
    # GPU free on the chosen node ran as gpu:s1:1 on each of two nodes).
    return {_other_field(field): "", field: request, "NumNodes": "1-1"}, ""


def spread_over_groups(count: int, sizes: list[tuple[str, int]]) -> dict[str, int]:
    """``count`` GPUs spread as evenly as the groups allow (largest free share first, ties
    to the lower group): {'s0': 1, 's1': 1} for 2 over two groups of 2; {} if they do not
    hold ``count``."""
    if count <= 0 or sum(n for _, n in sizes) < count:
        return {}
    counts = {name: 0 for name, _ in sizes}
    size = dict(sizes)
    for _ in range(count):
        name = max(sizes, key=lambda g: ((size[g[0]] - counts[g[0]]) / size[g[0]],
                                         -sizes.index(g)))[0]
        counts[name] += 1
    return {k: v for k, v in counts.items() if v}


def plan_unstick(job: Job, snapshot: ClusterSnapshot | None
                 ) -> tuple[list[dict[str, str]], str]:
    """The updates, each ONE ``scontrol update``, to try in turn to undo the agent's
    narrowing of a job Slurm now refuses to start (``NEVER_RUNNABLE``), or ([], why not /
    "" if the job is not such a job).

    Such a job: marked, its user asked for untyped GPUs per node, and it asks now for one
    GPU type per job (the narrowing's cross-field form). First its user's own request back
    (``TresPerJob= TresPerNode=<marker's>``): Slurm 24.11 takes it and runs the job
    (measured). Slurm 22.05 refuses an untyped request for a job once typed ("Invalid
    GRES specification (with and without type identification)", both fields named in one
    update or the request cleared first, and a cleared request in between let a job start
    without GPUs), so second the same count per node spread over the node's GPU groups,
    which 22.05 then runs (measured on 22.05.8: a ``--cpus-per-gpu=4 --gres=gpu:2`` job
    narrowed to ``s0:2`` on 4-core sockets stuck BadConstraints; given
    ``gres:gpu:s0:1,gres:gpu:s1:1`` per node it ran at once; 24.11 keeps that form stuck).
    The agent's node pin goes too, unless its user named the nodes. A request over several
    types is one the agent leaves to Slurm (``parse.unmodelable_reason``), so it is never
    narrowed again; the user's own request is the marker's, read as such after a requeue."""
    if job.pending_reason not in NEVER_RUNNABLE or not job.is_pending:
        return [], ""
    marker = parse_marker(job.admin_comment)
    if marker is None or not marker.per_node_request:
        return [], ""
    _, user_type = user_gpu_request(job)
    if user_type is not None or not (job.gpus_per_job and not job.gpus_per_node
                                     and job.gpu_type is not None):
        return [], ""   # not the agent's narrowing (a typed request is its user's)
    per_node = marker_gpus_per_node(marker)
    if job.gpus_per_job != per_node:
        return [], (f"asks for {job.gpus_per_job} GPU(s) per job, its user for {per_node} "
                    "per node: left as it is")
    unpin = ({"ReqNodeList": ""} if marker.user_gave_no_nodes and job.required_nodes
             else {})
    # the marker holds the request as the gate read it (24.11+: "gres/gpu:2"); written in
    # the "gres:" form, which every version takes on updates (22.05 ignores "gres/")
    options = [{"TresPerJob": "", "TresPerNode": marker.tres_per_node.replace("gres/", "gres:"),
                **unpin}]
    node = _node_with_type(job, snapshot) if snapshot is not None else None
    if node is not None:
        groups = [(g.name, len(g.gpu_indices)) for g in node.gpu_groups if g.name]
        counts = spread_over_groups(per_node, groups)
        if len(counts) >= 2:
            options.append({"TresPerJob": "", "TresPerNode": G.format_gpu_request(counts),
                            **unpin})
    return options, ""


def _node_with_type(job: Job, snapshot: ClusterSnapshot) -> Node | None:
    """The first node the job may run on (its required nodes, else its partition's) with
    a GPU group of the type it was narrowed to: the node whose groups a widened request
    spreads over."""
    names = job.required_nodes or tuple(
        n.name for n in snapshot.nodes if not job.partition or job.partition in n.partitions)
    return next((snapshot.node(n) for n in names if snapshot.node(n) is not None
                 and any(g.name == job.gpu_type for g in snapshot.node(n).gpu_groups)),
                None)
