"""The simulator's cluster from a site's own Slurm files: slurm.conf, gres.conf, topology.conf.

What would the agent have done on *my* cluster: the files are read by ``slurm_marl.topology``
(the one parser of Slurm's configuration syntax: case-insensitive keys, ``#`` comments,
``\\`` continuations, ``Include``, ``NodeName=DEFAULT`` / ``PartitionName=DEFAULT``,
hostlists, ``Nodes=ALL``); this module turns what they say into ``PartitionSpec``s and
``build_cluster``'s ``SimCluster``, then gives the nodes their site names and the leaf
switches of topology.conf (``sim/site_topology.py``). Whatever the simulator cannot model
is not an error: it is said, one short sentence each, in ``SiteCluster.not_modelled`` (and
``SimCluster.not_modelled``), naming the file line, node or partition.

Per node: sockets = ``Sockets`` (or ``Boards`` x ``SocketsPerBoard``); CPU cores per
socket = ``CPUs`` / sockets (Slurm's CPUs, threads included); memory = ``RealMemory`` MiB
// 1024 GiB; GPUs = the ``gpu`` items of ``Gres=``; which socket each GPU sits behind
comes from gres.conf's ``Cores=`` (core // ``CoresPerSocket``). A partition takes its most
common node shape. A node listed by several partitions belongs to the first of them, the
``Default=YES`` partition first (the simulator's first partition is Slurm's default).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from slurm_marl.sim.cluster_model import (ClusterSpecError, PartitionSpec, SimCluster,
                                          build_cluster)
from slurm_marl.sim.site_topology import with_site_names
from slurm_marl.slurm_integration.text import GresSpec, collapse_hosts
from slurm_marl.topology.confparse import ConfigEntry, ConfigText, read_config_file
from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import GresConf, gres_from_config
from slurm_marl.topology.layout import core_to_socket_for, gpu_devices_for_node, socket_of_cores
from slurm_marl.topology.slurm_conf import NodeSpec, SlurmConf, slurm_conf_from_config
from slurm_marl.topology.slurm_conf import PartitionSpec as SlurmPartition
from slurm_marl.topology.topology_conf import TopologyConf, topology_from_config

DEFAULT_MEM_GIB = 256

# Partition keys the simulator models; every other key on a PartitionName line is said.
_PARTITION_MODELLED = {"partitionname", "nodes", "default", "state"}
# Node keys that change scheduling but that the simulator does not model.
_NODE_IGNORED = {"weight": "Weight", "features": "Features", "feature": "Feature",
                 "corespeccount": "CoreSpecCount", "cpuspeclist": "CpuSpecList",
                 "memspeclimit": "MemSpecLimit", "tmpdisk": "TmpDisk"}
# slurm.conf settings that change scheduling; the simulator's order and placement are the
# profile's, so these are said when present.
_GLOBAL_IGNORED_PREFIXES = ("priority", "preempt")
_GLOBAL_IGNORED = {"schedulertype", "schedulerparameters", "selecttypeparameters",
                   "defmempercpu", "defmempergpu", "defcpupergpu", "maxmempercpu",
                   "maxmempernode", "defmempernode", "topologyparam", "enforcepartlimits",
                   "accountingstorageenforce", "oversubscribe"}
_GRES_KEYS = {"autodetect", "count", "cores", "cpus", "file", "flags", "links",
              "multiplefiles", "name", "nodename", "type"}
_TOPOLOGY_HEADS = {"switchname": {"switchname", "switches", "nodes", "linkspeed"},
                   "blockname": {"blockname", "nodes"}, "blocksizes": {"blocksizes"}}
_SETTLED_STATES = {"", "UNKNOWN", "IDLE", "CLOUD"}


class SiteConfigError(ClusterSpecError):
    """A site's Slurm file that cannot be read; the message names ``path:line``."""


@dataclass(frozen=True)
class SiteCluster:
    cluster: SimCluster
    not_modelled: tuple[str, ...]


@dataclass(frozen=True)
class _Shape:
    sockets: int
    gpus_per_socket: int
    cores_per_socket: int
    mem_gib: int

    def describe(self) -> str:
        return (f"{self.sockets} socket(s) x {self.gpus_per_socket} GPU(s), "
                f"{self.cores_per_socket} cores per socket, {self.mem_gib} GiB")


def looks_like_slurm_conf(path: str | Path) -> bool:
    """A folder holding slurm.conf, a ``*.conf`` file, or a file with a ``NodeName=`` line."""
    p = Path(path)
    try:
        if p.is_dir():
            return (p / "slurm.conf").is_file()
        if not p.is_file():
            return False
        if p.suffix == ".conf":
            return True
        with p.open(encoding="utf-8", errors="replace") as handle:
            head = handle.read(1 << 20)
    except OSError:
        return False
    return any(line.strip().lower().startswith("nodename=") for line in head.splitlines())


