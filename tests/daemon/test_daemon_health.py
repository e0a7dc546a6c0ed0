"""Health that must not look fine when it is not (issue 31): config errors at start, an
unknown managed partition, a store that cannot be written, and jobs that vanish from Slurm
and come back. Through the config, the agent's cycle with the shared fakes, the store and
the admin commands."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fakes import FakeClusterSource, FakeDecisionSink
from agent_builders import GATED, NODES, PARTS
from test_daemon_cli_errors import one_line_error
from slurm_marl.cli import app
from slurm_marl.daemon.config import ConfigError, parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, Job, JobState, SetPriority
from slurm_marl.slurm_integration.plugin import PluginError, render_job_submit_lua



class OrderAll:
    """Every pending job of the view, in job id order (what to decide is the policy
    tests' business)."""

    def run_cycle(self, snapshot):
        return [SetPriority(j.job_id, "fixed", "q0", 100 - k, 0)
                for k, j in enumerate(sorted(snapshot.pending, key=lambda j: j.job_id))]


def agent(tmp_path, snap, **agent_cfg):
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1, "grace_s": 30,
                                  **agent_cfg}})
    return Agent(cfg, FakeClusterSource(snap), FakeDecisionSink(),
                 Store(tmp_path / "state.sqlite"), OrderAll())


def pending(jid, now):
    return Job(jid, name=f"j{jid}", partition="gpu", gpus_per_node=1, submit_time_s=now - 10,
               eligible_time_s=now + 20, admin_comment=GATED)


def snap(now, *jobs, parts=PARTS):
    return ClusterSnapshot(now, NODES, tuple(jobs), parts)


# ---- jobs that vanish from Slurm and come back ---------------------------------------------

def test_a_job_that_vanishes_and_comes_back_is_live_again(tmp_path):
    now = 1000.0
    a = agent(tmp_path, snap(now, pending(1, now), pending(2, now)))
    assert a.cycle().pending == 2
    # job 2 gone from Slurm's list (its partition renamed, slurmctld restarted): finished
    a.source.snap = snap(now + 10, pending(1, now))
    assert a.cycle().pending == 1
    assert a.store.records.get([2])[2].finished_s is not None
    # ... and back (the partition restored): live again, in the pending count, the store
    # and `queues`, with the record it had
    a.source.snap = snap(now + 20, pending(1, now), pending(2, now))
    report = a.cycle()
    assert report.error is None and report.pending == 2
    assert {d.job_id for d in report.decisions} == {1, 2}
    rec = a.store.records.get([2])[2]
    assert rec.finished_s is None and rec.last_state == "PENDING"
    assert rec.submit_time_s == now - 10 and rec.queue is not None
    # a later agent reading the file (a restart) sees it unfinished too
    a.store.close()
    again = Store(tmp_path / "state.sqlite")
    assert {r.job_id for r in again.records.unfinished()} == {1, 2}
    # retention keeps it: it is not finished
    assert again.prune(keep_days=0.01, now_s=now + 10 * 86400)["jobs"] == 0
    out = CliRunner().invoke(app, ["queues", "--json", "--store",
                                   str(tmp_path / "state.sqlite")])
    assert out.exit_code == 0 and {r["job_id"] for r in json.loads(out.stdout)} == {1, 2}


def test_a_running_job_that_comes_back_keeps_its_service(tmp_path):
    now = 1000.0
    run = Job(3, name="r", partition="gpu", state=JobState.RUNNING, gpus_per_node=1,
              start_time_s=now - 100, nodes=("n1",), gpu_alloc=(("n1", (0,)),),
              submit_time_s=now - 200)
    a = agent(tmp_path, snap(now, run))
    a.cycle()
    a.source.snap = snap(now + 30)          # gone: its run is closed at the last sight
    a.cycle()
    assert a.store.records.get([3])[3].finished_s == now
    a.source.snap = snap(now + 60, run)     # back, still running
    report = a.cycle()
    rec = a.store.records.get([3])[3]
    assert report.running == 1 and rec.finished_s is None and rec.last_state == "RUNNING"
    assert rec.attained_gpu_s == pytest.approx(100.0)   # the first run's service is kept


# ---- config errors at start ------------------------------------------------------------

BAD_NAMES = ["gpu;rm", "a b", "gpu,cpu", 'x"]', "$(id)", "p`x`", "g'}", "ü", ""]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_partition_names_with_metacharacters_are_refused_by_run_and_the_gate(name):
    """One rule for the config and install-plugin (slurm_integration/vocabulary.py)."""
    with pytest.raises(ConfigError) as err:
        parse_config({"agent": {"managed_partitions": ["gpu", name]}}, "cfg.toml")
    assert "cfg.toml: agent.managed_partitions" in str(err.value)
    with pytest.raises(PluginError) as gate:
        render_job_submit_lua(["gpu", name], 30, [], slurm_version="22.05.8")
    assert str(gate.value) in str(err.value)


