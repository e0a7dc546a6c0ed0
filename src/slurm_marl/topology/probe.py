"""Node probe: what one compute node's GPUs, sockets and links really look like.

Runs on every compute node (systemd timer, HealthCheckProgram or prolog) and writes
``<output_dir>/<node>.json``; the controller reads these documents into the topology graph.
Sources, best first (read in ``probe_sources``): NVML (``import pynvml``: GPUs, PCI bus ids,
NUMA node / CPU affinity, NVLink peers, PCIe common ancestors, P2P status), hwloc XML
(``lstopo-no-graphics --of xml``: packages, cores, where each PCI device hangs), sysfs
(``/sys/bus/pci/devices/<bus>/numa_node``). When NVML is missing or fails
(``pynvml.NVMLError``, e.g. "NVML Shared Library Not Found") or sysfs says
``numa_node = -1``, the document says so in ``fallbacks`` (and a warning is logged), and GPU
groups come from gres.conf's ``Cores=`` binding instead.

This module assembles the document (``probe_node``: Slurm GPU indices, GPU locality, GPU
groups), writes, validates and loads probe documents, and is the ``slurm-marl probe``
command. ``probe_node`` takes any object with pynvml's function names, so it runs on
recorded values.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_marl.slurm_integration.text import format_index_ranges
from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import GresConf, parse_gres_conf
from slurm_marl.topology.hwloc import GPU_VENDORS, HwlocTopology
from slurm_marl.topology.layout import (core_to_socket_for, gpu_devices_for_node,
                                        groups_from_devices)
from slurm_marl.topology.probe_sources import (hwloc_part, import_pynvml, numa_value,
                                               probe_nvml, run_lstopo, sysfs_gpus,
                                               sysfs_numa_raw)
from slurm_marl.topology.slurm_conf import SlurmConf, parse_slurm_conf

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


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
        raw = sysfs_numa_raw(sysfs_root, bus)
        gpu["sysfs_numa_node_raw"] = raw
        sysfs = numa_value(raw)
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


def _nvml_part(nvml: Any | None, use_nvml: bool, cpu_count: int) -> dict:
    """The NVML part of the document: what NVML says about the GPUs and their pairs, or
    why it could not be asked (not importable, or not asked for)."""
    if nvml is None and use_nvml:
        nvml = import_pynvml()
    if nvml is None:
        return {"available": False, "error": "nvidia-ml-py (pynvml) not importable"
                if use_nvml else "NVML not asked for", "gpus": [], "pairs": [],
                "warnings": []}
    return probe_nvml(nvml, cpu_count)


def _find_gpus(nvml_part: dict, sysfs_root: Path, proc_root: Path,
               hw: HwlocTopology | None, fallbacks: list[str]) -> list[dict]:
    """The machine's GPUs from the best source there is: NVML, else a sysfs PCI scan, else
    hwloc's PCI devices (the fallback noted in ``fallbacks``)."""
    if nvml_part["available"]:
        return [dict(g, source="nvml") for g in nvml_part["gpus"]]
    fallbacks.append(f"NVML unavailable ({nvml_part['error']}): GPUs from sysfs PCI scan")
    gpus = [dict(g, source="sysfs") for g in sysfs_gpus(sysfs_root, proc_root)]
    if not gpus and hw is not None:
        gpus = [{"pci_bus_id": d.bus_id, "vendor": GPU_VENDORS[d.vendor_id],
                 "minor_number": None, "source": "hwloc"} for d in hw.gpus]
    return gpus


def _gpu_groups(gpus: list[dict], nvml_part: dict, gres_conf: GresConf | None,
                slurm_conf: SlurmConf | None, name: str, hw: HwlocTopology | None,
                fallbacks: list[str]) -> list[dict]:
    """The GPU groups: from the probe where every GPU was located, else from gres.conf's
    Cores= binding, with the reason noted in ``fallbacks``."""
    unplaced = [g for g in gpus if g["numa_node"] is None and g["socket"] is None]
    if gpus and not unplaced:
        return _groups_from_probe(gpus, hw)
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
    return groups


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
    hw, hw_part = hwloc_part(lstopo)
    if not hw_part["available"]:
        fallbacks.append(f"hwloc unavailable: {hw_part['error']}")
    cpu_count = hw.pu_count if hw is not None and hw.pu_count else (os.cpu_count() or 1)

    nvml_part = _nvml_part(nvml, use_nvml, cpu_count)
    gpus = _find_gpus(nvml_part, sysfs_root, proc_root, hw, fallbacks)
    _slurm_indices(gpus, gres_conf, name, notes)
    _locate_gpus(gpus, hw, sysfs_root)
    groups = _gpu_groups(gpus, nvml_part, gres_conf, slurm_conf, name, hw, fallbacks)
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
          node_name: str | None = None, json_output: bool = False,
          record_nvml_to: Path | None = None) -> dict:
    """Probe this node, write ``<output_dir>/<node>.json`` and print what was found;
    ``record_nvml_to``: also write NVML's raw answers there (``nvml_record``), for replay."""
    gres = parse_gres_conf(gres_conf) if gres_conf is not None else None
    slurm = parse_slurm_conf(slurm_conf) if slurm_conf is not None else None
    document = probe_node(gres_conf=gres, slurm_conf=slurm, node_name=node_name)
    path = write_probe_document(document, output_dir)
    if record_nvml_to is not None:
        write_nvml_record(document, record_nvml_to)
    if json_output:
        print(json.dumps({"written_to": str(path), "document": document}, indent=1,
                         sort_keys=True))
    else:
        print_probe_summary(document, path)
    return document


def write_nvml_record(document: dict, target: Path, nvml: Any | None = None) -> Path:
    """NVML's answers on this node (the probe's own questions) as JSON at ``target``; the
    CPU mask is sized as the probe sized it (hwloc's PU count, else ``os.cpu_count()``)."""
    from slurm_marl.topology.nvml_record import record_nvml

    nvml = nvml if nvml is not None else import_pynvml()
    if nvml is None:
        raise TopologyConfigError("cannot record NVML: nvidia-ml-py (pynvml) is not "
                                  "importable", str(target))
    cpu_count = document["hwloc"].get("pu_count") or os.cpu_count() or 1
    try:
        recorded = record_nvml(nvml, cpu_count, description=(
            f"recorded by slurm-marl probe --record-nvml on {document['hostname']} "
            f"(node {document['node']}) at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"))
    except nvml.NVMLError as exc:
        raise TopologyConfigError(f"cannot record NVML: {exc}", str(target)) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
    return target


def print_probe_summary(document: dict, path: Path) -> None:
    from rich.table import Table

    from slurm_marl.console import output_console

    console = output_console()
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
    return format_index_ranges(values) or "-"