def slurm_conf_file(slurm_conf: str | Path) -> Path:
    """The slurm.conf a ``--slurm-conf`` names: the file, or a folder's slurm.conf."""
    path = Path(slurm_conf)
    return path / "slurm.conf" if path.is_dir() else path


def read_site_cluster(slurm_conf: str | Path, gres_conf: str | Path | None = None,
                      topology_conf: str | Path | None = None) -> SiteCluster:
    """Read a site's files; gres.conf / topology.conf default to the ones next to slurm.conf
    (a folder is read as its slurm.conf). Raises ``SiteConfigError`` naming file and line."""
    conf_path = slurm_conf_file(slurm_conf)
    folder = conf_path.parent
    gres_path = Path(gres_conf) if gres_conf is not None else folder / "gres.conf"
    topo_path = Path(topology_conf) if topology_conf is not None else folder / "topology.conf"
    notes: list[str] = []
    try:
        config = read_config_file(conf_path)
        conf = slurm_conf_from_config(config)
        gres = None
        if gres_conf is not None or gres_path.is_file():
            gres = gres_from_config(_filtered(read_config_file(gres_path), _gres_keep, notes))
        topo = None
        if topology_conf is not None or topo_path.is_file():
            topo = topology_from_config(_filtered(read_config_file(topo_path), _topology_keep,
                                                  notes))
    except TopologyConfigError as exc:
        raise SiteConfigError(str(exc)) from None
    for include in conf.includes + (gres.includes if gres else ()) \
            + (topo.includes if topo else ()):
        if not include.found:
            notes.append(f"{include.source}: Include {include.target} not found, skipped")
    return _build(conf, config, gres, topo, str(conf_path), notes)


def _gres_keep(entry: ConfigEntry) -> set[str] | None:
    return _GRES_KEYS


def _topology_keep(entry: ConfigEntry) -> set[str] | None:
    return _TOPOLOGY_HEADS.get(entry.first_key)


def _filtered(config: ConfigText, keep, notes: list[str]) -> ConfigText:
    """Drop keys the parser would refuse; each dropped key (or line) is said."""
    entries = []
    for entry in config.entries:
        allowed = keep(entry)
        if allowed is None:
            notes.append(f"{entry.source}: {entry.pairs[0][0]}= line not understood, ignored")
            continue
        unknown = [k for k, _ in entry.pairs if k.lower() not in allowed]
        if unknown:
            notes.append(f"{entry.source}: unknown key(s) {', '.join(unknown)} ignored")
            entry = ConfigEntry(entry.source,
                                tuple((k, v) for k, v in entry.pairs if k.lower() in allowed))
        entries.append(entry)
    return ConfigText(config.path, tuple(entries), config.includes)


def _hosts(names) -> str:
    return collapse_hosts(sorted(names))


def _global_notes(conf: SlurmConf, notes: list[str]) -> None:
    keys = [k for k, _ in conf.settings
            if k.lower() in _GLOBAL_IGNORED or k.lower().startswith(_GLOBAL_IGNORED_PREFIXES)]
    if keys:
        notes.append(f"{conf.path}: {', '.join(dict.fromkeys(keys))} ignored (the simulator "
                     f"orders and places jobs by its profile)")


def _node_key_notes(config: ConfigText, conf: SlurmConf, notes: list[str]) -> None:
    """Node keys that change scheduling, with the nodes that set them (defaults included)."""
    defaults: dict[str, str] = {}
    by_key: dict[str, list[str]] = {}
    states: dict[str, list[str]] = {}
    for entry in config.entries:
        if entry.first_key != "nodename":
            continue
        values = {k.lower(): v for k, v in entry.pairs}
        if (entry.get("NodeName") or "").upper() == "DEFAULT":
            defaults.update(values)
            continue
        merged = {**defaults, **values}
        names = [n.name for n in conf.nodes if n.source == entry.source]
        for key in merged:
            if key in _NODE_IGNORED:
                by_key.setdefault(_NODE_IGNORED[key], []).extend(names)
        state = merged.get("state", "").upper()
        if state not in _SETTLED_STATES:
            states.setdefault(state, []).extend(names)
    for key, names in by_key.items():
        notes.append(f"nodes {_hosts(names)}: {key} not modelled")
    for state, names in states.items():
        notes.append(f"nodes {_hosts(names)}: State={state} not modelled (simulated as up)")