def test_plain_partition_names_are_accepted():
    names = ["gpu", "a100-80g", "v100_long", "ml.prio", "P1"]
    assert parse_config({"agent": {"managed_partitions": names}}).agent.managed_partitions \
        == tuple(names)
    assert 'ml.prio' in render_job_submit_lua(names, 30, [], slurm_version="22.05.8")


def write_config(tmp_path, slurm_conf, partitions=("gpu",), shadow=False):
    cfg = tmp_path / "config.toml"
    parts = ", ".join(f'"{p}"' for p in partitions)
    cfg.write_text(f'[slurm]\nslurm_conf = "{slurm_conf}"\n'
                   f'[agent]\nstate_dir = "{tmp_path / "state"}"\n'
                   f"managed_partitions = [{parts}]\nshadow = {str(shadow).lower()}\n"
                   "[metrics]\nenabled = false\n")
    return cfg


@pytest.mark.parametrize("shadow", [False, True])
def test_run_with_a_missing_slurm_conf_exits_2_at_start(tmp_path, shadow):
    missing = tmp_path / "etc" / "slurm.conf"
    res = CliRunner().invoke(app, ["run", "-c", str(write_config(tmp_path, missing,
                                                                   shadow=shadow)),
                                   "--cycles", "1"])
    one_line_error(res, f"slurm.slurm_conf {missing} does not exist")
    assert not (tmp_path / "state").exists()     # nothing started


def test_run_with_an_unreadable_slurm_conf_exits_2_at_start(tmp_path):
    res = CliRunner().invoke(app, ["run", "-c", str(write_config(tmp_path, tmp_path)),
                                   "--cycles", "1"])
    one_line_error(res, f"slurm.slurm_conf {tmp_path} is a directory")


