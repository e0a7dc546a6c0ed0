"""The parts of slurm.conf the topology needs: ``NodeName=``, ``PartitionName=``, ``NodeSet=``.

Node keys (slurm.conf(5)): ``NodeName`` (hostlist), ``NodeHostname``/``NodeAddr`` (hostlists
matched by position), ``Boards``, ``Sockets``/``SocketsPerBoard``, ``CoresPerSocket``,
``ThreadsPerCore``, ``CPUs``/``Procs``, ``RealMemory`` (MiB), ``Gres``, ``Feature(s)``,
``Weight``, ``State``. ``NodeName=DEFAULT`` sets values for the NodeName lines after it (a
later DEFAULT line changes only the keys it names). Defaults follow the man page: one board,
one socket, one core, one thread, CPUs = sockets x cores x threads. ``PartitionName=DEFAULT``
works the same way; ``Nodes=ALL`` means every node. Other lines are kept as plain settings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from slurm_marl.domain import Partition
from slurm_marl.slurm_integration.text import GresSpec, gpu_count_of, parse_time_limit_s
from slurm_marl.topology.confparse import (ConfigEntry, ConfigText, IncludeDirective,
                                           SourceLine, expand_hosts, parse_bool,
                                           parse_config_text, parse_int, read_config_file)
from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import require_gres_list


@dataclass(frozen=True)
class NodeSpec:
    name: str
    sockets: int = 1
    cores_per_socket: int = 1
    threads_per_core: int = 1
    boards: int = 1
    cpus: int = 1
    real_memory_mib: int = 1
    gres: tuple[GresSpec, ...] = ()
    features: tuple[str, ...] = ()
    weight: int = 1
    state: str = ""
    hostname: str | None = None
    address: str | None = None
    source: SourceLine | None = None

    @property
    def gpu_count(self) -> int:
        return gpu_count_of(self.gres)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: tuple[str, ...] = ()
    default: bool = False
    state: str = "UP"
    max_time_s: float | None = None
    source: SourceLine | None = None

    def to_domain(self) -> Partition:
        return Partition(name=self.name, nodes=self.nodes, default=self.default,
                         state=self.state, max_time_s=self.max_time_s)


@dataclass(frozen=True)
class SlurmConf:
    path: str
    nodes: tuple[NodeSpec, ...]
    partitions: tuple[PartitionSpec, ...] = ()
    settings: tuple[tuple[str, str], ...] = ()
    includes: tuple[IncludeDirective, ...] = ()
    _by_name: dict[str, NodeSpec] = field(default=None, init=False, compare=False,
                                          repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {n.name: n for n in self.nodes})

    def node(self, name: str) -> NodeSpec | None:
        return self._by_name.get(name)

    def setting(self, key: str) -> str | None:
        for k, v in self.settings:
            if k.lower() == key.lower():
                return v
        return None

    def partitions_of(self, node_name: str) -> tuple[str, ...]:
        return tuple(p.name for p in self.partitions if node_name in p.nodes)


_NODE_INT_KEYS = {"sockets": "Sockets", "socketsperboard": "SocketsPerBoard",
                  "corespersocket": "CoresPerSocket", "threadspercore": "ThreadsPerCore",
                  "boards": "Boards", "cpus": "CPUs", "procs": "Procs",
                  "realmemory": "RealMemory", "weight": "Weight"}


def _node_values(entry: ConfigEntry, defaults: dict[str, str]) -> dict[str, str]:
    values = dict(defaults)
    for key, value in entry.pairs:
        values[key.lower()] = value
    return values


def _int_value(values: dict[str, str], key: str, entry: ConfigEntry, default: int,
               minimum: int = 1) -> int:
    text = values.get(key)
    if text is None or text == "":
        return default
    return parse_int(text, entry, _NODE_INT_KEYS.get(key, key), minimum=minimum)


def _positional(names: tuple[str, ...], text: str | None, entry: ConfigEntry,
                key: str) -> list[str | None]:
    if not text:
        return [None] * len(names)
    expanded = expand_hosts(text, entry, key)
    if len(expanded) == len(names):
        return list(expanded)
    if len(expanded) == 1:
        return [expanded[0]] * len(names)
    raise entry.error(f"{key}= names {len(expanded)} hosts but NodeName= names {len(names)}")


def _nodes_from_entry(entry: ConfigEntry, defaults: dict[str, str]) -> list[NodeSpec]:
    values = _node_values(entry, defaults)
    names = expand_hosts(values["nodename"], entry, "NodeName")
    if not names:
        raise entry.error("NodeName= is empty")
    boards = _int_value(values, "boards", entry, 1)
    if values.get("sockets") and values.get("socketsperboard"):
        raise entry.error("Sockets= and SocketsPerBoard= are mutually exclusive")
    sockets = (_int_value(values, "sockets", entry, 1) if values.get("sockets")
               else boards * _int_value(values, "socketsperboard", entry, 1))
    cores_per_socket = _int_value(values, "corespersocket", entry, 1)
    threads = _int_value(values, "threadspercore", entry, 1)
    cpus_key = "cpus" if values.get("cpus") else "procs"
    cpus = _int_value(values, cpus_key, entry, sockets * cores_per_socket * threads)
    memory = _int_value(values, "realmemory", entry, 1, minimum=0)
    weight = _int_value(values, "weight", entry, 1, minimum=0)
    gres = require_gres_list(values.get("gres", ""), entry)
    feature_text = values.get("features", values.get("feature", ""))
    features = tuple(f.strip() for f in re.split(r"[,&|]", feature_text) if f.strip())
    hostnames = _positional(names, values.get("nodehostname"), entry, "NodeHostname")
    addresses = _positional(names, values.get("nodeaddr"), entry, "NodeAddr")
    return [NodeSpec(name=name, sockets=sockets, cores_per_socket=cores_per_socket,
                     threads_per_core=threads, boards=boards, cpus=cpus,
                     real_memory_mib=memory, gres=gres, features=features, weight=weight,
                     state=values.get("state", ""), hostname=hostname, address=address,
                     source=entry.source)
            for name, hostname, address in zip(names, hostnames, addresses, strict=True)]


def _partition_from_entry(entry: ConfigEntry, defaults: dict[str, str],
                          all_nodes: tuple[str, ...],
                          nodesets: dict[str, tuple[str, ...]]) -> PartitionSpec:
    values = _node_values(entry, defaults)
    nodes_text = values.get("nodes", "")
    nodes: list[str] = []
    if nodes_text.upper() == "ALL":
        nodes = list(all_nodes)
    elif nodes_text:
        for name in expand_hosts(nodes_text, entry, "Nodes"):
            nodes.extend(nodesets.get(name, (name,)))
    max_time_text = values.get("maxtime", "")
    try:
        max_time = parse_time_limit_s(max_time_text)
    except ValueError:
        raise entry.error(f"MaxTime={max_time_text!r}: not a Slurm time") from None
    default = parse_bool(values["default"], entry, "Default") if values.get("default") else False
    return PartitionSpec(name=values["partitionname"], nodes=tuple(dict.fromkeys(nodes)),
                         default=default, state=values.get("state", "UP").upper(),
                         max_time_s=max_time, source=entry.source)


def slurm_conf_from_config(config: ConfigText) -> SlurmConf:
    nodes: list[NodeSpec] = []
    seen: dict[str, NodeSpec] = {}
    node_defaults: dict[str, str] = {}
    part_defaults: dict[str, str] = {}
    part_entries: list[tuple[ConfigEntry, dict[str, str]]] = []
    nodeset_entries: list[ConfigEntry] = []
    settings: list[tuple[str, str]] = []
    for entry in config.entries:
        head = entry.first_key
        if head == "nodename":
            name = entry.get("NodeName") or ""
            if name.upper() == "DEFAULT":
                node_defaults.update({k.lower(): v for k, v in entry.pairs
                                      if k.lower() != "nodename"})
                continue
            for spec in _nodes_from_entry(entry, node_defaults):
                if spec.name in seen:
                    raise entry.error(f"node {spec.name} defined twice "
                                      f"(first at {seen[spec.name].source})")
                seen[spec.name] = spec
                nodes.append(spec)
        elif head == "partitionname":
            name = entry.get("PartitionName") or ""
            if not name:
                raise entry.error("PartitionName= is empty")
            if name.upper() == "DEFAULT":
                part_defaults.update({k.lower(): v for k, v in entry.pairs
                                      if k.lower() != "partitionname"})
                continue
            part_entries.append((entry, dict(part_defaults)))
        elif head == "nodeset":
            nodeset_entries.append(entry)
        else:
            settings.extend(entry.pairs)
    all_nodes = tuple(n.name for n in nodes)
    nodesets = _nodesets(nodeset_entries, nodes)
    partitions = [_partition_from_entry(e, d, all_nodes, nodesets) for e, d in part_entries]
    names = [p.name for p in partitions]
    for p in partitions:
        if names.count(p.name) > 1:
            raise TopologyConfigError(f"partition {p.name} defined twice",
                                      p.source.path if p.source else None,
                                      p.source.line if p.source else None)
    return SlurmConf(path=config.path, nodes=tuple(nodes), partitions=tuple(partitions),
                     settings=tuple(settings), includes=config.includes)


def _nodesets(entries: list[ConfigEntry], nodes: list[NodeSpec]) -> dict[str, tuple[str, ...]]:
    """``NodeSet=name Nodes=...`` or ``Feature=...``: names a partition may list."""
    sets: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        name = entry.get("NodeSet") or ""
        if not name:
            raise entry.error("NodeSet= is empty")
        members: list[str] = []
        if entry.get("Nodes"):
            members.extend(expand_hosts(entry.get("Nodes") or "", entry, "Nodes"))
        feature = entry.get("Feature")
        if feature:
            members.extend(n.name for n in nodes if feature in n.features)
        sets[name] = tuple(dict.fromkeys(members))
    return sets


def parse_slurm_conf_text(text: str, path: str = "slurm.conf") -> SlurmConf:
    return slurm_conf_from_config(parse_config_text(text, path))


def parse_slurm_conf(path: str | Path) -> SlurmConf:
    return slurm_conf_from_config(read_config_file(path))