def _partition_notes(config: ConfigText, conf: SlurmConf, notes: list[str]) -> None:
    defaults: dict[str, str] = {}
    for entry in config.entries:
        if entry.first_key != "partitionname":
            continue
        name = entry.get("PartitionName") or ""
        values = {k.lower(): (k, v) for k, v in entry.pairs}
        if name.upper() == "DEFAULT":
            defaults.update(values)
            continue
        merged = {**defaults, **values}
        keys = [k for low, (k, v) in merged.items()
                if low not in _PARTITION_MODELLED
                and not (low == "maxtime" and v.upper() in ("INFINITE", "UNLIMITED"))]
        if keys:
            notes.append(f"partition {name} ({entry.source}): {', '.join(keys)} ignored")
        state = merged.get("state", ("", "UP"))[1].upper()
        if state != "UP":
            notes.append(f"partition {name} ({entry.source}): State={state} not modelled "
                         f"(simulated as UP)")


def _gpu_items(node: NodeSpec) -> tuple[GresSpec, ...]:
    return tuple(g for g in node.gres if g.name == "gpu")


def _node_shape(node: NodeSpec, gres: GresConf | None,
                said: dict[str, list[str]]) -> _Shape | None:
    """The node's shape; what it cannot model goes into ``said`` (sentence -> node names)."""
    gpus = sum(g.count for g in _gpu_items(node))
    if gpus < 1:
        return None
    sockets = max(1, node.sockets)
    per_socket: Counter[int] | None = None
    devices = gpu_devices_for_node(gres, node.name) if gres is not None else ()
    mode = gres.autodetect_for(node.name) if gres is not None else None
    if devices:
        if len(devices) != gpus:
            said.setdefault(f"gres.conf lists {len(devices)} GPU(s), slurm.conf Gres= {gpus}: "
                            f"modelled with {gpus}", []).append(node.name)
        lookup = core_to_socket_for(node)
        found = [socket_of_cores(d.cores, lookup) if d.cores and lookup else None
                 for d in devices]
        if all(s is not None for s in found) and len(devices) == gpus:
            per_socket = Counter(found)
    if per_socket is None:
        if mode and mode != "off" and not devices:
            why = f"gres.conf AutoDetect={mode} (the hardware) cannot be read here"
        elif gres is None:
            why = "no gres.conf"
        else:
            why = "gres.conf gives no socket (Cores=) for all their GPUs"
        said.setdefault(f"{why}, so their GPUs are spread evenly over their sockets",
                        []).append(node.name)
    elif len(per_socket) != sockets or len(set(per_socket.values())) != 1:
        said.setdefault(_UNEVEN, []).append(node.name)
    groups = sockets
    if gpus % sockets:
        groups = 1
        said.setdefault(f"{gpus} GPUs do not divide over {sockets} sockets: modelled as one "
                        f"GPU group per node", []).append(node.name)
    cpus_per_group = max(1, node.cpus // groups)
    gpus_per_group = gpus // groups
    if cpus_per_group < gpus_per_group:
        said.setdefault("fewer CPUs than GPUs; modelled with one core per GPU",
                        []).append(node.name)
        cpus_per_group = gpus_per_group
    if node.real_memory_mib <= 1:
        said.setdefault(f"no RealMemory; modelled with {DEFAULT_MEM_GIB} GiB",
                        []).append(node.name)
        mem = DEFAULT_MEM_GIB
    else:
        mem = max(1, node.real_memory_mib // 1024)
    return _Shape(groups, gpus_per_group, cpus_per_group, mem)


_UNEVEN = "GPUs not spread evenly over the sockets; modelled spread evenly"


def _build(conf: SlurmConf, config: ConfigText, gres: GresConf | None,
           topo: TopologyConf | None, spec: str, notes: list[str]) -> SiteCluster:
    _global_notes(conf, notes)
    _node_key_notes(config, conf, notes)
    _partition_notes(config, conf, notes)
    by_name = {n.name: n for n in conf.nodes}
    parts = sorted(conf.partitions, key=lambda p: not p.default)  # stable: file order after
    owner = _node_owners(parts, by_name)
    _membership_notes(parts, by_name, owner, notes)
    _gres_notes(conf, gres, notes)
    specs: list[PartitionSpec] = []
    members: list[list[str]] = []
    said: dict[str, list[str]] = {}
    for part in parts:
        names = [n for n in part.nodes if owner.get(n) == part.name]
        shapes = _shapes(part, names, by_name, gres, said, notes)
        if shapes:
            specs.append(_partition_spec(part, shapes, notes))
            members.append(list(shapes))
    if not specs:
        raise SiteConfigError(f"{spec}: no partition has nodes with GPUs (Gres=gpu:...)")
    for sentence, names in said.items():
        notes.append(f"nodes {_hosts(names)}: {sentence}")
    for part in specs:
        try:
            part.validate(f"{spec}: partition {part.name}")
        except ClusterSpecError as exc:
            raise SiteConfigError(str(exc)) from None
    cluster = with_site_names(build_cluster(specs, spec), members, topo, notes)
    return SiteCluster(cluster=cluster, not_modelled=cluster.not_modelled)


def _node_owners(parts: list[SlurmPartition], by_name: dict[str, NodeSpec]) -> dict[str, str]:
    """Node -> the partition it is simulated in: the first listing it (``parts`` has the
    default partition first). A partition listing an undefined node is an error."""
    owner: dict[str, str] = {}
    for part in parts:
        for name in part.nodes:
            if name not in by_name:
                raise SiteConfigError(f"{part.source}: partition {part.name} lists node "
                                      f"{name}, which no NodeName= line defines")
            owner.setdefault(name, part.name)
    return owner


def _membership_notes(parts: list[SlurmPartition], by_name: dict[str, NodeSpec],
                      owner: dict[str, str], notes: list[str]) -> None:
    """Nodes in several partitions (modelled in the first) and nodes in none (left out)."""
    shared: dict[tuple[str, ...], list[str]] = {}
    for name in by_name:
        homes = tuple(p.name for p in parts if name in p.nodes)
        if len(homes) > 1:
            shared.setdefault(homes, []).append(name)
    for homes, names in shared.items():
        notes.append(f"nodes {_hosts(names)} are in partitions {', '.join(homes)}: modelled in "
                     f"{homes[0]} only (a simulated node has one partition)")
    loose = [n for n in by_name if n not in owner]
    if loose:
        notes.append(f"nodes {_hosts(loose)} are in no partition: left out")


def _gres_notes(conf: SlurmConf, gres: GresConf | None, notes: list[str]) -> None:
    """GPU types, other GRES and GPU links: none is modelled."""
    typed: dict[tuple[str, ...], list[str]] = {}
    other_gres: dict[str, list[str]] = {}
    for node in conf.nodes:
        types = tuple(dict.fromkeys(g.type for g in _gpu_items(node) if g.type))
        if types:
            typed.setdefault(types, []).append(node.name)
        for g in node.gres:
            if g.name != "gpu":
                other_gres.setdefault(g.name, []).append(node.name)
    for types, names in typed.items():
        notes.append(f"nodes {_hosts(names)}: GPU type(s) {', '.join(types)} not modelled "
                     f"(simulated GPUs are untyped; a job asking for a type is not told apart)")
    for gname, names in other_gres.items():
        notes.append(f"nodes {_hosts(set(names))}: Gres {gname} not modelled")
    if gres is not None:
        for line in gres.lines:
            if line.links:
                notes.append(f"{line.source}: Links= (GPU interconnect) not modelled")


def _shapes(part: SlurmPartition, names: list[str], by_name: dict[str, NodeSpec],
            gres: GresConf | None, said: dict[str, list[str]],
            notes: list[str]) -> dict[str, _Shape]:
    """The shape of each node of ``part`` with GPUs (empty: the partition is left out);
    nodes without GPUs are said and left out."""
    shapes = {}
    for n in names:
        shape = _node_shape(by_name[n], gres, said)
        if shape is not None:
            shapes[n] = shape
    cpu_only = [n for n in names if n not in shapes]
    if not shapes:
        why = "no nodes of its own" if not names else "no GPUs"
        notes.append(f"partition {part.name} ({part.source}): {why}, left out")
    elif cpu_only:
        notes.append(f"partition {part.name}: nodes {_hosts(cpu_only)} have no GPUs, "
                     f"left out")
    return shapes


def _partition_spec(part: SlurmPartition, shapes: dict[str, _Shape],
                    notes: list[str]) -> PartitionSpec:
    """The partition as the simulator models it: all its nodes of its most common shape
    (the first seen among equals); nodes of other shapes are said."""
    counts = Counter(shapes.values())
    common = max(counts, key=lambda s: (counts[s], -list(shapes.values()).index(s)))
    for shape in counts:
        if shape != common:
            odd = [n for n, s in shapes.items() if s == shape]
            notes.append(f"partition {part.name}: nodes {_hosts(odd)} have "
                         f"{shape.describe()}; modelled with the partition's most common "
                         f"shape, {common.describe()}")
    return PartitionSpec(name=part.name, nodes=len(shapes), sockets=common.sockets,
                         gpus_per_socket=common.gpus_per_socket,
                         cores_per_socket=common.cores_per_socket, mem_gib=common.mem_gib)
