"""GPU groups per node, derived from the files Slurm itself uses to number and bind GPUs.

Slurm's GPU index (``IDX`` in ``scontrol show -d job``, ``CUDA_VISIBLE_DEVICES``) is the
position of the device file in the node's sorted gres File list; so GPU index here = position
after a natural sort of the files (``nvidia2`` before ``nvidia10``). A GPU group is the set
of GPUs with the same gres ``Type`` and the same ``Cores`` binding: exactly what a typed
request such as ``gpu:s1:2`` with enforce-binding pins a job to. The group's socket is the
socket that holds all its cores (Slurm core index // CoresPerSocket), when there is one.

Nodes without gres.conf lines get their groups from slurm.conf's ``Gres=`` (one group per
typed item, in listed order; one group for an untyped count); sockets are then unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slurm_marl.domain import GpuGroup
from slurm_marl.slurm_integration.text import gpu_groups
from slurm_marl.topology.confparse import SourceLine, natural_key
from slurm_marl.topology.gres_conf import GresConf, GresSpec
from slurm_marl.topology.slurm_conf import NodeSpec, SlurmConf


@dataclass(frozen=True)
class GpuDevice:
    """One GPU of a node as gres.conf describes it; ``index`` is Slurm's IDX."""

    index: int
    file: str | None
    type: str | None
    cores: tuple[int, ...]
    links: tuple[int, ...] = ()
    source: SourceLine | None = None

    @property
    def minor_number(self) -> int | None:
        """Trailing number of the device file (``/dev/nvidia3`` -> 3), used to match NVML."""
        if not self.file:
            return None
        digits = ""
        for ch in reversed(self.file.split(",")[0]):
            if not ch.isdigit():
                break
            digits = ch + digits
        return int(digits) if digits else None


def gpu_devices_for_node(gres_conf: GresConf, node_name: str) -> tuple[GpuDevice, ...]:
    """The node's GPUs in Slurm's index order; lines with only ``Count=`` come after files."""
    with_files: list[tuple[str, object]] = []
    counted: list[object] = []
    for line in gres_conf.lines_for(node_name, "gpu"):
        if line.files:
            with_files.extend((f, line) for f in line.files)
        else:
            counted.extend([line] * line.count)
    ordered = sorted(with_files, key=lambda item: natural_key(item[0]))
    devices: list[GpuDevice] = []
    for file, line in ordered:
        devices.append(GpuDevice(index=len(devices), file=file, type=line.type,
                                 cores=line.cores, links=line.links, source=line.source))
    for line in counted:
        devices.append(GpuDevice(index=len(devices), file=None, type=line.type,
                                 cores=line.cores, links=line.links, source=line.source))
    return tuple(devices)


def socket_of_cores(cores: tuple[int, ...], core_to_socket: Callable[[int], int | None]
                    ) -> int | None:
    sockets = {core_to_socket(c) for c in cores}
    if len(sockets) == 1:
        return next(iter(sockets))
    return None


def groups_from_devices(devices: tuple[GpuDevice, ...],
                        core_to_socket: Callable[[int], int | None] | None
                        ) -> tuple[GpuGroup, ...]:
    """Group devices by (Type, Cores); groups are ordered by their smallest GPU index."""
    buckets: dict[tuple[str | None, tuple[int, ...]], list[int]] = {}
    for device in devices:
        buckets.setdefault((device.type, device.cores), []).append(device.index)
    ordered = sorted(buckets.items(), key=lambda item: min(item[1]))
    groups = []
    for position, ((gres_type, cores), indices) in enumerate(ordered):
        socket = socket_of_cores(cores, core_to_socket) if cores and core_to_socket else None
        groups.append(GpuGroup(index=position, gpu_indices=tuple(sorted(indices)),
                               name=gres_type, socket=socket, core_ids=cores))
    return tuple(groups)


def groups_from_gres_specs(specs: tuple[GresSpec, ...]) -> tuple[GpuGroup, ...]:
    """Without gres.conf: one group per typed ``gpu:<type>:<n>`` item, numbered in order."""
    return gpu_groups(s for s in specs if s.name == "gpu" and s.count > 0)


def core_to_socket_for(node: NodeSpec | None) -> Callable[[int], int | None] | None:
    """Slurm numbers cores socket by socket: core c sits on socket c // CoresPerSocket."""
    if node is None or node.cores_per_socket <= 0:
        return None
    cores_per_socket = node.cores_per_socket
    sockets = node.sockets

    def lookup(core: int) -> int | None:
        socket = core // cores_per_socket
        return socket if socket < sockets else None

    return lookup


def node_layout(node: NodeSpec, gres_conf: GresConf | None) -> tuple[GpuGroup, ...]:
    devices = gpu_devices_for_node(gres_conf, node.name) if gres_conf is not None else ()
    if devices:
        return groups_from_devices(devices, core_to_socket_for(node))
    return groups_from_gres_specs(node.gres)


def snapshot_layout_from_files(slurm_conf: SlurmConf, gres_conf: GresConf | None = None
                               ) -> dict[str, tuple[GpuGroup, ...]]:
    """Per node, the ``GpuGroup``s the Slurm layer puts into ``Node.gpu_groups``.

    For the test cluster (``File=$ROOT/dev/nvidia[0-1] Type=s0 Cores=0-3`` and
    ``nvidia[2-3] Type=s1 Cores=4-7``, 2 sockets x 4 cores) every node gets
    ``GpuGroup(0, (0, 1), "s0", 0, (0, 1, 2, 3))`` and ``GpuGroup(1, (2, 3), "s1", 1, (4..7))``.
    """
    return {node.name: node_layout(node, gres_conf) for node in slurm_conf.nodes}
