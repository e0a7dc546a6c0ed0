"""The shipped unit file passes `systemd-analyze verify` (Debian's systemd)."""

import shutil
import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).parents[2] / "src/slurm_marl/data/systemd/slurm-marl.service"


def test_unit_file_verifies(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing: run.sh installs Debian's systemd package"
    # Point ExecStart at this checkout's entry point (verify checks it is executable).
    exe = Path(sys.executable).parent / "slurm-marl"
    text = UNIT.read_text().replace("/opt/slurm-marl/.venv/bin/slurm-marl", str(exe))
    unit = tmp_path / "slurm-marl.service"
    unit.write_text(text)
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


def test_unit_is_notify_with_watchdog_and_hardening():
    text = UNIT.read_text()
    for line in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "ReadWritePaths=/var/lib/slurm-marl", "User=slurm-marl"):
        assert line in text
