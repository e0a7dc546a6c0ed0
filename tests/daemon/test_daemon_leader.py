"""One active agent per cluster (daemon/leader.py): the locks, the standby, a lost lock.

flock locks conflict between separate opens of a file even inside one process, so two
``AgentLocks`` here behave as two agents would."""

import os
import threading
import time

import pytest

from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.leader import (LOCK_NAME, SLURM_STATE_DEFAULT, AgentLocks, LockError,
                                      cluster_lock_path, holder_text, lock_is_held,
                                      read_holder, state_save_location)
from slurm_marl.daemon.loop import run_daemon, wait_for_locks
from slurm_marl.daemon.service import CycleReport


def test_state_save_location_is_read_from_slurm_conf_and_its_includes(tmp_path):
    conf = tmp_path / "slurm.conf"
    (tmp_path / "extra.conf").write_text("StateSaveLocation=/shared/ctld\n")
    conf.write_text("ClusterName=c\nStateSaveLocation=/first\nInclude extra.conf\n")
    assert state_save_location(conf) == "/shared/ctld"      # the last one, as in Slurm
    conf.write_text("ClusterName=c\n")
    assert state_save_location(conf) == SLURM_STATE_DEFAULT
    assert str(cluster_lock_path("", conf)) == f"{SLURM_STATE_DEFAULT}/{LOCK_NAME}"
    conf.write_text("StateSaveLocation=/shared/ctld\n")
    assert str(cluster_lock_path("", conf)) == f"/shared/ctld/{LOCK_NAME}"
    assert str(cluster_lock_path("/x/y.lock", conf)) == "/x/y.lock"   # the config's wins


def test_a_missing_slurm_conf_is_a_lock_error_naming_it(tmp_path):
    with pytest.raises(LockError, match="nosuch.conf"):
        cluster_lock_path("", tmp_path / "nosuch.conf")


def locks(tmp_path, state="a", cluster="cluster.lock", source="cfg"):
    return AgentLocks(tmp_path / cluster if cluster else None, tmp_path / state, source)


def test_a_second_agent_with_its_own_state_dir_is_refused_by_the_cluster_lock(tmp_path):
    first, second = locks(tmp_path, "a"), locks(tmp_path, "b", source="other.toml")
    assert first.try_acquire() is None
    busy = second.try_acquire()
    assert busy is not None and busy.what == "cluster lock"
    holder = busy.holder()
    assert holder["pid"] == os.getpid() and holder["config"] == "cfg"
    assert f"pid {os.getpid()}" in holder_text(holder)
    # refused at the cluster lock, the second agent did not even create its state dir
    assert not (tmp_path / "b").exists()
    assert lock_is_held(tmp_path / "cluster.lock") is True
    first.release()
    assert lock_is_held(tmp_path / "cluster.lock") is False
    assert second.try_acquire() is None
    assert read_holder(tmp_path / "cluster.lock")["config"] == "other.toml"
    second.release()


def test_one_state_dir_has_one_writer_even_with_two_cluster_lock_files(tmp_path):
    first = locks(tmp_path, "same", cluster="one.lock")
    second = locks(tmp_path, "same", cluster="two.lock")
    assert first.try_acquire() is None
    busy = second.try_acquire()
    assert busy is not None and busy.what == "state-dir lock"
    # all or none: the second let go of the cluster lock it took on the way
    assert lock_is_held(tmp_path / "two.lock") is False
    first.release()


def test_a_shadow_agent_runs_beside_the_active_one_with_its_own_state_dir(tmp_path):
    active, shadow = locks(tmp_path, "a"), locks(tmp_path, "shadow", cluster=None)
    assert active.try_acquire() is None
    assert shadow.try_acquire() is None
    assert [lock.what for lock in shadow.locks] == ["state-dir lock"]
    active.release()
    shadow.release()


def test_a_removed_or_replaced_lock_file_is_noticed(tmp_path):
    held = locks(tmp_path)
    assert held.try_acquire() is None and held.lost() is None
    (tmp_path / "cluster.lock").unlink()
    assert held.lost().what == "cluster lock"
    (tmp_path / "cluster.lock").write_text("")          # a new file: another agent could
    assert held.lost().what == "cluster lock"           # lock it; still not ours
    held.release()


def test_a_lock_that_cannot_be_opened_is_one_clear_error(tmp_path):
    blocked = AgentLocks(tmp_path / "no" / "such" / "dir" / "x.lock", tmp_path / "s", "cfg")
    with pytest.raises(LockError, match="set agent.lock_file"):
        blocked.try_acquire()


