"""The simulator's per-job record, the jobs it builds from a trace and their domain view.

``SimJob`` is the mutable state of one simulated job (never handed to a policy);
``build_jobs`` turns trace rows into ``SimJob`` records for a cluster: partition checks,
shapes, CPUs and memory per GPU slot, model types, and with GPU sharing (``share=K``) the
slots a job of ``gpu_fraction`` f takes, max(1, round(f x K)) of one physical GPU
(``same_gpu``). ``domain_job`` and ``with_attained`` give the frozen ``Job`` a policy sees;
``SimOutcome`` is what a run returns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from slurm_marl.colocation import Neighbourhood
from slurm_marl.domain import Job, JobState, Node
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.models import assign_model_types
from slurm_marl.sim.traces import TraceJob


class SimulationError(RuntimeError):
    pass


@dataclass
class SimJob:
    """Mutable simulator state of one job (never handed to a policy)."""

    job_id: int
    submit_s: float
    duration_s: float
    num_gpus: int
    gpus_per_node: int
    node_count: int
    model_type: str | None
    partition: str
    user: str
    cpus: int
    mem_mib: int
    state: str = "future"                      # future, pending, running, done
    work_done_s: float = 0.0                   # progress in seconds-alone
    extra_work_s: float = 0.0                  # restart delays owed
    speed: float = 1.0
    seg_start_s: float = 0.0
    attained_base_gpu_s: float = 0.0           # attained before the current run
    stint_start_s: float | None = None
    queue_since_s: float = 0.0
    last_run_s: float = 0.0
    first_start_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    pending_total_s: float = 0.0
    allocs: list = field(default_factory=list)  # [(node, group pos, (gpu indices...)), ...]
    version: int = 0
    finish_queued: bool = False                # a live finish event is in the heap
    same_gpu: bool = False                     # its slots must be on one physical GPU
    gpu_fraction: float | None = None
    predicted_gpu_s: float | None = None       # what a predictor said at submission
    prediction_withheld: str = ""              # why the skill gate withholds it now ("": not)
    job_obj: Job | None = None
    speed_weighted_s: float = 0.0              # sum(speed x run time), for mean speed
    run_total_s: float = 0.0
    last_nodes: tuple[str, ...] = ()
    hood: Neighbourhood | None = None          # what the job shares in its current segment

    def attained(self, now: float) -> float:
        if self.state == "running" and self.stint_start_s is not None:
            return self.attained_base_gpu_s + self.num_gpus * (now - self.stint_start_s)
        return self.attained_base_gpu_s

    def progress_gpu_s(self, now: float) -> float:
        """GPU-seconds of work done at solo speed, restart delays paid included: it never
        falls (not subtracting the delay a preemption adds keeps a job that outlived its
        prediction from looking short again after a restart, which made preemptions chase
        each other every restart delay)."""
        done = self.work_done_s
        if self.state == "running":
            done += self.speed * max(0.0, now - self.seg_start_s)
        return done * self.num_gpus

    def progress_shown(self, now: float) -> float | None:
        """The progress a policy sees: only a job with a prediction carries it."""
        return None if self.prediction_shown is None else self.progress_gpu_s(now)

    @property
    def prediction_shown(self) -> float | None:
        """The prediction a policy sees: none while the skill gate withholds it."""
        return None if self.prediction_withheld else self.predicted_gpu_s

    @property
    def remaining_work_s(self) -> float:
        return self.duration_s + self.extra_work_s - self.work_done_s


@dataclass
class SimOutcome:
    jobs: list[SimJob]
    cycles: int
    wall_time_s: float
    preemptions: int
    reservations: int
    samples: list[dict]
    end_time_s: float
    unfinished: int
    total_gpus: int
    dropped: int = 0                 # jobs larger than their partition, dropped
    refused_placements: int = 0      # same-GPU placements no single GPU could hold


def build_jobs(cluster: SimCluster, trace: list[TraceJob], seed: int,
               drop_oversized: bool) -> tuple[list[SimJob], list[int]]:
    """The trace's jobs as ``SimJob`` records, and the ids of jobs dropped as larger than
    their partition (``drop_oversized``; else such a job is a ``SimulationError``)."""
    dropped: list[int] = []
    parts = {p.name: p for p in cluster.partitions_spec}
    default = cluster.partitions_spec[0].name
    drawn = assign_model_types(len(trace), seed) \
        if any(t.model_type is None for t in trace) else []
    jobs = []
    ids = set()
    unshared: list[TraceJob] = []    # fractional jobs on partitions of whole GPUs
    for i, t in enumerate(trace):
        part_name = t.partition or default
        part = parts.get(part_name)
        if part is None:
            raise SimulationError(f"job {t.job_id} asks for partition {part_name!r}, the "
                                  f"cluster has {', '.join(parts)}")
        num, per_node, same_gpu = t.num_gpus, t.gpus_per_node, False
        frac = t.gpu_fraction
        if frac is not None:
            if not 0 < frac <= 1:
                raise SimulationError(f"job {t.job_id}: gpu_fraction={frac!r} is not in "
                                      f"(0, 1]")
            if frac < 1 and t.num_gpus != 1:
                raise SimulationError(f"job {t.job_id} asks for gpu_fraction={frac:g} "
                                      f"with {t.num_gpus} GPUs: fractions are for 1-GPU "
                                      f"jobs only")
            if frac < 1 and part.share == 1:
                unshared.append(t)
            if t.num_gpus == 1 and part.share > 1:
                # Half up: f x K = 2.5 takes 3 slots.
                num = max(1, min(part.share, math.floor(frac * part.share + 0.5)))
                if num > 1:          # one node, one GPU
                    per_node, same_gpu = num, True
        slots = part.nodes * part.slots_per_node
        if num > slots or per_node > part.slots_per_node or (
                per_node and num // per_node > part.nodes):
            if drop_oversized:
                dropped.append(t.job_id)
                continue
            k = num // per_node if per_node else 0
            shape = (f"{k} node{'s' if k != 1 else ''} x {per_node} GPUs" if per_node
                     else f"{num} GPUs")
            raise SimulationError(
                f"job {t.job_id} needs {shape} but partition {part_name!r} has "
                f"{part.nodes} node{'s' if part.nodes != 1 else ''} x "
                f"{part.slots_per_node} GPUs ({slots} in all): use a larger cluster, or "
                f"drop such jobs (--drop-oversized; drop_oversized=True from Python)")
        if t.job_id in ids:
            raise SimulationError(f"job id {t.job_id} appears twice in the trace")
        ids.add(t.job_id)
        # CPUs and memory per GPU slot, so GPUs stay the binding resource (the cluster
        # spec guarantees a core per slot; half the node's memory goes to jobs).
        slots_node = part.slots_per_node
        cpus_per_slot = max(1, (part.sockets * part.cores_per_socket) // slots_node)
        mem_per_slot = part.mem_gib * 1024 // (2 * slots_node)
        jobs.append(SimJob(
            job_id=t.job_id, submit_s=t.submit_time_s, duration_s=t.duration_s,
            num_gpus=num, gpus_per_node=per_node,
            node_count=num // per_node if per_node else 1,
            model_type=t.model_type if t.model_type is not None else drawn[i],
            partition=part_name, user=t.user, cpus=cpus_per_slot * num,
            mem_mib=mem_per_slot * num, same_gpu=same_gpu, gpu_fraction=frac))
    if unshared:
        t = unshared[0]
        part_name = t.partition or default
        raise SimulationError(
            f"{len(unshared)} job(s) ask for a fraction of a GPU (first: job {t.job_id}, "
            f"gpu_fraction={t.gpu_fraction:g}) but partition {part_name!r} offers whole "
            f"GPUs: give it GPU sharing (share=K, e.g. --cluster 8x2x4:share=4) to model "
            f"them")
    return jobs, dropped


_new = object.__new__
_set = object.__setattr__


def with_attained(job: Job, attained: float, progress: float | None = None) -> Job:
    """A copy of a frozen Job with a new attained service (and progress, when the job
    carries a prediction to measure it against), without dataclass overhead (a running job
    is refreshed at every cycle, so this is the simulator's hottest line)."""
    new = _new(Job)
    fields = job.__dict__.copy()
    fields["attained_gpu_s"] = attained
    if progress is not None:
        fields["progress_gpu_s"] = progress
    _set(new, "__dict__", fields)
    return new


def domain_job(j: SimJob, now: float, sim_nodes: Sequence[Node]) -> Job:
    """The frozen ``Job`` a policy sees of ``j`` at ``now`` (cached on ``j.job_obj``;
    ``sim_nodes`` are the simulator's nodes, by index)."""
    if j.job_obj is not None:
        if j.state == "running":
            return with_attained(j.job_obj, j.attained(now), j.progress_shown(now))
        return j.job_obj
    running = j.state == "running"
    gpu_alloc = ()
    nodes = ()
    if running:
        by_node: dict[str, list[int]] = {}
        for n, _, gpus in j.allocs:
            by_node.setdefault(sim_nodes[n].name, []).extend(gpus)
        gpu_alloc = tuple((name, tuple(sorted(g))) for name, g in by_node.items())
        nodes = tuple(by_node)
    obj = Job(job_id=j.job_id, name=f"job{j.job_id}", user=j.user, partition=j.partition,
              state=JobState.RUNNING if running else JobState.PENDING,
              gpus_per_node=j.gpus_per_node,
              gpus_per_job=0 if j.gpus_per_node else j.num_gpus,
              node_count=j.node_count, cpus=j.cpus, mem_mib=j.mem_mib,
              submit_time_s=j.submit_s, eligible_time_s=j.submit_s,
              start_time_s=j.stint_start_s, nodes=nodes, gpu_alloc=gpu_alloc,
              restart_count=j.preemptions, attained_gpu_s=j.attained(now),
              last_run_s=j.last_run_s, queue_since_s=j.queue_since_s,
              preemptions=j.preemptions, model_type=j.model_type,
              duration_s=j.duration_s, predicted_gpu_s=j.prediction_shown,
              prediction_withheld=j.prediction_withheld,
              progress_gpu_s=j.progress_shown(now))
    j.job_obj = obj
    return obj
