"""`slurm-marl check-slurm` against the real local cluster: it reads the live config."""

import json
import subprocess

import pytest
from slurmtest import SLURM_MARL

pytestmark = pytest.mark.slurm


def test_check_slurm_reads_the_live_cluster(cluster, tmp_path):
    proc = subprocess.run([*SLURM_MARL, "check-slurm", "--slurm-conf",
                           str(cluster.local.slurm_conf), "--json"],
                          capture_output=True, text=True, timeout=60,
                          env=cluster.local.env)   # this cluster's clients (a chroot's)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ready"] is True
    checks = {c["name"]: c for c in report["checks"]}
    version = cluster.run("scontrol", "--version").stdout.split()[-1]
    assert checks["Slurm version"]["found"] == version
    assert checks["GPU groups per socket"]["level"] == "ok"
    assert checks["network topology"]["found"] == "topology/tree"


def test_install_plugin_asks_the_live_slurm_and_never_forces_enforce_binding(cluster, tmp_path):
    """The gate asks the live Slurm's version and renders without forcing GRES
    enforce-binding on any (22.05 refused valid submissions with it, 24.11 gave each job
    its GPUs' whole socket)."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[slurm]\nslurm_conf = "{cluster.local.slurm_conf}"\n'
                   '[agent]\nmanaged_partitions = ["gpu"]\n')
    proc = subprocess.run([*SLURM_MARL, "install-plugin", "--config", str(cfg), "--print"],
                          capture_output=True, text=True, timeout=60, env=cluster.local.env)
    assert proc.returncode == 0, proc.stderr
    version = cluster.run("scontrol", "--version").stdout.split()[-1]
    assert version and "ENFORCE_BINDING = false" in proc.stdout
