"""A running job the daemon marks not preemptible (outside its preempt partitions) is never
a victim, whatever its queue: the job that would have preempted it waits instead."""

from policy_builders import kinds, node, pending, running, snapshot
from slurm_marl.policy.framework import run_cycle
from slurm_marl.policy.profile import profile_from_mapping


def test_policy_never_picks_a_job_marked_not_preemptible():
    prof = profile_from_mapping({"name": "t", "preemption": True, "backfill": True,
                                 "backfill_reserve": False,
                                 "order": {"plugin": "tiresias_las"},
                                 "place": {"consolidate": 1.0}})
    n1 = node("n1", groups=(4,))
    old = running(1, {"n1": (0, 1, 2, 3)}, attained=3300.0, start=0.0)   # queue 1
    new = pending(2, 4, submit=900.0)                                     # queue 0
    assert [d.job_id for d in kinds(run_cycle(snapshot([n1], [old, new]), prof),
                                    "Preempt")] == [1]
    kept = run_cycle(snapshot([n1], [old.with_(preemptible=False), new]), prof)
    assert not kinds(kept, "Preempt") and not [p for p in kinds(kept, "Place")
                                               if p.start_now]
