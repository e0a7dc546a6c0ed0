"""Hardware readers for the node probe (``probe.py``): NVML, sysfs and lstopo.

- NVML (``import pynvml``): GPUs, PCI bus ids, NUMA node / CPU affinity, NVLink peers, PCIe
  common ancestors, P2P status. ``probe_nvml`` takes any object with pynvml's function names,
  so it runs on recorded values; a failing call becomes a warning, a failing ``nvmlInit`` an
  ``{"available": False, "error": ...}`` part.
- sysfs: GPU-vendor display controllers under ``/sys/bus/pci/devices`` and their
  ``numa_node`` (-1 reads as unknown), minor numbers from ``/proc/driver/nvidia``.
- hwloc: ``lstopo-no-graphics --of xml`` run and parsed; a missing or failing lstopo gives an
  ``{"available": False, "error": ...}`` part.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.hwloc import (GPU_VENDORS, HwlocTopology, hwloc_summary,
                                       normalise_bus_id, parse_hwloc_xml)

TOPOLOGY_LEVELS = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE",
                   50: "SYSTEM"}
P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED",
              3: "IOH_TOPOLOGY_NOT_SUPPORTED", 4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED",
              6: "UNKNOWN"}
LSTOPO_COMMAND = ("lstopo-no-graphics", "--of", "xml")


# ---------------------------------------------------------------------------------------
# NVML


def import_pynvml() -> Any | None:
    """pynvml (nvidia-ml-py), or None when it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def nvml_text(value: Any) -> str:
    """An NVML string answer (bytes in older pynvml) as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def _affinity_cpus(words: Any) -> list[int]:
    """NVML's CPU affinity: an array of 64-bit words, word 0 holding CPUs 0-63."""
    cpus = []
    for w_index, word in enumerate(list(words)):
        value = int(word)
        cpus.extend(w_index * 64 + bit for bit in range(64) if value >> bit & 1)
    return cpus


