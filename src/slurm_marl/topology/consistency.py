"""Inconsistencies an admin should fix: inside the files, and files versus the live view.

Slurm tolerates much of this silently (a node in no switch cannot share a job with the
others; a GRES count that differs from gres.conf drains the node), so the checks say which
file and which nodes, and group nodes with the same finding into one hostlist line.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_marl.domain import GpuGroup
from slurm_marl.slurm_integration.text import collapse_hosts, format_index_ranges
from slurm_marl.topology.gres_conf import GresConf, GresSpec
from slurm_marl.topology.layout import gpu_devices_for_node
from slurm_marl.topology.scontrol import LiveNode, LiveSwitch
from slurm_marl.topology.slurm_conf import SlurmConf
from slurm_marl.topology.topology_conf import TopologyConf

PROBLEM = "problem"
NOTE = "note"


@dataclass(frozen=True)
class Finding:
    severity: str  # "problem" (check exits 1) or "note" (worth knowing, not wrong)
    kind: str
    message: str

    def to_json(self) -> dict:
        return {"severity": self.severity, "kind": self.kind, "message": self.message}


def _grouped(kind: str, severity: str, per_node: Mapping[str, list[str]]) -> list[Finding]:
    """Turn {node: [detail, ...]} into one finding per distinct detail, nodes compressed."""
    by_detail: dict[str, list[str]] = defaultdict(list)
    for node, details in per_node.items():
        for detail in details:
            by_detail[detail].append(node)
    return [Finding(severity, kind, f"{collapse_hosts(nodes)}: {detail}")
            for detail, nodes in sorted(by_detail.items())]


def _gpu_counts_by_type(specs: Iterable[GresSpec]) -> Counter:
    counts: Counter = Counter()
    for s in specs:
        if s.name == "gpu":
            counts[s.type or "(untyped)"] += s.count
    return counts


def _format_counts(counts: Counter) -> str:
    return ",".join(f"{t}:{n}" for t, n in sorted(counts.items())) or "none"


def check_files(slurm_conf: SlurmConf, gres_conf: GresConf | None,
                topology_conf: TopologyConf | None,
                layout: Mapping[str, tuple[GpuGroup, ...]]) -> list[Finding]:
    """Findings inside the configuration files (no Slurm needed)."""
    findings: list[Finding] = []
    node_names = {n.name for n in slurm_conf.nodes}
    for directive in (*slurm_conf.includes, *(gres_conf.includes if gres_conf else ()),
                      *(topology_conf.includes if topology_conf else ())):
        if not directive.found:
            findings.append(Finding(NOTE, "include", directive.describe()))
    if topology_conf is not None and topology_conf.switches:
        findings.extend(_check_switches(topology_conf, node_names))
    elif topology_conf is None and slurm_conf.setting("TopologyPlugin") == "topology/tree":
        findings.append(Finding(PROBLEM, "topology",
                                "TopologyPlugin=topology/tree but no topology.conf was read"))
    if gres_conf is not None:
        findings.extend(_check_gres(slurm_conf, gres_conf))
    no_socket: dict[str, list[str]] = {}
    for node in slurm_conf.nodes:
        groups = layout.get(node.name, ())
        lost = [i for g in groups if g.socket is None for i in g.gpu_indices]
        if lost:
            no_socket[node.name] = [f"GPU(s) {format_index_ranges(lost)} have no socket "
                                    "(no Cores= binding in gres.conf, or cores span sockets)"]
    findings.extend(_grouped("gpu_socket", PROBLEM, no_socket))
    return findings


def _check_switches(topology_conf: TopologyConf, node_names: set[str]) -> list[Finding]:
    findings: list[Finding] = []
    leaves_of: dict[str, list[str]] = defaultdict(list)
    parents: dict[str, list[str]] = defaultdict(list)
    for s in topology_conf.switches:
        for n in s.nodes:
            leaves_of[n].append(s.name)
        for child in s.switches:
            parents[child].append(s.name)
    missing = sorted(node_names - set(leaves_of))
    if missing:
        findings.append(Finding(PROBLEM, "node_without_switch",
                                f"{collapse_hosts(missing)}: in slurm.conf but under no switch "
                                f"of {topology_conf.path}; jobs cannot span them and others"))
    unknown = sorted(set(leaves_of) - node_names)
    if unknown and node_names:
        findings.append(Finding(PROBLEM, "unknown_node",
                                f"{collapse_hosts(unknown)}: in {topology_conf.path} but not "
                                "defined in slurm.conf"))
    for node, leaves in sorted(leaves_of.items()):
        if len(leaves) > 1:
            findings.append(Finding(PROBLEM, "node_in_two_leaves",
                                    f"{node}: under several leaf switches ({', '.join(leaves)})"))
    for child, ps in sorted(parents.items()):
        if len(ps) > 1:
            findings.append(Finding(PROBLEM, "switch_two_parents",
                                    f"switch {child}: has several parents ({', '.join(ps)}); "
                                    f"hop distances use {sorted(ps)[0]}"))
    roots = [s.name for s in topology_conf.switches if s.name not in parents]
    if len(roots) > 1:
        findings.append(Finding(NOTE, "fabrics",
                                f"{len(roots)} top-level switches ({', '.join(roots)}): "
                                "jobs cannot span nodes of different trees"))
    return findings


def _check_gres(slurm_conf: SlurmConf, gres_conf: GresConf) -> list[Finding]:
    findings: list[Finding] = []
    node_names = {n.name for n in slurm_conf.nodes}
    for line in gres_conf.lines:
        if line.node_names is not None:
            unknown = sorted(set(line.node_names) - node_names)
            if unknown and node_names:
                findings.append(Finding(PROBLEM, "unknown_node",
                                        f"{line.source}: NodeName lists {collapse_hosts(unknown)}"
                                        " not defined in slurm.conf"))
    count_mismatch: dict[str, list[str]] = {}
    bad_cores: dict[str, list[str]] = {}
    bad_links: dict[str, list[str]] = {}
    autodetected: list[str] = []
    for node in slurm_conf.nodes:
        devices = gpu_devices_for_node(gres_conf, node.name)
        configured = _gpu_counts_by_type(node.gres)
        if not devices:
            if configured and (gres_conf.autodetect_for(node.name) or "off") != "off":
                autodetected.append(node.name)
            continue
        described = Counter(d.type or "(untyped)" for d in devices)
        if described != configured and not _untyped_matches(configured, described):
            count_mismatch[node.name] = [
                f"slurm.conf Gres={_format_counts(configured)} but gres.conf describes "
                f"{_format_counts(described)}"]
        limit = node.sockets * node.cores_per_socket
        over = sorted({c for d in devices for c in d.cores if c >= limit})
        if over:
            bad_cores[node.name] = [f"gres.conf Cores= names core(s) "
                                    f"{format_index_ranges(over)} beyond the {limit} cores of "
                                    "slurm.conf"]
        wrong = sorted({d.index for d in devices if d.links and len(d.links) != len(devices)})
        if wrong:
            bad_links[node.name] = [f"gres.conf Links= of GPU(s) {format_index_ranges(wrong)} "
                                    f"does not have one entry per GPU ({len(devices)})"]
    findings.extend(_grouped("gres_count", PROBLEM, count_mismatch))
    findings.extend(_grouped("gres_cores", PROBLEM, bad_cores))
    findings.extend(_grouped("gres_links", PROBLEM, bad_links))
    if autodetected:
        findings.append(Finding(NOTE, "autodetect",
                                f"{collapse_hosts(autodetected)}: GPUs come from AutoDetect; "
                                "their binding is only known from node probes"))
    return findings


def _untyped_matches(configured: Counter, described: Counter) -> bool:
    """An untyped ``Gres=gpu:N`` is satisfied by N typed devices in gres.conf."""
    return set(configured) == {"(untyped)"} and \
        configured["(untyped)"] == sum(described.values())


# ---------------------------------------------------------------------------------------


def compare_views(slurm_conf: SlurmConf | None, gres_conf: GresConf | None,
                  topology_conf: TopologyConf | None,
                  live_nodes: Iterable[LiveNode] | None,
                  live_switches: Iterable[LiveSwitch] | None,
                  layout: Mapping[str, tuple[GpuGroup, ...]] | None = None) -> list[str]:
    """Human-readable disagreements between the files and ``scontrol show`` output."""
    out: list[str] = []
    if slurm_conf is not None and live_nodes is not None:
        out.extend(_compare_nodes(slurm_conf, tuple(live_nodes), gres_conf, layout or {}))
    if topology_conf is not None and live_switches is not None:
        out.extend(_compare_switches(topology_conf, tuple(live_switches)))
    return out


def _compare_nodes(slurm_conf: SlurmConf, live: tuple[LiveNode, ...],
                   gres_conf: GresConf | None,
                   layout: Mapping[str, tuple[GpuGroup, ...]]) -> list[str]:
    out: list[str] = []
    live_by_name = {n.name: n for n in live}
    file_names = {n.name for n in slurm_conf.nodes}
    only_files = sorted(file_names - set(live_by_name))
    only_live = sorted(set(live_by_name) - file_names)
    if only_files:
        out.append(f"{collapse_hosts(only_files)}: in slurm.conf but not in scontrol show node")
    if only_live:
        out.append(f"{collapse_hosts(only_live)}: in scontrol show node but not in slurm.conf")
    per_node: dict[str, list[str]] = defaultdict(list)
    for spec in slurm_conf.nodes:
        node = live_by_name.get(spec.name)
        if node is None:
            continue
        pairs = (("Sockets", spec.sockets, node.sockets * max(1, node.boards)),
                 ("CoresPerSocket", spec.cores_per_socket, node.cores_per_socket),
                 ("ThreadsPerCore", spec.threads_per_core, node.threads_per_core),
                 ("CPUs", spec.cpus, node.cpus),
                 ("RealMemory", spec.real_memory_mib, node.real_memory_mib))
        for key, in_file, in_live in pairs:
            if in_file != in_live:
                per_node[spec.name].append(f"{key} is {in_file} in slurm.conf, {in_live} live")
        file_gpus = _gpu_counts_by_type(spec.gres)
        live_gpus = _gpu_counts_by_type(node.gres)
        if file_gpus != live_gpus:
            per_node[spec.name].append(f"GPUs {_format_counts(file_gpus)} in slurm.conf, "
                                       f"{_format_counts(live_gpus)} live")
        if gres_conf is not None:
            devices = gpu_devices_for_node(gres_conf, spec.name)
            if devices and len(devices) != sum(live_gpus.values()):
                per_node[spec.name].append(f"gres.conf has {len(devices)} GPU file(s), "
                                           f"Slurm reports {sum(live_gpus.values())}")
        per_node[spec.name].extend(_compare_sockets(layout.get(spec.name, ()), node.gres))
        file_parts = set(slurm_conf.partitions_of(spec.name))
        if slurm_conf.partitions and file_parts != set(node.partitions):
            per_node[spec.name].append(
                f"partitions {','.join(sorted(file_parts)) or 'none'} in slurm.conf, "
                f"{','.join(sorted(node.partitions)) or 'none'} live")
    by_detail: dict[str, list[str]] = defaultdict(list)
    for name, details in per_node.items():
        for d in details:
            by_detail[d].append(name)
    out.extend(f"{collapse_hosts(names)}: {detail}" for detail, names in sorted(by_detail.items()))
    return out


def _compare_sockets(groups: tuple[GpuGroup, ...], live_gres: tuple[GresSpec, ...]) -> list[str]:
    """gres.conf's Cores= binding versus the ``(S:n)`` Slurm reports per GRES type."""
    out = []
    for spec in live_gres:
        if spec.name != "gpu" or not spec.type or not spec.sockets:
            continue
        file_sockets = sorted({g.socket for g in groups if g.name == spec.type
                               and g.socket is not None})
        if file_sockets and file_sockets != list(spec.sockets):
            out.append(f"gpu:{spec.type} bound to socket(s) "
                       f"{','.join(map(str, file_sockets))} by gres.conf, "
                       f"{','.join(map(str, spec.sockets))} live")
    return out


