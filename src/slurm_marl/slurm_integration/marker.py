"""The AdminComment marker: which jobs slurm-marl manages and their original GPU request.

Written by ``job_submit.lua`` at submit time (or by the sink before its first re-pin), so a
job whose GPU request was cleared mid-way through a two-step re-pin can always get its
original request back. Format (no spaces, so it is one scontrol argument)::

    slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=;beg=1795709171

``req`` is the node list the user asked for (``-w``), empty if none: the agent writes
``ReqNodeList`` itself when it places a job, and after a requeue it must know that such a
list is its own pin, free to change, and not the user's constraint. Markers written before
``req`` existed parse with ``required_nodes=None`` (unknown: the list is kept as a
constraint).

``beg`` is the begin time the user asked for (``--begin``), in epoch seconds, empty if none:
the gate moves every gated job's begin time to at least now + grace, and the agent starts a
job early only within that grace, never before the user's own begin. Markers without it
parse with ``user_begin_s=None``.

The marker is appended after any text an admin put there, separated by ``|``.

What a marker says about a job's GPU request (``user_gpu_request``, ``requested_gpu_fields``)
is read here too: the daemon decides with it, the sink writes with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_marl.domain import Job
from slurm_marl.slurm_integration.text import gres as G

PREFIX = "slurm-marl:v1"


@dataclass(frozen=True)
class Marker:
    tres_per_node: str = ""
    tres_per_job: str = ""
    required_nodes: str | None = None
    user_begin_s: float | None = None

    def render(self) -> str:
        req = "" if self.required_nodes is None else f";req={self.required_nodes}"
        if self.user_begin_s is not None:
            req += f";beg={int(self.user_begin_s)}"
        return f"{PREFIX};tpn={self.tres_per_node};tpj={self.tres_per_job}{req}"

    @property
    def per_node_request(self) -> bool:
        """True when the user asked for GPUs per node only (``--gres``,
        ``--gpus-per-node``): the agent may have moved the request to the per-job field
        when it narrowed it to one GPU group, but the job remains a per-node request."""
        per_node, bad1 = G.parse_gpu_request(self.tres_per_node)
        per_job, bad2 = G.parse_gpu_request(self.tres_per_job)
        return (not bad1 and not bad2 and G.total_gpus(per_node) > 0
                and G.total_gpus(per_job) == 0)

    @property
    def user_gave_no_nodes(self) -> bool:
        """True when the job's submission named no nodes (so any ReqNodeList is the
        agent's own pin)."""
        return self.required_nodes == ""


def parse_marker(admin_comment: str | None) -> Marker | None:
    """The marker inside an AdminComment, or None if this job is not marked."""
    text = admin_comment or ""
    start = text.find(PREFIX)
    if start < 0:
        return None
    body = text[start:].split("|", 1)[0]
    fields = {}
    for part in body.split(";")[1:]:
        key, _, value = part.partition("=")
        fields[key.strip()] = value.strip()
    begin = fields.get("beg", "")
    return Marker(tres_per_node=fields.get("tpn", ""), tres_per_job=fields.get("tpj", ""),
                  required_nodes=fields.get("req"),
                  user_begin_s=float(begin) if begin.isdigit() else None)


def with_marker(admin_comment: str | None, marker: Marker) -> str:
    """AdminComment text carrying ``marker``, keeping whatever else an admin wrote."""
    text = admin_comment or ""
    start = text.find(PREFIX)
    if start >= 0:
        rest = text[start:].split("|", 1)
        tail = ("|" + rest[1]) if len(rest) > 1 else ""
        text = (text[:start] + tail).strip("|")
    return f"{text}|{marker.render()}" if text else marker.render()


def user_gpu_request(job: Job) -> tuple[int, str | None]:
    """(GPU count, GPU type or None) the user asked for: from the gate's marker, else what
    the job asks now (then a type already there counts as the user's)."""
    marker = parse_marker(job.admin_comment)
    if marker is not None:
        per_node, bad1 = G.parse_gpu_request(marker.tres_per_node)
        per_job, bad2 = G.parse_gpu_request(marker.tres_per_job)
        if not (bad1 or bad2) and (per_node or per_job):
            total = (G.total_gpus(per_node) * max(1, job.node_count) + G.total_gpus(per_job))
            return total, G.single_type(per_node + per_job)
    return job.num_gpus, job.gpu_type


def requested_gpu_fields(marker: Marker) -> dict[str, str]:
    """The marker's request fields that ask for GPUs (readable, more than 0): what a job
    emptied by an old half-done re-pin gets back. Empty for ``--gres=gpu:0``."""
    fields = {}
    for key, value in (("TresPerNode", marker.tres_per_node),
                       ("TresPerJob", marker.tres_per_job)):
        reqs, bad = G.parse_gpu_request(value)
        if value and not bad and G.total_gpus(reqs) > 0:
            fields[key] = value
    return fields


def marker_gpus_per_node(marker: Marker) -> int:
    """GPUs per node the user asked for (``tpn``), at least 1; for ``per_node_request``
    markers."""
    reqs, _ = G.parse_gpu_request(marker.tres_per_node)
    return max(1, G.total_gpus(reqs))


def user_begin(job: Job, marker: Marker | None) -> float | None:
    """The begin time the job's user wants now, or None: the marker's ``beg`` (their
    ``--begin`` at submission), unless the job's begin time has since been moved EARLIER
    than that. The agent writes no start time to a job before its user's begin, so an
    earlier one was set by its owner (the gate lets them go down to now + grace) or by an
    admin, and it is the begin time that now counts. A begin moved later is read from the
    job's eligible time by the daemon's horizon rule."""
    if marker is None or marker.user_begin_s is None:
        return None
    eligible = job.eligible_time_s
    if eligible and eligible < marker.user_begin_s - 1:
        return eligible
    return marker.user_begin_s
