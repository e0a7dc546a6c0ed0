"""`slurm-marl install-plugin --ip-allow`: the unit's IPAddressAllow drop-in from slurm.conf's
slurmctld hosts (primary and backups), the name servers and --allow."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_marl.cli import app
from slurm_marl.daemon import ipallow

UNIT = Path(__file__).parents[2] / "src/slurm_marl/data/systemd/slurm-marl.service"


def _conf(tmp_path, slurm_lines, metrics=""):
    (tmp_path / "slurm.conf").write_text("ClusterName=t\n" + slurm_lines)
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[slurm]\nslurm_conf = "{tmp_path / "slurm.conf"}"\n{metrics}')
    return cfg


def test_every_slurmctld_host_primary_and_backups(tmp_path):
    _conf(tmp_path, "SlurmctldHost=ctl1(192.0.2.1)\nSlurmctldHost=ctl2(192.0.2.2)\n"
                    "SlurmctldHost=ctl3\nSlurmctldPort=6817-6818\n")
    peers = ipallow.slurmctld_peers(tmp_path / "slurm.conf")
    assert [p.host for p in peers] == ["192.0.2.1", "192.0.2.2", "ctl3"]
    assert peers[1].why == f"SlurmctldHost=ctl2(192.0.2.2) ({tmp_path / 'slurm.conf'}:3)"


def test_older_control_machine_keys(tmp_path):
    _conf(tmp_path, "ControlMachine=ctl1\nControlAddr=192.0.2.1\nBackupController=ctl2\n")
    assert [p.host for p in ipallow.slurmctld_peers(tmp_path / "slurm.conf")] == \
        ["192.0.2.1", "ctl2"]
    _conf(tmp_path, "SlurmctldPort=6817\n")
    with pytest.raises(ipallow.AllowError, match="names no SlurmctldHost"):
        ipallow.slurmctld_peers(tmp_path / "slurm.conf")


def test_addresses_names_and_networks():
    assert ipallow.addresses("192.0.2.9") == ["192.0.2.9"]
    assert ipallow.addresses("2001:db8::1") == ["2001:db8::1"]
    assert ipallow.addresses("198.51.100.7/24") == ["198.51.100.0/24"]
    assert "127.0.0.1" in ipallow.addresses("localhost")
    with pytest.raises(ipallow.AllowError, match="nosuch.invalid does not resolve"):
        ipallow.addresses("nosuch.invalid")


def test_name_servers(tmp_path):
    (tmp_path / "resolv.conf").write_text("search x\nnameserver 192.0.2.53\nnameserver ::1\n")
    assert [p.host for p in ipallow.name_servers(tmp_path / "resolv.conf")] == \
        ["192.0.2.53", "::1"]
    assert ipallow.name_servers(tmp_path / "missing") == []


def test_cli_prints_the_dropin_and_writes_nothing(tmp_path):
    cfg = _conf(tmp_path, "SlurmctldHost=localhost\nSlurmctldHost=ctl2(192.0.2.7)\n")
    res = CliRunner().invoke(app, ["install-plugin", "--config", str(cfg), "--ip-allow",
                                   "--allow", "198.51.100.0/24", "--allow", "192.0.2.7"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == f"# {ipallow.DROPIN}" and "[Service]" in lines
    allowed = [line.split("=", 1)[1] for line in lines if line.startswith("IPAddressAllow=")]
    assert "192.0.2.7" in allowed and "198.51.100.0/24" in allowed
    assert allowed.count("192.0.2.7") == 1                  # once, though named twice
    assert not any(a.startswith("127.") for a in allowed)  # the unit allows localhost
    assert res.stderr == ""                                 # metrics on 127.0.0.1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.toml", "slurm.conf"]


def test_cli_errors_and_the_metrics_warning(tmp_path):
    cfg = _conf(tmp_path, "SlurmctldHost=ctl9.invalid\n")
    res = CliRunner().invoke(app, ["install-plugin", "--config", str(cfg), "--ip-allow"])
    assert res.exit_code == 2 and res.stdout == ""
    err = res.stderr.strip()
    assert "\n" not in err and err.startswith("error: ctl9.invalid does not resolve"), err
    assert f"SlurmctldHost=ctl9.invalid ({tmp_path / 'slurm.conf'}:2)" in err
    res = CliRunner().invoke(app, ["install-plugin", "--config", str(cfg), "--print",
                                   "--slurm-version", "24.11.5", "--allow", "192.0.2.9"])
    assert res.exit_code == 2 and res.stderr == "error: --allow goes with --ip-allow\n"
    cfg = _conf(tmp_path, "SlurmctldHost=192.0.2.1\n", '[metrics]\naddress = "0.0.0.0"\n')
    res = CliRunner().invoke(app, ["install-plugin", "--config", str(cfg), "--ip-allow"])
    assert res.exit_code == 0 and "IPAddressAllow=192.0.2.1" in res.stdout
    assert res.stderr.startswith("warning: metrics listen on 0.0.0.0:9798: name your "
                                 "Prometheus servers with --allow"), res.stderr


def test_dropin_verifies_with_the_shipped_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing: run.sh installs Debian's systemd package"
    cfg = _conf(tmp_path, "SlurmctldHost=ctl1(192.0.2.1)\nSlurmctldHost=ctl2(2001:db8::2)\n")
    res = CliRunner().invoke(app, ["install-plugin", "--config", str(cfg), "--ip-allow",
                                   "--allow", "198.51.100.0/24"])
    assert res.exit_code == 0, res.output
    units = tmp_path / "units"
    (units / "slurm-marl.service.d").mkdir(parents=True)
    exe = Path(sys.executable).parent / "slurm-marl"
    (units / "slurm-marl.service").write_text(
        UNIT.read_text().replace("/opt/slurm-marl/.venv/bin/slurm-marl", str(exe)))
    (units / "slurm-marl.service.d" / "ipaddress.conf").write_text(res.stdout)
    env = {"SYSTEMD_UNIT_PATH": f"{units}:", "PATH": "/usr/bin:/bin"}
    unit = str(units / "slurm-marl.service")
    proc = subprocess.run([analyze, "verify", unit], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr
    # the drop-in is read: the allow list now has non-localhost entries
    proc = subprocess.run([analyze, "security", "--offline=true", "--no-pager", unit],
                          capture_output=True, text=True, env=env)
    assert "allow list with non-localhost entries" in proc.stdout, proc.stdout + proc.stderr
