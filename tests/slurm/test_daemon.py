"""The agent daemon end to end on real Slurm daemons: plain sbatch in, decisions out.

The daemon runs as its own process (`slurm-marl run`), as systemd would start it.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import pytest
from slurmtest import SLURM_MARL, Daemon, fast_las, gated_cluster, write_agent_config

from slurm_marl.daemon.config import load_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.slurm_integration.ports import WriteStatus

pytestmark = pytest.mark.slurm
GRACE_S = 20

# 2D-LAS with tiny thresholds so a test sees demotion within seconds.
FAST_LAS = fast_las(40)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    with gated_cluster(tmp_path_factory.mktemp("lua"), GRACE_S, nodes=4) as cluster:
        yield cluster


@pytest.fixture
def cfg_path(gated, tmp_path):
    gated.cancel_all()
    path = write_agent_config(gated, tmp_path, FAST_LAS, GRACE_S, "fast-las")
    yield path
    gated.cancel_all()


def test_decision_reaches_slurm_within_3s_and_job_runs_on_chosen_group(gated, cfg_path):
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        t0 = time.monotonic()
        job = c.sbatch("--gres=gpu:2", "-J", "agent-placed", gated=False)
        c.wait_for(lambda: (j := c.job(job)).required_nodes or not j.is_pending, 3.0,
                   "the agent's placement to reach Slurm")
        reached = time.monotonic() - t0
        ran = c.wait_state(job, "RUNNING", timeout_s=GRACE_S - 5)
        started = time.monotonic() - t0
        assert reached < 3.0 and started < GRACE_S / 2, (reached, started)
        store = Store(load_config(cfg_path).store_path)
        place = [d for d in store.log.decisions(job_id=job) if d["kind"] == "Place"][0]
        assert place["status"] == "ok"
        (node, idx), = ran.gpu_alloc
        snap = c.source.snapshot()
        groups = {a["group"] for a in place["payload"]["allocs"]}
        chosen = {i for g in snap.node(node).gpu_groups if g.index in groups
                  for i in g.gpu_indices}
        assert node in place["payload"]["nodes"] and set(idx) <= chosen
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_learned_profile_places_jobs_with_its_agent_on_real_slurm(gated, cfg_path):
    """las-learned (the shipped checkpoint: one GNN agent for a 4 x 2 x 2 partition 'gpu',
    the shape of this cluster) decides through the daemon: the agent, not the fallback,
    places each job, and Slurm runs it on the GPU group the agent chose."""
    c = gated
    cfg = cfg_path.read_text().replace(f'profile = "{cfg_path.parent / "fast-las.toml"}"',
                                       'profile = "las-learned"')
    assert 'profile = "las-learned"' in cfg
    cfg_path.write_text(cfg)
    daemon = Daemon(cfg_path, c.local.env)
    try:
        jobs = [c.sbatch("--gres=gpu:1", "-J", "resnet50-learned", gated=False),
                c.sbatch("--gres=gpu:2", "-J", "lm-learned", gated=False)]
        snap = None
        for job in jobs:
            ran = c.wait_state(job, "RUNNING", timeout_s=GRACE_S - 5)
            store = Store(load_config(cfg_path).store_path)
            place = [d for d in store.log.decisions(job_id=job) if d["kind"] == "Place"][0]
            assert place["status"] == "ok", place
            assert place["plugin"] == "learned", place
            (node, idx), = ran.gpu_alloc
            snap = snap or c.source.snapshot()
            groups = {a["group"] for a in place["payload"]["allocs"]}
            chosen = {i for g in snap.node(node).gpu_groups if g.index in groups
                      for i in g.gpu_indices}
            assert node in place["payload"]["nodes"] and set(idx) <= chosen
        assert "no agent for partition" not in daemon.output()
        assert "placing with" not in daemon.output()     # the checkpoint loaded
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_las_demotes_and_preempts_long_running_job_for_new_one(gated, cfg_path):
    """A 16-GPU job crosses the 40 GPU-s threshold in ~3 s and falls to queue 1; a new
    16-GPU job (queue 0) then takes the cluster by Tiresias preemption (requeue)."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        old = c.sbatch("--gres=gpu:4", "-N", "4", "-J", "old", gated=False)
        c.wait_state(old, "RUNNING", timeout_s=5)
        time.sleep(3.5)
        new = c.sbatch("--gres=gpu:4", "-N", "4", "-J", "new", gated=False)
        c.wait_state(new, "RUNNING", timeout_s=20)
        o = c.job(old)
        assert o.is_pending and o.restart_count == 1
        store = Store(load_config(cfg_path).store_path)
        pre = [d for d in store.log.decisions(job_id=old) if d["kind"] == "Preempt"]
        assert pre and pre[0]["status"] == "ok"
        rec = c.wait_for(lambda: (r := store.records.get([old])[old]).queue == 1 and r, 5,
                         "the requeued job to be ranked in queue 1")
        assert rec.attained_gpu_s >= 40 and rec.preemptions == 1
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_kill9_fail_open_then_restart_resumes_without_duplicates(gated, cfg_path):
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    first = c.sbatch("--gres=gpu:4", "-N", "4", "-J", "fill", gated=False)
    c.wait_state(first, "RUNNING", timeout_s=5)
    waiting = [c.sbatch("--gres=gpu:1", "-J", f"w{i}", gated=False) for i in range(3)]
    time.sleep(1.5)
    daemon.stop(signal.SIGKILL)
    # Agent gone: Slurm keeps scheduling. Free the cluster; gated jobs start on their own
    # once their (leased) begin time passes.
    c.run("scancel", str(first))
    for j in waiting:
        c.wait_state(j, "RUNNING", timeout_s=GRACE_S + 15)
    # Restart: resumes from its store (cycle numbers continue), no errors.
    store_path = load_config(cfg_path).store_path
    before = Store(store_path).log.cycles(1)[0]["cycle"]
    daemon = Daemon(cfg_path, c.local.env)
    try:
        time.sleep(1.5)
        cycles = Store(store_path).log.cycles(3)
        assert cycles[0]["cycle"] > before and all(cy["error"] is None for cy in cycles)
        shown = c.run("scontrol", "show", "reservation", check=False).stdout
        assert shown.count("ReservationName=slurm-marl-") <= 1
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_two_agents_on_one_cluster_one_acts_and_a_standby_takes_over(gated, cfg_path,
                                                                     tmp_path):
    """Three agents against one cluster: A, B with a state dir of its own, and A's config
    started twice. Only A acts (B's store is never created, the others log no start); killed
    with SIGKILL, exactly one standby takes over within a few intervals and starts jobs."""
    c = gated
    other = tmp_path / "other"
    other.mkdir()
    cfg_b = other / "config.toml"
    cfg_b.write_text(cfg_path.read_text().replace(str(tmp_path / "state"),
                                                  str(other / "state")))
    assert load_config(cfg_b).store_path != load_config(cfg_path).store_path
    a = Daemon(cfg_path, c.local.env)
    b = Daemon(cfg_b, c.local.env, wait=False)
    twin = Daemon(cfg_path, c.local.env, wait=False)
    standbys = (b, twin)
    try:
        c.wait_for(lambda: all("standby: the cluster lock" in d.output() for d in standbys),
                   30, "both later agents to wait as standbys")
        lock = tmp_path / "cluster-lock-holder"
        holder = c.local.root / "state" / "slurm-marl.lock"
        lock.write_text(holder.read_text())
        assert f'"pid": {a.proc.pid}' in lock.read_text()
        jobs = [c.sbatch("--gres=gpu:1", "-J", f"one{i}", gated=False) for i in range(2)]
        for j in jobs:   # the gate delays them 20 s: only an agent's StartTime=now is sooner
            c.wait_state(j, "RUNNING", timeout_s=GRACE_S / 2)
        assert not load_config(cfg_b).store_path.exists()
        assert all("slurm-marl agent starting" not in d.output() for d in standbys)
        a.stop(signal.SIGKILL)
        killed = time.monotonic()
        took_over = c.wait_for(lambda: [d for d in standbys if "standby over" in d.output()],
                               10, "a standby to take over")
        over_s = time.monotonic() - killed
        assert len(took_over) == 1
        new = took_over[0]
        print(f"standby took the locks {over_s:.2f} s after the SIGKILL")
        c.wait_for(lambda: "slurm-marl agent starting" in new.output(), 20, "its start")
        late = c.sbatch("--gres=gpu:1", "-J", "after-takeover", gated=False)
        c.wait_state(late, "RUNNING", timeout_s=GRACE_S / 2)
        took_s = time.monotonic() - killed
        assert took_s < GRACE_S, took_s
        time.sleep(1.0)
        assert len([d for d in standbys if "standby over" in d.output()]) == 1
    finally:
        a.stop(signal.SIGKILL)
        for d in standbys:
            assert d.stop() == 0, d.output()


