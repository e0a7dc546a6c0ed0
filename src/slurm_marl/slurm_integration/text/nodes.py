"""Node records as ``scontrol show node [-o]`` prints them: one line of ``Key=Value`` pairs
per node with ``-o``, else one line and the indented lines after it; values may hold blanks
(``OS=Linux 6.1.0 #1 SMP``) and ``Reason=`` runs to the end of its line.

The strict reading (every field in the form Slurm prints, or ``SlurmTextError``), for the
topology checks; the daemon reads nodes from the JSON answers instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurm_marl.slurm_integration.text.errors import SlurmTextError
from slurm_marl.slurm_integration.text.gres import (GresSpec, gpu_count_of, parse_gres_list,
                                                    parse_tres)
from slurm_marl.slurm_integration.text.records import scontrol_records


@dataclass(frozen=True)
class LiveNode:
    """One node as ``scontrol show node`` reports it. Memory in MiB."""

    name: str
    state: str = ""
    partitions: tuple[str, ...] = ()
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    boards: int = 1
    cpus: int = 1
    alloc_cpus: int = 0
    real_memory_mib: int = 0
    alloc_memory_mib: int = 0
    gres: tuple[GresSpec, ...] = ()
    gres_used: tuple[GresSpec, ...] = ()
    features: tuple[str, ...] = ()
    cfg_tres: tuple[tuple[str, str], ...] = ()
    alloc_tres: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    fields: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def gpu_count(self) -> int:
        return gpu_count_of(self.gres)

    def used_gpu_indices(self) -> frozenset[int]:
        return frozenset(i for g in self.gres_used if g.name == "gpu" for i in g.indices)

    def tres(self, key: str) -> str | None:
        return dict(self.cfg_tres).get(key)


def _node_from_record(number: int, pairs: list[tuple[str, str]]) -> LiveNode:
    values = {k.lower(): v for k, v in pairs}

    def num(key: str, default: int) -> int:
        value = values.get(key.lower())
        if value is None or value in ("", "N/A", "(null)"):
            return default
        if not re.fullmatch(r"\d{1,18}", value):
            raise SlurmTextError(f"{key}={value!r}: expected an integer", number)
        return int(value)

    gres_text = values.get("gres", "")
    gres = parse_gres_list(gres_text)
    if gres is None:
        raise SlurmTextError(f"Gres={gres_text!r}: unreadable GRES list", number)
    used = parse_gres_list(values.get("gresused", ""))
    if used is None:
        raise SlurmTextError(f"GresUsed={values.get('gresused')!r}: unreadable", number)
    features_text = values.get("availablefeatures", values.get("features", ""))
    features = () if features_text in ("", "(null)") else tuple(
        f for f in features_text.split(",") if f)
    partitions_text = values.get("partitions", "")
    partitions = () if partitions_text in ("", "(null)") else tuple(
        p for p in partitions_text.split(",") if p)
    name = values.get("nodename", "")
    if not name:
        raise SlurmTextError("NodeName= is empty", number)
    return LiveNode(
        name=name, state=values.get("state", ""), partitions=partitions,
        sockets=num("Sockets", 1), cores_per_socket=num("CoresPerSocket", 1),
        threads_per_core=num("ThreadsPerCore", 1), boards=num("Boards", 1),
        cpus=num("CPUTot", 1), alloc_cpus=num("CPUAlloc", 0),
        real_memory_mib=num("RealMemory", 0), alloc_memory_mib=num("AllocMem", 0),
        gres=gres, gres_used=used, features=features,
        cfg_tres=parse_tres(values.get("cfgtres", "")),
        alloc_tres=parse_tres(values.get("alloctres", "")),
        reason=values.get("reason", ""), fields=tuple(pairs))


def parse_node_records(text: str) -> tuple[LiveNode, ...]:
    """``scontrol show node -o`` (or the multi-line form) as LiveNode values. Raises
    ``SlurmTextError`` naming the record's line."""
    nodes: list[LiveNode] = []
    seen: set[str] = set()
    for number, pairs in scontrol_records(text, "NodeName", to_end=("Reason",)):
        node = _node_from_record(number, pairs)
        if node.name in seen:
            raise SlurmTextError(f"node {node.name} listed twice", number)
        seen.add(node.name)
        nodes.append(node)
    return tuple(nodes)
