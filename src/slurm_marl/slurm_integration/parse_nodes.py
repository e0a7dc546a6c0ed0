"""Slurm nodes, partitions and switches -> domain values. Pure functions, tested on recorded
output of Slurm 22.05, 24.11 and 26.05 (tests/data/slurm).

Per-node records come from ``sinfo --json`` on 22.05 (one record per node and partition:
``state`` a word plus ``state_flags``, ``features`` a comma list) and from ``scontrol show
node --json`` from 24.11 on (``state`` a list, no ``state_flags``, ``features`` a list);
both have ``gres`` / ``gres_used`` in the same text form. Partitions and switches come from
``scontrol show partition -o`` / ``scontrol show topology`` text, alike in all three.

One strange node never spoils a snapshot (it becomes a problem string); a non-empty node
list of which none can be read is refused (``SlurmOutputError``).
"""

from __future__ import annotations

from slurm_marl.domain import GpuGroup, Node, Partition, Switch
from slurm_marl.slurm_integration.parse_layout import (layout_of, node_state_text, num,
                                                       read_record, text_list)
from slurm_marl.slurm_integration.runner import SlurmOutputError
from slurm_marl.slurm_integration.text import (SlurmTextError, expand_host_field, gpu_groups,
                                               parse_gres_used, parse_kv_line, parse_node_gres,
                                               parse_switch_line, parse_time_limit_s)

SINFO = "sinfo --json"
SCONTROL_NODES = "scontrol show node --json"


def gpu_groups_from_gres(gres: str | None, cores_per_socket: int
                         ) -> tuple[tuple[GpuGroup, ...], str | None]:
    """GPU groups of a node from its configured GRES, indices in Slurm's order.

    Each typed entry bound to one socket (``gpu:s1:2(S:1)``) is one group; an entry spanning
    several sockets or none is one group whose socket is unknown.
    """
    entries, problem = parse_node_gres(gres)
    return gpu_groups(entries, cores_per_socket), problem


def used_gpu_indices(gres_used: str | None, groups: tuple[GpuGroup, ...]) -> frozenset[int]:
    """The node's GPUs in use: those Slurm names by index; for a count without indices
    (``parse_gres_used``), that many of its type's GPUs not named, lowest first (any
    group's for an untyped count), so placement sees the right number free in each group
    although not which GPUs."""
    indexed, counted = parse_gres_used(gres_used)
    used = set(indexed)
    for gpu_type, count in counted:
        pool = [i for g in groups if gpu_type is None or g.name == gpu_type
                for i in g.gpu_indices if i not in used]
        used.update(pool[:count])
    return frozenset(used)


def node_from_json(raw: dict, leaf_of: dict[str, str] | None = None
                   ) -> tuple[Node | None, list[str]]:
    """One per-node record of 22.05's ``sinfo --json`` or a later ``scontrol show node
    --json``; (None, problems) only if it has no name."""
    name = str(raw.get("name") or "").strip()
    if not name:
        return None, [f"node without name skipped: {str(raw)[:120]}"]
    problems: list[str] = []
    state = node_state_text(raw.get("state") or "UNKNOWN", raw.get("state_flags"))
    if state is None:
        problems.append(f"node {name}: state {raw.get('state')!r} unreadable; read as UNKNOWN")
        state = "UNKNOWN"
    cores = int(num(raw.get("cores"), 1) or 1)
    groups, problem = gpu_groups_from_gres(raw.get("gres"), cores)
    if problem:
        problems.append(f"node {name}: {problem}")
    used = used_gpu_indices(raw.get("gres_used"), groups)
    node = Node(
        name=name,
        state=state,
        partitions=tuple(raw.get("partitions") or ()),
        sockets=int(num(raw.get("sockets"), 1) or 1),
        cores_per_socket=cores,
        threads_per_core=int(num(raw.get("threads"), 1) or 1),
        cpus=int(num(raw.get("cpus"), 1) or 1),
        alloc_cpus=int(num(raw.get("alloc_cpus"), 0) or 0),
        real_memory_mib=int(num(raw.get("real_memory"), 0) or 0),
        alloc_memory_mib=int(num(raw.get("alloc_memory"), 0) or 0),
        gpu_groups=groups,
        used_gpu_indices=used,
        features=text_list(raw.get("active_features") or raw.get("features")),
        leaf_switch=(leaf_of or {}).get(name),
        reason=str(raw.get("reason") or ""),
    )
    return node, problems