def probe_nvml(nvml: Any, cpu_count: int) -> dict:
    """GPUs and their links from NVML; ``{"available": False, "error": ...}`` when NVML fails.

    A failure inside one call (e.g. NUMA id not supported by an old driver) is recorded as a
    warning and the rest of the probe goes on.
    """
    nvml_error = nvml.NVMLError
    try:
        nvml.nvmlInit()
    except nvml_error as exc:
        return {"available": False, "error": str(exc), "gpus": [], "pairs": [], "warnings": []}
    warnings: list[str] = []

    def attempt(what: str, call: Callable[[], Any], default: Any = None) -> Any:
        try:
            return call()
        except nvml_error as exc:
            warnings.append(f"{what}: {exc}")
            return default

    try:
        driver = attempt("driver version", lambda: nvml_text(nvml.nvmlSystemGetDriverVersion()))
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        words = max(1, (cpu_count + 63) // 64)
        for i, h in enumerate(handles):
            bus = normalise_bus_id(nvml_text(nvml.nvmlDeviceGetPciInfo(h).busId))
            numa = attempt(f"GPU {i} NUMA node", lambda h=h: int(nvml.nvmlDeviceGetNumaNodeId(h)))
            gpus.append({
                "nvml_index": i,
                "name": attempt(f"GPU {i} name", lambda h=h: nvml_text(nvml.nvmlDeviceGetName(h))),
                "uuid": attempt(f"GPU {i} UUID", lambda h=h: nvml_text(nvml.nvmlDeviceGetUUID(h))),
                "pci_bus_id": bus,
                "minor_number": attempt(f"GPU {i} minor number",
                                        lambda h=h: int(nvml.nvmlDeviceGetMinorNumber(h))),
                "nvml_numa_node": numa if numa is not None and numa >= 0 else None,
                "cpu_affinity": attempt(
                    f"GPU {i} CPU affinity",
                    lambda h=h: _affinity_cpus(nvml.nvmlDeviceGetCpuAffinity(h, words)), []),
                "nvlinks": _nvlinks(nvml, nvml_error, h),
            })
        pairs = _pairs(nvml, nvml_error, handles, gpus, attempt)
        return {"available": True, "error": None, "driver_version": driver, "gpus": gpus,
                "pairs": pairs, "warnings": warnings}
    except nvml_error as exc:
        return {"available": False, "error": f"NVML failed during the probe: {exc}",
                "gpus": [], "pairs": [], "warnings": warnings}
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml_error:
            pass


def _nvlinks(nvml: Any, nvml_error: type, handle: Any) -> list[dict]:
    """Active NVLinks of one GPU and the PCI bus id at the other end (GPU or NVSwitch)."""
    links = []
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    for link in range(max_links):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != enabled:
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except nvml_error:
            continue  # link absent on this GPU model, or NVLink not supported at all
        links.append({"link": link,
                      "remote_pci_bus_id": normalise_bus_id(nvml_text(remote.busId))})
    return links


def p2p_read_index(nvml: Any) -> int:
    """NVML's P2P capability index for reads (pynvml defines it with a stray trailing
    comma, so as a tuple)."""
    read_index = getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    return read_index[0] if isinstance(read_index, tuple) else read_index


def _pairs(nvml: Any, nvml_error: type, handles: list, gpus: list[dict],
           attempt: Callable) -> list[dict]:
    by_bus = {g["pci_bus_id"]: g["nvml_index"] for g in gpus}
    read_index = p2p_read_index(nvml)
    switch_links = [sum(1 for lk in g["nvlinks"] if lk["remote_pci_bus_id"] not in by_bus)
                    for g in gpus]
    pairs = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            level = attempt(f"GPUs {i},{j} common ancestor",
                            lambda i=i, j=j: int(nvml.nvmlDeviceGetTopologyCommonAncestor(
                                handles[i], handles[j])))
            p2p = attempt(f"GPUs {i},{j} P2P status",
                          lambda i=i, j=j: int(nvml.nvmlDeviceGetP2PStatus(
                              handles[i], handles[j], read_index)))
            direct = sum(1 for lk in gpus[i]["nvlinks"]
                         if by_bus.get(lk["remote_pci_bus_id"]) == j)
            via_switch = min(switch_links[i], switch_links[j])
            pairs.append({"gpus": [i, j],
                          "common_ancestor": TOPOLOGY_LEVELS.get(level) if level is not None
                          else None,
                          "p2p_read": P2P_STATUS.get(p2p, str(p2p)) if p2p is not None else None,
                          "nvlink_count": direct or via_switch,
                          "nvlink_via": "direct" if direct else ("nvswitch" if via_switch
                                                                 else None)})
    return pairs


# ---------------------------------------------------------------------------------------
# sysfs and hwloc


def sysfs_gpus(sysfs_root: Path, proc_root: Path) -> list[dict]:
    """Display/3D controllers of GPU vendors under ``/sys/bus/pci/devices``, in bus order."""
    base = sysfs_root / "bus" / "pci" / "devices"
    found = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    for entry in entries:
        cls = _read(entry / "class")
        vendor = _read(entry / "vendor")
        if not cls or not vendor or not cls.lower().startswith("0x03"):
            continue
        vendor_id = vendor.lower().removeprefix("0x")
        if vendor_id not in GPU_VENDORS:
            continue
        bus = normalise_bus_id(entry.name)
        found.append({"pci_bus_id": bus, "vendor": GPU_VENDORS[vendor_id],
                      "sysfs_numa_node": sysfs_numa_node(sysfs_root, bus),
                      "minor_number": _nvidia_minor(proc_root, bus)})
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def sysfs_numa_node(sysfs_root: Path, bus_id: str) -> int | None:
    """``numa_node`` of a PCI device; -1 (no NUMA information) and unreadable give None."""
    return numa_value(sysfs_numa_raw(sysfs_root, bus_id))


def sysfs_numa_raw(sysfs_root: Path, bus_id: str) -> str | None:
    """``numa_node`` of a PCI device as written (e.g. ``"-1"``), None when unreadable."""
    return _read(sysfs_root / "bus" / "pci" / "devices" / normalise_bus_id(bus_id) / "numa_node")


def numa_value(text: str | None) -> int | None:
    """A ``numa_node`` text as a node id; -1 and non-numbers give None."""
    if text is None or not re.fullmatch(r"-?\d+", text):
        return None
    value = int(text)
    return value if value >= 0 else None


def _nvidia_minor(proc_root: Path, bus_id: str) -> int | None:
    text = _read(proc_root / "driver" / "nvidia" / "gpus" / bus_id / "information")
    m = re.search(r"Device Minor:\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def run_lstopo() -> str:
    """``lstopo-no-graphics --of xml``; raises OSError / CalledProcessError when it fails."""
    done = subprocess.run(LSTOPO_COMMAND, capture_output=True, text=True, timeout=60,
                          check=True)
    return done.stdout


def hwloc_part(lstopo: Callable[[], str] | None) -> tuple[HwlocTopology | None, dict]:
    """The parsed lstopo topology (or None) and the document's ``hwloc`` part."""
    if lstopo is None:
        return None, {"available": False, "error": "hwloc not asked for"}
    try:
        text = lstopo()
    except FileNotFoundError:
        return None, {"available": False,
                      "error": "lstopo-no-graphics not found (install hwloc-nox)"}
    except (OSError, subprocess.SubprocessError) as exc:
        return None, {"available": False, "error": f"lstopo-no-graphics failed: {exc}"}
    try:
        topology = parse_hwloc_xml(text, "lstopo-no-graphics --of xml")
    except TopologyConfigError as exc:
        return None, {"available": False, "error": str(exc)}
    return topology, {"available": True, "error": None, **hwloc_summary(topology)}

