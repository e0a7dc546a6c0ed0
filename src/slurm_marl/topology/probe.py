"""Node probe: what one compute node's GPUs, sockets and links really look like.

Runs on every compute node (systemd timer, HealthCheckProgram or prolog) and writes
``<output_dir>/<node>.json``; the controller reads these documents into the topology graph.
Sources, best first: NVML (``import pynvml``: GPUs, PCI bus ids, NUMA node / CPU affinity,
NVLink peers, PCIe common ancestors, P2P status), hwloc XML (``lstopo-no-graphics --of
xml``: packages, cores, where each PCI device hangs), sysfs (``/sys/bus/pci/devices/<bus>/
numa_node``). When NVML is missing or fails (``pynvml.NVMLError``, e.g. "NVML Shared Library
Not Found") or sysfs says ``numa_node = -1``, the document says so in ``fallbacks`` (and a
warning is logged), and GPU groups come from gres.conf's ``Cores=`` binding instead.

The NVML part takes any object with pynvml's function names, so it runs on recorded values.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import GresConf, parse_gres_conf
from slurm_marl.topology.hwloc import (GPU_VENDORS, HwlocTopology, hwloc_summary,
                                       normalise_bus_id, parse_hwloc_xml)
from slurm_marl.topology.layout import (core_to_socket_for, gpu_devices_for_node,
                                        groups_from_devices)
from slurm_marl.topology.slurm_conf import SlurmConf, parse_slurm_conf

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
TOPOLOGY_LEVELS = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE",
                   50: "SYSTEM"}
P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED",
              3: "IOH_TOPOLOGY_NOT_SUPPORTED", 4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED",
              6: "UNKNOWN"}
LSTOPO_COMMAND = ("lstopo-no-graphics", "--of", "xml")


def _text(value: Any) -> str:
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
        driver = attempt("driver version", lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        words = max(1, (cpu_count + 63) // 64)
        for i, h in enumerate(handles):
            bus = normalise_bus_id(_text(nvml.nvmlDeviceGetPciInfo(h).busId))
            numa = attempt(f"GPU {i} NUMA node", lambda h=h: int(nvml.nvmlDeviceGetNumaNodeId(h)))
            gpus.append({
                "nvml_index": i,
                "name": attempt(f"GPU {i} name", lambda h=h: _text(nvml.nvmlDeviceGetName(h))),
                "uuid": attempt(f"GPU {i} UUID", lambda h=h: _text(nvml.nvmlDeviceGetUUID(h))),
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
                      "remote_pci_bus_id": normalise_bus_id(_text(remote.busId))})
    return links


def _pairs(nvml: Any, nvml_error: type, handles: list, gpus: list[dict],
           attempt: Callable) -> list[dict]:
    by_bus = {g["pci_bus_id"]: g["nvml_index"] for g in gpus}
    read_index = getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    if isinstance(read_index, tuple):  # pynvml defines it with a stray trailing comma
        read_index = read_index[0]
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
    return _numa_value(_sysfs_numa_raw(sysfs_root, bus_id))


def _sysfs_numa_raw(sysfs_root: Path, bus_id: str) -> str | None:
    return _read(sysfs_root / "bus" / "pci" / "devices" / normalise_bus_id(bus_id) / "numa_node")


def _numa_value(text: str | None) -> int | None:
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


def _hwloc_part(lstopo: Callable[[], str] | None) -> tuple[HwlocTopology | None, dict]:
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


# ---------------------------------------------------------------------------------------


def _import_pynvml() -> Any | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _slurm_indices(gpus: list[dict], gres_conf: GresConf | None, node_name: str,
                   notes: list[str]) -> None:
    """Give each GPU Slurm's index: its gres.conf device file's position, matched by minor
    number; without a match, PCI bus order, which is how Slurm numbers autodetected GPUs
    (gres.conf(5), Links)."""
    devices = gpu_devices_for_node(gres_conf, node_name) if gres_conf is not None else ()
    by_minor = {d.minor_number: d for d in devices if d.minor_number is not None}
    matched = bool(devices) and all(g.get("minor_number") in by_minor for g in gpus)
    if devices and not matched:
        notes.append("GPU minor numbers do not match gres.conf File= names; GPU index = "
                     "PCI bus order")
    for position, gpu in enumerate(sorted(gpus, key=lambda g: g["pci_bus_id"])):
        if matched:
            device = by_minor[gpu["minor_number"]]
            gpu["index"] = device.index
            gpu["gres_type"] = device.type
        else:
            gpu["index"] = position
            gpu["gres_type"] = None
    gpus.sort(key=lambda g: g["index"])


def _locate_gpus(gpus: list[dict], hw: HwlocTopology | None, sysfs_root: Path) -> None:
    """NUMA node and socket of each GPU: NVML, then sysfs, then hwloc."""
    for gpu in gpus:
        bus = gpu["pci_bus_id"]
        raw = _sysfs_numa_raw(sysfs_root, bus)
        gpu["sysfs_numa_node_raw"] = raw
        sysfs = _numa_value(raw)
        device = hw.device(bus) if hw is not None else None
        hw_numa = device.numa_nodes[0] if device is not None and len(device.numa_nodes) == 1 \
            else None
        if gpu.get("nvml_numa_node") is not None:
            gpu["numa_node"], gpu["numa_source"] = gpu["nvml_numa_node"], "nvml"
        elif sysfs is not None:
            gpu["numa_node"], gpu["numa_source"] = sysfs, "sysfs"
        elif hw_numa is not None:
            gpu["numa_node"], gpu["numa_source"] = hw_numa, "hwloc"
        else:
            gpu["numa_node"], gpu["numa_source"] = None, None
        socket_id = device.package if device is not None else None
        if socket_id is None and hw is not None and gpu["numa_node"] is not None:
            holders = [p.os_index for p in hw.packages if gpu["numa_node"] in p.numa_nodes]
            socket_id = holders[0] if len(holders) == 1 else None
        if socket_id is None and hw is not None and gpu.get("cpu_affinity"):
            affinity = set(gpu["cpu_affinity"])
            holders = [p.os_index for p in hw.packages if affinity <= set(p.cpus)]
            socket_id = holders[0] if len(holders) == 1 else None
        gpu["socket"] = socket_id


def _groups_from_probe(gpus: list[dict], hw: HwlocTopology | None) -> list[dict]:
    buckets: dict[tuple, list[dict]] = {}
    for gpu in gpus:
        buckets.setdefault((gpu["socket"], gpu["numa_node"]), []).append(gpu)
    groups = []
    for (socket_id, numa), members in sorted(buckets.items(),
                                            key=lambda kv: min(g["index"] for g in kv[1])):
        cores: tuple[int, ...] = ()
        if hw is not None and socket_id is not None:
            cores = next((p.core_ids for p in hw.packages if p.os_index == socket_id), ())
        types = {g.get("gres_type") for g in members}
        groups.append({"index": len(groups),
                       "gpu_indices": sorted(g["index"] for g in members),
                       "name": types.pop() if len(types) == 1 else None,
                       "socket": socket_id, "numa_node": numa, "core_ids": list(cores),
                       "source": members[0].get("numa_source") or "hwloc"})
    return groups


def _groups_from_gres(gres_conf: GresConf | None, slurm_conf: SlurmConf | None,
                      node_name: str, hw: HwlocTopology | None) -> list[dict]:
    if gres_conf is None:
        return []
    devices = gpu_devices_for_node(gres_conf, node_name)
    node_spec = slurm_conf.node(node_name) if slurm_conf is not None else None
    lookup = core_to_socket_for(node_spec)
    if lookup is None and hw is not None:
        lookup = hw.package_of_core
    return [{"index": g.index, "gpu_indices": list(g.gpu_indices), "name": g.name,
             "socket": g.socket, "numa_node": None, "core_ids": list(g.core_ids),
             "source": "gres.conf"}
            for g in groups_from_devices(devices, lookup)]


def probe_node(*, nvml: Any | None = None, lstopo: Callable[[], str] | None = run_lstopo,
               sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
               gres_conf: GresConf | None = None, slurm_conf: SlurmConf | None = None,
               node_name: str | None = None, use_nvml: bool = True,
               now_s: float | None = None) -> dict:
    """Probe this machine; a JSON-ready document (``schema_version`` 1).

    ``nvml`` is pynvml or an object with the same names (None: import pynvml); ``lstopo``
    returns hwloc XML (None: skip hwloc). ``node_name`` is the Slurm node name (default: the
    short host name), used to find the node's gres.conf lines.
    """
    name = node_name or socket.gethostname().split(".")[0]
    fallbacks: list[str] = []
    notes: list[str] = []
    hw, hw_part = _hwloc_part(lstopo)
    if not hw_part["available"]:
        fallbacks.append(f"hwloc unavailable: {hw_part['error']}")
    cpu_count = hw.pu_count if hw is not None and hw.pu_count else (os.cpu_count() or 1)

    if nvml is None and use_nvml:
        nvml = _import_pynvml()
    if nvml is None:
        nvml_part = {"available": False, "error": "nvidia-ml-py (pynvml) not importable"
                     if use_nvml else "NVML not asked for", "gpus": [], "pairs": [],
                     "warnings": []}
    else:
        nvml_part = probe_nvml(nvml, cpu_count)
    if nvml_part["available"]:
        gpus = [dict(g, source="nvml") for g in nvml_part["gpus"]]
    else:
        fallbacks.append(f"NVML unavailable ({nvml_part['error']}): GPUs from sysfs PCI scan")
        gpus = [dict(g, source="sysfs") for g in sysfs_gpus(sysfs_root, proc_root)]
        if not gpus and hw is not None:
            gpus = [{"pci_bus_id": d.bus_id, "vendor": GPU_VENDORS[d.vendor_id],
                     "minor_number": None, "source": "hwloc"} for d in hw.gpus]
    _slurm_indices(gpus, gres_conf, name, notes)
    _locate_gpus(gpus, hw, sysfs_root)

    unplaced = [g for g in gpus if g["numa_node"] is None and g["socket"] is None]
    if gpus and not unplaced:
        groups = _groups_from_probe(gpus, hw)
    else:
        why = []
        if not nvml_part["available"]:
            why.append("NVML unavailable")
        minus_one = [g["pci_bus_id"] for g in unplaced if g.get("sysfs_numa_node_raw") == "-1"]
        if minus_one:
            why.append(f"sysfs numa_node = -1 for {', '.join(minus_one)}")
        if not gpus:
            why.append("no GPU found on the PCI bus")
        groups = _groups_from_gres(gres_conf, slurm_conf, name, hw)
        source = (f"gres.conf Cores= binding ({len(groups)} group(s))" if groups
                  else "nothing (no gres.conf lines for this node)")
        fallbacks.append(f"{'; '.join(why) or 'GPU locality unknown'}: GPU groups taken "
                         f"from {source}")
    for message in fallbacks:
        log.warning("probe %s: %s", name, message)
    return {
        "schema_version": SCHEMA_VERSION,
        "node": name,
        "hostname": socket.gethostname(),
        "probed_at_s": time.time() if now_s is None else now_s,
        "nvml": {k: nvml_part.get(k) for k in ("available", "error", "driver_version",
                                               "warnings")},
        "gpus": gpus,
        "gpu_pairs": nvml_part["pairs"],
        "gpu_groups": groups,
        "hwloc": hw_part,
        "fallbacks": fallbacks,
        "notes": notes,
    }


# ---------------------------------------------------------------------------------------


def write_probe_document(document: dict, output_dir: Path) -> Path:
    """Write ``<output_dir>/<node>.json`` atomically (temp file in the same folder + rename)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / f"{document['node']}.json"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{document['node']}.", suffix=".tmp",
                                    dir=output_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    return target


