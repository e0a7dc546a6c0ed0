"""The live views: text of ``scontrol show topology`` and ``scontrol show node [-o] [-d]``.

These functions take the command's output as a string (the Slurm layer runs the commands),
so they are pure and testable on recorded output. ``scontrol show topology`` prints, per
switch, ``SwitchName=s Level=0 LinkSpeed=1 Nodes=n[1-2]``; an upper switch prints
``Switches=`` and, as ``Nodes=``, every node below it. ``scontrol show node -o`` prints one
line of ``Key=Value`` pairs per node; values may hold blanks (``OS=Linux 6.1.0 #1 SMP``) and
``Reason=`` runs to the end of its line. Without ``-o`` a record spans several indented lines.
The text itself is read by ``slurm_marl.slurm_integration.text``; this module builds the
live views and names ``source:line`` in its errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurm_marl.domain import GpuGroup, Node
from slurm_marl.slurm_integration import text as slurm_text
from slurm_marl.slurm_integration.text import (GresSpec, LiveSwitch, gpu_count_of,
                                               parse_gres_list, parse_tres)
from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.layout import groups_from_gres_specs

TOPOLOGY_SOURCE = "<scontrol show topology>"
NODES_SOURCE = "<scontrol show node>"


def parse_switch_line(raw: str, source: str = TOPOLOGY_SOURCE, number: int = 1
                      ) -> LiveSwitch | None:
    """One line of ``scontrol show topology`` (``slurm_text.parse_switch_line``); None for a
    blank or "no topology" line. Raises ``TopologyConfigError`` naming ``source:number``."""
    try:
        return slurm_text.parse_switch_line(raw)
    except slurm_text.SlurmTextError as exc:
        raise TopologyConfigError(exc.reason, source, number) from None


def parse_show_topology(text: str, source: str = TOPOLOGY_SOURCE) -> tuple[LiveSwitch, ...]:
    """Every switch; the first unreadable line raises (the topology CLI's strict view)."""
    parsed = (parse_switch_line(raw, source, number)
              for number, raw in enumerate(text.splitlines(), start=1))
    return tuple(s for s in parsed if s is not None)


# ---------------------------------------------------------------------------------------


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


def _records(text: str, source: str) -> list[tuple[int, list[tuple[str, str]]]]:
    try:
        return slurm_text.scontrol_records(text, "NodeName", to_end=("Reason",))
    except slurm_text.SlurmTextError as exc:
        raise TopologyConfigError(exc.reason, source, exc.line) from None


def _node_from_record(number: int, pairs: list[tuple[str, str]], source: str) -> LiveNode:
    values = {k.lower(): v for k, v in pairs}

    def num(key: str, default: int) -> int:
        value = values.get(key.lower())
        if value is None or value in ("", "N/A", "(null)"):
            return default
        if not re.fullmatch(r"\d{1,18}", value):
            raise TopologyConfigError(f"{key}={value!r}: expected an integer", source, number)
        return int(value)

    gres_text = values.get("gres", "")
    gres = parse_gres_list(gres_text)
    if gres is None:
        raise TopologyConfigError(f"Gres={gres_text!r}: unreadable GRES list", source, number)
    used = parse_gres_list(values.get("gresused", ""))
    if used is None:
        raise TopologyConfigError(f"GresUsed={values.get('gresused')!r}: unreadable", source,
                                  number)
    features_text = values.get("availablefeatures", values.get("features", ""))
    features = () if features_text in ("", "(null)") else tuple(
        f for f in features_text.split(",") if f)
    partitions_text = values.get("partitions", "")
    partitions = () if partitions_text in ("", "(null)") else tuple(
        p for p in partitions_text.split(",") if p)
    name = values.get("nodename", "")
    if not name:
        raise TopologyConfigError("NodeName= is empty", source, number)
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


def parse_show_nodes(text: str, source: str = NODES_SOURCE) -> tuple[LiveNode, ...]:
    """Parse ``scontrol show node -o`` (or the multi-line form) into LiveNode values."""
    nodes: list[LiveNode] = []
    seen: set[str] = set()
    for number, pairs in _records(text, source):
        node = _node_from_record(number, pairs, source)
        if node.name in seen:
            raise TopologyConfigError(f"node {node.name} listed twice", source, number)
        seen.add(node.name)
        nodes.append(node)
    return tuple(nodes)


def live_node_to_domain(live: LiveNode, gpu_groups: tuple[GpuGroup, ...] = (),
                        leaf_switch: str | None = None) -> Node:
    """A domain Node from the live view; the GPU groups come from the files (layout)."""
    if not gpu_groups and live.gpu_count:
        gpu_groups = groups_from_gres_specs(live.gres)
    return Node(name=live.name, state=live.state, partitions=live.partitions,
                sockets=live.sockets * max(1, live.boards),
                cores_per_socket=live.cores_per_socket,
                threads_per_core=live.threads_per_core, cpus=live.cpus,
                alloc_cpus=live.alloc_cpus, real_memory_mib=live.real_memory_mib,
                alloc_memory_mib=live.alloc_memory_mib, gpu_groups=gpu_groups,
                used_gpu_indices=live.used_gpu_indices(), features=live.features,
                leaf_switch=leaf_switch, reason=live.reason)


__all__ = ["LiveSwitch", "LiveNode", "parse_switch_line", "parse_show_topology",
           "parse_show_nodes", "live_node_to_domain"]