def test_run_with_a_bad_partition_name_exits_2_at_start(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\n")
    res = CliRunner().invoke(app, ["run", "-c", str(write_config(tmp_path, conf,
                                                                   ("gpu", "a;b"))),
                                   "--cycles", "1"])
    one_line_error(res, "agent.managed_partitions", "'a;b' is not a plain Slurm name")


# ---- managed partitions Slurm does not have ----------------------------------------------

def status_json(tmp_path, *extra):
    res = CliRunner().invoke(app, ["status", "--json", "--store",
                                   str(tmp_path / "state.sqlite"), *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_no_managed_partition_in_slurm_is_a_failing_cycle(tmp_path, caplog):
    from slurm_marl.daemon.loop import WatchdogGate
    from slurm_marl.daemon.metrics import Metrics

    now = 1000.0
    a = agent(tmp_path, snap(now, pending(1, now)), managed_partitions=["nosuch"])
    a.metrics = Metrics()
    clock = [0.0]
    pings = []
    gate = WatchdogGate(type("N", (), {"watchdog": lambda self: pings.append(1) or True,
                                       "watchdog_s": None})(), 1.0, clock=lambda: clock[0])
    with caplog.at_level("INFO"):
        for k in range(5):
            a.source.snap = snap(now + k, pending(1, now))
            report = a.cycle()
            gate.cycle_done(report.error is None)
            clock[0] += 1.0
            gate.beat()
    assert report.error.startswith("config: no managed partition is in Slurm: ")
    assert "nosuch" in report.error and "Slurm has: gpu, cpu" in report.error
    assert report.pending == 0 and not a.sink.calls
    # one line, once (not every cycle), no traceback
    lines = [r for r in caplog.records if "nosuch" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelname == "ERROR" and lines[0].exc_info is None
    # the watchdog stops: 3 intervals without a good cycle
    assert len(pings) == 3 and gate.stopped
    # the store, `status --json` and the metrics say so
    assert a.store.log.cycles(1)[0]["error"] == report.error
    info = status_json(tmp_path)
    assert info["healthy"] is False and info["last_cycle"]["error"] == report.error
    assert any("nosuch" in p for p in info["problems"]), info["problems"]
    assert a.metrics.healthy._value.get() == 0
    assert a.metrics.unknown_partitions._value.get() == 1
    assert a.metrics.cycle_errors.labels("config")._value.get() == 5
    text = CliRunner().invoke(app, ["status", "--store", str(tmp_path / "state.sqlite")])
    assert "health: FAILING: cycle 5 failed: config: no managed partition" in text.stdout


def test_some_managed_partitions_unknown_is_a_warning(tmp_path, caplog):
    from slurm_marl.daemon.metrics import Metrics

    now = 1000.0
    a = agent(tmp_path, snap(now, pending(1, now)), managed_partitions=["gpu", "typo"])
    a.metrics = Metrics()
    with caplog.at_level("INFO"):
        for k in range(3):
            report = a.cycle()
    assert report.error is None and report.pending == 1      # gpu is managed
    assert report.warning.startswith("managed partitions not in Slurm: typo (Slurm has: ")
    assert len([r for r in caplog.records if "typo" in r.getMessage()]) == 1
    assert a.store.log.cycles(1)[0]["warning"] == report.warning
    info = status_json(tmp_path)
    assert info["healthy"] is True and info["warnings"] == [report.warning]
    assert a.metrics.healthy._value.get() == 1
    assert a.metrics.unknown_partitions._value.get() == 1
    text = CliRunner().invoke(app, ["status", "--store", str(tmp_path / "state.sqlite")])
    assert f"warning: {report.warning}" in text.stdout


def test_status_json_health_fields_of_a_healthy_agent(tmp_path):
    import time as _time

    a = agent(tmp_path, snap(_time.time(), pending(1, _time.time())))
    a.clock = _time.time
    a.cycle()
    info = status_json(tmp_path)
    assert info["healthy"] is True and info["problems"] == [] and info["warnings"] == []
    assert info["agent_report"]["ok"] is True and info["agent_report"]["recorded"] is True
    assert info["agent_report"]["cycle"] == info["last_cycle"]["cycle"] == 1
    # an agent that stopped cycling: stale after 3 intervals (30 s at least)
    report = dict(info["agent_report"], time_s=_time.time() - 100,
                  written_s=_time.time() - 100)
    (tmp_path / "state.health").write_text(json.dumps(report) + "\n")
    with a.store.transaction() as db:
        db.execute("UPDATE cycles SET time_s = ?", (_time.time() - 100,))
    info = status_json(tmp_path)
    assert info["healthy"] is False and "no cycle for 100 s" in info["problems"][0]


# ---- a store that cannot be written (disk full) ----------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only), filled up on demand."""
    import os
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
            capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path):
    """Write ``path`` until the file system is full."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_full_disk_is_a_failed_cycle_in_one_line_that_status_shows(small_disk, caplog):
    import time as _time

    from slurm_marl.daemon.metrics import Metrics

    now = _time.time()
    a = agent(small_disk, snap(now, pending(1, now)))
    a.clock = _time.time
    a.metrics = Metrics()
    assert a.cycle().error is None
    fill(small_disk / "filler")
    jobs = [pending(j, now) for j in range(1, 400)]      # much to write: new records
    a.source.snap = snap(now + 1, *jobs)
    with caplog.at_level("INFO"):
        report = a.cycle()
        again = a.cycle()
    assert report.error.startswith(f"store: cannot write {small_disk / 'state.sqlite'}: ")
    assert "full" in report.error, report.error
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2 and all(r.exc_info is None for r in errors), \
        [(r.getMessage(), r.exc_info) for r in errors]
    assert "Traceback" not in caplog.text and again.error is not None
    # the store still says cycle 1 was fine; status learns the failure from the side file
    assert a.store.log.cycles(1)[0]["cycle"] == 1
    info = status_json(small_disk)
    assert info["healthy"] is False and info["last_cycle"]["cycle"] == 1
    assert info["agent_report"]["cycle"] == again.cycle
    assert info["agent_report"]["recorded"] is False
    assert any("full" in p for p in info["problems"]), info["problems"]
    assert a.metrics.cycle_errors.labels("store")._value.get() == 2
    assert a.metrics.healthy._value.get() == 0
    # space again: the next cycle succeeds and status is healthy again
    (small_disk / "filler").unlink()
    assert a.cycle().error is None
    info = status_json(small_disk)
    assert info["healthy"] is True and info["last_cycle"]["cycle"] == info[
        "agent_report"]["cycle"]


# ---- the loop: systemd's STATUS line, `run --cycles N`'s exit status ------------------------

@pytest.mark.parametrize("error,warning,rc", [
    (None, None, 0),
    (None, "managed partitions not in Slurm: typo", 0),
    ("config: no managed partition is in Slurm: nosuch", None, 1),
])
def test_status_line_and_exit_status_of_a_last_failed_cycle(monkeypatch, error, warning, rc):
    import time as _time

    from slurm_marl.daemon.loop import run_daemon
    from slurm_marl.daemon.service import CycleReport

    monkeypatch.setattr("signal.signal", lambda *a: None)  # keep pytest's handlers
    lines = []

    class Store:
        def close(self):
            pass

        def prune(self, *a, **k):
            return {"done": 1}

    class FailingAgent:
        metrics = None
        store = Store()

        def cycle(self):
            return CycleReport(cycle=1, time_s=_time.time(), error=error, warning=warning)

    class Notifier:
        enabled = False
        watchdog_s = None

        def ready(self, status=""): return False
        def status(self, text): return lines.append(text) or False
        def stopping(self): return False
        def watchdog(self): return False

    config = parse_config({"agent": {"interval_s": 0.5}, "metrics": {"enabled": False}})
    import os

    umask = os.umask(0o022)
    try:        # run_daemon sets the agent's umask: not pytest's
        got = run_daemon(config, agent=FailingAgent(), notifier=Notifier(), max_cycles=1)
    finally:
        os.umask(umask)
    assert got == rc
    assert len(lines) == 1
    assert (f"error: {error}" in lines[0]) == bool(error)
    assert (f"warning: {warning}" in lines[0]) == bool(warning)
