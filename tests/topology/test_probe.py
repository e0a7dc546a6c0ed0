"""Node probe: recorded NVML answers for a DGX-like server, the real no-NVML path here,
sysfs numa_node = -1 falling back to gres.conf, atomic writes, reading documents back."""

import json
import logging
import os
import socket
import sys
from pathlib import Path

import pynvml
import pytest

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import parse_gres_conf_text
from slurm_marl.topology.probe import (SCHEMA_VERSION, load_probe_documents, probe,
                                       probe_node, validate_probe_document,
                                       write_probe_document)
from slurm_marl.topology.probe_sources import probe_nvml, sysfs_gpus
from slurm_marl.topology.slurm_conf import parse_slurm_conf_text

sys.path.insert(0, str(Path(__file__).parent))
from fake_nvml import FakeNvml  # noqa: E402

GRES = parse_gres_conf_text(
    "NodeName=dgx01 Name=gpu Type=s0 File=/dev/nvidia[0-3] Cores=0-3\n"
    "NodeName=dgx01 Name=gpu Type=s1 File=/dev/nvidia[4-7] Cores=4-7\n")
SLURM = parse_slurm_conf_text("NodeName=dgx01 Sockets=2 CoresPerSocket=4 ThreadsPerCore=2 "
                              "Gres=gpu:s0:4,gpu:s1:4\n")


@pytest.fixture
def fake(data_dir):
    return FakeNvml.from_file(data_dir / "nvml/dgx_like_2s8g.json")


@pytest.fixture
def dgx_xml(data_dir):
    return (data_dir / "hwloc/dgx_like_2s8g.xml").read_text()


def make_sysfs(root: Path, numa: dict[str, int], vendor: str = "0x10de") -> Path:
    for bus, node in numa.items():
        d = root / "bus" / "pci" / "devices" / bus
        d.mkdir(parents=True)
        (d / "class").write_text("0x030200\n")
        (d / "vendor").write_text(vendor + "\n")
        (d / "numa_node").write_text(f"{node}\n")
    nic = root / "bus" / "pci" / "devices" / "0000:05:00.0"
    nic.mkdir(parents=True)
    (nic / "class").write_text("0x020700\n")
    (nic / "vendor").write_text("0x15b3\n")
    return root


BUSES = ["0000:06:00.0", "0000:07:00.0", "0000:0a:00.0", "0000:0b:00.0",
         "0000:85:00.0", "0000:86:00.0", "0000:89:00.0", "0000:8a:00.0"]


def test_nvml_replay_of_a_dgx_like_server(fake):
    part = probe_nvml(fake, cpu_count=16)
    assert part["available"] and part["driver_version"] == "535.104.05"
    gpus = part["gpus"]
    assert [g["pci_bus_id"] for g in gpus] == BUSES
    assert gpus[0]["cpu_affinity"] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert gpus[5]["cpu_affinity"] == [4, 5, 6, 7, 12, 13, 14, 15]
    assert gpus[0]["nvml_numa_node"] is None  # this driver said NOT_SUPPORTED...
    assert any("NUMA node: Not Supported" in w for w in part["warnings"])  # ...and it is said
    assert [lk["remote_pci_bus_id"] for lk in gpus[0]["nvlinks"]] == [
        BUSES[1], BUSES[2], BUSES[3], BUSES[3], BUSES[4], BUSES[4]]
    pairs = {tuple(p["gpus"]): p for p in part["pairs"]}
    assert len(pairs) == 28
    assert pairs[(0, 3)]["nvlink_count"] == 2 and pairs[(0, 1)]["nvlink_count"] == 1
    assert pairs[(0, 5)]["nvlink_count"] == 0 and pairs[(0, 5)]["common_ancestor"] == "SYSTEM"
    assert pairs[(0, 5)]["p2p_read"] == "IOH_TOPOLOGY_NOT_SUPPORTED"
    assert pairs[(6, 7)]["common_ancestor"] == "SINGLE"
    assert fake.calls == ["init", "shutdown"]


def test_nvml_init_failure_is_reported(fake):
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    part = probe_nvml(fake, cpu_count=16)
    assert part == {"available": False, "error": "Driver Not Loaded", "gpus": [], "pairs": [],
                    "warnings": []}


def test_probe_locates_gpus_via_sysfs_and_uses_slurm_indices(fake, dgx_xml, tmp_path):
    sysfs = make_sysfs(tmp_path, {b: (0 if i < 4 else 1) for i, b in enumerate(BUSES)})
    doc = probe_node(nvml=fake, lstopo=lambda: dgx_xml, sysfs_root=sysfs, gres_conf=GRES,
                     slurm_conf=SLURM, node_name="dgx01", now_s=1.0)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["node"] == "dgx01"
    assert [g["index"] for g in doc["gpus"]] == list(range(8))
    assert {g["numa_source"] for g in doc["gpus"]} == {"sysfs"}
    assert [g["gres_type"] for g in doc["gpus"]] == ["s0"] * 4 + ["s1"] * 4
    assert [(g["gpu_indices"], g["socket"], g["name"], g["core_ids"], g["source"])
            for g in doc["gpu_groups"]] == [
        ([0, 1, 2, 3], 0, "s0", [0, 1, 2, 3], "sysfs"), ([4, 5, 6, 7], 1, "s1", [4, 5, 6, 7],
                                                         "sysfs")]
    assert doc["fallbacks"] == []
    json.dumps(doc)  # JSON-serialisable as is


