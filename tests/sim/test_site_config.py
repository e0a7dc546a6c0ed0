"""The simulator's cluster from a site's slurm.conf / gres.conf / topology.conf (issue 34)."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from slurm_marl.sim.cli import compare, simulate
from slurm_marl.sim.cluster import ClusterSpecError, parse_cluster
from slurm_marl.sim.site_config import SiteConfigError, read_site_cluster
from slurm_marl.testcluster.spec import ClusterSpec, render_configs

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"

SLURM_CONF = """\
ClusterName=site
SchedulerType=sched/backfill
PriorityType=priority/multifactor
PriorityWeightAge=1000
NodeName=DEFAULT Sockets=2 CoresPerSocket=16 ThreadsPerCore=1 \\
    RealMemory=512000 Gres=gpu:4
NodeName=gpu[01-08]
PartitionName=gpu Nodes=gpu[01-08] Default=YES MaxTime=INFINITE State=UP
"""
GRES_CONF = """\
# two GPUs behind each socket
NodeName=gpu[01-08] Name=gpu File=/dev/nvidia[0-1] Cores=0-15
NodeName=gpu[01-08] Name=gpu File=/dev/nvidia[2-3] Cores=16-31
"""
TOPOLOGY_CONF = """\
SwitchName=leafA Nodes=gpu[01-04]
SwitchName=leafB Nodes=gpu[05-08]
SwitchName=top Switches=leafA,leafB
"""


def _write(folder: Path, slurm: str, gres: str | None = None, topo: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "slurm.conf").write_text(slurm)
    if gres is not None:
        (folder / "gres.conf").write_text(gres)
    if topo is not None:
        (folder / "topology.conf").write_text(topo)
    return folder / "slurm.conf"


def _said(site, *fragments: str) -> list[str]:
    return [n for n in site.not_modelled if all(f in n for f in fragments)]


def test_homogeneous_cluster_with_gres_and_topology(tmp_path):
    site = read_site_cluster(_write(tmp_path, SLURM_CONF, GRES_CONF, TOPOLOGY_CONF))
    c = site.cluster
    (part,) = c.partitions_spec
    assert (part.name, part.nodes, part.sockets, part.gpus_per_socket) == ("gpu", 8, 2, 2)
    assert part.cores_per_socket == 16 and part.mem_gib == 500 and part.nodes_per_leaf == 4
    assert [n.name for n in c.nodes] == [f"gpu{i:02d}" for i in range(1, 9)]
    node = c.nodes[0]
    assert [g.gpu_indices for g in node.gpu_groups] == [(0, 1), (2, 3)]
    assert node.cpus == 32 and node.real_memory_mib == 500 * 1024
    leaves = {s.name: s.nodes for s in c.switches if s.is_leaf}
    assert leaves == {"leafA": tuple(f"gpu0{i}" for i in range(1, 5)),
                      "leafB": tuple(f"gpu0{i}" for i in range(5, 9))}
    assert {n.leaf_switch for n in c.nodes[4:]} == {"leafB"}
    assert c.total_gpus == 32 and c.partitions[0].nodes == tuple(n.name for n in c.nodes)
    assert set(c.share_by_node) == {n.name for n in c.nodes}
    # The socket mapping came from gres.conf: nothing said about spreading GPUs.
    assert not _said(site, "spread evenly")
    assert _said(site, "PriorityType", "PriorityWeightAge", "SchedulerType")
    assert c.not_modelled == site.not_modelled


def test_parse_cluster_reads_a_slurm_conf_and_its_neighbours(tmp_path):
    conf = _write(tmp_path / "etc", SLURM_CONF, GRES_CONF, TOPOLOGY_CONF)
    for spec in (conf, str(conf), str(tmp_path / "etc")):
        c = parse_cluster(spec)
        assert len([s for s in c.switches if s.is_leaf]) == 2 and c.total_gpus == 32
    other = tmp_path / "site-nodes"  # no .conf suffix: recognised by its NodeName= lines
    other.write_text(SLURM_CONF)
    assert parse_cluster(other).total_gpus == 32
    assert parse_cluster("8x2x4").nodes[0].name == "gpu01"  # the spec strings are untouched


def test_without_gres_conf_or_topology_gpus_spread_and_one_leaf(tmp_path):
    site = read_site_cluster(_write(tmp_path, SLURM_CONF))
    (part,) = site.cluster.partitions_spec
    assert (part.sockets, part.gpus_per_socket) == (2, 2)
    assert [s.name for s in site.cluster.switches if s.is_leaf] == ["leaf1"]
    assert _said(site, "gpu[01-08]", "no gres.conf", "spread evenly")
    assert _said(site, "no topology.conf", "one leaf")


def test_defaults_hostlists_continuations_and_case(tmp_path):
    conf = """\
nodename=DEFAULT SOCKETS=2 corespersocket=8 RealMemory=65536 # a comment
NodeName=DEFAULT Gres=gpu:2
NodeName=a[1-3],b[7-8] \\
   CoresPerSocket=12