def _compare_switches(topology_conf: TopologyConf, live: tuple[LiveSwitch, ...]) -> list[str]:
    out: list[str] = []
    files = {s.name: s for s in topology_conf.switches}
    live_by_name = {s.name: s for s in live}
    for name in sorted(set(files) - set(live_by_name)):
        out.append(f"switch {name}: in {topology_conf.path} but not in scontrol show topology")
    for name in sorted(set(live_by_name) - set(files)):
        out.append(f"switch {name}: in scontrol show topology but not in {topology_conf.path}")
    for name in sorted(set(files) & set(live_by_name)):
        f, lv = files[name], live_by_name[name]
        if set(f.switches) != set(lv.switches):
            out.append(f"switch {name}: child switches {','.join(f.switches) or 'none'} in "
                       f"the file, {','.join(lv.switches) or 'none'} live")
        if f.nodes and not lv.switches and set(f.nodes) != set(lv.nodes):
            gone = sorted(set(f.nodes) - set(lv.nodes))
            new = sorted(set(lv.nodes) - set(f.nodes))
            detail = []
            if gone:
                detail.append(f"{collapse_hosts(gone)} missing live")
            if new:
                detail.append(f"{collapse_hosts(new)} only live")
            out.append(f"switch {name}: nodes differ ({'; '.join(detail)})")
    return out
