"""SiteFactor mode on real Slurm with multifactor priority and fair-share (slurmdbd +
MariaDB): the agent's order written as SiteFactor is added to the site's factors, so
fair-share still acts; written as Priority it overrides them.

Fair-share needs usage, which Slurm computes once per PriorityCalcPeriod (1 minute at the
least): this test waits for the first computation (about 65 s)."""

from __future__ import annotations

import subprocess
import time

import pytest
from slurmtest import Cluster

from slurm_marl.domain import SetPriority
from slurm_marl.testcluster import ClusterSpec, LocalCluster

pytestmark = pytest.mark.slurm

MULTIFACTOR = ("PriorityType=priority/multifactor\nPriorityWeightFairshare=10000\n"
               "PriorityWeightAge=0\nPriorityCalcPeriod=1")


@pytest.fixture(scope="module")
def fair_cluster():
    local = LocalCluster(spec=ClusterSpec(nodes=1, sockets=2, gpus_per_socket=2,
                                          accounting=True, extra_slurm_conf=MULTIFACTOR)).up()
    try:
        yield Cluster(local)
    finally:
        local.down()


def sprio(c: Cluster) -> dict[int, tuple[int, int, int]]:
    """job -> (priority, site factor, fair-share factor), from sprio (the only place Slurm
    shows a SiteFactor)."""
    out = c.run("sprio", "-h", "-o", "%i %Y %S %F").stdout
    return {int(r[0]): (int(r[1]), int(r[2]), int(r[3]))
            for r in (line.split() for line in out.splitlines()) if len(r) == 4}


def test_site_factor_adds_to_fair_share_priority_overrides_it(fair_cluster):
    c = fair_cluster
    for account, share in (("heavy", 10), ("light", 90)):
        c.run("sacctmgr", "-i", "add", "account", account, f"fairshare={share}")
        c.run("sacctmgr", "-i", "add", "user", "root", f"account={account}")
    # account "heavy" uses every GPU, so it has usage and later jobs wait
    blocker = c.sbatch("-A", "heavy", "--gres=gpu:4", seconds=600, gated=False)
    c.wait_state(blocker, "RUNNING", timeout_s=30)
    jobs = {name: c.sbatch("-A", account, "--gres=gpu:1", seconds=5, gated=False)
            for name, account in (("site_heavy", "heavy"), ("site_light", "light"),
                                  ("prio_heavy", "heavy"), ("prio_light", "light"))}
    # the agent's order puts the heavy account's job first in both modes, by a little
    results = c.sink.apply([
        SetPriority(jobs["site_heavy"], "las", "q0", 6000, 0, site_factor=True),
        SetPriority(jobs["site_light"], "las", "q0", 5000, 0, site_factor=True),
        SetPriority(jobs["prio_heavy"], "las", "q0", 6000, 0),
        SetPriority(jobs["prio_light"], "las", "q0", 5000, 0)], c.source.snapshot())
    assert all(r.ok for r in results), [r.message for r in results]
    assert any("SiteFactor=6000" in cmd for r in results for cmd in r.commands)

    def fair_share_computed():
        got = sprio(c)
        return got if got.get(jobs["site_light"], (0, 0, 0))[2] > 0 else None

    got = c.wait_for(fair_share_computed, 150, "Slurm's first fair-share computation")
    heavy, light = got[jobs["site_heavy"]], got[jobs["site_light"]]
    assert (heavy[1], light[1]) == (6000, 5000)              # the agent's SiteFactors
    assert light[2] > heavy[2]                               # fair-share favours "light"
    assert heavy[0] == heavy[1] + heavy[2] and light[0] == light[1] + light[2]
    assert light[0] > heavy[0]                 # combined: fair-share reorders a close call
    queue = dict(line.split() for line in c.run("squeue", "-h", "-o", "%i %Q").stdout
                 .splitlines())
    assert int(queue[str(jobs["prio_heavy"])]) == 6000     # Priority: every factor ignored
    assert int(queue[str(jobs["prio_light"])]) == 5000
