"""The systemd watchdog stops when cycles keep failing, so systemd restarts the agent."""

import logging

import pytest

from slurm_marl.daemon.loop import WatchdogGate, watchdog_limit_s, watchdog_ok


def test_limit_is_three_intervals_or_half_the_watchdog():
    assert watchdog_limit_s(5.0, 120.0) == 60.0      # the shipped unit: WatchdogSec=120s
    assert watchdog_limit_s(30.0, 120.0) == 90.0     # slow cycles: three of them
    assert watchdog_limit_s(5.0, None) == 15.0       # no WatchdogSec


@pytest.mark.parametrize("age,ok", [(0, True), (59.9, True), (60, True), (60.1, False),
                                    (3600, False)])
def test_watchdog_ok_only_while_the_last_success_is_recent(age, ok):
    assert watchdog_ok(1000.0 + age, 1000.0, 5.0, 120.0) is ok


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


class Notifier:
    watchdog_s = 120.0

    def __init__(self):
        self.pings = 0

    def watchdog(self):
        self.pings += 1
        return True


def test_pings_stop_while_every_cycle_fails_and_resume_after_a_success(caplog):
    clock, notifier = Clock(), Notifier()
    gate = WatchdogGate(notifier, 5.0, clock=clock)
    assert gate.beat()                   # at start: the grace before the first cycle
    with caplog.at_level(logging.ERROR, logger="slurm_marl.daemon"):
        for t in range(5, 300, 5):       # slurmctld unreachable: every cycle fails
            clock.t = t
            gate.beat()
            gate.cycle_done(False)
            gate.beat()
    assert notifier.pings == 1 + 2 * 12  # up to 60 s after the start, then none
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "watchdog" in errors[0].getMessage()  # logged once
    clock.t = 300
    gate.cycle_done(True)
    assert gate.beat() and notifier.pings == 26
    clock.t = 400                        # failing again: stops again, logs again
    with caplog.at_level(logging.ERROR, logger="slurm_marl.daemon"):
        assert not gate.beat()
    assert sum(r.levelno == logging.ERROR for r in caplog.records) == 2


def test_successful_cycles_keep_pinging_and_disabled_never_pings():
    clock, notifier = Clock(), Notifier()
    gate = WatchdogGate(notifier, 5.0, clock=clock)
    for t in range(0, 1000, 5):
        clock.t = t
        gate.cycle_done(True)
        assert gate.beat()
    off = WatchdogGate(Notifier(), 5.0, enabled=False, clock=clock)
    assert not off.beat() and off.notifier.pings == 0
