"""hwloc XML: this machine's real lstopo output (recorded) and a hand-written 2-socket,
8-GPU server with PCIe switches under each package's host bridge."""

import shutil
import subprocess

import pytest

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.hwloc import (common_ancestor_level, hwloc_summary, normalise_bus_id,
                                       parse_cpuset, parse_hwloc_xml)


def test_this_machine_recorded(data_dir):
    topo = parse_hwloc_xml((data_dir / "hwloc/this_machine.xml").read_text())
    assert topo.hostname == "vm"
    assert (topo.pu_count, topo.core_count) == (2, 2)
    (package,) = topo.packages
    assert package.cpus == (0, 1) and package.core_ids == (0, 1) and package.numa_nodes == (0,)
    assert topo.gpus == ()
    disk = topo.device("0000:00:02.0")
    assert disk.class_id == "0180" and disk.package == 0 and disk.os_devices == ("vda",)


@pytest.mark.skipif(shutil.which("lstopo-no-graphics") is None,
                    reason="hwloc-nox not installed")  # installed on the project machine
def test_this_machine_live_output_parses():
    xml = subprocess.run(["lstopo-no-graphics", "--of", "xml"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    topo = parse_hwloc_xml(xml)
    assert topo.pu_count >= 1 and topo.packages


def test_two_socket_eight_gpu_server(data_dir):
    topo = parse_hwloc_xml((data_dir / "hwloc/dgx_like_2s8g.xml").read_text())
    assert [p.os_index for p in topo.packages] == [0, 1]
    assert topo.packages[1].cpus == (4, 5, 6, 7, 12, 13, 14, 15)
    assert topo.packages[1].core_ids == (4, 5, 6, 7)  # Slurm-style logical core numbers
    assert [n.os_index for n in topo.numa_nodes] == [0, 1]
    gpus = topo.gpus
    assert [g.bus_id for g in gpus] == ["0000:06:00.0", "0000:07:00.0", "0000:0a:00.0",
                                        "0000:0b:00.0", "0000:85:00.0", "0000:86:00.0",
                                        "0000:89:00.0", "0000:8a:00.0"]
    assert [g.package for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.numa_nodes for g in gpus] == [(0,)] * 4 + [(1,)] * 4
    assert common_ancestor_level(gpus[0], gpus[1]) == "SINGLE"
    assert common_ancestor_level(gpus[0], gpus[2]) == "HOSTBRIDGE"
    assert common_ancestor_level(gpus[0], gpus[4]) == "SYSTEM"
    nic = topo.device("0000:05:00.0")
    assert not nic.is_gpu and nic.package == 0
    summary = hwloc_summary(topo)
    assert summary["gpus"][4]["vendor"] == "NVIDIA" and summary["core_count"] == 8


def test_cpusets_and_bus_ids():
    assert parse_cpuset("0x00000003") == (0, 1)
    assert parse_cpuset("0x00000001,0x00000000") == (32,)
    assert parse_cpuset("0xf...f,0x00000005") == (0, 2)
    assert normalise_bus_id("00000000:8A:00.0") == "0000:8a:00.0"
    with pytest.raises(ValueError):
        parse_cpuset("0xzz")


@pytest.mark.parametrize("text,needle", [
    ("<topology><object", "not valid hwloc XML"),
    ("<other/>", "expected <topology>"),
    ('<topology><object type="Package" cpuset="0xqq"/></topology>', "bad cpuset"),
    ('<topology><object type="PCIDev" pci_type="junk"/></topology>', "pci_type"),
])
def test_bad_xml_raises_the_one_error(text, needle):
    with pytest.raises(TopologyConfigError, match=needle) as info:
        parse_hwloc_xml(text, "node7.xml")
    assert info.value.path == "node7.xml"
