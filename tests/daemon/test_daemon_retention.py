"""Store retention: the config setting, Store.prune, and the loop's prune schedule."""

import logging
import os
import signal
import time

import pytest

from slurm_marl.daemon.config import ConfigError, parse_config
from slurm_marl.daemon.loop import PRUNE_EVERY_S, Retention, run_daemon
from slurm_marl.daemon.service import CycleReport
from slurm_marl.daemon.store import JobRecord, Store
from slurm_marl.domain import SetPriority

DAY = 86400.0
NOW = 1_700_000_000.0


def test_retention_settings_default_and_validate():
    cfg = parse_config({})
    assert cfg.agent.retention_days == 14.0 and cfg.agent.retention_max_rows == 1_000_000
    cfg = parse_config({"agent": {"retention_days": 3, "retention_max_rows": 0}})
    assert cfg.agent.retention_days == 3.0 and cfg.agent.retention_max_rows == 0
    for bad, needle in (({"retention_days": 0}, "outside"),
                        ({"retention_days": "two weeks"}, "expected a number"),
                        ({"retention_max_rows": -1}, "outside"),
                        ({"retention_max_rows": 1.5}, "whole number")):
        with pytest.raises(ConfigError, match=needle):
            parse_config({"agent": bad}, "cfg.toml")


def fill(st: Store, times: list[float]) -> None:
    for i, t in enumerate(times, start=1):
        st.record_cycle(i, t, 0.1, 1, 0, 1, 1, 0)
        st.log.record(i, t, [(SetPriority(i, "las", "q0", 5, 0), "ok", "")])


def test_prune_deletes_what_is_older_than_the_retention_and_keeps_the_rest(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    fill(st, [NOW - 20 * DAY, NOW - 15 * DAY, NOW - 13 * DAY, NOW - 60])
    st.records.save([JobRecord(1, finished_s=NOW - 20 * DAY), JobRecord(2, finished_s=NOW - DAY),
                  JobRecord(3)])
    st.written.mark([(1, "priority", "5"), (2, "priority", "6"), (3, "priority", "7")], NOW)
    st.reservations.add("slurm-marl-1", 1, "n1", NOW - 21 * DAY)
    st.reservations.end("slurm-marl-1", NOW - 20 * DAY)
    st.reservations.add("slurm-marl-3", 3, "n2", NOW - 20 * DAY)  # still active
    counts = st.prune(14, now_s=NOW, batch=1)  # batch=1: every delete loops
    assert counts == {"decisions": 2, "cycles": 2, "written": 1, "jobs": 1,
                      "reservations": 1, "done": 1}
    assert [c["cycle"] for c in st.log.cycles()] == [4, 3]
    assert sorted(d["job_id"] for d in st.log.decisions()) == [3, 4]
    assert sorted(st.records.get()) == [2, 3]
    assert st.written.get([1, 2, 3]) == {(2, "priority"): "6", (3, "priority"): "7"}
    assert list(st.reservations.active()) == ["slurm-marl-3"]
    assert st.next_cycle() == 5


def test_prune_caps_rows_and_keeps_the_newest_cycle(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    fill(st, [NOW - 100 + i for i in range(10)])
    st.prune(14, now_s=NOW, max_rows=3, batch=2)
    assert [c["cycle"] for c in st.log.cycles(limit=100)] == [10, 9, 8]
    assert [d["cycle"] for d in st.log.decisions(limit=100)] == [10, 9, 8]
    # everything older than the retention: the newest cycle report stays (numbering goes on)
    st.prune(14, now_s=NOW + 30 * DAY)
    assert [c["cycle"] for c in st.log.cycles()] == [10] and st.log.decisions() == []
    assert st.next_cycle() == 11


def test_prune_stops_at_its_deadline_and_resumes(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    fill(st, [NOW - 30 * DAY + i for i in range(6)] + [NOW])
    ticks = iter(range(100))
    counts = st.prune(14, now_s=NOW, batch=2, deadline=2, clock=lambda: next(ticks))
    assert counts["done"] == 0 and counts["decisions"] == 4
    counts = st.prune(14, now_s=NOW, batch=2)
    assert counts["done"] == 1 and counts["decisions"] == 2 and counts["cycles"] == 6
    assert [d["cycle"] for d in st.log.decisions()] == [7]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class FakeStore:
    def __init__(self, results=None):
        self.calls = []
        self.results = list(results or [])

    def prune(self, keep_days, now_s=None, max_rows=0, deadline=None, clock=None):
        self.calls.append((keep_days, now_s, max_rows, deadline))
        result = self.results.pop(0) if self.results else {"decisions": 0, "done": 1}
        if isinstance(result, Exception):
            raise result
        return result


def test_retention_prunes_at_start_then_at_most_every_period():
    clock, store = Clock(), FakeStore()
    r = Retention(store, 14.0, 500, every_s=600, budget_s=5, clock=clock,
                  wall_clock=lambda: NOW + clock.t)
    assert r.maybe_prune() is not None  # the first cycle prunes
    assert store.calls == [(14.0, NOW, 500, 5.0)]
    for t in (1, 5, 300, 599.9):  # every cycle in between: nothing
        clock.t = t
        assert r.maybe_prune() is None
    assert len(store.calls) == 1
    clock.t = 600
    r.maybe_prune()
    assert len(store.calls) == 2 and store.calls[1][1] == NOW + 600


def test_retention_finishes_a_cut_short_prune_at_the_next_cycle():
    clock, store = Clock(), FakeStore([{"decisions": 9, "done": 0}, {"decisions": 3, "done": 1}])
    r = Retention(store, 14.0, 0, every_s=600, clock=clock)
    r.maybe_prune()
    clock.t = 5
    r.maybe_prune()  # not done: again at once
    clock.t = 10
    assert r.maybe_prune() is None and len(store.calls) == 2  # done: wait a period


def test_a_failing_prune_is_logged_and_retried_next_period(caplog):
    clock = Clock()
    store = FakeStore([OSError("disk I/O error")])
    r = Retention(store, 14.0, 0, every_s=600, clock=clock)
    with caplog.at_level(logging.ERROR, logger="slurm_marl.daemon"):
        assert r.maybe_prune() is None  # no exception
    assert "prune failed" in caplog.text and "disk I/O error" in caplog.text
    clock.t = 10
    r.maybe_prune()
    assert len(store.calls) == 1
    clock.t = 600
    r.maybe_prune()
    assert len(store.calls) == 2


@pytest.fixture
def process_state():
    """run_daemon sets signal handlers and the umask: give pytest its own back."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    os.umask(umask)
    for s, h in handlers.items():
        signal.signal(s, h)


def test_the_loop_prunes_the_agents_store_once_at_start(process_state):
    class Agent:
        metrics = None

        def __init__(self):
            self.store = FakeStore()
            self.store.close = lambda: None
            self.cycles = 0

        def cycle(self):
            self.cycles += 1
            return CycleReport(cycle=self.cycles, time_s=time.time())

    class Notifier:
        enabled = False
        watchdog_s = None

        def ready(self, status=""): return False
        def status(self, text): return False
        def stopping(self): return False
        def watchdog(self): return False

    config = parse_config({"agent": {"retention_days": 2.5, "retention_max_rows": 1234},
                           "metrics": {"enabled": False}})
    agent = Agent()
    assert run_daemon(config, agent=agent, notifier=Notifier(), max_cycles=1) == 0
    assert agent.cycles == 1
    assert [(c[0], c[2]) for c in agent.store.calls] == [(2.5, 1234)]
    assert PRUNE_EVERY_S >= 5 * 60  # never every cycle
