"""The project's job_submit.lua on real slurmctld: gate, marker, fail-open, user guard."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from slurm_marl.domain import GroupAlloc, Place
from slurm_marl.slurm_integration.harness import ClusterSpec, LocalCluster
from slurm_marl.slurm_integration.marker import parse_marker
from slurm_marl.slurm_integration.plugin import render_job_submit_lua

from slurmtest import Cluster

pytestmark = pytest.mark.slurm
GRACE_S = 4


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    lua = tmp_path_factory.mktemp("lua") / "job_submit.lua"
    lua.write_text(render_job_submit_lua(["gpu"], GRACE_S, []))
    local = LocalCluster(spec=ClusterSpec(nodes=2, job_submit_lua=str(lua),
                                          extra_partitions=(("cpu", (1, 2)),),
                                          sched_interval_s=2)).up()
    os.chmod(local.root / "out", 0o777)
    try:
        yield Cluster(local)
    finally:
        local.down()


@pytest.fixture(autouse=True)
def _no_leftovers(gated):
    gated.cancel_all()
    yield
    gated.cancel_all()


def test_gpu_batch_job_is_gated_marked_and_starts_on_its_own(gated):
    c = gated
    submitted = time.time()
    job = c.sbatch("--gres=gpu:2", "-J", "gated", gated=False)
    j = c.job(job)
    assert j.is_pending and j.pending_reason == "BeginTime"
    assert j.eligible_time_s >= submitted + GRACE_S - 1
    assert parse_marker(j.admin_comment).tres_per_node == "gres:gpu:2"
    assert parse_marker(j.admin_comment).user_gave_no_nodes
    pinned = c.sbatch("--gres=gpu:1", "-w", "n2", "-J", "users-own-node", gated=False)
    assert parse_marker(c.job(pinned).admin_comment).required_nodes == "n2"
    c.run("scancel", str(pinned))
    # Nobody acts: the job starts by itself after the grace (fail-open).
    ran = c.wait_state(job, "RUNNING", timeout_s=GRACE_S + 15)
    assert ran.start_time_s >= submitted + GRACE_S - 1


def test_agent_decision_starts_gated_job_before_grace_ends(gated):
    c = gated
    job = c.sbatch("--gres=gpu:1", "-J", "decided", gated=False)
    snap = c.source.snapshot()
    t0 = time.monotonic()
    res = c.sink.apply([Place(job, nodes=("n2",), allocs=(GroupAlloc("n2", 1, 1),))], snap)
    assert all(r.ok for r in res), res
    ran = c.wait_state(job, "RUNNING", timeout_s=GRACE_S)
    assert time.monotonic() - t0 < GRACE_S
    assert ran.gpu_alloc == (("n2", (2,)),)


def test_not_gated_cpu_jobs_other_partitions_and_later_begin(gated):
    c = gated
    cpu_only = c.sbatch("-J", "cpu", gated=False)
    other = c.sbatch("--gres=gpu:1", "-p", "cpu", "-J", "unmanaged", gated=False)
    later = c.sbatch("--gres=gpu:1", "--begin=now+900", "-J", "later", gated=False)
    c.wait_state(cpu_only, "RUNNING", timeout_s=10)
    c.wait_state(other, "RUNNING", timeout_s=10)
    assert parse_marker(c.job(cpu_only).admin_comment) is None
    j = c.job(later)
    assert j.is_pending and j.eligible_time_s > time.time() + 800  # the user's --begin kept


def test_interactive_srun_is_not_gated(gated):
    proc = gated.run("srun", "--gres=gpu:1", "-J", "inter", "true", check=False)
    assert proc.returncode == 0, proc.stderr


def test_users_cannot_skip_the_grace_but_the_agent_can(gated):
    c = gated
    env = c.local.env
    user = subprocess.run(["runuser", "-u", "nobody", "--", "sbatch", "--parsable",
                           "--gres=gpu:1", f"--chdir={c.local.root}/out", "-o", "/dev/null",
                           "--wrap", "sleep 60"], env=env, capture_output=True, text=True)
    assert user.returncode == 0, user.stderr
    job = int(user.stdout.strip())
    bypass = subprocess.run(["runuser", "-u", "nobody", "--", "scontrol", "update",
                             f"jobid={job}", "StartTime=now"], env=env, capture_output=True,
                            text=True)
    assert bypass.returncode != 0
    assert c.job(job).is_pending
    # The owner may still cancel (nothing else is taken from users).
    res = c.sink.apply([Place(job, nodes=("n1",), allocs=(GroupAlloc("n1", 0, 1),))],
                       c.source.snapshot())
    assert all(r.ok for r in res), res
    c.wait_state(job, "RUNNING", timeout_s=GRACE_S)
    cancel = subprocess.run(["runuser", "-u", "nobody", "--", "scancel", str(job)], env=env,
                            capture_output=True, text=True)
    assert cancel.returncode == 0, cancel.stderr
