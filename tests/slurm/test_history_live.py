"""History from a real slurmdbd + MariaDB: jobs run on the local cluster, then
`slurm-marl history import` reads them back through sacct, each with its GPUs, run time,
name and state; what is still running or has no GPU is counted, not kept."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from slurmtest import SLURM_MARL, Cluster, cluster_spec

from slurm_marl.testcluster import LocalCluster

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def acct_cluster():
    local = LocalCluster(spec=cluster_spec(nodes=2, sockets=2, gpus_per_socket=2,
                                           sched_interval_s=2, accounting=True)).up()
    try:
        yield Cluster(local)
    finally:
        local.down()


def test_import_reads_what_ran(acct_cluster, tmp_path):
    c = acct_cluster
    ids = {
        "two-gpu": c.sbatch("-J", "resnet-a", "--gres=gpu:2", "-t", "10", seconds=3,
                            gated=False),
        "typed": c.sbatch("-J", "bert-b", "--gres=gpu:s1:1", "-t", "1-0", seconds=2,
                          gated=False),
        "cpu": c.sbatch("-J", "cpu-c", "-t", "5", seconds=1, gated=False),
        "two-node": c.sbatch("-J", "dist-d", "-N", "2", "--gres=gpu:1", "-t", "5", seconds=2,
                             gated=False),
        "running": c.sbatch("-J", "long-e", "--gres=gpu:1", "-t", "5", seconds=600,
                            gated=False),
    }

    def accounted():
        out = c.run("sacct", "-a", "-X", "-n", "-P", "--format=JobID,State").stdout
        states = dict(line.split("|", 1) for line in out.splitlines() if line)
        done = [states.get(str(ids[k]), "") for k in ("two-gpu", "typed", "cpu", "two-node")]
        return all(s == "COMPLETED" for s in done) and \
            states.get(str(ids["running"])) == "RUNNING"

    c.wait_for(accounted, 60, "the jobs to be in accounting")
    out, trace = tmp_path / "history.csv", tmp_path / "trace.csv"
    proc = subprocess.run(
        [*SLURM_MARL, "history", "import", "--slurm-conf", str(c.local.slurm_conf),
         "--since", "2020-01-01", "--slice-days", "2000", "--out", str(out),
         "--trace", str(trace), "--json"],
        env=c.local.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["jobs"] == 3 and summary["bad_rows"] == 0
    assert summary["skipped"] == {"no GPUs": 1, "not ended": 1}
    rows = {int(r["job_id"]): r for r in csv.DictReader(out.open())}
    assert set(rows) == {ids["two-gpu"], ids["typed"], ids["two-node"]}
    a, b, d = rows[ids["two-gpu"]], rows[ids["typed"]], rows[ids["two-node"]]
    assert (a["name"], a["gpus"], a["nodes"], a["state"], a["user"]) == \
        ("resnet-a", "2", "1", "COMPLETED", "root")
    assert 2 <= float(a["end_s"]) - float(a["start_s"]) <= 8
    assert float(a["time_limit_s"]) == 600 and float(b["time_limit_s"]) == 86400
    assert (b["gpus"], d["gpus"], d["nodes"]) == ("1", "2", "2")
    assert summary["trace_jobs"] == 3
    trows = list(csv.DictReader(trace.open()))
    assert sorted(int(r["num_gpus"]) for r in trows) == [1, 2, 2]
    assert min(float(r["submit_time_s"]) for r in trows) == 0


def test_import_reports_a_failing_sacct(acct_cluster, tmp_path):
    """A cluster without accounting: sacct's own words, exit 1, no history file."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join(
        "AccountingStorageType=accounting_storage/none"
        if line.startswith("AccountingStorageType=") else line
        for line in acct_cluster.local.slurm_conf.read_text().splitlines()) + "\n")
    proc = subprocess.run(
        [*SLURM_MARL, "history", "import", "--slurm-conf", str(conf),
         "--since", "2020-01-01", "--out", str(tmp_path / "h.csv")],
        env=acct_cluster.local.env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "sacct failed" in proc.stderr and not (tmp_path / "h.csv").exists()


def holding_slurmdbd_port(held: list):
    """A ``LocalCluster._run_daemon`` that, before slurmdbd's first start, holds its port
    (a listening socket, appended to ``held``; the caller closes it), so that start stops
    at once: "fatal: slurm_init_msg_engine_port error Address already in use"."""
    import socket

    run_daemon = LocalCluster._run_daemon

    def run(self, cmd, label):
        if label == "slurmdbd" and not held:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self.accounting_ports.slurmdbd))
            sock.listen()
            held.append(sock)
        return run_daemon(self, cmd, label)

    return run


def test_slurmdbd_that_dies_while_starting_is_started_again(monkeypatch):
    """slurmdbd's first start dies (its port held: "fatal: ... Address already in use") and
    MariaDB dies with it: the harness starts MariaDB and slurmdbd again, and accounting
    answers, instead of waiting out its timeout and failing the cluster."""
    import os
    import signal
    import socket
    import time

    from slurm_marl.testcluster.processes import alive

    held: list[socket.socket] = []
    mariadb_pids: list[int] = []
    wait_for_dbd = LocalCluster._wait_for_dbd

    def then_kill_mariadb(self, *args, **kwargs):
        started = wait_for_dbd(self, *args, **kwargs)
        if not started and not mariadb_pids:
            mariadb_pids.append(self.pids()["mariadb"])
            os.kill(mariadb_pids[0], signal.SIGKILL)
            deadline = time.monotonic() + 10     # SIGKILL lands asynchronously
            while alive(mariadb_pids[0]) and time.monotonic() < deadline:
                time.sleep(0.05)
            held[0].close()
        return started

    monkeypatch.setattr(LocalCluster, "_run_daemon", holding_slurmdbd_port(held))
    monkeypatch.setattr(LocalCluster, "_wait_for_dbd", then_kill_mariadb)
    local = LocalCluster(spec=cluster_spec(nodes=1, accounting=True)).up(timeout_s=45)
    try:
        log = (local.root / "log" / "slurmdbd.log").read_text()
        # died once, of the held port (24.11 may log a second fatal line as that same
        # process tears down: "_set_fd_polling ... Bad file descriptor"), then started again
        lines = log.splitlines()
        assert sum("fatal:" in ln and "Address already in use" in ln for ln in lines) == 1
        assert mariadb_pids and local.pids()["mariadb"] != mariadb_pids[0]
        proc = subprocess.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"],
                              env=local.env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and proc.stdout.strip()
    finally:
        local.down()


def test_slurmdbd_that_dies_at_every_start_fails_the_cluster_without_waiting(monkeypatch):
    """Its port held for good: every start stops at once ("fatal"), and the cluster fails
    after the last start with slurmdbd's own words, not after waiting out its timeout."""
    import socket
    import time

    from slurm_marl.testcluster.errors import HarnessError
    from slurm_marl.testcluster.harness import DBD_STARTS

    held: list[socket.socket] = []
    monkeypatch.setattr(LocalCluster, "_run_daemon", holding_slurmdbd_port(held))
    local = LocalCluster(spec=cluster_spec(nodes=1, accounting=True))
    started = time.monotonic()
    try:
        with pytest.raises(HarnessError, match=f"stopped while starting, {DBD_STARTS} times"
                           ) as err:
            local.up(timeout_s=60)
    finally:
        held[0].close()
    assert time.monotonic() - started < 60        # not one timeout waited out
    assert "Address already in use" in str(err.value)
    # up() tore everything down: no daemon of this cluster (MariaDB included) is left
    import psutil
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if str(local.root) in " ".join(p.info["cmdline"] or [])]
    assert left == []
