"""When the loop runs a cycle (daemon/loop.py ``Pacer``): every interval, and early when the
queue's fingerprint changed, never more than about half the time."""

from slurm_marl.daemon.loop import Pacer


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def recording(clock, fingerprint):
    """A probe that always sees ``fingerprint``, and the times it was read."""
    reads = []

    def probe():
        reads.append(clock.t)
        return fingerprint
    return probe, reads


def test_without_reacting_a_cycle_runs_every_interval_and_the_probe_is_never_read():
    clock = Clock()
    pacer = Pacer(5.0, 0.0, clock=clock)
    probe, reads = recording(clock, "x")

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
    assert pacer.tick_s == 0.25            # due asked four times a react_s
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


def loop(pacer, clock, probe, until, duration):
    """The service loop: ``due`` asked every ``tick_s`` on a fixed grid (apscheduler's
    interval job; a tick that falls inside a cycle is skipped), each cycle ``duration``."""
    starts = []
    tick = 0
    while True:
        t = tick * pacer.tick_s
        tick += 1
        if t > until:
            return starts
        if t < clock.t:
            continue                            # inside the last cycle: skipped
        clock.t = t
        if pacer.due(probe):
            starts.append(t)
            pacer.started()
            clock.t += duration
            pacer.ended()


def test_an_early_cycle_comes_within_a_quarter_react_s_of_when_it_may():
    """A busy queue (every probe sees a change), 0.5 s cycles, react_s 1: each cycle may
    start 1 s after the last ended, so every 1.5 s; on a grid of one react_s it came every
    2 s, the freed GPUs waiting a third longer."""
    clock = Clock()
    pacer = Pacer(5.0, 1.0, clock=clock)
    assert pacer.tick_s == 0.25
    starts = loop(pacer, clock, always_changing(), until=30.0, duration=0.5)
    gaps = {round(b - a, 2) for a, b in zip(starts, starts[1:])}
    assert gaps == {1.5}
    # what a one-react_s grid gives
    clock = Clock()
    coarse = Pacer(5.0, 1.0, clock=clock)
    coarse.tick_s = 1.0
    starts = loop(coarse, clock, always_changing(), until=30.0, duration=0.5)
    assert {round(b - a, 2) for a, b in zip(starts, starts[1:])} == {2.0}


def test_a_quiet_queue_is_probed_once_a_react_s_however_fine_the_ticks():
    clock = Clock()
    pacer = Pacer(5.0, 1.0, clock=clock)
    probe, reads = recording(clock, "same")
    starts = loop(pacer, clock, probe, until=20.0, duration=0.2)
    assert starts == [0.0, 5.0, 10.0, 15.0, 20.0]     # the interval only
    gaps = [round(b - a, 2) for a, b in zip(reads, reads[1:])]
    # one probe a react_s between cycles; the interval cycle takes its own fingerprint
    assert min(gaps) >= 0.75 and len(reads) <= 21, reads


def test_the_tick_is_a_quarter_react_s_but_never_below_a_tenth_of_a_second():
    assert Pacer(5.0, 2.0).tick_s == 0.5
    assert Pacer(5.0, 0.2).tick_s == 0.1
    assert Pacer(5.0, 0.05).tick_s == 0.05       # a react_s below the floor: one tick each