def test_numa_minus_one_without_hwloc_falls_back_to_gres_cores(fake, tmp_path, caplog):
    sysfs = make_sysfs(tmp_path, {b: -1 for b in BUSES})
    with caplog.at_level(logging.WARNING, logger="slurm_marl.topology.probe"):
        doc = probe_node(nvml=fake, lstopo=None, sysfs_root=sysfs, gres_conf=GRES,
                         slurm_conf=SLURM, node_name="dgx01")
    assert {g["sysfs_numa_node_raw"] for g in doc["gpus"]} == {"-1"}
    assert [(g["gpu_indices"], g["socket"], g["source"]) for g in doc["gpu_groups"]] == [
        ([0, 1, 2, 3], 0, "gres.conf"), ([4, 5, 6, 7], 1, "gres.conf")]
    fallback = doc["fallbacks"][-1]
    assert "sysfs numa_node = -1 for 0000:06:00.0" in fallback
    assert "gres.conf Cores= binding (2 group(s))" in fallback
    assert "hwloc unavailable" in doc["fallbacks"][0]
    assert any("numa_node = -1" in r.getMessage() for r in caplog.records)


def test_nvml_missing_uses_sysfs_scan_then_hwloc_locality(dgx_xml, tmp_path):
    sysfs = make_sysfs(tmp_path, {b: -1 for b in BUSES})
    missing = FakeNvml({"devices": []}, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    doc = probe_node(nvml=missing, lstopo=lambda: dgx_xml, sysfs_root=sysfs,
                     proc_root=tmp_path / "proc", node_name="dgx01")
    assert doc["nvml"]["available"] is False
    assert doc["nvml"]["error"] == "NVML Shared Library Not Found"
    assert "NVML unavailable (NVML Shared Library Not Found)" in doc["fallbacks"][0]
    assert [g["source"] for g in doc["gpus"]] == ["sysfs"] * 8
    assert [g["numa_source"] for g in doc["gpus"]] == ["hwloc"] * 8
    assert [g["socket"] for g in doc["gpu_groups"]] == [0, 1]


def test_real_machine_without_nvml(tmp_path, caplog):
    """This machine: nvidia-ml-py installed, no NVIDIA library, no GPU, numa_node = -1."""
    with caplog.at_level(logging.WARNING, logger="slurm_marl.topology.probe"):
        doc = probe_node(node_name="vm-test")
    assert doc["nvml"]["available"] is False
    assert "NVML Shared Library Not Found" in doc["nvml"]["error"]
    assert doc["gpus"] == [] and doc["gpu_groups"] == []
    assert any("NVML unavailable (NVML Shared Library Not Found)" in f for f in doc["fallbacks"])
    assert any("no GPU found" in f for f in doc["fallbacks"])
    assert any("NVML Shared Library Not Found" in r.getMessage() for r in caplog.records)
    if doc["hwloc"]["available"]:
        assert doc["hwloc"]["pu_count"] >= 1
    assert sysfs_gpus(Path("/sys"), Path("/proc")) == []
    validate_probe_document(json.loads(json.dumps(doc)), "doc")


def test_write_is_atomic_and_documents_load_back(tmp_path, fake, dgx_xml):
    doc = probe_node(nvml=fake, lstopo=lambda: dgx_xml, sysfs_root=tmp_path / "none",
                     node_name="dgx01")
    out = tmp_path / "probes"
    path = write_probe_document(doc, out)
    assert path == out / "dgx01.json"
    assert [p.name for p in out.iterdir()] == ["dgx01.json"]  # no temp file left behind
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    loaded = load_probe_documents(out)
    assert loaded["dgx01"]["gpu_groups"] == doc["gpu_groups"]
    (out / "bad.json").write_text('{"schema_version": 1,')
    with pytest.raises(TopologyConfigError, match="bad.json:1: not JSON"):
        load_probe_documents(out)


@pytest.mark.parametrize("doc,needle", [
    ([], "not a JSON object"),
    ({"schema_version": 2, "node": "a", "gpus": [], "gpu_groups": [], "gpu_pairs": [],
      "fallbacks": []}, "schema_version 2"),
    ({"schema_version": 1, "node": "a", "gpus": [{}], "gpu_groups": [], "gpu_pairs": [],
      "fallbacks": []}, "integer 'index'"),
    ({"schema_version": 1, "node": "a", "gpus": [], "gpu_groups": [],
      "fallbacks": []}, "gpu_pairs"),
])
def test_validation_names_the_file(doc, needle):
    with pytest.raises(TopologyConfigError, match=needle) as info:
        validate_probe_document(doc, "/var/lib/slurm-marl/probes/a.json")
    assert info.value.path == "/var/lib/slurm-marl/probes/a.json"


def test_probe_command_writes_and_prints_json(tmp_path, capsys):
    gres = tmp_path / "gres.conf"
    gres.write_text("NodeName=vm-test Name=gpu File=/dev/nvidia[0-1] Cores=0-1\n")
    probe(tmp_path / "out", gres_conf=gres, node_name="vm-test", json_output=True)
    printed = json.loads(capsys.readouterr().out)
    assert printed["written_to"] == str(tmp_path / "out" / "vm-test.json")
    groups = printed["document"]["gpu_groups"]
    assert groups and groups[0]["source"] == "gres.conf" and groups[0]["gpu_indices"] == [0, 1]
    assert json.loads((tmp_path / "out" / "vm-test.json").read_text())["node"] == "vm-test"
    assert socket.gethostname()  # the document also records the real host name


def test_recorded_nvml_answers_replay_to_the_same_probe(fake, tmp_path):
    """``probe --record-nvml`` on the DGX-like replay: the recording, replayed, gives the
    probe exactly what the original answers gave (every NVLink, error and matrix entry)."""
    from slurm_marl.topology.nvml_record import record_nvml

    recorded = record_nvml(fake, 16, "round trip")
    assert recorded["devices"][0]["numa_node"] == {"error": "NOT_SUPPORTED"}
    assert [lk["state"] for lk in recorded["devices"][0]["nvlinks"]][:7] == \
        [pynvml.NVML_FEATURE_ENABLED] * 6 + [{"error": "NOT_SUPPORTED"}]
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(recorded))
    again = FakeNvml.from_file(path)
    assert probe_nvml(again, 16) == probe_nvml(FakeNvml.from_file(
        Path(__file__).parents[1] / "data/topology/nvml/dgx_like_2s8g.json"), 16)
    assert again.calls[-1] == "shutdown" and fake.calls[-1] == "shutdown"


