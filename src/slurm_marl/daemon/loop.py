"""`slurm-marl run`: the service loop (apscheduler), logging, metrics, sd_notify."""

from __future__ import annotations

import _thread
import datetime
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.blocking import BlockingScheduler

from slurm_marl.daemon.config import Config
from slurm_marl.daemon.leader import AgentLocks, holder_text
from slurm_marl.daemon.metrics import Metrics
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.wiring import build_agent
from slurm_marl.daemon.systemd import Notifier

log = logging.getLogger("slurm_marl.daemon")


def setup_logging(level: str) -> None:
    """Plain lines with levels: journald adds time and unit."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("apscheduler").setLevel(logging.ERROR)  # "skipped: ... running" when a
    # cycle outlasts the interval is the intended coalescing, not a problem


PRUNE_EVERY_S = 600.0   # store retention: after the first cycle, then every 10 minutes
PRUNE_BUDGET_S = 5.0    # the most one prune may take; the rest is done at the next tick


def watchdog_limit_s(interval_s: float, watchdog_s: float | None) -> float:
    """How old the last successful cycle may be while the agent still pings systemd's
    watchdog: three cycle intervals, or half of WatchdogSec if that is longer (one failed
    cycle, or a slurmctld restart of a minute, must not get the agent restarted)."""
    return max(3.0 * interval_s, (watchdog_s or 0.0) / 2.0)


def watchdog_ok(now_s: float, last_ok_s: float, interval_s: float,
                watchdog_s: float | None) -> bool:
    """Whether to send WATCHDOG=1 now: only while the last successful cycle (before the
    first one: the start) is recent. When cycles keep failing (slurmctld unreachable, an
    internal error every cycle) the pings stop and systemd restarts the agent after
    WatchdogSec."""
    return now_s - last_ok_s <= watchdog_limit_s(interval_s, watchdog_s)


class WatchdogGate:
    """sd_notify WATCHDOG=1, sent only while :func:`watchdog_ok`; logs once when it stops."""

    def __init__(self, notifier, interval_s: float, enabled: bool = True,
                 clock=time.monotonic) -> None:
        self.notifier = notifier
        self.interval_s = interval_s
        self.enabled = enabled
        self.clock = clock
        self.watchdog_s = getattr(notifier, "watchdog_s", None)
        self.last_ok_s = clock()  # the start: grace before the first cycle succeeds
        self.stopped = False

    def cycle_done(self, ok: bool) -> None:
        if not ok:
            return
        self.last_ok_s = self.clock()
        if self.stopped:
            self.stopped = False
            log.warning("a cycle succeeded again: systemd watchdog pings resume")

    def beat(self) -> bool:
        if not self.enabled:
            return False
        now = self.clock()
        if watchdog_ok(now, self.last_ok_s, self.interval_s, self.watchdog_s):
            return bool(self.notifier.watchdog())
        if not self.stopped:
            self.stopped = True
            log.error("no successful cycle for %.0f s (limit %.0f s): no more watchdog pings, "
                      "systemd will restart the agent once WatchdogSec runs out",
                      now - self.last_ok_s,
                      watchdog_limit_s(self.interval_s, self.watchdog_s))
        return False


class Pacer:
    """When the loop runs a cycle: every ``interval_s``; and, with ``react_s`` (0 <
    ``react_s`` < ``interval_s``), early when the managed partitions' queue fingerprint
    (``Agent.probe``, one light squeue, taken every ``react_s``) differs from the one taken
    as the last cycle started: a job arrived, started or ended, so freed GPUs wait about
    ``react_s`` for the agent, not up to ``interval_s``. An early cycle waits at least
    ``react_s`` and the last cycle's own duration after it ended, so cycles take at most
    about half the time however busy the queue. That duration is the cycle's up to its last
    start (``ended(busy_s)``: the lease renewals and bookkeeping after the starts are not
    counted), so a batch of renewals does not hold back the next start; the lease is
    renewed every cycle all the same.

    The loop asks ``due`` every ``tick_s``: a quarter of ``react_s`` when reacting, so an
    early cycle comes within a quarter ``react_s`` of the moment it may (on a one-``react_s``
    grid it came up to a whole ``react_s`` late: a cycle ending between two ticks waited for
    the second); the probe itself is still taken at most once a ``react_s``."""

    TICKS_PER_REACT = 4
    MIN_TICK_S = 0.1

    def __init__(self, interval_s: float, react_s: float, clock=time.monotonic) -> None:
        self.interval_s = interval_s
        self.react_s = react_s
        self.reacting = 0 < react_s < interval_s
        # (no finer than MIN_TICK_S: a tiny react_s must not spin the loop)
        self.tick_s = (max(react_s / self.TICKS_PER_REACT, min(react_s, self.MIN_TICK_S))
                       if self.reacting else interval_s)
        self.clock = clock
        self.last_start: float | None = None
        self.last_end = -1e18
        self.last_duration = 0.0
        self.last_fingerprint: str | None = None
        self.last_probe = -1e18
        self.early = 0                     # cycles run early so far
        self.probes = 0                    # probes taken so far

    def due(self, probe) -> bool:
        """Whether to run a cycle now; ``probe()`` gives the fingerprint (None: unknown)."""
        now = self.clock()
        if self.last_start is None or now - self.last_start >= self.interval_s - 0.01:
            self.last_fingerprint = self._probe(probe, now) if self.reacting else None
            return True
        if not self.reacting or now - self.last_end < max(self.react_s, self.last_duration):
            return False
        if now - self.last_probe < self.react_s - self.tick_s / 2:
            return False
        seen = self._probe(probe, now)
        if seen is None or seen == self.last_fingerprint:
            return False
        self.last_fingerprint = seen
        self.early += 1
        return True

    def _probe(self, probe, now: float):
        self.last_probe = now
        self.probes += 1
        return probe()

    def started(self) -> None:
        self.last_start = self.clock()

    def ended(self, busy_s: float | None = None) -> None:
        """The cycle ended; ``busy_s``: how long it took up to its last start (the
        report's ``starts_s``), None: its whole duration counts."""
        self.last_end = self.clock()
        if self.last_start is not None:
            self.last_duration = self.last_end - self.last_start
            if busy_s is not None:
                self.last_duration = max(0.0, min(self.last_duration, busy_s))


class Retention:
    """Prunes the store (``Store.prune``) after the first cycle, then at most every
    ``every_s``; sooner only to finish a prune its time budget cut short. A failure is
    logged and retried at the next period; it never ends the loop."""

    def __init__(self, store, keep_days: float, max_rows: int,
                 every_s: float = PRUNE_EVERY_S, budget_s: float = PRUNE_BUDGET_S,
                 clock=time.monotonic, wall_clock=time.time) -> None:
        self.store = store
        self.keep_days = keep_days
        self.max_rows = max_rows
        self.every_s = every_s
        self.budget_s = budget_s
        self.clock = clock
        self.wall_clock = wall_clock
        self.next_s: float | None = None  # None: due now

    def due(self) -> bool:
        return self.next_s is None or self.clock() >= self.next_s

    def maybe_prune(self) -> dict | None:
        if not self.due():
            return None
        now = self.clock()
        try:
            counts = self.store.prune(self.keep_days, now_s=self.wall_clock(),
                                      max_rows=self.max_rows,
                                      deadline=now + self.budget_s, clock=self.clock)
        except Exception as exc:  # the store is the agent's; its upkeep must not stop it
            log.error("store retention: prune failed (%s); next try in %.0f s",
                      f"{type(exc).__name__}: {exc}", self.every_s)
            self.next_s = now + self.every_s
            return None
        done = bool(counts.get("done", 1))
        self.next_s = now + self.every_s if done else now
        deleted = {k: v for k, v in counts.items() if k != "done" and v}
        if deleted:
            log.info("store retention (%g days, %s rows): deleted %s%s", self.keep_days,
                     self.max_rows or "no cap on",
                     ", ".join(f"{v} {k}" for k, v in deleted.items()),
                     "" if done else "; continuing next cycle")
        return counts


def wait_for_locks(locks: AgentLocks, interval_s: float, notifier,
                   stopped: threading.Event) -> bool:
    """Take ``locks``; while another agent holds one, wait as a standby: ready for systemd,
    the watchdog fed, a try every ``interval_s``. False: stopped before taking them."""
    busy = locks.try_acquire()
    if busy is None:
        return True
    what = f"standby: the {busy.what} {busy.path} is held by {holder_text(busy.holder())}"
    log.warning("%s; this agent acts only when it is released (tried every %.1f s)",
                what, interval_s)
    notifier.ready(what)
    while not stopped.wait(interval_s):
        notifier.watchdog()
        busy = locks.try_acquire()
        if busy is None:
            log.warning("standby over: this agent holds %s and acts from now on",
                        locks.describe())
            return True
    return False


def run_daemon(config: Config, agent: Agent | None = None, max_cycles: int | None = None,
               notifier: Notifier | None = None, locks: AgentLocks | None = None) -> int:
    """Run cycles every ``agent.interval_s`` until SIGTERM/SIGINT (or ``max_cycles``).

    Without an ``agent`` given, it first takes the agent's locks (``locks``, else those of
    ``config``: daemon/leader.py), waiting as a standby while another agent holds them."""
    import torch  # the learned plugin uses torch; one thread, the cores are Slurm's

    torch.set_num_threads(1)
    os.umask(0o027)  # the store and logs: readable by the admin group, not by users
    notifier = notifier or Notifier()
    done = threading.Event()
    schedulers: list[BlockingScheduler] = []  # the loop's, once it exists

    def _shutdown() -> None:
        for scheduler in schedulers:
            try:
                scheduler.shutdown(wait=False)
            except SchedulerNotRunningError:  # a second signal, or max_cycles and a signal
                pass

    def stopping(signum: int) -> None:
        log.info("signal %d: stopping", signum)
        notifier.stopping()
        done.set()
        _shutdown()

    def stop(signum, _frame) -> None:
        # The handler runs in the main thread between two of its bytecodes, perhaps while
        # it holds the lock of the event it waits on (the scheduler's, or ``done`` in a
        # standby): ``Event.set`` or the scheduler's shutdown here would wait for that
        # lock for ever (a daemon hung after "signal 15: stopping"). A thread of its own,
        # started without taking any of ``threading``'s locks, does it once the main
        # thread lets go.
        _thread.start_new_thread(stopping, (signum,))

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    acquire: Callable[[], bool] | None = None
    if agent is None:
        locks = locks or AgentLocks.for_config(config)
        held = locks
        acquire = functools.partial(wait_for_locks, held, config.agent.interval_s,
                                    notifier, done)
    try:
        return _run_active(config, agent, max_cycles, notifier, locks, done, schedulers,
                           _shutdown, acquire)
    finally:
        if locks is not None:
            locks.release()


def _run_active(config: Config, agent: Agent | None, max_cycles: int | None, notifier,
                locks: AgentLocks | None, done: threading.Event,
                schedulers: list[BlockingScheduler], _shutdown, acquire) -> int:
    metrics = Metrics() if config.metrics.enabled else None
    # The agent first: a bad profile or store ends the start before a port is taken; it
    # opens its store only once it holds the locks (a standby waits inside, see above).
    agent = agent or build_agent(config, metrics=metrics, acquire=acquire)
    if agent is None:
        log.info("slurm-marl agent stopped while a standby")
        return 0
    if agent.metrics is None:
        agent.metrics = metrics
    server = None
    if metrics is not None:
        try:
            server = metrics.serve(config.metrics.address, config.metrics.port)
        except OSError as exc:
            log.error("metrics endpoint %s:%d unavailable (%s); continuing without it",
                      config.metrics.address, config.metrics.port, exc)
    mode = "shadow (decides, writes nothing)" if config.agent.shadow else "active"
    log.info("slurm-marl agent starting: %s mode, profile %s, partitions %s, every %.1f s, "
             "store %s", mode, config.agent.profile, ",".join(config.agent.managed_partitions),
             config.agent.interval_s, config.store_path)

    scheduler = BlockingScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                "misfire_grace_time": None})
    schedulers.append(scheduler)
    count = {"n": 0, "rc": 0}

    watchdog = WatchdogGate(notifier, config.agent.interval_s,
                            enabled=config.agent.watchdog and getattr(notifier, "enabled", True))
    beat = watchdog.beat
    retention = Retention(agent.store, config.agent.retention_days,
                          config.agent.retention_max_rows)

    in_cycle = threading.Lock()  # shutdown waits for a running cycle before closing the store
    pacer = Pacer(config.agent.interval_s, config.agent.react_s)
    probe = getattr(agent, "probe", lambda: None)   # an agent without a probe: interval only

    def tick() -> None:
        if done.is_set():   # (a stop that came as the scheduler started: it ends it now)
            _shutdown()
            return
        lost = locks.lost() if locks is not None else None
        if lost is not None:
            log.error("the agent's %s %s was removed or replaced while held: stopping, so "
                      "that no second agent acts beside this one (systemd restarts it, as "
                      "a standby if another agent holds the new file)", lost.what, lost.path)
            count["rc"] = 1
            done.set()
            _shutdown()
            return
        beat()
        with in_cycle:
            if done.is_set():  # stopped while this tick waited: the store may be closed
                return
            if not pacer.due(probe):
                return
            pacer.started()
            report = agent.cycle()
            pacer.ended(getattr(report, "starts_s", None))
        watchdog.cycle_done(report.error is None)
        count["n"] += 1
        if count["n"] == 1:
            notifier.ready(f"first cycle {'failed: ' + report.error if report.error else 'ok'}")
        beat()
        notifier.status(f"cycle {report.cycle}: {report.pending} pending, {report.running} "
                        f"running, {report.written} written"
                        + (f", error: {report.error}" if report.error else "")
                        + (f", warning: {report.warning}" if report.warning else ""))
        if report.error is None:
            log.debug("cycle %d: %.3f s, %d decisions, %d written, %d refused", report.cycle,
                      report.duration_s, len(report.decisions), report.written,
                      report.refused)
        with in_cycle:
            if not done.is_set():
                retention.maybe_prune()
        if max_cycles is not None and count["n"] >= max_cycles:
            if report.error and not count["rc"]:
                count["rc"] = 1     # `run --cycles N`: exit 1 when the last cycle failed
            done.set()
            _shutdown()

    if done.is_set():  # a signal while the agent was being built
        agent.store.close()
        return 0
    if pacer.reacting:
        log.info("between cycles the queue is probed every %.1f s; a change runs a cycle "
                 "early", pacer.react_s)
    scheduler.add_job(tick, "interval", seconds=pacer.tick_s, id="cycle",
                      next_run_time=datetime.datetime.now())
    try:
        scheduler.start()
    finally:
        done.set()
        # Wait for a running cycle, close the store, then let go of the lock: a tick that
        # started just before the signal is blocked on it, must see ``done`` and end, or
        # the interpreter's exit (which joins the scheduler's worker threads) hangs.
        held = in_cycle.acquire(timeout=config.slurm.command_timeout_s * 4 + 10)
        if not held:
            log.warning("a cycle is still running at shutdown; leaving it")
        try:
            if server is not None:
                server.shutdown()
            if held:
                agent.store.close()
        finally:
            if held:
                in_cycle.release()
    log.info("slurm-marl agent stopped after %d cycles", count["n"])
    return count["rc"]
