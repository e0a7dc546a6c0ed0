"""The shipped unit's hardening (issue 31): its directives, its `systemd-analyze security`
exposure, and that the agent's torch and LightGBM code runs under MemoryDenyWriteExecute."""

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).parents[2] / "src/slurm_marl/data/systemd/slurm-marl.service"
# The exposure `systemd-analyze security --offline=true` measured on the shipped unit with
# systemd 252 (Debian 12), recorded in docs/operations.md (section 5)
MAX_EXPOSURE = 1.1
PR_GET_MDWE = 66


def _directives() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_unit_has_the_hardening_directives():
    d = _directives()
    assert d["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    assert d["SystemCallErrorNumber"] == ["EPERM"]
    assert d["MemoryDenyWriteExecute"] == ["yes"]
    assert d["ProtectProc"] == ["invisible"]
    assert d["IPAddressDeny"] == ["any"]
    assert d["IPAddressAllow"] == ["localhost"]
    assert d["RemoveIPC"] == ["yes"] and d["PrivateMounts"] == ["yes"]
    # munge authenticates the agent by its uid: a user namespace would break it; torch
    # needs /proc/cpuinfo for its vector kernels
    assert "PrivateUsers" not in d and "ProcSubset" not in d and "PrivateNetwork" not in d


def test_offline_security_exposure_is_at_most_the_measured_one():
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing: run.sh installs Debian's systemd package"
    proc = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(UNIT)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = re.search(r"Overall exposure level for slurm-marl\.service: (\d+\.\d+)", proc.stdout)
    assert got, proc.stdout + proc.stderr
    assert float(got.group(1)) <= MAX_EXPOSURE, proc.stdout


def _kernel_has_mdwe() -> bool:
    return ctypes.CDLL(None, use_errno=True).prctl(PR_GET_MDWE, 0, 0, 0, 0) >= 0


@pytest.mark.skipif(not _kernel_has_mdwe(),
                    reason="this kernel lacks PR_SET_MDWE (Linux < 6.3): cannot check that "
                           "torch and LightGBM run under MemoryDenyWriteExecute")
def test_torch_and_lightgbm_run_without_write_execute_memory():
    """The unit's MemoryDenyWriteExecute=yes: the agent's learned placement, interference
    model and GPU-time predictor run in a process refused W+X memory (prctl PR_SET_MDWE,
    the kernel's form of the same refusal). torch's oneDNN convolutions JIT code and fail
    so ("could not create a primitive"); the agent must not come to use such paths."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "mdwe_child.py")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "OK", proc.stdout + proc.stderr
