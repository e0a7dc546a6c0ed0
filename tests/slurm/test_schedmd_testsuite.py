"""SchedMD's own regression tests (Slurm's testsuite/python, from Debian's source package of
the installed Slurm) on a local cluster with Slurm alone and with the gate and the agent
(``slurm_marl.testcluster.schedmd``, ``bash run.sh schedmd-tests``): a few fast modules
that submit, list, update and cancel real jobs must end the same way, test by test."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_marl.testcluster.schedmd import QUICK_MODULES, RunSettings, compare, table

from slurmtest import SLURM_VERSION

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(SLURM_VERSION is not None,
                    reason="the testsuite comes from the host Slurm's Debian source package; "
                           "it runs against the host's 22.05 only")
def test_schedmd_testsuite_same_with_and_without_agent(tmp_path):
    # No skip when the source cannot be had: fetch_testsuite raises SchedmdError saying why
    # (Debian's source archives are reachable wherever the Debian packages are).
    result = compare(RunSettings(modules=QUICK_MODULES, nodes=4, accounting=False,
                                 cache=REPO / ".cache" / "schedmd-testsuite",
                                 out=tmp_path / "schedmd", timeout_s=300))
    report = table(result)
    assert result["same_per_test"], report
    slurm, agent = result["counts"]["slurm"], result["counts"]["agent"]
    assert slurm == agent, report
    # not vacuous: real tests ran and passed in both runs, with the gate and agent present
    assert result["passed_in_both"] >= 10, report
    run = result["runs"]["agent"]
    assert run["gate_loaded"] and run["agent_alive_at_end"] and run["agent_cycles"] >= 3, run
    assert not result["runs"]["slurm"]["gate_loaded"]
