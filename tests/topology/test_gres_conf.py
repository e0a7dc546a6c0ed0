"""gres.conf lines and Gres= strings."""

import pytest

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import parse_gres_conf, parse_gres_conf_text


def test_test_cluster_gres(testcluster_dir):
    conf = parse_gres_conf(testcluster_dir / "gres.conf")
    assert conf.autodetect == "off"
    s0, s1 = conf.lines_for("n3")
    assert s0.type == "s0" and s0.cores == (0, 1, 2, 3)
    assert s0.files == ("/tmp/slurm-marl-test/dev/nvidia0", "/tmp/slurm-marl-test/dev/nvidia1")
    assert s1.files[-1].endswith("nvidia3") and s1.count == 2
    assert conf.lines_for("n9") == ()


def test_site_gres_typed_links_untyped_and_no_nodename(site_dir):
    conf = parse_gres_conf(site_dir / "gres.conf")
    assert conf.autodetect_for("gpu-a03") == "nvml" and conf.autodetect_for("gpu-b01") == "off"
    a = conf.lines_for("gpu-a03")
    assert len(a) == 4 and a[0].links == (-1, 12, 12, 12, 12, 12, 12, 12)
    assert a[3].files == tuple(f"/dev/nvidia{i}" for i in range(4, 8))
    b = conf.lines_for("gpu-b07")
    assert b[0].cores == tuple(range(32)) and b[1].cores == tuple(range(32, 64))
    (bandwidth,) = conf.lines_for("cpu001", "bandwidth")
    assert bandwidth.node_names is None and bandwidth.count == 20 * 1024 ** 2
    assert bandwidth.flags == ("CountOnly",)


@pytest.mark.parametrize("text,needle", [
    ("NodeName=n1 Name=gpu File=/dev/nvidia[0-1] Count=3", "Count=3"),
    ("NodeName=n1 Name=gpu File=/dev/nvidia[0-1] Links=-1,2", "exactly one device"),
    ("NodeName=n1 Name=gpu File=/dev/nvidia0 Links=-1,x", "Links"),
    ("NodeName=n1 Name=gpu File=/dev/nvidia0 Cores=a-b", "Cores"),
    ("NodeName=n1 File=/dev/nvidia0", "needs Name="),
    ("NodeName=n1 Name=gpu File=dev/nvidia0", "absolute"),
    ("AutoDetect=maybe", "AutoDetect"),
    ("NodeName=n1 Name=gpu Colour=red", "unknown gres.conf key"),
])
def test_errors(text, needle):
    with pytest.raises(TopologyConfigError) as info:
        parse_gres_conf_text("# header\n" + text + "\n", "/etc/slurm/gres.conf")
    assert needle in str(info.value) and info.value.line == 2


def test_autodetect_on_a_gres_line_applies_to_its_nodes():
    conf = parse_gres_conf_text("AutoDetect=nvml\n"
                                "NodeName=tux3 AutoDetect=off Name=gpu File=/dev/nvidia[0-3]\n")
    assert conf.autodetect_for("tux3") == "off" and conf.autodetect_for("tux4") == "nvml"
    assert conf.lines_for("tux3")[0].count == 4