class NodesReader:
    """Nodes of per-node records read one at a time (``add``), so a streamed answer is
    never held whole; a node listed twice (sinfo lists it once per partition) is kept once.
    ``finish`` refuses what ``nodes_from_sinfo`` / ``nodes_from_scontrol`` refuse."""

    def __init__(self, what: str, leaf_of: dict[str, str] | None = None) -> None:
        self.what = what
        self.leaf_of = leaf_of
        self.nodes: list[Node] = []
        self.problems: list[str] = []
        self.records = 0
        self._seen: set[str] = set()

    def add(self, raw: object) -> None:
        self.records += 1
        node = read_record(raw, "node", "name", lambda r: node_from_json(r, self.leaf_of),
                           self.problems)
        if node is not None and node.name not in self._seen:
            self._seen.add(node.name)
            self.nodes.append(node)

    def finish(self, rest: dict, listed: bool) -> tuple[list[Node], list[str]]:
        """The nodes, with ``rest`` the answer without the 'nodes' array read (``listed``:
        there was one). Refused: an unknown layout, a 22.05-style sinfo read of a later
        Slurm (no per-node records there), no 'nodes' array, and records none of which
        reads."""
        layout = layout_of(rest, self.what)
        if self.what == SINFO and not layout.nodes_from_sinfo:
            raise SlurmOutputError(SINFO.split(), 0, (
                f"Slurm {layout.release} ({layout.parser}) lists no per-node records in "
                f"sinfo --json; read nodes from scontrol show node --json"))
        if not listed:
            if "nodes" in rest:
                raise SlurmOutputError(self.what.split(), 0, (
                    f"'nodes' is a {type(rest['nodes']).__name__}, not a list"))
            raise SlurmOutputError(self.what.split(), 0, (
                f"no 'nodes' in {self.what} of Slurm {layout.release} ({layout.parser}): "
                "unknown layout"))
        if self.records and not self.nodes:
            raise SlurmOutputError(self.what.split(), 0, (
                f"{self.records} node records but none readable (unknown layout?): "
                f"{'; '.join(self.problems[:3])}"))
        return self.nodes, self.problems


def _nodes_of_answer(data: dict, what: str, leaf_of: dict[str, str] | None
                     ) -> tuple[list[Node], list[str]]:
    reader = NodesReader(what, leaf_of)
    raws = data.get("nodes")
    listed = isinstance(raws, list)
    for raw in raws if listed else ():
        reader.add(raw)
    return reader.finish({k: v for k, v in data.items() if k != "nodes" or not listed}, listed)


def nodes_from_sinfo(data: dict, leaf_of: dict[str, str] | None = None
                     ) -> tuple[list[Node], list[str]]:
    """Nodes of a whole 22.05 ``sinfo --json`` answer. Later versions print no per-node
    records there: their answer is refused with a pointer to ``scontrol show node --json``."""
    return _nodes_of_answer(data, SINFO, leaf_of)


def nodes_from_scontrol(data: dict, leaf_of: dict[str, str] | None = None
                        ) -> tuple[list[Node], list[str]]:
    """Nodes of a whole ``scontrol show node --json`` answer (Slurm 24.11 and later)."""
    return _nodes_of_answer(data, SCONTROL_NODES, leaf_of)


# ---------------------------------------------------------------------------------------
# partitions and switches (scontrol show ... text)


def partitions_from_scontrol(text: str) -> tuple[list[Partition], list[str]]:
    """Partitions of ``scontrol show partition -o`` (24.11 adds ``ExclusiveUser=`` and
    ``ExclusiveTopo=``, 26.05 ``Exclusive=``; neither is read)."""
    parts, problems = [], []
    for line in text.splitlines():
        if not line.strip().startswith("PartitionName="):
            continue
        kv = parse_kv_line(line)
        try:
            parts.append(Partition(
                name=kv["PartitionName"],
                nodes=expand_host_field(kv.get("Nodes")),
                default=kv.get("Default", "NO").upper() == "YES",
                state=kv.get("State", "UP"),
                max_time_s=(None if kv.get("MaxTime", "") in ("", "N/A")
                            else parse_time_limit_s(kv["MaxTime"])),
            ))
        except (ValueError, KeyError) as exc:
            problems.append(f"partition line unreadable ({exc}): {line[:120]}")
    return parts, problems


def switches_from_scontrol(text: str) -> tuple[list[Switch], dict[str, str], list[str]]:
    """Switches of ``scontrol show topology``; also node -> leaf switch (Level=0).

    The line parser the topology CLI uses too (``text.parse_switch_line``), but
    lenient as the daemon must be: an unreadable line becomes a problem and the other
    switches are kept."""
    switches, leaf_of, problems = [], {}, []
    for line in text.splitlines():
        if not line.strip().startswith("SwitchName="):
            continue
        try:
            live = parse_switch_line(line)
        except SlurmTextError as exc:
            problems.append(f"switch line unreadable ({exc.reason}): {line[:120]}")
            continue
        if live is None:
            continue
        switches.append(live.to_domain())
        if live.level == 0:
            for n in live.nodes:
                leaf_of.setdefault(n, live.name)
    return switches, leaf_of, problems
