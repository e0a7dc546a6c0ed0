"""The order users and admins ask of Slurm (``--nice``, ``scontrol top``, ``Priority=``)
kept inside the policy's order: hand-built rankings."""

from __future__ import annotations

from slurm_marl.domain import Job
from slurm_marl.policy.actions import RankedJob
from slurm_marl.policy.asked_order import asked_order


def ranked(*jobs: Job) -> list[RankedJob]:
    return [RankedJob(j, 0, ()) for j in jobs]


def ids(rs) -> list[int]:
    return [r.job.job_id for r in rs]


def test_no_ask_leaves_the_policys_order_unchanged():
    rs = ranked(*(Job(i, priority=10 - i) for i in range(5)))
    assert asked_order(rs) == rs


def test_nice_moves_a_job_that_many_places_later():
    # --nice=3 on the first of five: priority/basic gives it the priority of the job
    # three places later, which it goes before on the tie (the lower job id)
    rs = ranked(Job(1, nice=3), Job(2), Job(3), Job(4), Job(5))
    assert ids(asked_order(rs)) == [2, 3, 1, 4, 5]
    # a large nice: last; a negative one (an admin's): earlier
    assert ids(asked_order(ranked(Job(1, nice=1000), Job(2), Job(3)))) == [2, 3, 1]
    assert ids(asked_order(ranked(Job(1), Job(2), Job(3, nice=-3)))) == [3, 1, 2]


def test_scontrol_top_keeps_the_order_slurm_gives_the_swapped_priorities():
    # the agent wrote 3000 > 2000 > 1000; `scontrol top 3` swapped them (3 took 3000, the
    # others moved down, their nice values changed): all three are asked; the other user's
    # job at 2500 keeps its place between them, as in Slurm
    a = Job(1, priority=2000, nice=1024, priority_asked=True)
    b = Job(2, priority=1000, nice=1024, priority_asked=True)
    c = Job(3, priority=3000, nice=-2048, priority_asked=True)
    other = Job(4, priority=2500)
    assert ids(asked_order(ranked(a, b, other, c))) == [3, 4, 1, 2]


def test_an_admins_priority_places_the_job_where_slurm_would():
    free = [Job(i, priority=p) for i, p in ((1, 5000), (2, 4000), (3, 3000))]
    boosted = Job(9, priority=4500, priority_asked=True)
    assert ids(asked_order(ranked(*free, boosted))) == [1, 9, 2, 3]
    sunk = Job(9, priority=1, priority_asked=True)
    assert ids(asked_order(ranked(sunk, *free))) == [1, 2, 3, 9]


def test_the_reason_says_what_was_asked():
    from slurm_marl.policy.asked_order import asked_note

    assert asked_note(Job(1)) == ""
    assert "nice 1000: 1000 places later" in asked_note(Job(1, nice=1000))
    assert "set by its user or an admin" in asked_note(Job(1, priority=7, priority_asked=True))
