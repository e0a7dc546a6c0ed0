"""A trace window turned into sbatch submissions for the local cluster, time compressed.

Each trace job keeps its GPU count and its (scaled) arrival and run time, nothing else:
single-node jobs ask ``--gres=gpu:N``, jobs larger than a node ask ``-N k --gres=gpu:N/k``
(whole nodes), as a researcher would. Model types come from the simulator's seeded draw
(Philly has none), and travel in the job name (``r12-resnet50_bs64``), the way real job names
often carry the model: the interference oracle reads them, and so may the agent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slurm_marl.sim.models import assign_model_types
from slurm_marl.sim.traces import TraceJob
from slurm_marl.testcluster import ClusterSpec

NAME_PREFIX = "r"


@dataclass(frozen=True)
class ReplayJob:
    index: int
    trace_job_id: int
    arrival_s: float        # wall seconds after the replay starts
    work_s: float           # wall seconds of work at full speed
    num_gpus: int
    node_count: int
    gpus_per_node: int
    model_type: str

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}{self.index}-{self.model_type}"

    def sbatch_args(self) -> list[str]:
        args = ["-J", self.name, f"--gres=gpu:{self.gpus_per_node}"]
        if self.node_count > 1:
            args += ["-N", str(self.node_count)]
        return args


@dataclass(frozen=True)
class ReplayPlan:
    jobs: tuple[ReplayJob, ...]
    speedup: float
    dropped: tuple[int, ...]     # trace job ids that cannot fit the cluster
    sim_trace: tuple[TraceJob, ...]  # the same jobs, in trace seconds, for the simulator

    @property
    def span_s(self) -> float:
        return max((j.arrival_s for j in self.jobs), default=0.0)


def parse_job_name(name: str) -> tuple[int, str] | None:
    """``r12-resnet50_bs64`` -> (12, 'resnet50_bs64'); None for jobs not of a replay."""
    if not name.startswith(NAME_PREFIX) or "-" not in name:
        return None
    head, _, model = name.partition("-")
    if not head[1:].isdigit() or not model:
        return None
    return int(head[1:]), model


def plan_replay(trace: list[TraceJob], spec: ClusterSpec, speedup: float, seed: int = 0
                ) -> ReplayPlan:
    if speedup <= 0:
        raise ValueError("speedup must be positive")
    per_node = spec.gpus_per_node
    drawn = assign_model_types(len(trace), seed)
    jobs, dropped, sim_jobs = [], [], []
    for i, t in enumerate(trace):
        nodes = max(1, math.ceil(t.num_gpus / per_node))
        if nodes > spec.nodes or t.num_gpus % nodes:
            dropped.append(t.job_id)
            continue
        gpn = t.num_gpus // nodes
        model = t.model_type or drawn[i]
        jobs.append(ReplayJob(index=len(jobs), trace_job_id=t.job_id,
                              arrival_s=t.submit_time_s / speedup,
                              work_s=t.duration_s / speedup, num_gpus=t.num_gpus,
                              node_count=nodes, gpus_per_node=gpn, model_type=model))
        sim_jobs.append(replace(t, model_type=model, gpus_per_node=gpn, partition=spec.partition))
    return ReplayPlan(tuple(jobs), speedup, tuple(dropped), tuple(sim_jobs))


def sim_cluster_spec(spec: ClusterSpec) -> str:
    """The simulator's cluster string for the local cluster's shape."""
    return (f"{spec.nodes}x{spec.sockets}x{spec.gpus_per_socket}:leaf={spec.nodes_per_leaf}"
            f":cores={spec.cores_per_socket}:name={spec.partition}"
            f":mem={max(1, spec.memory_mib // 1024)}")