nodename=c1 Boards=1 Sockets=1 CPUs=48 Gres=gpu:4 RealMemory=131072
partitionname=DEFAULT State=UP
PartitionName=small Nodes=a[1-3],b[7-8] Default=YES
PartitionName=big Nodes=c1
"""
    site = read_site_cluster(_write(tmp_path, conf))
    small, big = site.cluster.partitions_spec
    assert (small.name, small.nodes, small.sockets, small.gpus_per_socket) == ("small", 5, 2, 1)
    assert small.cores_per_socket == 12 and small.mem_gib == 64
    assert (big.nodes, big.sockets, big.gpus_per_socket, big.cores_per_socket) == (1, 1, 4, 48)
    assert big.mem_gib == 128
    assert [n.name for n in site.cluster.nodes] == ["a1", "a2", "a3", "b7", "b8", "c1"]
    assert site.cluster.partitions[0].default and site.cluster.partitions[0].name == "small"


def test_typed_and_several_gres(tmp_path):
    conf = """\
GresTypes=gpu,shard
NodeName=n[1-2] Sockets=2 CoresPerSocket=8 RealMemory=64000 Gres=gpu:a100:4,shard:32
NodeName=m1 Sockets=2 CoresPerSocket=8 RealMemory=64000 Gres=gpu:v100:2,gpu:t4:2
PartitionName=p Nodes=n[1-2],m1 Default=YES
"""
    site = read_site_cluster(_write(tmp_path, conf))
    (part,) = site.cluster.partitions_spec
    assert (part.nodes, part.sockets, part.gpus_per_socket) == (3, 2, 2)
    assert site.cluster.total_gpus == 12
    assert _said(site, "n[1-2]", "GPU type(s) a100", "not modelled")
    assert _said(site, "m1", "GPU type(s) v100, t4")
    assert _said(site, "n[1-2]", "Gres shard not modelled")


def test_heterogeneous_partition_takes_the_most_common_shape(tmp_path):
    conf = """\
NodeName=DEFAULT Sockets=2 CoresPerSocket=16 RealMemory=256000
NodeName=g[01-02] Gres=gpu:4
NodeName=g[03-08] Gres=gpu:8
PartitionName=gpu Nodes=g[01-08] Default=YES
"""
    site = read_site_cluster(_write(tmp_path, conf))
    (part,) = site.cluster.partitions_spec
    assert (part.nodes, part.sockets, part.gpus_per_socket) == (8, 2, 4)
    (note,) = _said(site, "partition gpu", "g[01-02]", "most common shape")
    assert "2 GPU(s)" in note and "4 GPU(s)" in note


def test_partition_over_all_nodes_overlaps_and_loose_nodes(tmp_path):
    conf = """\
