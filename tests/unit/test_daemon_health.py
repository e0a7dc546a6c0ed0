"""Health that must not look fine when it is not (issue 31): config errors at start, an
unknown managed partition, a store that cannot be written, and jobs that vanish from Slurm
and come back. Through the config, the agent's cycle with the shared fakes, the store and
the admin commands."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fakes import FakeClusterSource, FakeDecisionSink
from slurm_marl.cli import app
from slurm_marl.daemon.config import ConfigError, parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import (ClusterSnapshot, GpuGroup, Job, JobState, Node, Partition,
                               SetPriority)
from slurm_marl.slurm_integration.plugin import PluginError, render_job_submit_lua

NODES = tuple(Node(name=n, partitions=("gpu",), cpus=8, real_memory_mib=16000,
                   gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
              for n in ("n1", "n2"))
PARTS = (Partition("gpu", ("n1", "n2"), True), Partition("cpu", ("n1",)))


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
    return Job(jid, name=f"j{jid}", partition="gpu", gpus_per_node=1, submit_time_s=now - 5,
               eligible_time_s=now + 20)


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
    assert a.store.job_records([2])[2].finished_s is not None
    # ... and back (the partition restored): live again, in the pending count, the store
    # and `queues`, with the record it had
    a.source.snap = snap(now + 20, pending(1, now), pending(2, now))
    report = a.cycle()
    assert report.error is None and report.pending == 2
    assert {d.job_id for d in report.decisions} == {1, 2}
    rec = a.store.job_records([2])[2]
    assert rec.finished_s is None and rec.last_state == "PENDING"
    assert rec.submit_time_s == now - 5 and rec.queue is not None
    # a later agent reading the file (a restart) sees it unfinished too
    a.store.close()
    again = Store(tmp_path / "state.sqlite")
    assert {r.job_id for r in again.unfinished_records()} == {1, 2}
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
    assert a.store.job_records([3])[3].finished_s == now
    a.source.snap = snap(now + 60, run)     # back, still running
    report = a.cycle()
    rec = a.store.job_records([3])[3]
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


def one_line_error(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    err = result.stderr.strip()
    assert "\n" not in err and err.startswith("error: "), err
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in err, err


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