def test_the_queue_fingerprint_changes_with_arrivals_and_starts_not_priorities(gated,
                                                                             cfg_path):
    """The light probe the agent runs between cycles (``react_s``): a new job and a job
    that starts change it; a priority write (the agent's own, every cycle) does not."""
    c = gated
    empty = c.source.queue_fingerprint(("gpu",))
    assert empty is not None
    job = c.sbatch("--gres=gpu:1", "-J", "probe")            # pending (begin in 600 s)
    arrived = c.source.queue_fingerprint(("gpu",))
    assert arrived not in (None, empty)
    c.run("scontrol", "update", f"jobid={job}", "Priority=12345")
    assert c.source.queue_fingerprint(("gpu",)) == arrived
    c.run("scontrol", "update", f"jobid={job}", "StartTime=now")
    c.wait_state(job, "RUNNING", timeout_s=10)
    assert c.source.queue_fingerprint(("gpu",)) not in (None, arrived)


def test_multi_node_waiting_job_gets_one_reservation_and_it_is_ended(gated, cfg_path):
    c = gated
    profile = cfg_path.parent / "reserve.toml"
    profile.write_text(FAST_LAS.replace("backfill_reserve = false", "backfill_reserve = true")
                       .replace("preemption = true", "preemption = false"))
    cfg_path.write_text(cfg_path.read_text().replace(str(cfg_path.parent / "fast-las.toml"),
                                                     str(profile)))
    daemon = Daemon(cfg_path, c.local.env)
    try:
        busy = c.sbatch("--gres=gpu:1", "-w", "n3", "-J", "busy", gated=False)
        c.wait_state(busy, "RUNNING", timeout_s=5)
        big = c.sbatch("--gres=gpu:4", "-N", "4", "-J", "big", gated=False)
        name = f"slurm-marl-{big}"
        c.wait_for(lambda: c.reservation_active(name), 10, "reservation created")
        time.sleep(2.0)  # several more cycles: still exactly one reservation
        shown = c.run("scontrol", "show", "reservation", check=False).stdout
        assert shown.count(f"ReservationName={name}") == 1
        assert c.job(big).reservation is None   # the job itself is never inside it
        c.run("scancel", str(busy))
        ran = c.wait_state(big, "RUNNING", timeout_s=15)
        assert ran.reservation is None and not c.reservation_active(name)
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_daemon_survives_slurmctld_restart(gated, cfg_path):
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        c.local.stop_daemon("slurmctld")
        time.sleep(12)  # at least one cycle fails against a stopped controller
        assert daemon.proc.poll() is None
        c.local.start_slurmctld()
        job = c.sbatch("--gres=gpu:1", "-J", "after-restart", gated=False)
        c.wait_state(job, "RUNNING", timeout_s=GRACE_S - 2)
        cycles = Store(load_config(cfg_path).store_path).log.cycles(200)
        assert any(cy["error"] for cy in cycles), "no cycle saw the controller down"
        assert cycles[0]["error"] is None
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_job_vanishing_between_read_and_write_is_logged_not_fatal(gated, cfg_path):
    c = gated
    cfg = load_config(cfg_path)
    job = c.sbatch("--gres=gpu:1", "-J", "vanish", gated=False)
    stale = c.source.snapshot()
    c.run("scancel", str(job))
    c.wait_for(lambda: not c.job(job).is_pending, 10, "job cancelled")

    class Stale:
        def snapshot(self):
            return stale

    agent = Agent(cfg, Stale(), c.sink, Store(cfg.store_path),
                  build_policy(load_profile(cfg.agent.profile)))
    report = agent.cycle()
    assert report.error is None
    mine = [r for r in report.results if r.decision.job_id == job]
    assert mine and all(r.status is WriteStatus.VANISHED for r in mine)


