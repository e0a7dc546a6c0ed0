"""Hand-built snapshots for policy tests: small clusters where every decision can be checked."""

from __future__ import annotations

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node, Switch


def node(name: str, used=(), groups=(4, 4), leaf: str = "leaf1", partitions=("gpu",),
         state: str = "IDLE", cpus: int = 32, mem_mib: int = 262144, alloc_cpus: int = 0,
         alloc_mem: int = 0) -> Node:
    gpu_groups, start = [], 0
    for i, size in enumerate(groups):
        gpu_groups.append(GpuGroup(index=i, gpu_indices=tuple(range(start, start + size)),
                                   name=f"s{i}", socket=i))
        start += size
    return Node(name=name, state=state, partitions=tuple(partitions), sockets=len(groups),
                cpus=cpus, alloc_cpus=alloc_cpus, real_memory_mib=mem_mib,
                alloc_memory_mib=alloc_mem, gpu_groups=tuple(gpu_groups),
                used_gpu_indices=frozenset(used), leaf_switch=leaf)


def pending(job_id: int, gpus: int, submit: float = 0.0, **kw) -> Job:
    kw.setdefault("partition", "gpu")
    return Job(job_id=job_id, gpus_per_job=gpus, submit_time_s=submit,
               queue_since_s=kw.pop("queue_since_s", submit), **kw)


def running(job_id: int, alloc: dict, submit: float = 0.0, attained: float = 0.0,
            start: float = 0.0, **kw) -> Job:
    """``alloc``: {node name: (gpu indices)}."""
    kw.setdefault("partition", "gpu")
    gpus = sum(len(v) for v in alloc.values())
    return Job(job_id=job_id, state=JobState.RUNNING, gpus_per_job=gpus,
               submit_time_s=submit, start_time_s=start, attained_gpu_s=attained,
               gpu_alloc=tuple((n, tuple(g)) for n, g in alloc.items()),
               nodes=tuple(alloc), queue_since_s=kw.pop("queue_since_s", submit), **kw)


def snapshot(nodes, jobs, now: float = 1000.0) -> ClusterSnapshot:
    """Nodes get used GPU indices from the running jobs (plus their own ``used``)."""
    used: dict[str, set[int]] = {n.name: set(n.used_gpu_indices) for n in nodes}
    for j in jobs:
        if j.is_running:
            for name, gpus in j.gpu_alloc:
                used[name].update(gpus)
    nodes = tuple(n.with_used(used[n.name]) if hasattr(n, "with_used") else
                  _with_used(n, used[n.name]) for n in nodes)
    leaves: dict[str, list[str]] = {}
    for n in nodes:
        leaves.setdefault(n.leaf_switch, []).append(n.name)
    switches = tuple(Switch(name=k, nodes=tuple(v)) for k, v in leaves.items())
    return ClusterSnapshot(time_s=now, nodes=nodes, jobs=tuple(jobs), switches=switches)


def _with_used(n: Node, used) -> Node:
    from dataclasses import replace
    return replace(n, used_gpu_indices=frozenset(used))


def kinds(decisions, kind):
    return [d for d in decisions if type(d).__name__ == kind]
