"""Simulated cluster shapes: nodes x sockets x GPUs per socket, under leaf and spine switches.

A spec string describes one or more partitions joined by ``+``::

    8x2x4                       8 nodes, 2 sockets (GPU groups) of 4 GPUs each
    8x2x4:leaf=4                ... 4 nodes per leaf switch (2 leaves under one spine)
    8x2x4:leaf=4:name=a+4x1x8:name=b    two partitions, "a" and "b"

Options after ``:``: ``leaf=N`` nodes per leaf switch (default: all nodes of the partition
under one leaf), ``name=P`` partition name (default ``gpu``, then ``gpu2``...), ``cores=N``
CPU cores per socket (default max(16, GPU slots per socket)), ``mem=N`` memory per node in
GiB (default 256), ``share=K`` Slurm GPU sharing (shards/MPS): each GPU offered as K slots
(default 1 = whole GPUs). A TOML file says the same (``[[partition]]`` tables with keys
``name``, ``nodes``, ``sockets``, ``gpus_per_socket``, ``cores_per_socket``, ``mem_gib``,
``nodes_per_leaf``, ``share``).

Jobs get CPUs in proportion to their GPU slots (cores per node / slots per node each), so GPUs
stay the binding resource only while a node has at least one core per GPU slot: fewer cores
given explicitly is an error that says which ``cores=`` to give.

Leaves are numbered across partitions; all leaves hang under one spine switch.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from slurm_marl.domain import GpuGroup, Node, Partition, Switch

_SHAPE = re.compile(r"^(\d+)x(\d+)x(\d+)$")
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


def parse_cluster(spec: str | Path) -> SimCluster:
    text = str(spec)
    if text.endswith(".toml") or (Path(text).is_file() and "x" not in Path(text).name):
        return _from_toml(Path(text))
    parts = []
    for i, chunk in enumerate(text.split("+")):
        parts.append(_parse_chunk(chunk.strip(), i, text))
    return build_cluster(parts, text)


def _parse_chunk(chunk: str, index: int, whole: str) -> PartitionSpec:
    fields = chunk.split(":")
    m = _SHAPE.match(fields[0])
    if not m:
        raise ClusterSpecError(f"cluster spec {whole!r}: {fields[0]!r} is not "
                               f"NODESxSOCKETSxGPUS_PER_SOCKET (e.g. 8x2x4)")
    opts: dict = {}
    for opt in fields[1:]:
        key, sep, value = opt.partition("=")
        if not sep:
            raise ClusterSpecError(f"cluster spec {whole!r}: option {opt!r} needs key=value")
        opts[key] = value
    name = opts.pop("name", "gpu" if index == 0 else f"gpu{index + 1}")
    mapping = {"leaf": "nodes_per_leaf", "cores": "cores_per_socket", "mem": "mem_gib",
               "share": "share"}
    kwargs = {}
    for key, value in opts.items():
        if key not in mapping:
            raise ClusterSpecError(f"cluster spec {whole!r}: unknown option {key!r} "
                                   f"(known: {', '.join(sorted(mapping))}, name)")
        try:
            kwargs[mapping[key]] = int(value)
        except ValueError:
            raise ClusterSpecError(f"cluster spec {whole!r}: {key}={value!r} is not an "
                                   f"integer") from None
    part = PartitionSpec(name=name, nodes=int(m[1]), sockets=int(m[2]),
                         gpus_per_socket=int(m[3]), **kwargs)
    part.validate(f"cluster spec {whole!r}")
    return part


def _from_toml(path: Path) -> SimCluster:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClusterSpecError(f"cannot read cluster file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClusterSpecError(f"{path}: invalid TOML: {exc}") from None
    tables = data.get("partition")
    if not isinstance(tables, list) or not tables:
        raise ClusterSpecError(f"{path}: needs at least one [[partition]] table")
    parts = []
    allowed = set(PartitionSpec.__dataclass_fields__)
    for i, table in enumerate(tables):
        unknown = set(table) - allowed
        if unknown:
            raise ClusterSpecError(f"{path}: [[partition]] #{i + 1}: unknown key(s) "
                                   f"{sorted(unknown)}; allowed: {sorted(allowed)}")
        missing = {"nodes", "sockets", "gpus_per_socket"} - set(table)
        if missing:
            raise ClusterSpecError(f"{path}: [[partition]] #{i + 1}: missing {sorted(missing)}")
        table = dict(table)
        table.setdefault("name", "gpu" if i == 0 else f"gpu{i + 1}")
        part = PartitionSpec(**table)
        part.validate(f"{path}: [[partition]] #{i + 1}", cores_hint="cores_per_socket = {}")
        parts.append(part)
    return build_cluster(parts, str(path))


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