NodeName=DEFAULT Sockets=2 CoresPerSocket=16 RealMemory=256000
NodeName=g[1-4] Gres=gpu:4
NodeName=cpu[1-2]
NodeName=spare1 Gres=gpu:4
PartitionName=debug Nodes=g[1-2] MaxTime=30 OverSubscribe=YES QOS=short
PartitionName=all Nodes=ALL Default=YES
"""
    site = read_site_cluster(_write(tmp_path, conf))
    c = site.cluster
    # The default partition comes first and takes every node it lists; debug keeps none.
    assert [p.name for p in c.partitions_spec] == ["all"]
    assert c.partitions_spec[0].nodes == 5  # g[1-4] and spare1; the CPU nodes left out
    assert [n.name for n in c.nodes] == ["g1", "g2", "g3", "g4", "spare1"]
    assert _said(site, "g[1-2]", "partitions all, debug", "modelled in all only")
    assert _said(site, "partition all", "cpu[1-2]", "no GPUs")
    assert _said(site, "partition debug", "no nodes of its own")
    assert _said(site, "partition debug", "MaxTime", "OverSubscribe", "QOS", "ignored")


def test_node_in_no_partition_is_said(tmp_path):
    conf = ("NodeName=g[1-3] Sockets=1 CoresPerSocket=8 RealMemory=8192 Gres=gpu:2\n"
            "PartitionName=p Nodes=g[1-2] Default=YES\n")
    site = read_site_cluster(_write(tmp_path, conf))
    assert [n.name for n in site.cluster.nodes] == ["g1", "g2"]
    assert _said(site, "g3", "no partition")


def test_gres_conf_socket_mapping_uneven_and_autodetect(tmp_path):
    conf = ("NodeName=u[1-2] Sockets=2 CoresPerSocket=8 RealMemory=8192 Gres=gpu:4\n"
            "NodeName=v1 Sockets=2 CoresPerSocket=8 RealMemory=8192 Gres=gpu:4\n"
            "PartitionName=p Nodes=u[1-2] Default=YES\nPartitionName=q Nodes=v1\n")
    gres = ("NodeName=u[1-2] Name=gpu File=/dev/nvidia[0-3] Cores=0-7 Colour=blue\n"
            "NodeName=v1 AutoDetect=nvml\n")
    site = read_site_cluster(_write(tmp_path, conf, gres))
    assert _said(site, "u[1-2]", "not spread evenly")
    assert _said(site, "gres.conf:1", "Colour", "ignored")
    assert _said(site, "v1", "AutoDetect=nvml", "spread evenly")


def test_deep_topology_is_flattened(tmp_path):
    conf = ("NodeName=n[1-4] Sockets=1 CoresPerSocket=8 RealMemory=8192 Gres=gpu:1\n"
            "PartitionName=p Nodes=n[1-4] Default=YES\n")
    topo = ("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n3\nSwitchName=mid Switches=l[1-2]\n"
            "SwitchName=core Switches=mid\n")
    site = read_site_cluster(_write(tmp_path, conf, None, topo))
    leaves = {s.name: s.nodes for s in site.cluster.switches if s.is_leaf}
    assert leaves == {"l1": ("n1", "n2"), "l2": ("n3",), "unswitched": ("n4",)}
    assert _said(site, "3 switch levels flattened")
    assert _said(site, "n4", "under no switch")


@pytest.mark.parametrize("name, text, where", [
    ("slurm.conf", "NodeName=g1 Gres=gpu:2\nNodeName=g2 Sockets=two Gres=gpu:2\n",
     "slurm.conf:2:"),
    ("slurm.conf", "NodeName=g1 Gres=gpu:2\n\nPartitionName=p Nodes=g1 Default\n",
     "slurm.conf:3:"),
    ("slurm.conf", "NodeName=g1 Gres=gpu:2\nPartitionName=p Nodes=g[1-2]\n",
     "slurm.conf:2:"),
    ("gres.conf", "Name=gpu File=/dev/nvidia[0-1\n", "gres.conf:1:"),
    ("topology.conf", "SwitchName=s1 Nodes=g1\nSwitchName=s2 Switches=nope\n",
     "topology.conf:2:"),
])
def test_bad_input_names_file_and_line(tmp_path, name, text, where):
    files = {"slurm.conf": "NodeName=g1 Sockets=1 CoresPerSocket=4 Gres=gpu:2\n"
                           "PartitionName=p Nodes=g1\n"}
    files[name] = text
    for file, body in files.items():
        (tmp_path / file).write_text(body)
    with pytest.raises(SiteConfigError) as info:
        parse_cluster(tmp_path / "slurm.conf")
    message = str(info.value)
    assert isinstance(info.value, ClusterSpecError)
    assert where in message and "\n" not in message


def test_no_gpu_partition_is_an_error(tmp_path):
    with pytest.raises(SiteConfigError, match="no partition has nodes with GPUs"):
        read_site_cluster(_write(tmp_path, "NodeName=c1 CPUs=8\nPartitionName=p Nodes=c1\n"))


def test_the_test_harness_slurm_conf_gives_its_shape(tmp_path):
    spec = ClusterSpec(nodes=6, sockets=2, cores_per_socket=4, gpus_per_socket=2,
                       nodes_per_leaf=2, memory_mib=16384, extra_partitions=(("dbg", (1,)),))
    confs = render_configs(spec, tmp_path, 6817, [7000 + i for i in range(6)], "localhost")
    for name, text in confs.items():
        (tmp_path / name).write_text(text)
    site = read_site_cluster(tmp_path / "slurm.conf")
    c = site.cluster
    (part,) = c.partitions_spec
    assert (part.name, part.nodes, part.sockets, part.gpus_per_socket) == ("gpu", 6, 2, 2)
    assert (part.cores_per_socket, part.mem_gib, part.nodes_per_leaf) == (4, 16, 2)
    assert [n.name for n in c.nodes] == spec.node_names
    leaves = {s.name: list(s.nodes) for s in c.switches if s.is_leaf}
    assert leaves == spec.leaves
    groups = c.nodes[0].gpu_groups
    assert [(g.gpu_indices, g.core_ids) for g in groups] == [((0, 1), (0, 1, 2, 3)),
                                                            ((2, 3), (4, 5, 6, 7))]
    assert _said(site, "GPU type(s) s0, s1")
    assert _said(site, "n1", "partitions gpu, dbg")
    assert not _said(site, "spread evenly") and not _said(site, "topology")


def test_simulate_cli_warns_what_it_did_not_model(tmp_path):
    conf = _write(tmp_path, SLURM_CONF.replace("Gres=gpu:4", "Gres=gpu:a100:4"))
    app = typer.Typer()
    app.command("simulate")(simulate)
    app.command("compare")(compare)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(TRACES / "generic_small.csv"),
                                      "--cluster", str(conf), "--profile", "fifo-consolidate",
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["finished"] == 4
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert any("GPU type(s) a100" in w for w in warnings)
    assert any("no topology.conf" in w for w in warnings)