def test_notify_socket_gets_ready_and_watchdog(gated, cfg_path, tmp_path):
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(10)
    daemon = Daemon(cfg_path, gated.local.env, {"NOTIFY_SOCKET": str(sock_path),
                                                "WATCHDOG_USEC": "2000000"}, wait=False)
    try:
        messages = []
        deadline = time.monotonic() + 45  # the daemon imports torch at start; CI is shared
        while time.monotonic() < deadline and (
                not any("READY=1" in m for m in messages)
                or sum("WATCHDOG=1" in m for m in messages) < 3):
            try:
                messages.append(sock.recv(4096).decode())
            except socket.timeout:
                assert daemon.proc.poll() is None, daemon.output()
        assert any("READY=1" in m for m in messages)
        assert sum("WATCHDOG=1" in m for m in messages) >= 3
    finally:
        sock.close()
        assert daemon.stop() == 0, daemon.output()


def test_malformed_config_is_a_clear_error_at_start(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent]\ninterval_s = 'often'\n")
    proc = subprocess.run([*SLURM_MARL, "run", "--config", str(bad)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "agent.interval_s" in proc.stderr and "expected a number" in proc.stderr
    bad.write_text("[agent\n")
    proc = subprocess.run([*SLURM_MARL, "run", "--config", str(bad)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "not valid TOML" in proc.stderr and str(bad) in proc.stderr


def test_a_gated_array_is_released_at_once_and_explained(gated, cfg_path):
    """An array the gate delayed (an older gate, or an admin's marker) is left to Slurm:
    the agent writes StartTime=now to it once, never pins or leases it, and `explain` says
    why. Its tasks then run on their own, each with its GPU."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        array = int(c.run("sbatch", "--parsable", "--array=0-3", "--gres=gpu:1",
                          f"--begin=now+{GRACE_S}", f"--chdir={c.local.root}/out",
                          "-o", f"{c.local.root}/out/%A_%a.out",
                          "--wrap", "echo CVD=$CUDA_VISIBLE_DEVICES; sleep 1").stdout.strip())
        c.run("scontrol", "update", f"jobid={array}",
              "AdminComment=slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=")
        t0 = time.monotonic()
        c.wait_for(lambda: not [j for j in c.source.snapshot().jobs
                                if j.array_job_id == array and j.state.value != "COMPLETED"],
                   GRACE_S - 5, "every task to run and end before the grace would")
        assert time.monotonic() - t0 < GRACE_S - 5
        store = Store(load_config(cfg_path).store_path)
        rows = store.log.decisions(job_id=array, limit=50)
        assert [r["kind"] for r in rows] == ["Release"] and rows[0]["status"] == "ok", rows
        assert "left to Slurm: job array" in rows[0]["reason"]
        out = subprocess.run([*SLURM_MARL, "explain", str(array), "--config", str(cfg_path)],
                             env=c.local.env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "left to Slurm: job array" in out.stdout, out
        for task in range(4):
            text = (c.local.root / "out" / f"{array}_{task}.out").read_text()
            assert len(text.split("CVD=")[1].split()[0].split(",")) == 1, text
    finally:
        assert daemon.stop() == 0, daemon.output()
