"""A pynvml stand-in that replays recorded answers (tests/data/topology/nvml/*.json).

It raises pynvml's own NVMLError subclasses, so the probe meets the same exception types
as on a real node. Two forms: hand-written files list each GPU's NVLink peers
(``nvlink_remote_pci_bus_ids``, one per enabled link); files written on a real node by
``slurm-marl probe --record-nvml`` (``slurm_marl/topology/nvml_record.py``) hold every
link's state and remote answer (``nvlinks``) and any answer may be ``{"error": NAME}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pynvml


@dataclass(frozen=True)
class _PciInfo:
    busId: bytes  # noqa: N815 - the ctypes field name pynvml returns


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_P2P_CAPS_INDEX_READ = pynvml.NVML_P2P_CAPS_INDEX_READ

    def __init__(self, recorded: dict, init_error: int | None = None) -> None:
        self.recorded = recorded
        self.devices = recorded["devices"]
        self.NVML_NVLINK_MAX_LINKS = recorded.get("nvlink_max_links", 18)
        self.init_error = init_error
        self.calls: list[str] = []
        self.initialised = False

    @classmethod
    def from_file(cls, path: Path, **kwargs) -> FakeNvml:
        return cls(json.loads(path.read_text()), **kwargs)

    def _value(self, value):
        if isinstance(value, dict) and "error" in value:
            raise pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{value['error']}"))
        return value

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self):
        self.calls.append("shutdown")
        self.initialised = False

    def _check(self):
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetDriverVersion(self):
        self._check()
        return self._value(self.recorded["driver_version"])

    def nvmlDeviceGetCount(self):
        self._check()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check()
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ("handle", index)

    def _dev(self, handle):
        self._check()
        return self.devices[handle[1]]

    def nvmlDeviceGetName(self, handle):
        return self._value(self._dev(handle)["name"])

    def nvmlDeviceGetUUID(self, handle):
        return self._value(self._dev(handle)["uuid"])

    def nvmlDeviceGetPciInfo(self, handle):
        return _PciInfo(self._dev(handle)["pci_bus_id"].encode())

    def nvmlDeviceGetMinorNumber(self, handle):
        return self._value(self._dev(handle)["minor_number"])

    def nvmlDeviceGetNumaNodeId(self, handle):
        return self._value(self._dev(handle)["numa_node"])

    def nvmlDeviceGetCpuAffinity(self, handle, cpu_set_size):
        words = list(self._value(self._dev(handle)["cpu_affinity_words"]))
        return (words + [0] * cpu_set_size)[:cpu_set_size]

    def _link(self, handle, link):
        links = self._dev(handle)["nvlinks"]
        if not 0 <= link < len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        if "nvlinks" in self._dev(handle):
            return self._value(self._link(handle, link)["state"])
        remotes = self._dev(handle)["nvlink_remote_pci_bus_ids"]
        if link >= len(remotes):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        if "nvlinks" in self._dev(handle):
            return _PciInfo(self._value(self._link(handle, link)["remote_pci_bus_id"]).encode())
        remotes = self._dev(handle)["nvlink_remote_pci_bus_ids"]
        if link >= len(remotes):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _PciInfo(remotes[link].encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        self._check()
        return self._value(self.recorded["topology_common_ancestor"][a[1]][b[1]])

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        self._check()
        return self._value(self.recorded["p2p_read_status"][a[1]][b[1]])
