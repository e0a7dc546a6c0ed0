"""check (inside the files) and compare_views (files versus live)."""

from slurm_marl.topology.consistency import check_files, compare_views
from slurm_marl.topology.gres_conf import parse_gres_conf, parse_gres_conf_text
from slurm_marl.topology.layout import snapshot_layout_from_files
from slurm_marl.topology.scontrol import parse_show_nodes, parse_show_topology
from slurm_marl.topology.slurm_conf import parse_slurm_conf, parse_slurm_conf_text
from slurm_marl.topology.topology_conf import parse_topology_conf, parse_topology_conf_text


def _files(d):
    slurm = parse_slurm_conf(d / "slurm.conf")
    gres = parse_gres_conf(d / "gres.conf")
    topo = parse_topology_conf(d / "topology.conf")
    return slurm, gres, topo, snapshot_layout_from_files(slurm, gres)


def test_test_cluster_files_are_clean(testcluster_dir):
    assert check_files(*_files(testcluster_dir)) == []


def test_test_cluster_files_agree_with_recorded_live_view(testcluster_dir, data_dir):
    slurm, gres, topo, layout = _files(testcluster_dir)
    live_nodes = parse_show_nodes((data_dir / "scontrol/show_node_testcluster.txt").read_text())
    live_topo = parse_show_topology((data_dir / "scontrol/show_topology_testcluster.txt")
                                    .read_text())
    diffs = compare_views(slurm, gres, topo, live_nodes, live_topo, layout)
    # The recorded cluster had no "short" partition: exactly that is reported.
    assert diffs == ["n[3-4]: partitions gpu,short in slurm.conf, gpu live"]


def test_disagreements_are_reported(testcluster_dir, data_dir):
    slurm, gres, topo, layout = _files(testcluster_dir)
    live = (data_dir / "scontrol/show_node_testcluster.txt").read_text()
    live = live.replace("NodeName=n4 ", "NodeName=n5 ").replace(
        "RealMemory=16000 AllocMem=0 FreeMem=23526 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1"
        " TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-22T00:32:34"
        " SlurmdStartTime=2026-11-22T00:36:48 LastBusyTime=2026-11-22T00:37:17",
        "RealMemory=8000 AllocMem=0 FreeMem=23526 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1"
        " TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-22T00:32:34"
        " SlurmdStartTime=2026-11-22T00:36:48 LastBusyTime=2026-11-22T00:37:17", 1)
    live = live.replace("Gres=gpu:s0:2(S:0),gpu:s1:2(S:1) NodeAddr=127.0.0.1 NodeHostName=n3",
                        "Gres=gpu:s0:2(S:1),gpu:s1:2(S:0) NodeAddr=127.0.0.1 NodeHostName=n3")
    topo_live = parse_show_topology("SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-3]\n"
                                    "SwitchName=top Level=1 LinkSpeed=1 Nodes=n[1-3] "
                                    "Switches=leaf1\n")
    diffs = compare_views(slurm, gres, topo, parse_show_nodes(live), topo_live, layout)
    text = "\n".join(diffs)
    assert "n4: in slurm.conf but not in scontrol show node" in text
    assert "n5: in scontrol show node but not in slurm.conf" in text
    assert "n1: RealMemory is 16000 in slurm.conf, 8000 live" in text
    assert "n3: gpu:s0 bound to socket(s) 0 by gres.conf, 1 live" in text
    assert "switch leaf2: in" in text and "switch top: in scontrol" in text
    assert "switch leaf1: nodes differ (n3 only live)" in text


def test_check_finds_file_problems():
    slurm = parse_slurm_conf_text(
        "TopologyPlugin=topology/tree\n"
        "NodeName=n[1-4] Sockets=2 CoresPerSocket=4 Gres=gpu:s0:2,gpu:s1:2\n"
        "NodeName=n5 Sockets=2 CoresPerSocket=4 Gres=gpu:2\n")
    gres = parse_gres_conf_text(
        "NodeName=n[1-4] Name=gpu Type=s0 File=/dev/nvidia[0-1] Cores=0-3\n"
        "NodeName=n[1-3] Name=gpu Type=s1 File=/dev/nvidia[2-3] Cores=4-11\n"
        "NodeName=n5 Name=gpu File=/dev/nvidia0 Links=-1,1,1\n"
        "NodeName=n5 Name=gpu File=/dev/nvidia1\n"
        "NodeName=n9 Name=gpu File=/dev/nvidia0\n")
    topo = parse_topology_conf_text("SwitchName=l1 Nodes=n[1-2],x1\nSwitchName=l2 Nodes=n2,n3\n")
    findings = check_files(slurm, gres, topo, snapshot_layout_from_files(slurm, gres))
    text = "\n".join(f.message for f in findings)
    assert "n[4-5]: in slurm.conf but under no switch" in text
    assert "x1: in topology.conf but not defined in slurm.conf" in text
    assert "n2: under several leaf switches (l1, l2)" in text
    assert "n4: slurm.conf Gres=s0:2,s1:2 but gres.conf describes s0:2" in text
    assert "n[1-3]: gres.conf Cores= names core(s) 8-11 beyond the 8 cores" in text
    assert "n5: gres.conf Links= of GPU(s) 0 does not have one entry per GPU (2)" in text
    assert "NodeName lists n9 not defined" in text
    assert "n5: GPU(s) 0-1 have no socket" in text
    assert "2 top-level switches" in text  # a note
    assert {f.severity for f in findings} == {"problem", "note"}
