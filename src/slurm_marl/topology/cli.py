"""``slurm-marl topology show|check`` and ``slurm-marl probe``.

Both topology commands read slurm.conf (``--slurm-conf``, default ``$SLURM_CONF`` or
/etc/slurm/slurm.conf) and find topology.conf and gres.conf beside it unless given.
``check`` exits 1 when it finds a problem (notes alone do not fail it); recorded
``scontrol show node -o`` / ``scontrol show topology`` output can be passed to compare the
files with what Slurm runs with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import networkx as nx
import typer
from rich.console import Console
from rich.tree import Tree

from slurm_marl.console import output_console
from slurm_marl.slurm_integration.text import format_index_ranges
from slurm_marl.topology.consistency import NOTE, PROBLEM, Finding, check_files, compare_views
from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import GresConf, parse_gres_conf
from slurm_marl.topology.graph import build_topology_graph, gpu_id, socket_id
from slurm_marl.topology.layout import snapshot_layout_from_files
from slurm_marl.topology.probe import load_probe_documents
from slurm_marl.topology.probe import probe as run_probe
from slurm_marl.topology.scontrol import parse_show_nodes, parse_show_topology
from slurm_marl.topology.slurm_conf import SlurmConf, parse_slurm_conf
from slurm_marl.topology.topology_conf import TopologyConf, parse_topology_conf

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Cluster wiring: switches, nodes, sockets, GPU groups, GPUs.")

DEFAULT_PROBE_DIR = Path("/var/lib/slurm-marl/probes")

SlurmConfOption = typer.Option(None, "--slurm-conf", help="slurm.conf (default: $SLURM_CONF "
                               "or /etc/slurm/slurm.conf)")
TopologyConfOption = typer.Option(None, "--topology-conf",
                                  help="topology.conf (default: beside slurm.conf)")
GresConfOption = typer.Option(None, "--gres-conf", help="gres.conf (default: beside slurm.conf)")
ProbeDirOption = typer.Option(None, "--probe-dir", help="folder of node probe documents")
JsonOption = typer.Option(False, "--json", help="print JSON instead of a tree/table")


def default_slurm_conf() -> Path:
    return Path(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")


def load_files(slurm_conf: Path | None, topology_conf: Path | None, gres_conf: Path | None
               ) -> tuple[SlurmConf, TopologyConf | None, GresConf | None]:
    """Parse the three files; a missing topology.conf / gres.conf beside slurm.conf is fine."""
    slurm_path = slurm_conf or default_slurm_conf()
    slurm = parse_slurm_conf(slurm_path)
    topo_path = topology_conf or slurm_path.parent / "topology.conf"
    gres_path = gres_conf or slurm_path.parent / "gres.conf"
    topo = parse_topology_conf(topo_path) if topology_conf or topo_path.is_file() else None
    gres = parse_gres_conf(gres_path) if gres_conf or gres_path.is_file() else None
    return slurm, topo, gres


def _fail(console: Console, exc: TopologyConfigError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"ok": False, "error": str(exc)}))
    else:
        console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(1)


# ---------------------------------------------------------------------------------------
# show


def topology_tree(graph: nx.Graph) -> dict:
    """The graph as nested JSON: top switches -> child switches -> nodes -> sockets -> ..."""
    switches = {a["name"]: a for _, a in graph.nodes(data=True) if a["kind"] == "switch"}
    parent_of = graph.graph.get("switch_parent", {})
    children: dict[str, list[str]] = {name: [] for name in switches}
    for child, parent in parent_of.items():
        children[parent].append(child)
    nodes_of: dict[str, list[str]] = {name: [] for name in switches}
    loose: list[str] = []
    for name in graph.graph.get("node_names", ()):
        leaf = graph.nodes[f"node:{name}"].get("leaf")
        (nodes_of[leaf] if leaf in nodes_of else loose).append(name)

    def switch_json(name: str) -> dict:
        return {"name": name, "level": switches[name]["level"],
                "link_speed": switches[name]["link_speed"],
                "switches": [switch_json(c) for c in children[name]],
                "nodes": [node_json(graph, n) for n in nodes_of[name]]}

    tops = [name for name in switches if name not in parent_of]
    return {"switches": [switch_json(t) for t in tops],
            "nodes_without_switch": [node_json(graph, n) for n in loose]}


def node_json(graph: nx.Graph, name: str) -> dict:
    attrs = graph.nodes[f"node:{name}"]

    def group_json(group) -> dict:
        gpus = []
        for i in group.gpu_indices:
            g = graph.nodes[gpu_id(name, i)]
            links = sorted((graph.nodes[v]["index"], e["kind"], e.get("links"))
                           for _, v, e in graph.edges(gpu_id(name, i), data=True)
                           if e["kind"] in ("nvlink", "pcie_switch"))
            gpus.append({"index": i, **{k: g[k] for k in ("model", "pci_bus_id", "uuid",
                                                           "numa_node") if k in g},
                         "peers": [{"gpu": p, "kind": k, "links": n} for p, k, n in links]})
        return {"index": group.index, "name": group.name, "socket": group.socket,
                "core_ids": list(group.core_ids), "gpus": gpus}

    groups = attrs["gpu_groups"]
    sockets = []
    for s in range(attrs["sockets"]):
        sockets.append({"index": s,
                        "core_ids": list(graph.nodes[socket_id(name, s)]["core_ids"]),
                        "gpu_groups": [group_json(g) for g in groups if g.socket == s]})
    placed = {g.index for g in groups if g.socket is not None and 0 <= g.socket < len(sockets)}
    return {"name": name, "partitions": list(attrs["partitions"]), "cpus": attrs["cpus"],
            "real_memory_mib": attrs["real_memory_mib"], "gpu_count": attrs["gpu_count"],
            "groups_source": attrs["groups_source"], "sockets": sockets,
            "gpu_groups_without_socket": [group_json(g) for g in groups
                                          if g.index not in placed]}


def render_tree(tree: dict) -> Tree:
    root = Tree("[bold]cluster[/bold]")

    def add_node(parent: Tree, node: dict) -> None:
        label = (f"[cyan]{node['name']}[/cyan]  {node['gpu_count']} GPU  {node['cpus']} CPU  "
                 f"partitions {','.join(node['partitions']) or '-'}")
        branch = parent.add(label)
        for s in node["sockets"]:
            sb = branch.add(f"socket {s['index']} (cores {format_index_ranges(s['core_ids'])})")
            for g in s["gpu_groups"]:
                add_group(sb, g)
        for g in node["gpu_groups_without_socket"]:
            add_group(branch.add("[yellow]socket unknown[/yellow]"), g)

    def add_group(parent: Tree, group: dict) -> None:
        gb = parent.add(f"GPU group {group['index']}"
                        + (f" type {group['name']}" if group["name"] else ""))
        for gpu in group["gpus"]:
            extra = ", ".join(f"{p['kind']}->{p['gpu']}" + (f"x{p['links']}" if p["links"] else "")
                              for p in gpu["peers"])
            ident = gpu.get("pci_bus_id") or ""
            gb.add(f"GPU {gpu['index']} {ident} {extra}".rstrip())

    def add_switch(parent: Tree, sw: dict) -> None:
        branch = parent.add(f"[magenta]switch {sw['name']}[/magenta] (level {sw['level']})")
        for child in sw["switches"]:
            add_switch(branch, child)
        for node in sw["nodes"]:
            add_node(branch, node)

    for sw in tree["switches"]:
        add_switch(root, sw)
    if tree["nodes_without_switch"]:
        loose = root.add("[yellow](under no switch)[/yellow]")
        for node in tree["nodes_without_switch"]:
            add_node(loose, node)
    return root


@app.command()
def show(slurm_conf: Path | None = SlurmConfOption,
         topology_conf: Path | None = TopologyConfOption,
         gres_conf: Path | None = GresConfOption,
         probe_dir: Path | None = ProbeDirOption,
         json_output: bool = JsonOption) -> None:
    """Tree view: switch -> node -> socket / GPU group -> GPUs."""
    console = output_console()
    try:
        slurm, topo, gres = load_files(slurm_conf, topology_conf, gres_conf)
        probes = load_probe_documents(probe_dir) if probe_dir else None
    except TopologyConfigError as exc:
        _fail(console, exc, json_output)
    graph = build_topology_graph(slurm_conf=slurm, gres_conf=gres, topology_conf=topo,
                                 probes=probes)
    tree = topology_tree(graph)
    if json_output:
        print(json.dumps(tree, indent=1))
    else:
        console.print(render_tree(tree))


# ---------------------------------------------------------------------------------------
# check


@app.command()
def check(slurm_conf: Path | None = SlurmConfOption,
          topology_conf: Path | None = TopologyConfOption,
          gres_conf: Path | None = GresConfOption,
          scontrol_nodes: Path | None = typer.Option(
              None, "--scontrol-nodes", help="saved output of `scontrol show node -o`"),
          scontrol_topology: Path | None = typer.Option(
              None, "--scontrol-topology", help="saved output of `scontrol show topology`"),
          json_output: bool = JsonOption) -> None:
    """List inconsistencies: nodes in no switch, GRES counts vs gres.conf, GPUs without a
    socket, files vs live view. Exit code 1 when there is a problem."""
    console = output_console()
    findings: list[Finding] = []
    live_diffs: list[str] = []
    try:
        slurm, topo, gres = load_files(slurm_conf, topology_conf, gres_conf)
        layout = snapshot_layout_from_files(slurm, gres)
        findings = check_files(slurm, gres, topo, layout)
        live_nodes = (parse_show_nodes(_read(scontrol_nodes), str(scontrol_nodes))
                      if scontrol_nodes else None)
        live_topo = (parse_show_topology(_read(scontrol_topology), str(scontrol_topology))
                     if scontrol_topology else None)
        live_diffs = compare_views(slurm, gres, topo, live_nodes, live_topo, layout)
    except TopologyConfigError as exc:
        findings.append(Finding(PROBLEM, "parse_error", str(exc)))
    findings.extend(Finding(PROBLEM, "live", d) for d in live_diffs)
    problems = [f for f in findings if f.severity == PROBLEM]
    if json_output:
        print(json.dumps({"ok": not problems, "findings": [f.to_json() for f in findings]},
                         indent=1))
    else:
        for f in findings:
            colour = "red" if f.severity == PROBLEM else "blue"
            console.print(f"[{colour}]{f.severity}[/{colour}] [{f.kind}] {f.message}")
        notes = sum(1 for f in findings if f.severity == NOTE)
        console.print(f"{len(problems)} problem(s), {notes} note(s)")
    if problems:
        raise typer.Exit(1)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyConfigError(f"cannot read: {exc}", str(path)) from exc


# ---------------------------------------------------------------------------------------
# probe (a top-level command: `slurm-marl probe`)


def probe(output_dir: Path = typer.Option(DEFAULT_PROBE_DIR, "--output-dir",
                                          help="where <node>.json is written"),
          gres_conf: Path | None = typer.Option(
              None, "--gres-conf", help="gres.conf for the Cores= fallback (default: beside "
              "slurm.conf when it exists)"),
          slurm_conf: Path | None = typer.Option(
              None, "--slurm-conf", help="slurm.conf (default: $SLURM_CONF or "
              "/etc/slurm/slurm.conf when it exists)"),
          node_name: str | None = typer.Option(
              None, "--node-name", help="Slurm node name (default: short host name)"),
          record_nvml: Path | None = typer.Option(
              None, "--record-nvml", help="also write NVML's raw answers to this JSON file "
              "(for a bug report or test data: tests/topology/fake_nvml.py replays it)"),
          json_output: bool = JsonOption) -> None:
    """Probe this compute node (NVML, hwloc, sysfs) and write <output-dir>/<node>.json."""
    slurm_path = slurm_conf or default_slurm_conf()
    gres_path = gres_conf or slurm_path.parent / "gres.conf"
    try:
        run_probe(output_dir,
                  gres_conf=gres_path if gres_conf or gres_path.is_file() else None,
                  slurm_conf=slurm_path if slurm_conf or slurm_path.is_file() else None,
                  node_name=node_name, json_output=json_output, record_nvml_to=record_nvml)
    except TopologyConfigError as exc:
        _fail(Console(stderr=True), exc, json_output)
    except OSError as exc:
        _fail(Console(stderr=True), TopologyConfigError(f"cannot write: {exc}",
                                                        str(output_dir)), json_output)
