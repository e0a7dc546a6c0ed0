"""Jobs the agent could never place, left to Slurm at once.

A request the agent's placements cannot hold even on its partition emptied of every other
job (per-job GPUs with more tasks or CPUs than one node has, which Slurm spreads over
nodes; a shape the place plugins do not generate) would otherwise be deferred, and its
lease renewed, cycle after cycle: the job would wait for as long as the agent runs, while
Slurm alone starts it. Such a job gets ``Job.left_to_slurm`` with the reason, so admission
releases its delay and ``explain`` says why; the agent never decides it.

The question is asked once per kind of request and partition (``_request_key``) and asked
again after ``RECHECK_S`` (nodes may be added to a partition).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from slurm_marl.domain import ClusterSnapshot, Job
from slurm_marl.placement_shapes import has_candidate, job_shape
from slurm_marl.policy.state import CycleState
from slurm_marl.slurm_integration.admission import partition_views


def _request_key(job: Job, partition: str) -> tuple:
    return (partition, job.gpus_per_node, job.gpus_per_job, job.gpu_type, job.node_count,
            job.cpus, job.mem_mib, job.cpus_per_gpu, job.required_nodes, job.excluded_nodes)


def idle_state(view: ClusterSnapshot) -> CycleState:
    """A cycle state of ``view``'s nodes all idle (as if no other job ran and every node
    were up), for ``why_never_placed``; read only, so one serves every job of a view."""
    idle = tuple(replace(n, state="IDLE", used_gpu_indices=frozenset(), alloc_cpus=0,
                         alloc_memory_mib=0) for n in view.nodes)
    return CycleState(ClusterSnapshot(time_s=view.time_s, nodes=idle, jobs=(),
                                      partitions=view.partitions, switches=view.switches))


def why_never_placed(job: Job, state: CycleState, partition: str) -> str:
    """Why no placement of the agent's holds ``job`` on the idle nodes of ``state``
    (``idle_state``), or "" if one does."""
    if has_candidate(job, state, state.free):
        return ""
    total, per_node, count = job_shape(job)
    most_cpus = max((n.cpus for n in state.snapshot.nodes), default=0)
    shape = (f"{total} GPUs per job" if not per_node
             else f"{per_node} GPUs on each of {count} node(s)")
    return (f"no placement of the agent's holds it on partition {partition} even with "
            f"every node idle ({shape}, {job.cpus} CPUs, {job.mem_mib} MiB; the largest "
            f"node has {most_cpus} CPUs): Slurm places it (it may spread it over nodes)")


class Placeability:
    """Marks, cycle after cycle, the waiting jobs no placement could ever hold."""

    RECHECK_S = 600.0

    def __init__(self) -> None:
        # request key -> (when asked, why never placed or "")
        self._known: dict[tuple, tuple[float, str]] = {}

    def mark(self, snap: ClusterSnapshot, managed: Collection[str]) -> ClusterSnapshot:
        """``snap`` with ``left_to_slurm`` set on the managed partitions' waiting GPU jobs
        that no placement could hold (module docstring)."""
        wanted = set(managed)
        views = None
        states: dict[str, CycleState] = {}   # the idle state of each view, built once
        changed: dict[int, Job] = {}
        for job in snap.pending:
            if job.left_to_slurm or not job.num_gpus or job.held:
                continue
            part = next((p for p in job.partition.split(",") if p in wanted), None)
            if part is None:
                continue
            key = _request_key(job, part)
            hit = self._known.get(key)
            if hit is None or snap.time_s - hit[0] > self.RECHECK_S:
                if views is None:
                    views = partition_views(snap, sorted(wanted))
                if part not in states:
                    states[part] = idle_state(views[part])
                hit = self._known[key] = (snap.time_s, why_never_placed(job, states[part],
                                                                        part))
            if hit[1]:
                changed[job.job_id] = job.with_(left_to_slurm=hit[1])
        if len(self._known) > 10_000:
            self._known.clear()
        if not changed:
            return snap
        return replace(snap, jobs=tuple(changed.get(j.job_id, j) for j in snap.jobs))