_REQUIRED = {"schema_version": int, "node": str, "gpus": list, "gpu_groups": list,
             "gpu_pairs": list, "fallbacks": list}


def validate_probe_document(document: Any, source: str) -> dict:
    """Check the shape the graph builder relies on; any mismatch names the file."""
    if not isinstance(document, dict):
        raise TopologyConfigError("probe document is not a JSON object", source)
    for key, kind in _REQUIRED.items():
        if not isinstance(document.get(key), kind):
            raise TopologyConfigError(f"probe document lacks {key!r} ({kind.__name__})", source)
    if document["schema_version"] != SCHEMA_VERSION:
        raise TopologyConfigError(f"probe schema_version {document['schema_version']} is not "
                                  f"{SCHEMA_VERSION}", source)
    for gpu in document["gpus"]:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            raise TopologyConfigError("every GPU needs an integer 'index'", source)
    for group in document["gpu_groups"]:
        if not isinstance(group, dict) or not isinstance(group.get("gpu_indices"), list) or \
                not all(isinstance(i, int) for i in group["gpu_indices"]):
            raise TopologyConfigError("every GPU group needs a list 'gpu_indices'", source)
    for pair in document["gpu_pairs"]:
        if not isinstance(pair, dict) or not isinstance(pair.get("gpus"), list) or \
                len(pair["gpus"]) != 2:
            raise TopologyConfigError("every GPU pair needs 'gpus': [a, b]", source)
    return document


