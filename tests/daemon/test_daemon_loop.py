"""The service loop's shutdown: SIGTERM while a tick is between its start and its cycle."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import os, signal, threading, time
    from slurm_marl.daemon.config import parse_config
    from slurm_marl.daemon.loop import run_daemon
    from slurm_marl.daemon.service import CycleReport

    class Store:
        closed = False
        def close(self):
            self.closed = True

    class Agent:
        metrics = None
        def __init__(self):
            self.store = Store()
            self.cycles = 0
        def cycle(self):
            assert not self.store.closed, "a cycle ran on a closed store"
            self.cycles += 1
            return CycleReport(cycle=self.cycles, time_s=time.time())

    class Notifier:
        beats = 0
        def ready(self, status=""): return False
        def status(self, text): return False
        def stopping(self): return False
        def watchdog(self):
            # the third beat opens the next tick: SIGTERM arrives while that tick waits
            # here, between its "stopped?" check and its cycle
            Notifier.beats += 1
            if Notifier.beats == 3:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.0)
            return False

    config = parse_config({"agent": {"interval_s": 0.5, "watchdog": True},
                           "metrics": {"enabled": False}})
    agent = Agent()
    rc = run_daemon(config, agent=agent, notifier=Notifier())
    print("returned", rc, "cycles", agent.cycles, "closed", agent.store.closed, flush=True)
''')


def test_sigterm_during_a_starting_tick_exits_promptly():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "returned 0 cycles 1 closed True" in proc.stdout, (proc.stdout, proc.stderr)
    assert "closed store" not in proc.stderr and "Traceback" not in proc.stderr


TRAPPED = textwrap.dedent('''
    import signal, threading, time
    import apscheduler.schedulers.blocking as blocking
    from slurm_marl.daemon.config import parse_config
    from slurm_marl.daemon.loop import run_daemon
    from slurm_marl.daemon.service import CycleReport

    class Store:
        def close(self): pass
        def prune(self, *args, **kwargs): return {"done": 1}

    class Agent:
        metrics = None
        store = Store()
        cycles = 0
        def cycle(self):
            Agent.cycles += 1
            return CycleReport(cycle=Agent.cycles, time_s=time.time())

    class TrappedEvent(threading.Event):
        """The scheduler's event: after the first cycle, SIGTERM comes while the main
        thread holds the event's own lock (as it does for a moment in every wait)."""
        armed = True
        def wait(self, timeout=None):
            if TrappedEvent.armed and Agent.cycles >= 1:
                TrappedEvent.armed = False
                with self._cond:
                    signal.raise_signal(signal.SIGTERM)
                    sum(range(100_000))    # bytecodes: the handler runs among them
            return super().wait(timeout)

    blocking.Event = TrappedEvent
    config = parse_config({"agent": {"interval_s": 0.5}, "metrics": {"enabled": False}})
    rc = run_daemon(config, agent=Agent())
    print("returned", rc, "trapped", not TrappedEvent.armed, flush=True)
''')


def test_sigterm_while_the_main_thread_holds_the_schedulers_lock_still_stops():
    """A daemon once hung after "signal 15: stopping": the handler set the scheduler's
    event (and shut it down) in the main thread, which may hold that event's lock when the
    signal comes; it waited for itself. The handler now hands that to a thread."""
    proc = subprocess.run([sys.executable, "-c", TRAPPED], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "returned 0 trapped True" in proc.stdout, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
