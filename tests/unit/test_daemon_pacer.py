"""When the loop runs a cycle (daemon/loop.py ``Pacer``): every interval, and early when the
queue's fingerprint changed, never more than about half the time."""

from slurm_marl.daemon.loop import Pacer


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_without_reacting_a_cycle_runs_every_interval_and_the_probe_is_never_read():
    clock = Clock()
    pacer = Pacer(5.0, 0.0, clock=clock)
    reads = []

    def probe():
        reads.append(clock.t)
        return "x"

    assert pacer.tick_s == 5.0 and not pacer.reacting
    assert pacer.due(probe)
    pacer.started()
    pacer.ended()
    clock.t = 4.0
    assert not pacer.due(probe)
    clock.t = 5.0
    assert pacer.due(probe)
    assert reads == []
    assert not Pacer(5.0, 5.0).reacting       # react_s >= interval_s: nothing to gain


def run(pacer, clock, probe, duration=0.2):
    if not pacer.due(probe):
        return False
    pacer.started()
    clock.t += duration
    pacer.ended()
    return True


def test_a_changed_queue_runs_a_cycle_early_an_unchanged_one_waits_for_the_interval():
    clock = Clock()
    pacer = Pacer(5.0, 1.0, clock=clock)
    queue = {"fp": "a"}
    probe = lambda: queue["fp"]   # noqa: E731
    assert pacer.tick_s == 1.0
    assert run(pacer, clock, probe)           # the first cycle; fingerprint "a" taken
    ran = []
    for t in (1.2, 2.2, 3.2, 4.2):
        clock.t = t
        ran.append(run(pacer, clock, probe))
    assert ran == [False] * 4                 # unchanged: no early cycle
    clock.t = 5.0
    assert run(pacer, clock, probe)           # the interval
    queue["fp"] = "b"                         # a job ended
    clock.t = 6.2
    assert run(pacer, clock, probe) and pacer.early == 1
    clock.t = 7.4
    assert not run(pacer, clock, probe)       # "b" again: nothing new


def always_changing():
    """A probe whose queue fingerprint changes at every read."""
    n = {"i": 0}

    def probe():
        n["i"] += 1
        return str(n["i"])
    return probe


def test_an_early_cycle_waits_for_react_s_and_the_last_cycles_duration():
    clock = Clock()
    pacer = Pacer(10.0, 1.0, clock=clock)
    probe = always_changing()
    assert run(pacer, clock, probe, duration=3.0)      # a slow cycle: 0 -> 3 s
    clock.t = 4.0
    assert not run(pacer, clock, probe)       # 1 s after it ended, but it took 3 s
    clock.t = 6.0
    assert run(pacer, clock, probe, duration=3.0)
    busy = 3.0 + 3.0
    assert busy / clock.t <= 0.7              # about half the time in cycles, not all


def test_an_unknown_fingerprint_never_runs_a_cycle_early():
    clock = Clock()
    pacer = Pacer(5.0, 1.0, clock=clock)
    assert run(pacer, clock, lambda: None)
    clock.t = 2.0
    assert not run(pacer, clock, lambda: None)
    clock.t = 5.0
    assert run(pacer, clock, lambda: None)


def test_the_pacer_counts_a_cycle_up_to_its_last_start():
    clock = Clock()
    pacer = Pacer(10.0, 1.0, clock=clock)
    probe = always_changing()
    assert pacer.due(probe)
    pacer.started()
    clock.t = 3.0                      # starts done at 1.2 s, then 1.8 s of renewals
    pacer.ended(1.2)
    assert pacer.last_duration == 1.2 and pacer.last_end == 3.0
    clock.t = 4.0
    assert not pacer.due(probe)        # react_s after its end, not yet 1.2 s
    clock.t = 4.25
    assert pacer.due(probe)            # was 6.0 with the renewals counted
    pacer.started()
    clock.t = 5.0
    pacer.ended(None)                  # not known: the whole duration
    assert pacer.last_duration == 0.75
    pacer.started()
    clock.t = 5.5
    pacer.ended(9.0)                   # never more than the whole cycle
    assert pacer.last_duration == 0.5
