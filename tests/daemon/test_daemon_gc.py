"""The cyclic garbage collector is off during a cycle (its objects die at the cycle's end)
and on again after it, also when the cycle fails."""

import gc

from agent_builders import NODES, PARTS, agent, pending

from slurm_marl.domain import ClusterSnapshot


class Recording:
    def __init__(self, fail=False):
        self.fail, self.seen = fail, []

    def run_cycle(self, snapshot):
        self.seen.append(gc.isenabled())
        if self.fail:
            raise RuntimeError("policy bug")
        return []


def test_gc_off_during_a_cycle_and_on_after_even_when_it_fails(tmp_path):
    now = 1000.0
    snap = ClusterSnapshot(now, NODES, (pending(1, now),), PARTS)
    a, _ = agent(tmp_path, snap, [])
    assert gc.isenabled()
    for fail in (False, True):
        a.policy = Recording(fail)
        report = a.cycle()
        assert a.policy.seen == [False]
        assert gc.isenabled()
        assert (report.error is not None) == fail
    gc.disable()
    try:   # an embedding program that runs without the collector keeps it off
        a.policy = Recording()
        a.cycle()
        assert not gc.isenabled()
    finally:
        gc.enable()
