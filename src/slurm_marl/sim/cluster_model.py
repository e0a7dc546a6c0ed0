"""The simulated cluster's model: ``PartitionSpec`` (one partition's shape), ``SimCluster``
(the domain objects the simulator runs on) and ``build_cluster``. ``sim/cluster.py`` reads
them from a spec string or TOML file, ``sim/site_config.py`` from a site's Slurm files."""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_marl.domain import GpuGroup, Node, Partition, Switch

DEFAULT_CORES_PER_SOCKET = 16


class ClusterSpecError(ValueError):
    pass


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: int
    sockets: int
    gpus_per_socket: int
    cores_per_socket: int | None = None  # None: max(16, GPU slots per socket)
    mem_gib: int = 256
    nodes_per_leaf: int = 0          # 0: the whole partition under one leaf
    share: int = 1

    def __post_init__(self) -> None:
        if self.cores_per_socket is None:
            gpus, share = self.gpus_per_socket, self.share
            slots = gpus * share if isinstance(gpus, int) and isinstance(share, int) else 0
            object.__setattr__(self, "cores_per_socket", max(DEFAULT_CORES_PER_SOCKET, slots))

    @property
    def slots_per_node(self) -> int:
        """GPU slots per node: GPUs x ``share``."""
        return self.sockets * self.gpus_per_socket * self.share

    def validate(self, where: str, cores_hint: str = "cores={} (per socket)") -> None:
        """Check the values; ``cores_hint`` is how the error says which cores to give."""
        for field_name in ("nodes", "sockets", "gpus_per_socket", "cores_per_socket",
                           "mem_gib", "share"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ClusterSpecError(f"{where}: {field_name} must be an integer >= 1, "
                                       f"got {value!r}")
        if not isinstance(self.nodes_per_leaf, int) or self.nodes_per_leaf < 0:
            raise ClusterSpecError(f"{where}: nodes_per_leaf must be an integer >= 0")
        if not re.match(r"^[A-Za-z][A-Za-z0-9_-]*$", self.name):
            raise ClusterSpecError(f"{where}: partition name {self.name!r} is not a valid "
                                   f"Slurm partition name")
        cores, slots = self.sockets * self.cores_per_socket, self.slots_per_node
        if cores < slots:
            need = cores_hint.format(-(-slots // self.sockets))
            raise ClusterSpecError(
                f"{where}: partition {self.name!r} has {cores} CPU cores per node for {slots} "
                f"GPU slots, so CPUs, not GPUs, would bind (a slot takes at least one core): "
                f"give {need} or more, or leave it out for the default")


@dataclass(frozen=True)
class SimCluster:
    """The domain objects of a simulated cluster, plus what the simulator needs about GPUs."""

    spec: str
    partitions_spec: tuple[PartitionSpec, ...]
    nodes: tuple[Node, ...]
    switches: tuple[Switch, ...]
    partitions: tuple[Partition, ...]
    share_by_node: dict
    # What a site's Slurm files said that the simulator does not model (sim/site_config.py)
    not_modelled: tuple[str, ...] = ()

    @property
    def total_gpus(self) -> int:
        """Physical GPUs."""
        return sum(p.nodes * p.sockets * p.gpus_per_socket for p in self.partitions_spec)

    @property
    def largest_job_gpus(self) -> int:
        return max(p.nodes * p.sockets * p.gpus_per_socket for p in self.partitions_spec)

    def physical_gpu(self, node_name: str, gpu_index: int) -> int:
        """Sharing offers each physical GPU as ``share`` slots: slot-major indices, so GPUs are
        filled one slot deep before any GPU is shared."""
        share, gpus = self.share_by_node[node_name]
        return gpu_index % gpus if share > 1 else gpu_index

    def one_gpu_slots(self, node_name: str, free: list[int], k: int) -> tuple[int, ...] | None:
        """``k`` of a node's ``free`` slots on one physical GPU: the GPU with the most free
        slots (then the lowest), its lowest free slots; None if no GPU has ``k`` free."""
        by_gpu: dict[int, list[int]] = {}
        for i in free:
            by_gpu.setdefault(self.physical_gpu(node_name, i), []).append(i)
        best = max(sorted(by_gpu.items()), key=lambda kv: len(kv[1]), default=None)
        if best is None or len(best[1]) < k:
            return None
        return tuple(sorted(best[1])[:k])


def build_cluster(parts: list[PartitionSpec], spec: str) -> SimCluster:
    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise ClusterSpecError(f"cluster spec {spec!r}: partition names repeat: {names}")
    nodes: list[Node] = []
    leaves: list[Switch] = []
    share_by_node = {}
    for part in parts:
        width = max(2, len(str(part.nodes)))
        per_leaf = part.nodes_per_leaf or part.nodes
        leaf_nodes: list[str] = []
        gpus_per_node = part.sockets * part.gpus_per_socket
        groups = []
        for s in range(part.sockets):
            # Slot-major GPU indices: slot j of physical GPU p is j * gpus_per_node + p.
            indices = tuple(sorted(j * gpus_per_node + s * part.gpus_per_socket + p
                                   for j in range(part.share)
                                   for p in range(part.gpus_per_socket)))
            cores = tuple(range(s * part.cores_per_socket, (s + 1) * part.cores_per_socket))
            groups.append(GpuGroup(index=s, gpu_indices=indices, name=f"s{s}", socket=s,
                                   core_ids=cores))
        groups_t = tuple(groups)
        for i in range(part.nodes):
            name = f"{part.name}{i + 1:0{width}d}"
            leaf = f"leaf{len(leaves) + 1}"
            nodes.append(Node(name=name, state="IDLE", partitions=(part.name,),
                              sockets=part.sockets, cores_per_socket=part.cores_per_socket,
                              cpus=part.sockets * part.cores_per_socket,
                              real_memory_mib=part.mem_gib * 1024, gpu_groups=groups_t,
                              leaf_switch=leaf))
            share_by_node[name] = (part.share, gpus_per_node)
            leaf_nodes.append(name)
            if len(leaf_nodes) == per_leaf or i == part.nodes - 1:
                leaves.append(Switch(name=leaf, nodes=tuple(leaf_nodes)))
                leaf_nodes = []
    spine = Switch(name="spine", switches=tuple(s.name for s in leaves))
    partitions = tuple(Partition(name=p.name, default=(i == 0),
                                 nodes=tuple(n.name for n in nodes if p.name in n.partitions))
                       for i, p in enumerate(parts))
    return SimCluster(spec=spec, partitions_spec=tuple(parts), nodes=tuple(nodes),
                      switches=tuple(leaves) + (spine,), partitions=partitions,
                      share_by_node=share_by_node)