def load_probe_documents(directory: Path) -> dict[str, dict]:
    """All ``*.json`` probe documents of a folder, by node name."""
    documents: dict[str, dict] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise TopologyConfigError(f"cannot read probe document: {exc}", str(path)) from exc
        except json.JSONDecodeError as exc:
            raise TopologyConfigError(f"not JSON ({exc.msg})", str(path), exc.lineno) from exc
        validate_probe_document(document, str(path))
        documents[document["node"]] = document
    return documents


def probe(output_dir: Path, gres_conf: Path | None = None, slurm_conf: Path | None = None,
          node_name: str | None = None, json_output: bool = False) -> dict:
    """Probe this node, write ``<output_dir>/<node>.json`` and print what was found."""
    gres = parse_gres_conf(gres_conf) if gres_conf is not None else None
    slurm = parse_slurm_conf(slurm_conf) if slurm_conf is not None else None
    document = probe_node(gres_conf=gres, slurm_conf=slurm, node_name=node_name)
    path = write_probe_document(document, output_dir)
    if json_output:
        print(json.dumps({"written_to": str(path), "document": document}, indent=1,
                         sort_keys=True))
    else:
        print_probe_summary(document, path)
    return document


def print_probe_summary(document: dict, path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    nvml_state = "available" if document["nvml"]["available"] else \
        f"unavailable: {document['nvml']['error']}"
    console.print(f"[bold]{document['node']}[/bold]: {len(document['gpus'])} GPU(s), "
                  f"NVML {nvml_state}; written to {path}")
    if document["gpu_groups"]:
        table = Table("group", "GPUs", "type", "socket", "NUMA", "cores", "source")
        for g in document["gpu_groups"]:
            table.add_row(str(g["index"]), ",".join(map(str, g["gpu_indices"])),
                          str(g.get("name") or "-"), str(g.get("socket")),
                          str(g.get("numa_node")), _ranges(g.get("core_ids") or []),
                          str(g.get("source")))
        console.print(table)
    for message in document["fallbacks"]:
        console.print(f"[yellow]fallback:[/yellow] {message}")
    for message in document["notes"]:
        console.print(f"note: {message}")


def _ranges(values: list[int]) -> str:
    from slurm_marl.topology.consistency import compress_hosts_ints

    return compress_hosts_ints(values) or "-"
