"""Issue 31 on real Slurm: the sink reads the GPU requests of every job it pins in one
``squeue -h -j a,b,c -O`` before its writes and reads them back in one after them; a job
that is gone (cancelled, or an id Slurm never had) is "not read" and hides no other job."""

from __future__ import annotations

import pytest

from slurm_marl.domain import GroupAlloc, Place
from slurm_marl.slurm_integration.ports import WriteStatus

pytestmark = pytest.mark.slurm


def test_one_read_before_and_one_after_and_a_gone_job_hides_no_other(clean):
    c = clean
    per_node = c.sbatch("--gres=gpu:2")
    gone = c.sbatch("--gres=gpu:1")
    per_job = c.sbatch("--gpus=2")
    c.run("scancel", str(gone))
    c.wait_for(lambda: c.job(gone) is None or not c.job(gone).is_pending, 10,
               "the cancelled job to end")
    snap = c.source.snapshot()
    # squeue leaves a list's unknown ids out (rc 0); one unknown id alone fails
    got = c.sink.read_requests([per_node, gone, per_job, 999_999])
    assert got == {per_node: {"gpus_per_node": 2, "gpus_per_job": 0, "gpu_type": None},
                   gone: None,
                   per_job: {"gpus_per_node": 0, "gpus_per_job": 2, "gpu_type": None},
                   999_999: None}
    assert c.sink.read_request(999_999) is None
    before = c.sink.runner.calls
    results = c.sink.apply([
        Place(per_node, plugin="test", nodes=("n1",), start_now=False,
              allocs=(GroupAlloc("n1", 1, 2),)),
        Place(gone, plugin="test", nodes=("n2",), start_now=False,
              allocs=(GroupAlloc("n2", 1, 1),)),
        Place(per_job, plugin="test", nodes=("n2",), start_now=False,
              allocs=(GroupAlloc("n2", 0, 2),))], snap)
    by_job = {r.decision.job_id: r for r in results}
    # two reads (before, after) and one update per job: 5 calls (were 2 reads per job)
    assert c.sink.runner.calls - before == 5, results
    assert by_job[per_node].status is WriteStatus.OK and not by_job[per_node].message
    assert by_job[per_job].status is WriteStatus.OK and not by_job[per_job].message
    assert by_job[gone].status is not WriteStatus.OK
    assert "could not read its GPU request" in by_job[gone].message \
        or by_job[gone].status is WriteStatus.VANISHED, by_job[gone]
    assert c.sink.read_requests([per_node, per_job]) == {
        per_node: {"gpus_per_node": 0, "gpus_per_job": 2, "gpu_type": "s1"},
        per_job: {"gpus_per_node": 2, "gpus_per_job": 0, "gpu_type": "s0"}}
