"""Fidelity against the Tiresias simulator's own figures.

tiresias_60_job.csv and the Philly windows of reference/tiresias_windows.md (both in
src/slurm_marl/data/public, whose README has the reference figures): placement by GPU count
only (jobs may split across nodes), no interference; average JCT within 5% (60 jobs) and 1%
(windows) of Tiresias' fifo, dlas-gpu and shortest-gpu, and job for job. Reads the data
shipped in the package (fails, naming the missing file, if it is not there).
"""

import pytest

from slurm_marl.shared_data import data_file
from slurm_marl.sim.fidelity import SCHEDULES, WINDOWS, compare, profile_for
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


# -- Larger Philly windows against Tiresias' simulator, job for job ----------------------------
# (src/slurm_marl/data/public/reference/tiresias_windows.md). The first two windows demote
# and preempt a thousand times; the last two are light. fifo and shortest-gpu agree job for job; under
# dlas-gpu a one-second difference (Tiresias truncates times to integers and wakes late for
# multi-GPU demotions) changes which job a preemption hits, and from there single jobs
# diverge while the average stays within 0.2%.


# Share of jobs whose JCT is within 1% (or 1 s) of Tiresias', at least.
JOB_FOR_JOB = {"fifo": 1.0, "shortest-gpu": 0.99}
DLAS_JOB_FOR_JOB = {"0e4a51_2017-09-20": 0.9, "7f04ca_2017-09-01": 0.5,
                    "b436b2_2017-10-15": 1.0, "6214e9_2017-12-01": 1.0}


@pytest.mark.parametrize("window, cluster", WINDOWS)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_reference_window_matches_tiresias(window, cluster, schedule):
    c = compare(window, cluster, schedule)
    assert c.ratio == pytest.approx(1.0, abs=0.01), c
    if c.reference_preemptions:
        assert c.ours_preemptions == pytest.approx(c.reference_preemptions, rel=0.05), c
    else:
        assert c.ours_preemptions == 0, c
    floor = JOB_FOR_JOB.get(schedule, DLAS_JOB_FOR_JOB[window])
    assert c.close_jct_share >= floor, c
    if schedule == "fifo":
        assert c.max_abs_diff_s <= 1.0, c


def test_running_first_order_misses_tiresias_on_a_contended_window():
    # The order this project used before (running jobs first inside a queue, waiting ones
    # by submit time) is 5% off: the tests above would catch a return to it.
    c = compare("0e4a51_2017-09-20", "n8g8", "dlas-gpu",
                profile_for("dlas-gpu", in_queue="running_first"))
    assert c.ratio > 1.03, c