def test_lock_is_held_says_none_for_a_missing_file(tmp_path):
    assert lock_is_held(tmp_path / "missing.lock") is None


class Notifier:
    enabled = True
    watchdog_s = None

    def __init__(self):
        self.readies, self.beats, self.statuses = [], 0, []

    def ready(self, status=""):
        self.readies.append(status)
        return True

    def watchdog(self):
        self.beats += 1
        return True

    def status(self, text):
        self.statuses.append(text)
        return True

    def stopping(self):
        return True


def test_a_standby_is_ready_feeds_the_watchdog_and_takes_over_once_released(tmp_path):
    active, standby = locks(tmp_path, "a"), locks(tmp_path, "b")
    assert active.try_acquire() is None
    notifier, stopped = Notifier(), threading.Event()
    threading.Timer(0.5, active.release).start()
    start = time.monotonic()
    assert wait_for_locks(standby, 0.1, notifier, stopped) is True
    assert time.monotonic() - start < 3.0
    assert len(notifier.readies) == 1 and notifier.readies[0].startswith("standby: the "
                                                                         "cluster lock")
    assert f"pid {os.getpid()}" in notifier.readies[0] and notifier.beats >= 2
    assert standby.lost() is None
    standby.release()


def test_a_standby_stopped_before_it_takes_over_returns_false(tmp_path):
    active, standby = locks(tmp_path, "a"), locks(tmp_path, "b")
    assert active.try_acquire() is None
    stopped = threading.Event()
    threading.Timer(0.3, stopped.set).start()
    assert wait_for_locks(standby, 0.1, Notifier(), stopped) is False
    assert lock_is_held(tmp_path / "cluster.lock") is True      # still the active one's
    assert not (tmp_path / "b").exists()
    active.release()


def test_the_loop_stops_with_exit_1_when_its_lock_file_is_removed(tmp_path, monkeypatch):
    held = locks(tmp_path)
    assert held.try_acquire() is None
    monkeypatch.setattr("signal.signal", lambda *a: None)  # keep pytest's handlers

    class Store:
        def close(self):
            pass

        def prune(self, *a, **k):
            return {"done": 1}

    class Agent:
        metrics = None
        store = Store()
        cycles = 0

        def cycle(self):
            Agent.cycles += 1
            if Agent.cycles == 2:
                (tmp_path / "cluster.lock").unlink()
            return CycleReport(cycle=Agent.cycles, time_s=time.time())

    config = parse_config({"agent": {"interval_s": 0.5}, "metrics": {"enabled": False}})
    umask = os.umask(0o022)
    try:
        rc = run_daemon(config, agent=Agent(), notifier=Notifier(), max_cycles=10,
                        locks=held)
    finally:
        os.umask(umask)
    assert rc == 1 and Agent.cycles == 2
    assert held.locks[0].fd is None          # let go at the end


def test_status_says_who_holds_the_cluster_lock(tmp_path):
    """`status --json` has agent_lock: path, held, holder; the line names the holder."""
    import json as _json

    from typer.testing import CliRunner

    from slurm_marl.cli import app
    from slurm_marl.daemon.store import Store

    conf = tmp_path / "slurm.conf"
    conf.write_text(f"StateSaveLocation={tmp_path}\n")
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[slurm]\nslurm_conf = "{conf}"\n[agent]\nstate_dir = "{tmp_path / "s"}"\n')
    Store(tmp_path / "s" / "state.sqlite").close()
    runner = CliRunner()
    free = runner.invoke(app, ["status", "--config", str(cfg), "--json"])
    assert free.exit_code == 0, free.output
    assert _json.loads(free.stdout)["agent_lock"] == {
        "path": str(tmp_path / LOCK_NAME), "held": None, "holder": None,
        "error": "cannot open the lock file"}
    held = AgentLocks(tmp_path / LOCK_NAME, tmp_path / "s", str(cfg))
    assert held.try_acquire() is None
    try:
        out = runner.invoke(app, ["status", "--config", str(cfg), "--json"])
        state = _json.loads(out.stdout)["agent_lock"]
        assert state["held"] is True and state["holder"]["pid"] == os.getpid()
        line = runner.invoke(app, ["status", "--config", str(cfg)]).stdout
        assert f"held by pid {os.getpid()}" in line
    finally:
        held.release()
    out = runner.invoke(app, ["status", "--config", str(cfg), "--json"])
    assert _json.loads(out.stdout)["agent_lock"]["held"] is False