def test_record_nvml_without_nvml_says_so_in_one_line(tmp_path):
    """Here (no NVIDIA driver) ``slurm-marl probe --record-nvml`` writes the probe document,
    then fails with one line naming NVML's own error, and writes no recording."""
    import subprocess

    out = tmp_path / "probes"
    done = subprocess.run([sys.executable, "-m", "slurm_marl.cli", "probe", "--output-dir",
                           str(out), "--node-name", "here", "--record-nvml",
                           str(tmp_path / "rec.json")],
                          env={**os.environ, "SLURM_CONF": str(tmp_path / "none.conf")},
                          capture_output=True, text=True, timeout=120)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "cannot record NVML" in done.stdout + done.stderr
        assert str(exc) in done.stdout + done.stderr
        assert not (tmp_path / "rec.json").exists()
        assert (out / "here.json").exists()
    else:   # a machine with NVML: the recording replays
        pynvml.nvmlShutdown()
        assert done.returncode == 0, done.stdout + done.stderr
        FakeNvml.from_file(tmp_path / "rec.json")


def test_a_real_h200_replays_to_the_probe_it_gave(data_dir, tmp_path):
    """A real GPU server (one H200 in a VM, tests/data/topology/real_h200_vm/README.md): its
    recorded NVML answers, lstopo XML and sysfs, replayed, give the probe document the live
    probe wrote there, field for field. The GPU is placed from hwloc (sysfs numa_node -1,
    NVML without a NUMA id), with no fallback; the graph has one group on socket 0."""
    from slurm_marl.topology.graph import build_topology_graph, gpu_groups_of

    live = json.loads((data_dir / "probe/h200_vm_1g.json").read_text())
    snap = json.loads((data_dir / "real_h200_vm/sysfs.json").read_text())
    sysfs = make_sysfs(tmp_path / "sys", {bus: int(e["numa_node"])
                                          for bus, e in snap["pci"].items()})
    replayed = probe_node(nvml=FakeNvml.from_file(data_dir / "nvml/h200_vm_1g.json"),
                          lstopo=lambda: (data_dir / "hwloc/h200_vm_1g.xml").read_text(),
                          sysfs_root=sysfs, proc_root=tmp_path / "proc", node_name="gpu01",
                          now_s=live["probed_at_s"])
    replayed["hostname"] = live["hostname"]
    assert json.loads(json.dumps(replayed)) == live
    (gpu,) = live["gpus"]
    assert (gpu["name"], gpu["sysfs_numa_node_raw"], gpu["numa_source"]) == \
        ("NVIDIA H200", "-1", "hwloc")
    assert live["nvml"]["warnings"] == ["GPU 0 NUMA node: Not Supported"]
    assert live["fallbacks"] == [] and gpu["nvlinks"] == []
    graph = build_topology_graph(probes={"gpu01": validate_probe_document(live, "h200")})
    assert [(g.gpu_indices, g.socket) for g in gpu_groups_of(graph, "gpu01")] == [((0,), 0)]
