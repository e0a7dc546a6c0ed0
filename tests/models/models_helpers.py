"""Tiny snapshots for the model tests (imported by name: pytest puts this folder on the path)."""

import torch

from slurm_marl.domain import ClusterSnapshot, Job, JobState

torch.set_num_threads(1)


def snapshot_with(cluster, running=(), pending=(), time_s=1000.0) -> ClusterSnapshot:
    """``running``: (job_id, model, ((node, (gpus...)), ...)); ``pending``: Job values."""
    used: dict[str, set[int]] = {}
    jobs = []
    for job_id, model, alloc in running:
        for name, gpus in alloc:
            used.setdefault(name, set()).update(gpus)
        n_gpus = sum(len(g) for _, g in alloc)
        partition = next(n.partitions[0] for n in cluster.nodes if n.name == alloc[0][0])
        jobs.append(Job(job_id=job_id, state=JobState.RUNNING, partition=partition,
                        gpus_per_job=n_gpus, nodes=tuple(n for n, _ in alloc),
                        gpu_alloc=tuple(alloc), model_type=model, cpus=n_gpus,
                        node_count=len(alloc)))
    nodes = []
    for node in cluster.nodes:
        d = dict(node.__dict__)
        d["used_gpu_indices"] = frozenset(used.get(node.name, ()))
        d["alloc_cpus"] = len(used.get(node.name, ()))
        new = object.__new__(type(node))
        new.__dict__.update(d)
        nodes.append(new)
    return ClusterSnapshot(time_s=time_s, nodes=tuple(nodes), jobs=tuple(jobs) + tuple(pending),
                           partitions=cluster.partitions, switches=cluster.switches)
