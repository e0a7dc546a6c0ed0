"""GPU groups from gres.conf / slurm.conf, Slurm's GPU index order."""

from slurm_marl.domain import GpuGroup
from slurm_marl.topology.gres_conf import parse_gres_conf, parse_gres_conf_text
from slurm_marl.topology.layout import gpu_devices_for_node, snapshot_layout_from_files
from slurm_marl.topology.slurm_conf import parse_slurm_conf, parse_slurm_conf_text


def test_test_cluster_layout(testcluster_dir):
    layout = snapshot_layout_from_files(parse_slurm_conf(testcluster_dir / "slurm.conf"),
                                        parse_gres_conf(testcluster_dir / "gres.conf"))
    expected = (GpuGroup(0, (0, 1), "s0", 0, (0, 1, 2, 3)),
                GpuGroup(1, (2, 3), "s1", 1, (4, 5, 6, 7)))
    assert layout == {name: expected for name in ("n1", "n2", "n3", "n4")}


def test_gpu_index_is_position_in_naturally_sorted_files():
    gres = parse_gres_conf_text(
        "NodeName=n1 Name=gpu Type=b File=/dev/nvidia[8-11] Cores=4-7\n"
        "NodeName=n1 Name=gpu Type=a File=/dev/nvidia[0-1],/dev/nvidia[2-3] Cores=0-3\n")
    devices = gpu_devices_for_node(gres, "n1")
    assert [d.file.rsplit("/", 1)[1] for d in devices] == [
        "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia8", "nvidia9", "nvidia10", "nvidia11"]
    assert [d.minor_number for d in devices] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert [d.type for d in devices] == ["a"] * 4 + ["b"] * 4


def test_groups_split_by_cores_when_types_are_equal(site_dir):
    layout = snapshot_layout_from_files(parse_slurm_conf(site_dir / "slurm.conf"),
                                        parse_gres_conf(site_dir / "gres.conf"))
    g0, g1 = layout["gpu-a05"]
    assert (g0.gpu_indices, g0.socket, g0.name) == ((0, 1, 2, 3), 0, "a100")
    assert (g1.gpu_indices, g1.socket) == ((4, 5, 6, 7), 1)
    assert [g.name for g in layout["gpu-b01"]] == ["v100s0", "v100s1"]
    assert layout["cpu001"] == ()


def test_without_gres_conf_groups_follow_slurm_conf_gres():
    conf = parse_slurm_conf_text("NodeName=a Gres=gpu:s0:2,gpu:s1:2\nNodeName=b Gres=gpu:4\n")
    layout = snapshot_layout_from_files(conf, None)
    assert layout["a"] == (GpuGroup(0, (0, 1), "s0"), GpuGroup(1, (2, 3), "s1"))
    assert layout["b"] == (GpuGroup(0, (0, 1, 2, 3), None),)


def test_untyped_gpus_without_cores_are_one_group_with_unknown_socket():
    conf = parse_slurm_conf_text("NodeName=a Sockets=2 CoresPerSocket=4 Gres=gpu:2\n")
    gres = parse_gres_conf_text("Name=gpu File=/dev/nvidia[0-1]\n")
    assert snapshot_layout_from_files(conf, gres)["a"] == (GpuGroup(0, (0, 1), None, None, ()),)


def test_cores_spanning_two_sockets_give_no_socket():
    conf = parse_slurm_conf_text("NodeName=a Sockets=2 CoresPerSocket=4 Gres=gpu:1\n")
    gres = parse_gres_conf_text("NodeName=a Name=gpu File=/dev/nvidia0 Cores=2-5\n")
    (group,) = snapshot_layout_from_files(conf, gres)["a"]
    assert group.socket is None and group.core_ids == (2, 3, 4, 5)
