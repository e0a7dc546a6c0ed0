"""The domain model: typed, frozen values that every other part of slurm-marl speaks.

No I/O, no torch, no Slurm here. The daemon builds these from Slurm, the simulator from a
trace, the training environment from the simulator; policies only ever see these types, so
they cannot tell which of the three they run in.

Units are in field names (``_s`` seconds, ``_mib`` mebibytes, ``_gpu_s`` GPU-seconds).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType


class JobState(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, text: str) -> "JobState":
        """Slurm state names, tolerant of case, flags (``PENDING+REQUEUED``) and unknowns."""
        head = (text or "").strip().upper().split("+")[0].split(" ")[0]
        try:
            return cls(head)
        except ValueError:
            return cls.OTHER

    @property
    def is_active(self) -> bool:
        """Holds (or is about to hold) resources."""
        return self in ACTIVE_STATES


# the states that hold (or are about to hold) resources: a set, not a tuple built per call
# (hot loops test it directly, many times per job every cycle: docs/benchmarks.md, "The
# cycle's constant costs")
ACTIVE_STATES = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})


@dataclass(frozen=True)
class GpuGroup:
    """GPUs that hang off one CPU socket / PCIe root: the unit of placement inside a node.

    ``name`` is the Slurm GRES type that pins a job to this group (``s0``, ``s1``), or ``None``
    where GPUs are untyped and the group is only known from topology.
    """

    index: int
    gpu_indices: tuple[int, ...]
    name: str | None = None
    socket: int | None = None
    core_ids: tuple[int, ...] = ()

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_indices)


@dataclass(frozen=True)
class Node:
    name: str
    state: str = "IDLE"
    partitions: tuple[str, ...] = ()
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    cpus: int = 1
    alloc_cpus: int = 0
    real_memory_mib: int = 0
    alloc_memory_mib: int = 0
    gpu_groups: tuple[GpuGroup, ...] = ()
    used_gpu_indices: frozenset[int] = frozenset()
    features: tuple[str, ...] = ()
    leaf_switch: str | None = None
    reason: str = ""

    # Slurm node state words that mean "do not place anything here".
    _UNUSABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWER", "FUTURE", "UNKNOWN",
                 "MAINT", "REBOOT", "INVAL")

    @property
    def available(self) -> bool:
        words = self.state.upper().replace("+", " ").replace("*", " NOT_RESPONDING").split()
        return not any(w.startswith(bad) for w in words for bad in self._UNUSABLE)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(sorted(i for g in self.gpu_groups for i in g.gpu_indices))

    @property
    def gpu_count(self) -> int:
        return sum(g.gpu_count for g in self.gpu_groups)

    @property
    def free_gpu_indices(self) -> tuple[int, ...]:
        return tuple(i for i in self.gpu_indices if i not in self.used_gpu_indices)

    @property
    def free_gpus(self) -> int:
        return len(self.free_gpu_indices)

    @property
    def free_cpus(self) -> int:
        return max(0, self.cpus - self.alloc_cpus)

    @property
    def free_memory_mib(self) -> int:
        return max(0, self.real_memory_mib - self.alloc_memory_mib)

    def free_in_group(self, group: GpuGroup) -> tuple[int, ...]:
        return tuple(i for i in group.gpu_indices if i not in self.used_gpu_indices)

    def group_of_gpu(self, gpu_index: int) -> GpuGroup | None:
        for g in self.gpu_groups:
            if gpu_index in g.gpu_indices:
                return g
        return None


@dataclass(frozen=True)
class Switch:
    """A switch of Slurm's topology/tree: a leaf lists nodes, an upper switch lists switches."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: float | None = None

    @property
    def is_leaf(self) -> bool:
        return bool(self.nodes)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...] = ()
    default: bool = False
    state: str = "UP"
    max_time_s: float | None = None


