"""Switch records as ``scontrol show topology`` prints them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_marl.domain import Switch
from slurm_marl.slurm_integration.text.errors import SlurmTextError
from slurm_marl.slurm_integration.text.hostlists import expand_hostlist
from slurm_marl.slurm_integration.text.records import strict_fields

@dataclass(frozen=True)
class LiveSwitch:
    """One switch as ``scontrol show topology`` prints it: ``SwitchName=s Level=0
    LinkSpeed=1 Nodes=n[1-2]``; an upper switch prints ``Switches=`` and, as ``Nodes=``,
    every node below it."""

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


def _int_field(value: str, key: str) -> int:
    if not re.fullmatch(r"\d{1,18}", value.strip()):
        raise SlurmTextError(f"{key}={value!r}: expected an integer")
    return int(value)


def _hosts_field(value: str, key: str) -> tuple[str, ...]:
    try:
        return expand_hostlist(value)
    except SlurmTextError:
        raise SlurmTextError(f"{key}={value!r}: bad hostlist expression") from None


def parse_switch_line(raw: str) -> LiveSwitch | None:
    """One line of ``scontrol show topology``; None for a blank or "no topology" line.
    Raises ``SlurmTextError``."""
    line = raw.strip()
    if not line or line.lower().startswith("no topology information"):
        return None
    pairs = {k.lower(): v for k, v in strict_fields(line)}
    if not pairs.get("switchname"):
        raise SlurmTextError("expected SwitchName=...")
    level = _int_field(pairs.get("level", "0"), "Level")
    speed = pairs.get("linkspeed")
    nodes = _hosts_field(pairs["nodes"], "Nodes") if pairs.get("nodes") else ()
    children = _hosts_field(pairs["switches"], "Switches") if pairs.get("switches") else ()
    return LiveSwitch(name=pairs["switchname"], level=level,
                      link_speed=_int_field(speed, "LinkSpeed") if speed else None,
                      nodes=nodes, switches=children)
