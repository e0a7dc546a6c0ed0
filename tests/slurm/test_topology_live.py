"""Topology on the local Slurm cluster: the files and Slurm's live view describe one graph."""

import networkx as nx
import pytest

from slurm_marl.topology.consistency import compare_views
from slurm_marl.topology.gres_conf import parse_gres_conf
from slurm_marl.topology.graph import build_topology_graph
from slurm_marl.topology.layout import snapshot_layout_from_files
from slurm_marl.topology.scontrol import parse_show_nodes, parse_show_topology
from slurm_marl.topology.slurm_conf import parse_slurm_conf
from slurm_marl.topology.topology_conf import parse_topology_conf

pytestmark = pytest.mark.slurm


def _kinds(graph):
    return sorted((d.get("kind"), n) for n, d in graph.nodes(data=True))


def test_files_and_live_view_agree_and_build_the_same_graph(clean):
    c = clean
    etc = c.local.slurm_conf.parent
    slurm_conf = parse_slurm_conf(etc / "slurm.conf")
    gres_conf = parse_gres_conf(etc / "gres.conf")
    topology_conf = parse_topology_conf(etc / "topology.conf")
    live_nodes = parse_show_nodes(c.runner.run_checked(["scontrol", "show", "node", "-o"]))
    live_switches = parse_show_topology(c.runner.run_checked(["scontrol", "show", "topology"]))
    layout = snapshot_layout_from_files(slurm_conf, gres_conf)

    assert compare_views(slurm_conf, gres_conf, topology_conf, live_nodes, live_switches,
                         layout) == []
    # The snapshot's GPU groups (from sinfo's live GRES) are the ones gres.conf describes.
    snap = c.source.snapshot()
    for node in snap.nodes:
        assert [(g.name, g.gpu_indices, g.socket) for g in node.gpu_groups] == \
            [(g.name, g.gpu_indices, g.socket) for g in layout[node.name]]
    from_files = build_topology_graph(slurm_conf=slurm_conf, gres_conf=gres_conf,
                                      topology_conf=topology_conf)
    from_live = build_topology_graph(snapshot=snap)
    assert _kinds(from_files) == _kinds(from_live)
    assert nx.utils.graphs_equal(nx.Graph(from_files.edges()), nx.Graph(from_live.edges()))
