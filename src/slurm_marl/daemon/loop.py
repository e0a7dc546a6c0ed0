"""`slurm-marl run`: the service loop (apscheduler), logging, metrics, sd_notify."""

from __future__ import annotations

import datetime
import logging
import os
import signal
import threading

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.blocking import BlockingScheduler

from slurm_marl.daemon.config import Config
from slurm_marl.daemon.metrics import Metrics
from slurm_marl.daemon.service import Agent, build_agent
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


def run_daemon(config: Config, agent: Agent | None = None, max_cycles: int | None = None,
               notifier: Notifier | None = None) -> int:
    """Run cycles every ``agent.interval_s`` until SIGTERM/SIGINT (or ``max_cycles``)."""
    import torch  # the learned plugin uses torch; one thread, the cores are Slurm's

    torch.set_num_threads(1)
    os.umask(0o027)  # the store and logs: readable by the admin group, not by users
    metrics = Metrics() if config.metrics.enabled else None
    server = None
    if metrics is not None:
        try:
            server = metrics.serve(config.metrics.address, config.metrics.port)
        except OSError as exc:
            log.error("metrics endpoint %s:%d unavailable (%s); continuing without it",
                      config.metrics.address, config.metrics.port, exc)
    agent = agent or build_agent(config, metrics=metrics)
    if agent.metrics is None:
        agent.metrics = metrics
    notifier = notifier or Notifier()
    mode = "shadow (decides, writes nothing)" if config.agent.shadow else "active"
    log.info("slurm-marl agent starting: %s mode, profile %s, partitions %s, every %.1f s, "
             "store %s", mode, config.agent.profile, ",".join(config.agent.managed_partitions),
             config.agent.interval_s, config.store_path)

    scheduler = BlockingScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                "misfire_grace_time": None})
    done = threading.Event()
    count = {"n": 0}

    beat = notifier.watchdog if config.agent.watchdog else (lambda: False)

    in_cycle = threading.Lock()  # shutdown waits for a running cycle before closing the store

    def tick() -> None:
        if done.is_set():
            return
        beat()
        with in_cycle:
            if done.is_set():  # stopped while this tick waited: the store may be closed
                return
            report = agent.cycle()
        count["n"] += 1
        if count["n"] == 1:
            notifier.ready(f"first cycle {'failed: ' + report.error if report.error else 'ok'}")
        beat()
        notifier.status(f"cycle {report.cycle}: {report.pending} pending, {report.running} "
                        f"running, {report.written} written"
                        + (f", error: {report.error}" if report.error else ""))
        if report.error is None:
            log.debug("cycle %d: %.3f s, %d decisions, %d written, %d refused", report.cycle,
                      report.duration_s, len(report.decisions), report.written,
                      report.refused)
        if max_cycles is not None and count["n"] >= max_cycles:
            done.set()
            _shutdown()

    def _shutdown() -> None:
        try:
            scheduler.shutdown(wait=False)
        except SchedulerNotRunningError:  # a second signal, or max_cycles and a signal
            pass

    def stop(signum, _frame) -> None:
        log.info("signal %d: stopping", signum)
        notifier.stopping()
        done.set()
        _shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    scheduler.add_job(tick, "interval", seconds=config.agent.interval_s, id="cycle",
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
    return 0
