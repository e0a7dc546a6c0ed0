"""The live views: text of ``scontrol show topology`` and ``scontrol show node [-o] [-d]``.

These functions take the command's output as a string (the Slurm layer runs the commands),
so they are pure and testable on recorded output. ``scontrol show topology`` prints, per
switch, ``SwitchName=s Level=0 LinkSpeed=1 Nodes=n[1-2]``; an upper switch prints
``Switches=`` and, as ``Nodes=``, every node below it. ``scontrol show node -o`` prints one
line of ``Key=Value`` pairs per node; values may hold blanks (``OS=Linux 6.1.0 #1 SMP``) and
``Reason=`` runs to the end of its line. Without ``-o`` a record spans several indented lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurm_marl.domain import GpuGroup, Node, Switch
from slurm_marl.topology.confparse import expand_hostlist_text, split_pairs
from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import GresSpec, gpu_count_of, parse_gres_list
from slurm_marl.topology.layout import groups_from_gres_specs

TOPOLOGY_SOURCE = "<scontrol show topology>"
NODES_SOURCE = "<scontrol show node>"


@dataclass(frozen=True)
class LiveSwitch:
    name: str
    level: int
    link_speed: int | None = None
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()

    def to_domain(self) -> Switch:
        """An upper switch lists every node below it; the domain keeps nodes for leaves only."""
        nodes = () if self.switches else self.nodes
        return Switch(name=self.name, nodes=nodes, switches=self.switches,
                      link_speed=None if self.link_speed is None else float(self.link_speed))


def _expand(expression: str, source: str, line: int, key: str) -> tuple[str, ...]:
    names = expand_hostlist_text(expression)
    if names is None:
        raise TopologyConfigError(f"{key}={expression!r}: bad hostlist expression", source, line)
    return names


def _int_field(value: str, key: str, source: str, line: int) -> int:
    if not re.fullmatch(r"\d{1,18}", value.strip()):
        raise TopologyConfigError(f"{key}={value!r}: expected an integer", source, line)
    return int(value)


def parse_switch_line(raw: str, source: str = TOPOLOGY_SOURCE, number: int = 1
                      ) -> LiveSwitch | None:
    """One line of ``scontrol show topology``; None for a blank or "no topology" line.
    Raises ``TopologyConfigError`` naming ``source:number``."""
    line = raw.strip()
    if not line or line.lower().startswith("no topology information"):
        return None
    pairs = dict((k.lower(), v) for k, v in split_pairs(line, source, number))
    if "switchname" not in pairs or not pairs["switchname"]:
        raise TopologyConfigError("expected SwitchName=...", source, number)
    level = _int_field(pairs.get("level", "0"), "Level", source, number)
    speed = pairs.get("linkspeed")
    nodes = _expand(pairs["nodes"], source, number, "Nodes") if pairs.get("nodes") else ()
    children = (_expand(pairs["switches"], source, number, "Switches")
                if pairs.get("switches") else ())
    return LiveSwitch(
        name=pairs["switchname"], level=level,
        link_speed=_int_field(speed, "LinkSpeed", source, number) if speed else None,
        nodes=nodes, switches=children)


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


_KEY_AT = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")


def split_node_fields(line: str) -> list[tuple[str, str]]:
    """``Key=Value`` pairs of one physical line, values may contain blanks; Reason ends it."""
    matches = list(_KEY_AT.finditer(line))
    pairs: list[tuple[str, str]] = []
    for i, m in enumerate(matches):
        key = m.group(1)
        if key.lower() == "reason":
            pairs.append((key, line[m.end():].strip()))
            break
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        pairs.append((key, line[m.end():end].strip()))
    return pairs


def _records(text: str, source: str) -> list[tuple[int, list[tuple[str, str]]]]:
    records: list[tuple[int, list[tuple[str, str]]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        pairs = split_node_fields(raw.strip())
        if not pairs:
            raise TopologyConfigError(f"expected Key=Value pairs, found {raw.strip()[:40]!r}",
                                      source, number)
        if pairs[0][0].lower() == "nodename":
            records.append((number, pairs))
        elif records:
            records[-1][1].extend(pairs)
        else:
            raise TopologyConfigError("expected a NodeName= record first", source, number)
    return records


def parse_tres(text: str) -> tuple[tuple[str, str], ...]:
    """``cpu=8,mem=16000M,gres/gpu=4`` -> (("cpu", "8"), ...); empty or (null) -> ()."""
    if not text or text.strip() in ("(null)", "N/A"):
        return ()
    pairs = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def memory_mib(text: str) -> int | None:
    """``16000M`` / ``15.62G`` / ``16000`` (MiB) -> MiB; None if unreadable."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", (text or "").strip())
    if not m:
        return None
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
    return int(round(float(m.group(1)) * scale[m.group(2)]))


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
           "parse_show_nodes",
           "parse_tres", "memory_mib", "live_node_to_domain"]