@dataclass(frozen=True)
class Job:
    """A Slurm job as a scheduler sees it, plus the scheduling state that outlives a cycle.

    ``gpus_per_node`` comes from ``--gres=gpu:N`` / ``--gpus-per-node`` (TresPerNode);
    ``gpus_per_job`` from ``--gpus`` (TresPerJob). ``num_gpus`` is the total either way.
    ``gpu_alloc`` is what a running job holds: ((node, (gpu indices...)), ...).
    """

    job_id: int
    name: str = ""
    user: str = ""
    partition: str = ""
    state: JobState = JobState.PENDING
    account: str = ""
    qos: str = ""
    gpus_per_node: int = 0
    gpus_per_job: int = 0
    gpu_type: str | None = None
    node_count: int = 1
    cpus: int = 1
    mem_mib: int = 0
    submit_time_s: float = 0.0
    eligible_time_s: float | None = None
    start_time_s: float | None = None
    end_time_s: float | None = None
    time_limit_s: float | None = None
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    gpu_alloc: tuple[tuple[str, tuple[int, ...]], ...] = ()
    priority: int = 0
    reservation: str | None = None
    pending_reason: str = ""
    restart_count: int = 0
    admin_comment: str = ""
    comment: str = ""
    array_job_id: int = 0
    # The task's index in its array (squeue's array_task_id): task 4 of array 123 is
    # "123_4" in sacct, whatever its own job_id. None: not an array task, or an array's
    # tasks not yet split out (listed as one pending job with the array's id, which its
    # last task to start keeps).
    array_task_id: int | None = None
    # Why the agent leaves this job to Slurm (a request it cannot model), "" if it decides it.
    left_to_slurm: str = ""
    # CPUs per GPU the user asked for (``--cpus-per-gpu``), 0 if none: Slurm then takes the
    # job's CPUs beside its GPUs, so one GPU group may not hold them.
    cpus_per_gpu: int = 0
    # False for a running job the agent may not requeue (its partition is not one of the
    # agent's preempt_partitions): the policy never picks it as a victim.
    preemptible: bool = True
    # Slurm holds this pending job (a user, an admin, or Slurm itself after a failed
    # launch): the agent writes nothing to it until it is released.
    held: bool = False
    # The job's nice value (``--nice``, an admin's ``Nice=``, and what ``scontrol top``
    # moves): its user or an admin asking for it to run later (or earlier) among the jobs
    # it waits with. 0 for none.
    nice: int = 0
    # True when the job's Slurm priority was set by someone other than the agent after
    # the agent wrote one (``scontrol top``, an admin's ``Priority=``, a release that
    # recomputed it): that priority is the job's place in the order, and the agent does
    # not write it again.
    priority_asked: bool = False
    # Scheduling state kept across cycles (daemon store or simulator).
    attained_gpu_s: float = 0.0
    last_run_s: float = 0.0
    queue_since_s: float | None = None
    preemptions: int = 0
    model_type: str | None = None
    # Only the simulator knows this; a clairvoyant reference policy may read it.
    duration_s: float | None = None
    # Predicted total GPU-time (seconds x GPUs) from what was known at submission; None:
    # no prediction (an order that uses it then falls back to attained service alone).
    predicted_gpu_s: float | None = None
    # Why the job has no prediction although its predictor gave one (the prediction-skill
    # gate withheld it, ``history/skill.py``); "" otherwise.
    prediction_withheld: str = ""
    # GPU-seconds of the job's work done so far at solo speed (unlike attained service it
    # does not grow faster when interference slows the job): what a prediction of its
    # GPU-time is measured against. The simulator knows it; None: unknown.
    progress_gpu_s: float | None = None

    @property
    def num_gpus(self) -> int:
        if self.gpus_per_job:
            return self.gpus_per_job
        return self.gpus_per_node * max(1, self.node_count)

    @property
    def is_pending(self) -> bool:
        return self.state is JobState.PENDING

    @property
    def is_running(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def gpu_indices_by_node(self) -> Mapping[str, tuple[int, ...]]:
        return MappingProxyType(dict(self.gpu_alloc))

    def with_(self, **changes) -> "Job":
        """A copy with ``changes``. Job has no checks or derived fields to recompute, so the
        copy skips ``dataclasses.replace``'s ``__init__``, which was a visible part of a
        cycle (docs/benchmarks.md, "The cycle's constant costs"); an unknown field is still
        a TypeError."""
        unknown = changes.keys() - _JOB_FIELDS
        if unknown:
            raise TypeError(f"Job has no field(s) {', '.join(sorted(unknown))}")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


_JOB_FIELDS = frozenset(f.name for f in fields(Job))


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything a scheduling cycle may look at, taken at ``time_s`` (epoch or simulated)."""

    time_s: float
    nodes: tuple[Node, ...] = ()
    jobs: tuple[Job, ...] = ()
    partitions: tuple[Partition, ...] = ()
    switches: tuple[Switch, ...] = ()
    _node_index: Mapping[str, Node] = field(default=None, init=False, compare=False,
                                            repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_node_index",
                           MappingProxyType({n.name: n for n in self.nodes}))

    @property
    def pending(self) -> tuple[Job, ...]:
        got = self.__dict__.get("_pending")
        if got is None:     # built on first use, kept: a cycle asks many times
            got = self.__dict__["_pending"] = tuple(
                j for j in self.jobs if j.state is JobState.PENDING)
        return got

    @property
    def running(self) -> tuple[Job, ...]:
        got = self.__dict__.get("_running")
        if got is None:
            got = self.__dict__["_running"] = tuple(
                j for j in self.jobs if j.state in ACTIVE_STATES)
        return got

    def node(self, name: str) -> Node | None:
        return self._node_index.get(name)

    def job(self, job_id: int) -> Job | None:
        index = self.__dict__.get("_job_index")
        if index is None:   # built on first use: many snapshots are never asked
            index = {}
            for j in self.jobs:
                index.setdefault(j.job_id, j)   # the first, as a scan would find
            object.__setattr__(self, "_job_index", index)
        return index.get(job_id)

    def partition(self, name: str) -> Partition | None:
        for p in self.partitions:
            if p.name == name:
                return p
        return None

    def nodes_in(self, partition: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if partition in n.partitions)

    def leaf_of(self, node_name: str) -> str | None:
        n = self.node(node_name)
        if n is not None and n.leaf_switch:
            return n.leaf_switch
        for s in self.switches:
            if node_name in s.nodes:
                return s.name
        return None


# ---------------------------------------------------------------------------------------
# Decisions: values a cycle returns; the sink (Slurm) or the simulator carries them out.


@dataclass(frozen=True)
class GroupAlloc:
    """``gpus`` GPUs of GPU group ``group`` (its index inside the node) on node ``node``."""

    node: str
    group: int
    gpus: int


@dataclass(frozen=True)
class Decision:
    job_id: int
    plugin: str = ""
    reason: str = ""


@dataclass(frozen=True)
class SetPriority(Decision):
    """Order: higher ``priority`` starts first; ``queue`` is the 2D-LAS queue (0 = highest).

    ``site_factor``: written as the job's SiteFactor, added to Slurm's multifactor priority
    (fair-share, age, QOS, ... keep acting), instead of an absolute Priority that overrides
    them all."""

    priority: int = 0
    queue: int = 0
    site_factor: bool = False


@dataclass(frozen=True)
class Place(Decision):
    """Where a job runs: its nodes and, per node, the GPU group(s) and GPU counts.

    ``start_now`` means the cycle has found free resources for it now; otherwise the
    placement is advice for when it becomes startable.
    """

    nodes: tuple[str, ...] = ()
    allocs: tuple[GroupAlloc, ...] = ()
    start_now: bool = True
    scores: tuple[tuple[str, float], ...] = ()

    @property
    def gpus(self) -> int:
        return sum(a.gpus for a in self.allocs)


@dataclass(frozen=True)
class Reserve(Decision):
    """Hold ``nodes`` for a multi-node job so backfill does not split it."""

    name: str = ""
    nodes: tuple[str, ...] = ()
    duration_s: float = 600.0


@dataclass(frozen=True)
class EndReservation(Decision):
    name: str = ""


@dataclass(frozen=True)
class Preempt(Decision):
    """Put a running job back to pending (Tiresias demotion); it keeps its attained service."""


@dataclass(frozen=True)
class Release(Decision):
    """Make a gated pending job eligible now (StartTime=now)."""


@dataclass(frozen=True)
class Defer(Decision):
    """Keep a gated pending job ineligible for ``seconds`` more (the agent's lease: if the
    agent stops renewing it, the job becomes eligible on its own)."""

    seconds: float = 30.0


def decisions_for(decisions: Iterable[Decision], job_id: int) -> list[Decision]:
    return [d for d in decisions if d.job_id == job_id]
