"""hwloc XML (``lstopo-no-graphics --of xml``): sockets, cores, NUMA nodes, PCI devices.

Why hwloc: it is what Slurm's own task/affinity and gres autodetection look at, it works
without any GPU driver, and it places every PCI device under the package (socket) whose
host bridge it hangs off. Both hwloc 2.x (NUMA nodes as memory children) and 1.x (NUMA
nodes as parents, ``Socket`` for packages) are read.

Cores get their *logical* index in topology order, which is how Slurm numbers the cores
that gres.conf ``Cores=`` names (socket by socket).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from slurm_marl.topology.errors import TopologyConfigError

GPU_VENDORS = {"10de": "NVIDIA", "1002": "AMD", "8086": "Intel"}
_PACKAGE_TYPES = {"Package", "Socket"}
_IO_TYPES = {"Bridge", "PCIDev", "OSDev", "Misc"}


@dataclass(frozen=True)
class HwlocPackage:
    os_index: int
    cpus: tuple[int, ...]
    core_ids: tuple[int, ...]
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class HwlocNumaNode:
    os_index: int
    cpus: tuple[int, ...]
    local_memory_bytes: int = 0


@dataclass(frozen=True)
class HwlocPciDevice:
    """``bridges`` lists (gp_index, bridge_type) from the host bridge down to this device."""

    bus_id: str
    class_id: str
    vendor_id: str
    device_id: str
    package: int | None
    numa_nodes: tuple[int, ...]
    os_devices: tuple[str, ...] = ()
    bridges: tuple[tuple[int, str], ...] = ()
    pci_link_speed_gbps: float | None = None

    @property
    def is_gpu(self) -> bool:
        """Display (0300) or 3D (0302) controllers from a GPU vendor."""
        return self.class_id[:2] == "03" and self.vendor_id in GPU_VENDORS


@dataclass(frozen=True)
class HwlocTopology:
    hostname: str | None
    packages: tuple[HwlocPackage, ...]
    numa_nodes: tuple[HwlocNumaNode, ...]
    pci_devices: tuple[HwlocPciDevice, ...]
    pu_count: int
    core_count: int

    @property
    def gpus(self) -> tuple[HwlocPciDevice, ...]:
        return tuple(d for d in self.pci_devices if d.is_gpu)

    def device(self, bus_id: str) -> HwlocPciDevice | None:
        wanted = normalise_bus_id(bus_id)
        for d in self.pci_devices:
            if d.bus_id == wanted:
                return d
        return None

    def package_of_core(self, core_id: int) -> int | None:
        for p in self.packages:
            if core_id in p.core_ids:
                return p.os_index
        return None


def normalise_bus_id(bus_id: str) -> str:
    """NVML says ``00000000:07:00.0``, sysfs ``0000:07:00.0``: lower case, 4-digit domain."""
    text = bus_id.strip().lower()
    m = re.fullmatch(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", text)
    if not m:
        return text
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def parse_cpuset(text: str | None) -> tuple[int, ...]:
    """hwloc bitmap ``0x00000003`` or ``0xffffffff,0x0000000f`` -> CPU numbers.

    Words are 32 bits, most significant first. An infinite prefix (``0xf...f``) stands for
    "all further CPUs" and is dropped: only the finite words name real CPUs.
    """
    if not text:
        return ()
    words = [w.strip() for w in text.split(",")]
    words = [w for w in words if "..." not in w]
    if not words:
        return ()
    bits = 0
    for w in words:
        digits = w[2:] if w.lower().startswith("0x") else w
        if not re.fullmatch(r"[0-9a-fA-F]{1,8}", digits):
            raise ValueError(f"bad cpuset word {w!r}")
        bits = (bits << 32) | int(digits, 16)
    return tuple(i for i in range(bits.bit_length()) if bits >> i & 1)


@dataclass
class _Walk:
    packages: list[dict] = field(default_factory=list)
    numa: list[HwlocNumaNode] = field(default_factory=list)
    devices: list[dict] = field(default_factory=list)
    core_counter: int = 0
    pus: set[int] = field(default_factory=set)
    hostname: str | None = None


def _int_attr(elem: ET.Element, name: str, default: int = 0) -> int:
    value = elem.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{elem.get('type')} {name}={value!r} is not an integer") from None


def _walk(elem: ET.Element, state: _Walk, package: dict | None, cpus: tuple[int, ...],
          bridges: tuple[tuple[int, str], ...]) -> None:
    kind = elem.get("type", "")
    if kind == "Machine":
        for info in elem.findall("info"):
            if info.get("name") == "HostName":
                state.hostname = info.get("value")
    if kind not in _IO_TYPES and elem.get("cpuset") is not None:
        cpus = parse_cpuset(elem.get("cpuset"))
    if kind in _PACKAGE_TYPES:
        package = {"os_index": _int_attr(elem, "os_index", len(state.packages)),
                   "cpus": cpus, "cores": []}
        state.packages.append(package)
    elif kind == "Core":
        if package is not None:
            package["cores"].append(state.core_counter)
        state.core_counter += 1
    elif kind == "PU":
        state.pus.add(_int_attr(elem, "os_index", len(state.pus)))
    elif kind == "NUMANode":
        state.numa.append(HwlocNumaNode(os_index=_int_attr(elem, "os_index", len(state.numa)),
                                        cpus=cpus,
                                        local_memory_bytes=_int_attr(elem, "local_memory")))
    elif kind == "Bridge":
        bridges = (*bridges, (_int_attr(elem, "gp_index"), elem.get("bridge_type", "")))
    elif kind == "PCIDev":
        state.devices.append(_device_record(elem, package, cpus, bridges))
    for child in elem.findall("object"):
        _walk(child, state, package, cpus, bridges)


_PCI_TYPE = re.compile(r"\s*([0-9a-fA-F]{4})\s*\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")


def _device_record(elem: ET.Element, package: dict | None, cpus: tuple[int, ...],
                   bridges: tuple[tuple[int, str], ...]) -> dict:
    m = _PCI_TYPE.match(elem.get("pci_type", ""))
    if not m:
        raise ValueError(f"PCIDev {elem.get('pci_busid')} has unreadable pci_type "
                         f"{elem.get('pci_type')!r}")
    speed = elem.get("pci_link_speed")
    try:
        speed_gbps = float(speed) * 8 if speed is not None and float(speed) > 0 else None
    except ValueError:
        speed_gbps = None
    return {"bus_id": normalise_bus_id(elem.get("pci_busid", "")),
            "class_id": m.group(1).lower(), "vendor_id": m.group(2).lower(),
            "device_id": m.group(3).lower(),
            "package": package["os_index"] if package is not None else None,
            "cpus": cpus, "bridges": bridges,
            "os_devices": tuple(o.get("name", "") for o in elem.iter("object")
                                if o.get("type") == "OSDev"),
            "speed_gbps": speed_gbps}


def _locate(record: dict, packages: list[HwlocPackage],
            numa: list[HwlocNumaNode]) -> tuple[int | None, tuple[int, ...]]:
    """Package and NUMA nodes of an I/O device from its nearest non-I/O ancestor's cpuset."""
    cpus = set(record["cpus"])
    package = record["package"]
    if package is None and cpus:
        holders = [p.os_index for p in packages if cpus <= set(p.cpus)]
        package = holders[0] if len(holders) == 1 else None
    scope = set(cpus)
    if package is not None:
        scope = set(next(p.cpus for p in packages if p.os_index == package))
    local = tuple(n.os_index for n in numa if n.cpus and set(n.cpus) <= scope)
    return package, local


