"""NVML's answers on this node, recorded for replay (``slurm-marl probe --record-nvml``).

The probe reads NVML through a handful of pynvml calls (``probe_sources.probe_nvml``). This
module asks NVML the same questions and writes every answer, or the NVML error it gave, into
one JSON document that ``tests/topology/fake_nvml.py`` replays: a site's bug report, or a
real GPU server's test data, without the server. Errors are kept by pynvml's constant name
(``{"error": "NOT_SUPPORTED"}``), so the replay raises the same exception types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurm_marl.topology.probe_sources import nvml_text, p2p_read_index

RECORD_VERSION = 2


def _error_name(nvml: Any, exc: Exception) -> str:
    """pynvml's constant name for an NVMLError (``NVML_ERROR_<NAME>`` -> ``NAME``)."""
    value = getattr(exc, "value", None)
    try:
        import pynvml as names
    except ImportError:
        names = nvml
    for name in dir(names):
        if name.startswith("NVML_ERROR_") and getattr(names, name) == value:
            return name.removeprefix("NVML_ERROR_")
    return f"UNKNOWN_{value}"


def record_nvml(nvml: Any, cpu_count: int, description: str = "") -> dict:
    """Every NVML answer the probe reads, for ``FakeNvml`` to replay.

    ``nvml`` is pynvml (or an object with its names); ``cpu_count`` sizes the CPU affinity
    mask as the probe does. Raises ``nvml.NVMLError`` only when ``nvmlInit`` or the device
    count fails (nothing to record then)."""
    err = nvml.NVMLError

    def answer(call: Callable[[], Any], convert: Callable[[Any], Any] = lambda v: v) -> Any:
        try:
            return convert(call())
        except err as exc:
            return {"error": _error_name(nvml, exc)}

    nvml.nvmlInit()
    try:
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        words = max(1, (cpu_count + 63) // 64)
        max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
        read_index = p2p_read_index(nvml)
        devices = []
        for h in handles:
            devices.append({
                "name": answer(lambda h=h: nvml.nvmlDeviceGetName(h), nvml_text),
                "uuid": answer(lambda h=h: nvml.nvmlDeviceGetUUID(h), nvml_text),
                "pci_bus_id": nvml_text(nvml.nvmlDeviceGetPciInfo(h).busId),
                "minor_number": answer(lambda h=h: nvml.nvmlDeviceGetMinorNumber(h), int),
                "numa_node": answer(lambda h=h: nvml.nvmlDeviceGetNumaNodeId(h), int),
                "cpu_affinity_words": answer(
                    lambda h=h: nvml.nvmlDeviceGetCpuAffinity(h, words),
                    lambda ws: [int(w) for w in ws]),
                "nvlinks": [{"link": link,
                             "state": answer(lambda h=h, k=link: nvml.nvmlDeviceGetNvLinkState(
                                 h, k), int),
                             "remote_pci_bus_id": answer(
                                 lambda h=h, k=link: nvml.nvmlDeviceGetNvLinkRemotePciInfo(
                                     h, k).busId, nvml_text)}
                            for link in range(max_links)],
            })
        matrix = [[answer(lambda a=a, b=b: nvml.nvmlDeviceGetTopologyCommonAncestor(a, b), int)
                   if a is not b else None for b in handles] for a in handles]
        p2p = [[answer(lambda a=a, b=b: nvml.nvmlDeviceGetP2PStatus(a, b, read_index), int)
                if a is not b else None for b in handles] for a in handles]
        return {"record_version": RECORD_VERSION, "description": description,
                "driver_version": answer(nvml.nvmlSystemGetDriverVersion, nvml_text),
                "nvlink_max_links": max_links, "cpu_affinity_words_asked": words,
                "devices": devices, "topology_common_ancestor": matrix,
                "p2p_read_status": p2p}
    finally:
        try:
            nvml.nvmlShutdown()
        except err:
            pass
