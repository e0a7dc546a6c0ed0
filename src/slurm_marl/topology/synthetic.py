"""Synthetic clusters of any size, for benchmarks and tests (no files, no Slurm).

Shape: ``n_nodes`` nodes of ``sockets`` sockets, each socket with one GPU group of
``gpus_per_node // sockets`` GPUs typed ``s<socket>`` and bound to that socket's cores;
``nodes_per_leaf`` nodes per leaf switch, ``leaves_per_spine`` leaves per spine switch.
Optionally a share of GPUs is busy with single- and multi-node jobs (seeded, reproducible).
"""

from __future__ import annotations

import random

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node, Partition, Switch


def synthetic_nodes_and_switches(n_nodes: int, *, gpus_per_node: int = 8, sockets: int = 2,
                                 cores_per_socket: int = 32, nodes_per_leaf: int = 40,
                                 leaves_per_spine: int = 25, partitions: int = 2
                                 ) -> tuple[tuple[Node, ...], tuple[Switch, ...],
                                            tuple[Partition, ...]]:
    width = len(str(n_nodes))
    names = [f"n{i:0{width}d}" for i in range(1, n_nodes + 1)]
    per_group = gpus_per_node // sockets
    groups = tuple(GpuGroup(index=s, gpu_indices=tuple(range(s * per_group, (s + 1) * per_group)),
                            name=f"s{s}", socket=s,
                            core_ids=tuple(range(s * cores_per_socket,
                                                 (s + 1) * cores_per_socket)))
                   for s in range(sockets))
    leaves: list[Switch] = []
    for start in range(0, n_nodes, nodes_per_leaf):
        leaves.append(Switch(name=f"leaf{len(leaves) + 1}",
                             nodes=tuple(names[start:start + nodes_per_leaf])))
    spines = [Switch(name=f"spine{i // leaves_per_spine + 1}",
                     switches=tuple(lf.name for lf in leaves[i:i + leaves_per_spine]))
              for i in range(0, len(leaves), leaves_per_spine)]
    leaf_of = {n: lf.name for lf in leaves for n in lf.nodes}
    part_names = [f"p{i}" for i in range(partitions)]
    nodes = tuple(Node(name=n, state="IDLE", partitions=(part_names[i * partitions // n_nodes],),
                       sockets=sockets, cores_per_socket=cores_per_socket, threads_per_core=1,
                       cpus=sockets * cores_per_socket, real_memory_mib=512_000,
                       gpu_groups=groups, leaf_switch=leaf_of[n])
                  for i, n in enumerate(names))
    parts = tuple(Partition(name=p, nodes=tuple(n.name for n in nodes if n.partitions[0] == p),
                            default=(i == 0)) for i, p in enumerate(part_names))
    return nodes, (*leaves, *spines), parts


def synthetic_snapshot(n_nodes: int, *, busy_fraction: float = 0.5, seed: int = 0,
                       multi_node_share: float = 0.1, **shape) -> ClusterSnapshot:
    """A snapshot with about ``busy_fraction`` of GPUs held by running jobs."""
    nodes, switches, parts = synthetic_nodes_and_switches(n_nodes, **shape)
    rng = random.Random(seed)
    used: dict[str, set[int]] = {n.name: set() for n in nodes}
    jobs: list[Job] = []
    job_id = 1
    for node in nodes:
        for group in node.gpu_groups:
            if rng.random() < busy_fraction:
                take = group.gpu_indices[:rng.randint(1, group.gpu_count)]
                used[node.name].update(take)
                jobs.append(Job(job_id=job_id, state=JobState.RUNNING, nodes=(node.name,),
                                gpus_per_node=len(take), gpu_alloc=((node.name, take),),
                                partition=node.partitions[0]))
                job_id += 1
    free_nodes = [n for n in nodes if not used[n.name]]
    rng.shuffle(free_nodes)
    pairs = int(len(free_nodes) * multi_node_share) // 2
    for k in range(pairs):
        a, b = free_nodes[2 * k], free_nodes[2 * k + 1]
        alloc = tuple((n.name, n.gpu_indices) for n in (a, b))
        for n in (a, b):
            used[n.name].update(n.gpu_indices)
        jobs.append(Job(job_id=job_id, state=JobState.RUNNING, nodes=(a.name, b.name),
                        gpus_per_node=a.gpu_count, node_count=2, gpu_alloc=alloc,
                        partition=a.partitions[0]))
        job_id += 1
    nodes = tuple(Node(**{**n.__dict__, "used_gpu_indices": frozenset(used[n.name]),
                          "alloc_cpus": 4 * len(used[n.name]),
                          "alloc_memory_mib": 16_000 * len(used[n.name])})
                  for n in nodes)
    return ClusterSnapshot(time_s=0.0, nodes=nodes, jobs=tuple(jobs), partitions=parts,
                           switches=switches)
