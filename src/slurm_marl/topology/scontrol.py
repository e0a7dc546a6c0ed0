"""The live views: text of ``scontrol show topology`` and ``scontrol show node [-o] [-d]``.

These functions take the command's output as a string (the Slurm layer runs the commands),
so they are pure and testable on recorded output. The records themselves (``LiveSwitch``,
``LiveNode``) are read by ``slurm_marl.slurm_integration.text``; this module names
``source:line`` in their errors and builds the domain's nodes from them.
"""

from __future__ import annotations

from slurm_marl.domain import GpuGroup, Node
from slurm_marl.slurm_integration import text as slurm_text
from slurm_marl.slurm_integration.text import LiveNode, LiveSwitch
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


def parse_show_nodes(text: str, source: str = NODES_SOURCE) -> tuple[LiveNode, ...]:
    """Parse ``scontrol show node -o`` (or the multi-line form) into LiveNode values
    (``text.parse_node_records``). Raises ``TopologyConfigError`` naming ``source:line``."""
    try:
        return slurm_text.parse_node_records(text)
    except slurm_text.SlurmTextError as exc:
        raise TopologyConfigError(exc.reason, source, exc.line) from None


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
