"""topology.conf (topology/tree): which switch holds which nodes or child switches.

Keys (topology.conf(5)): ``SwitchName`` (required), ``Switches`` (child switches, hostlist),
``Nodes`` (child nodes, hostlist), ``LinkSpeed`` (an integer in arbitrary units that Slurm
itself does not use). Slurm 23.02+ adds ``BlockName``/``BlockSizes`` for topology/block;
a block is read as a leaf switch without parent, which is what it means for placement.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurm_marl.domain import Switch
from slurm_marl.topology.confparse import (ConfigEntry, ConfigText, IncludeDirective,
                                           SourceLine, expand_hosts, parse_config_text,
                                           parse_int, read_config_file)
from slurm_marl.topology.errors import TopologyConfigError

_SWITCH_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
_BLOCK_KEYS = {"blockname", "nodes"}


@dataclass(frozen=True)
class SwitchSpec:
    """One switch line; ``nodes`` for a leaf, ``switches`` for an upper switch."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int | None = None
    source: SourceLine | None = None

    @property
    def is_leaf(self) -> bool:
        return bool(self.nodes)

    def to_domain(self) -> Switch:
        return Switch(name=self.name, nodes=self.nodes, switches=self.switches,
                      link_speed=None if self.link_speed is None else float(self.link_speed))


@dataclass(frozen=True)
class TopologyConf:
    path: str
    switches: tuple[SwitchSpec, ...]
    includes: tuple[IncludeDirective, ...] = ()
    block_sizes: tuple[int, ...] = ()

    def switch(self, name: str) -> SwitchSpec | None:
        for s in self.switches:
            if s.name == name:
                return s
        return None

    def to_domain(self) -> tuple[Switch, ...]:
        return tuple(s.to_domain() for s in self.switches)

    def leaf_of_node(self) -> dict[str, str]:
        """Node name -> its leaf switch (first leaf listing it, in file order)."""
        leaf: dict[str, str] = {}
        for s in self.switches:
            for n in s.nodes:
                leaf.setdefault(n, s.name)
        return leaf


def _switch_from_entry(entry: ConfigEntry) -> SwitchSpec:
    unknown = set(entry.keys_lower()) - _SWITCH_KEYS
    if unknown:
        raise entry.error(f"unknown key(s) {', '.join(sorted(unknown))} on a SwitchName line")
    name = entry.get("SwitchName") or ""
    if not name.strip():
        raise entry.error("SwitchName needs a value")
    nodes_text = entry.get("Nodes")
    switches_text = entry.get("Switches")
    nodes = expand_hosts(nodes_text, entry, "Nodes") if nodes_text else ()
    switches = expand_hosts(switches_text, entry, "Switches") if switches_text else ()
    if nodes and switches:
        raise entry.error(f"switch {name} lists both Nodes= and Switches=; "
                          "topology/tree wants one of them")
    if not nodes and not switches:
        raise entry.error(f"switch {name} needs Nodes= or Switches=")
    speed_text = entry.get("LinkSpeed")
    speed = parse_int(speed_text, entry, "LinkSpeed") if speed_text else None
    return SwitchSpec(name=name, nodes=nodes, switches=switches, link_speed=speed,
                      source=entry.source)


def _block_from_entry(entry: ConfigEntry) -> SwitchSpec:
    unknown = set(entry.keys_lower()) - _BLOCK_KEYS
    if unknown:
        raise entry.error(f"unknown key(s) {', '.join(sorted(unknown))} on a BlockName line")
    name = entry.get("BlockName") or ""
    nodes_text = entry.get("Nodes") or ""
    if not name.strip() or not nodes_text:
        raise entry.error("BlockName needs a name and Nodes=")
    return SwitchSpec(name=name, nodes=expand_hosts(nodes_text, entry, "Nodes"),
                      source=entry.source)


def topology_from_config(config: ConfigText) -> TopologyConf:
    switches: list[SwitchSpec] = []
    block_sizes: tuple[int, ...] = ()
    for entry in config.entries:
        head = entry.first_key
        if head == "switchname":
            switches.append(_switch_from_entry(entry))
        elif head == "blockname":
            switches.append(_block_from_entry(entry))
        elif head == "blocksizes":
            if len(entry.pairs) != 1:
                raise entry.error("BlockSizes must be alone on its line")
            block_sizes = tuple(parse_int(v, entry, "BlockSizes", minimum=1)
                                for v in (entry.get("BlockSizes") or "").split(",") if v)
        else:
            raise entry.error(f"expected SwitchName=..., found {entry.pairs[0][0]}=")
    _validate_tree(switches)
    return TopologyConf(path=config.path, switches=tuple(switches),
                        includes=config.includes, block_sizes=block_sizes)


def _validate_tree(switches: list[SwitchSpec]) -> None:
    """Duplicate names, children that do not exist, and cycles are fatal in Slurm too."""
    by_name: dict[str, SwitchSpec] = {}
    for s in switches:
        if s.name in by_name:
            first = by_name[s.name].source
            raise _error_at(s, f"switch {s.name} defined twice (first at {first})")
        by_name[s.name] = s
    for s in switches:
        for child in s.switches:
            if child not in by_name:
                raise _error_at(s, f"switch {s.name} lists unknown child switch {child}")
            if child == s.name:
                raise _error_at(s, f"switch {s.name} lists itself as a child")
    # Cycle check: walk down from every switch; a path may not revisit a switch.
    state: dict[str, int] = {}

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise _error_at(by_name[name], "switch cycle: " + " -> ".join((*trail, name)))
        state[name] = 1
        for child in by_name[name].switches:
            visit(child, (*trail, name))
        state[name] = 2

    try:
        for s in switches:
            visit(s.name, ())
    except RecursionError:
        raise _error_at(switches[0], "switch tree nested too deeply") from None


def _error_at(spec: SwitchSpec, message: str) -> TopologyConfigError:
    src = spec.source
    return TopologyConfigError(message, src.path if src else None, src.line if src else None)


def parse_topology_conf_text(text: str, path: str = "topology.conf") -> TopologyConf:
    """Parse topology.conf contents; ``path`` names the file in errors and resolves Includes."""
    return topology_from_config(parse_config_text(text, path))


def parse_topology_conf(path: str | Path) -> TopologyConf:
    return topology_from_config(read_config_file(path))