def parse_hwloc_xml(xml_text: str, source: str = "<lstopo xml>") -> HwlocTopology:
    """Parse hwloc XML; malformed XML or attributes raise TopologyConfigError with the line."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise TopologyConfigError(f"not valid hwloc XML ({exc})", source, line) from None
    if root.tag != "topology":
        raise TopologyConfigError(f"root element is <{root.tag}>, expected <topology>", source)
    state = _Walk()
    try:
        for top in root.findall("object"):
            _walk(top, state, None, (), ())
    except ValueError as exc:
        raise TopologyConfigError(f"bad hwloc XML: {exc}", source) from None
    except RecursionError:
        raise TopologyConfigError("hwloc XML nested too deeply", source) from None
    numa = sorted(state.numa, key=lambda n: n.os_index)
    packages = []
    for p in state.packages:
        local = tuple(n.os_index for n in numa if n.cpus and set(n.cpus) <= set(p["cpus"]))
        packages.append(HwlocPackage(os_index=p["os_index"], cpus=p["cpus"],
                                     core_ids=tuple(p["cores"]), numa_nodes=local))
    packages.sort(key=lambda p: p.os_index)
    devices = []
    for record in state.devices:
        package, local = _locate(record, packages, numa)
        devices.append(HwlocPciDevice(
            bus_id=record["bus_id"], class_id=record["class_id"],
            vendor_id=record["vendor_id"], device_id=record["device_id"], package=package,
            numa_nodes=local, os_devices=record["os_devices"], bridges=record["bridges"],
            pci_link_speed_gbps=record["speed_gbps"]))
    return HwlocTopology(hostname=state.hostname, packages=tuple(packages),
                         numa_nodes=tuple(numa), pci_devices=tuple(devices),
                         pu_count=len(state.pus), core_count=state.core_counter)


def common_ancestor_level(a: HwlocPciDevice, b: HwlocPciDevice) -> str:
    """NVML-style name of the closest thing two PCI devices share.

    SINGLE / MULTIPLE: one or several PCIe switches (PCI-to-PCI bridges) in common;
    HOSTBRIDGE: the same host bridge; NODE: the same package (NUMA side), different host
    bridges; SYSTEM: across the socket interconnect, or unknown locality.
    """
    shared = 0
    for x, y in zip(a.bridges, b.bridges, strict=False):
        if x[0] != y[0]:
            break
        shared += 1
    if shared:
        common = a.bridges[:shared]
        if common[-1][1] != "0-1":  # the deepest shared bridge is a PCI-to-PCI one
            p2p_between = (len(a.bridges) - shared) + (len(b.bridges) - shared) + 1
            return "SINGLE" if p2p_between <= 3 else "MULTIPLE"
        return "HOSTBRIDGE"
    if a.package is not None and a.package == b.package:
        return "NODE"
    return "SYSTEM"


def hwloc_summary(topology: HwlocTopology) -> dict:
    """JSON-ready summary for the probe document."""
    return {
        "hostname": topology.hostname,
        "pu_count": topology.pu_count,
        "core_count": topology.core_count,
        "packages": [{"os_index": p.os_index, "cpus": list(p.cpus),
                      "core_ids": list(p.core_ids), "numa_nodes": list(p.numa_nodes)}
                     for p in topology.packages],
        "numa_nodes": [{"os_index": n.os_index, "cpus": list(n.cpus),
                        "local_memory_bytes": n.local_memory_bytes}
                       for n in topology.numa_nodes],
        "gpus": [{"bus_id": d.bus_id, "vendor": GPU_VENDORS.get(d.vendor_id, d.vendor_id),
                  "device_id": d.device_id, "package": d.package,
                  "numa_nodes": list(d.numa_nodes), "os_devices": list(d.os_devices)}
                 for d in topology.gpus],
        "pci_device_count": len(topology.pci_devices),
    }
