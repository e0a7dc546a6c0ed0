"""`slurm-marl check-slurm` over recorded `scontrol show config` / `show node -o` output
(the local test cluster of each version) and hand-edited variants of it."""

from pathlib import Path

import pytest

from slurm_marl.slurm_integration.readiness import (check, gres_groups, parse_show_config,
                                                   priority_weight_sum)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm" / "v22.05"
CONFIG = (DATA / "scontrol_show_config.txt").read_text()
NODES = (DATA / "scontrol_show_node.txt").read_text()
GATE = ("-- slurm-marl job_submit.lua\nlocal MARK = \"slurm-marl:v1\"\n"
        "local ENFORCE_BINDING = false\n")
OLD_GATE = GATE.replace("local ENFORCE_BINDING = false\n", "")


def levels(checks):
    return {c.name: c.level for c in checks}


def test_the_test_cluster_is_ready_but_for_the_gate_and_accounting():
    cfg = parse_show_config(CONFIG)
    assert cfg["SLURM_VERSION"] == "22.05.8" and cfg["SelectType"] == "select/cons_tres"
    got = levels(check(cfg, NODES, None, "root", None))
    assert got == {"Slurm version": "ok", "GPU-aware node selection": "ok",
                   "priority plugin": "ok", "job_submit gate": "warn",
                   "network topology": "ok", "GPU groups per socket": "ok",
                   "accounting (slurmdbd)": "warn", "agent's rights": "ok"}


def test_what_is_missing_is_said_with_its_fix():
    cfg = parse_show_config(CONFIG)
    bad = dict(cfg, SelectType="select/linear", SLURM_VERSION="21.08.8",
               JobSubmitPlugins="lua", AccountingStorageType="accounting_storage/slurmdbd")
    checks = {c.name: c for c in check(bad, NODES, GATE, "svc-agent", "None")}
    assert checks["GPU-aware node selection"].level == "missing"
    assert "cons_tres" in checks["GPU-aware node selection"].advice
    assert checks["Slurm version"].level == "warn"
    assert checks["job_submit gate"].level == "ok"
    assert checks["agent's rights"].level == "missing"
    assert "adminlevel=operator" in checks["agent's rights"].advice
    assert levels(check(bad, NODES, GATE, "svc-agent", "Operator"))["agent's rights"] == "ok"
    other_gate = levels(check(dict(cfg, JobSubmitPlugins="lua"), NODES, "-- site's own\n",
                              "root", None))
    assert other_gate["job_submit gate"] == "warn"


def test_gpu_groups_and_priority_weights():
    assert gres_groups(NODES)[0] == gres_groups(NODES)[1] > 0
    loose = NODES.replace("Gres=gpu:s0:2(S:0),gpu:s1:2(S:1)", "Gres=gpu:4", 1)
    with_gpus, per_socket, names = gres_groups(loose)
    assert (with_gpus - per_socket, len(names)) == (1, 1)
    assert levels(check(parse_show_config(CONFIG), loose, None, "root", None))[
        "GPU groups per socket"] == "warn"
    none = "\n".join(line.replace("Gres=gpu:s0:2(S:0),gpu:s1:2(S:1)", "Gres=(null)")
                     for line in NODES.splitlines())
    assert levels(check(parse_show_config(CONFIG), none, None, "root", None))[
        "GPUs in gres.conf"] == "missing"
    cfg = {"PriorityType": "priority/multifactor", "PriorityWeightAge": "1000",
           "PriorityWeightFairshare": "10000", "PriorityWeightQOS": "0",
           "PriorityWeightTRES": "CPU=1000"}
    assert priority_weight_sum(cfg) == 11000
    prio = next(c for c in check(cfg, NODES, None, "root", None) if c.name == "priority plugin")
    assert "11000" in prio.found and "SiteFactor" in prio.advice


def test_no_slurm_clients_is_one_line_and_exit_2(tmp_path):
    import os
    import subprocess
    import sys
    env = dict(os.environ, PATH=str(tmp_path),     # no scontrol anywhere
               SLURM_CONF=str(tmp_path / "slurm.conf"))
    proc = subprocess.run([sys.executable, "-m", "slurm_marl.cli", "check-slurm"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: cannot read Slurm's configuration")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_each_supported_version_reads_as_ready_but_for_gate_and_accounting(version):
    """Recorded `scontrol show config` / `show node -o` of the local cluster of each
    version (tests/data/slurm/v*/)."""
    folder = DATA.parent / f"v{version}"
    cfg = parse_show_config((folder / "scontrol_show_config.txt").read_text())
    assert cfg["SLURM_VERSION"].startswith(version)
    got = levels(check(cfg, (folder / "scontrol_show_node.txt").read_text(), None, "root",
                       None))
    assert got["Slurm version"] == got["GPU-aware node selection"] == "ok"
    assert got["GPU groups per socket"] == got["network topology"] == "ok"
    assert got["job_submit gate"] == got["accounting (slurmdbd)"] == "warn"


def test_a_gate_forcing_enforce_binding_is_named_on_every_version():
    """A gate that forces GRES enforce-binding makes sbatch refuse what Slurm alone accepts
    on 22.05 and gives each job its GPUs' whole socket on 24.11+ (measured): check-slurm
    says to render it again, whatever the version."""
    cfg = dict(parse_show_config(CONFIG), JobSubmitPlugins="lua")
    newer = dict(cfg, SLURM_VERSION="24.11.5")
    forcing = GATE.replace("ENFORCE_BINDING = false", "ENFORCE_BINDING = true")
    for conf in (cfg, newer):
        got = {c.name: c for c in check(conf, NODES, forcing, "root", None)}
        assert got["job_submit gate"].level == "warn"
        assert "whole socket" in got["job_submit gate"].advice
        assert "refuse" in got["job_submit gate"].advice
        assert levels(check(conf, NODES, GATE, "root", None))["job_submit gate"] == "ok"
        assert levels(check(conf, NODES, OLD_GATE, "root", None))["job_submit gate"] == "warn"


def test_a_gate_that_does_not_match_the_agent_is_named():
    """A gate rendered for other partitions or another grace (the config changed, the gate
    not installed again) delays jobs the agent does not decide and lets others start on
    their own; an older gate refuses users' begin updates. check-slurm --managed says so,
    and the daemon at start (wiring.gate_warning)."""
    from slurm_marl.slurm_integration.plugin import gate_mismatch, render_job_submit_lua

    rendered = render_job_submit_lua(["gpu"], 30, [], slurm_version="22.05.8")
    assert gate_mismatch(rendered, ["gpu"], 30) is None
    assert gate_mismatch(None, ["gpu"], 30) is None           # no gate: not judged here
    other = gate_mismatch(rendered, ["gpu", "a100"], 20)
    assert "it gates partitions gpu, the agent manages a100, gpu" in other
    assert "its grace is 30 s, the agent's 20 s" in other
    older = rendered.replace("slurm_job_modify(", "refuse_earlier_start(); slurm_job_modify(")
    assert "older slurm-marl's gate" in gate_mismatch(older, ["gpu"], 30)
    cfg = dict(parse_show_config(CONFIG), JobSubmitPlugins="lua")
    got = {c.name: c for c in check(cfg, NODES, rendered, "root", None, (["gpu"], 20))}
    assert got["job_submit gate"].level == "warn" and "grace" in got["job_submit gate"].found
    assert "install-plugin" in got["job_submit gate"].advice
    got = {c.name: c for c in check(cfg, NODES, rendered, "root", None, (["gpu"], 30))}
    assert got["job_submit gate"].level == "ok" and "gpu, 30 s" in got["job_submit gate"].found
