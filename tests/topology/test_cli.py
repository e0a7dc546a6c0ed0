"""`slurm-marl topology show|check` and `slurm-marl probe`, through the real CLI app."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from slurm_marl.cli import app as main_app
from slurm_marl.topology.cli import app

runner = CliRunner()


def test_registered_in_the_main_cli():
    result = runner.invoke(main_app, ["--help"])
    assert result.exit_code == 0
    assert "topology" in result.output and "probe" in result.output


def test_show_tree_and_json(testcluster_dir):
    conf = str(testcluster_dir / "slurm.conf")
    tree = runner.invoke(app, ["show", "--slurm-conf", conf])
    assert tree.exit_code == 0, tree.output
    assert "switch spine" in tree.output and "GPU group 1 type s1" in tree.output
    data = json.loads(runner.invoke(app, ["show", "--slurm-conf", conf, "--json"]).output)
    (spine,) = data["switches"]
    assert [leaf["name"] for leaf in spine["switches"]] == ["leaf1", "leaf2"]
    n3 = spine["switches"][1]["nodes"][0]
    assert n3["name"] == "n3" and n3["partitions"] == ["gpu", "short"]
    assert n3["sockets"][1]["gpu_groups"][0]["name"] == "s1"
    assert [g["index"] for g in n3["sockets"][1]["gpu_groups"][0]["gpus"]] == [2, 3]
    assert data["nodes_without_switch"] == []


def test_show_with_probe_dir_lists_nvlink_peers(tmp_path, data_dir):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fake_nvml import FakeNvml

    from slurm_marl.topology.probe import probe_node, write_probe_document

    doc = probe_node(nvml=FakeNvml.from_file(data_dir / "nvml/dgx_like_2s8g.json"),
                     lstopo=lambda: (data_dir / "hwloc/dgx_like_2s8g.xml").read_text(),
                     sysfs_root=tmp_path / "none", node_name="dgx01")
    write_probe_document(doc, tmp_path / "probes")
    (tmp_path / "slurm.conf").write_text("NodeName=dgx01 Sockets=2 CoresPerSocket=4\n")
    result = runner.invoke(app, ["show", "--slurm-conf", str(tmp_path / "slurm.conf"),
                                 "--probe-dir", str(tmp_path / "probes"), "--json"])
    data = json.loads(result.output)
    (node,) = data["nodes_without_switch"]
    gpu0 = node["sockets"][0]["gpu_groups"][0]["gpus"][0]
    assert gpu0["pci_bus_id"] == "0000:06:00.0"
    assert {"gpu": 3, "kind": "nvlink", "links": 2} in gpu0["peers"]


def test_check_clean_and_with_live_view(testcluster_dir, data_dir, tmp_path):
    conf = str(testcluster_dir / "slurm.conf")
    clean = runner.invoke(app, ["check", "--slurm-conf", conf])
    assert clean.exit_code == 0 and "0 problem(s)" in clean.output
    live = runner.invoke(app, ["check", "--slurm-conf", conf, "--json", "--scontrol-nodes",
                               str(data_dir / "scontrol/show_node_testcluster.txt"),
                               "--scontrol-topology",
                               str(data_dir / "scontrol/show_topology_testcluster.txt")])
    assert live.exit_code == 1
    data = json.loads(live.output)
    assert data["ok"] is False
    assert data["findings"] == [{"severity": "problem", "kind": "live",
                                 "message": "n[3-4]: partitions gpu,short in slurm.conf, gpu live"}]


def test_check_reports_parse_errors_with_file_and_line(tmp_path, testcluster_dir):
    for name in ("slurm.conf", "gres.conf"):
        shutil.copy(testcluster_dir / name, tmp_path / name)
    (tmp_path / "topology.conf").write_text("SwitchName=leaf1 Nodes=n[1-2\n")
    result = runner.invoke(app, ["check", "--slurm-conf", str(tmp_path / "slurm.conf"),
                                 "--json"])
    assert result.exit_code == 1
    (finding,) = json.loads(result.output)["findings"]
    assert finding["kind"] == "parse_error"
    assert f"{tmp_path / 'topology.conf'}:1: Nodes='n[1-2'" in finding["message"]


def test_check_finds_nodes_without_switch(site_dir):
    result = runner.invoke(app, ["check", "--slurm-conf", str(site_dir / "slurm.conf"),
                                 "--json"])
    assert result.exit_code == 1
    kinds = {f["kind"] for f in json.loads(result.output)["findings"]}
    assert kinds == {"node_without_switch", "include"}


def test_show_missing_file_fails_clearly(tmp_path):
    result = runner.invoke(app, ["show", "--slurm-conf", str(tmp_path / "none.conf"), "--json"])
    assert result.exit_code == 1
    assert "none.conf: cannot read" in json.loads(result.output)["error"]


def test_probe_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent.conf"))  # default: skipped
    result = runner.invoke(main_app, ["probe", "--output-dir", str(tmp_path), "--node-name",
                                      "vm-cli", "--json"])
    assert result.exit_code == 0, result.output
    start = result.output.index("{")
    printed = json.loads(result.output[start:result.output.rindex("}") + 1])
    assert printed["document"]["nvml"]["available"] is False
    assert (tmp_path / "vm-cli.json").is_file()


@pytest.mark.parametrize("args", [["show"], ["check"]])
def test_default_slurm_conf_comes_from_the_environment(args, testcluster_dir, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(testcluster_dir / "slurm.conf"))
    assert runner.invoke(app, args).exit_code == 0


def test_probe_command_with_a_missing_explicit_file_fails(tmp_path):
    result = runner.invoke(main_app, ["probe", "--output-dir", str(tmp_path), "--slurm-conf",
                                      str(tmp_path / "absent.conf"), "--json"])
    assert result.exit_code == 1
    assert "absent.conf: cannot read" in result.output
    assert not list(tmp_path.glob("*.json"))
