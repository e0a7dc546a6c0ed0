"""slurm.conf node and partition lines."""

import pytest

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.slurm_conf import parse_slurm_conf, parse_slurm_conf_text


def test_test_cluster_nodes(testcluster_dir):
    conf = parse_slurm_conf(testcluster_dir / "slurm.conf")
    assert [n.name for n in conf.nodes] == ["n1", "n2", "n3", "n4"]
    n1 = conf.node("n1")
    assert (n1.sockets, n1.cores_per_socket, n1.threads_per_core, n1.cpus) == (2, 4, 1, 8)
    assert n1.real_memory_mib == 16000 and n1.gpu_count == 4
    assert [(g.type, g.count) for g in n1.gres] == [("s0", 2), ("s1", 2)]
    assert conf.setting("topologyplugin") == "topology/tree"
    assert conf.partitions_of("n3") == ("gpu", "short")
    assert conf.partitions[1].max_time_s == 3600.0


def test_site_defaults_continuations_include_and_case(site_dir):
    conf = parse_slurm_conf(site_dir / "slurm.conf")
    a01 = conf.node("gpu-a01")
    assert (a01.sockets, a01.cores_per_socket, a01.threads_per_core) == (2, 32, 2)
    assert a01.cpus == 128 and a01.real_memory_mib == 1024000 and a01.weight == 10
    assert a01.state == "UNKNOWN" and a01.features == ("a100", "nvlink")
    b07 = conf.node("gpu-b07")  # after a second DEFAULT line that only changes RealMemory
    assert b07.real_memory_mib == 512000 and b07.cores_per_socket == 32
    assert b07.features == ("v100", "pcie")
    assert conf.node("gpu-b05") is None
    cpu = conf.node("cpu002")
    assert (cpu.sockets, cpu.cpus, cpu.threads_per_core) == (1, 16, 1)
    assert conf.node("login1") is not None  # from the Include
    assert [i.found for i in conf.includes] == [True, False]
    parts = {p.name: p for p in conf.partitions}
    assert parts["a100"].default and parts["a100"].max_time_s == 2 * 86400
    assert parts["v100"].max_time_s == 12 * 3600
    assert parts["all"].nodes[0] == "login1" and len(parts["all"].nodes) == len(conf.nodes)
    assert parts["all"].state == "DRAIN" and parts["all"].max_time_s is None
    assert parts["fast"].nodes == tuple(f"gpu-a{i:02d}" for i in range(1, 11))


@pytest.mark.parametrize("text,needle,line", [
    ("NodeName=n1 Sockets=two\n", "Sockets", 1),
    ("NodeName=n1\nNodeName=n[1-2]\n", "defined twice", 2),
    ("NodeName=n1 Gres=gpu:a:b:c:4\n", "Gres", 1),
    ("NodeName=n[1-2] NodeAddr=a,b,c\n", "NodeAddr", 1),
    ("NodeName=n1 Sockets=2 SocketsPerBoard=1\n", "mutually exclusive", 1),
    ("NodeName=n1\nPartitionName=p Nodes=n1 MaxTime=soon\n", "MaxTime", 2),
    ("PartitionName=p Default=maybe\n", "Default", 1),
    ("NodeName=n1 CoresPerSocket=0\n", "at least 1", 1),
])
def test_errors(text, needle, line):
    with pytest.raises(TopologyConfigError) as info:
        parse_slurm_conf_text(text, "slurm.conf")
    assert needle in str(info.value) and info.value.line == line


def test_cpus_default_and_boards():
    conf = parse_slurm_conf_text("NodeName=n1 Boards=2 SocketsPerBoard=2 CoresPerSocket=4 "
                                 "ThreadsPerCore=2\n")
    n1 = conf.node("n1")
    assert n1.sockets == 4 and n1.cpus == 32
