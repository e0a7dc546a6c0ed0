"""Fidelity against the Tiresias simulator's own figures (shared/data/README.md).

tiresias_60_job.csv, placement by GPU count only (jobs may split across nodes), no
interference: average JCT within 5% of Tiresias' fifo and dlas. Needs the shared data
(fails, naming where it looked, if it is missing).
"""

import pytest

from slurm_marl.sim.data import data_file
from slurm_marl.sim.run import simulate

REFERENCE = {  # (cluster, profile): Tiresias' average JCT in seconds
    ("2x1x4", "fifo-consolidate"): 1556.5,
    ("2x1x4", "las-consolidate"): 715.3,
    ("4x1x4", "fifo-consolidate"): 200.8,
    ("4x1x4", "las-consolidate"): 190.7,
}


@pytest.mark.parametrize("cluster, profile", sorted(REFERENCE))
def test_average_jct_matches_tiresias(cluster, profile):
    trace = data_file("traces/tiresias_60_job.csv")
    run = simulate(trace, cluster, profile, interference="none")
    assert run.summary["finished"] == 60
    assert run.summary["avg_jct_s"] == pytest.approx(REFERENCE[(cluster, profile)], rel=0.05)
