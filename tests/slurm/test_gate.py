"""The project's job_submit.lua on real slurmctld: gate, marker, fail-open, user guard."""

from __future__ import annotations

import json
import os
import time

import pytest

from slurm_marl.domain import GroupAlloc, Place
from slurm_marl.slurm_integration.marker import parse_marker
from slurm_marl.slurm_integration.parse_layout import job_state_text, num

from slurmtest import as_nobody, gated_cluster

pytestmark = pytest.mark.slurm
GRACE_S = 4


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    with gated_cluster(tmp_path_factory.mktemp("lua"), GRACE_S, nodes=2,
                       extra_partitions=(("cpu", (1, 2)),)) as cluster:
        os.chmod(cluster.local.root / "out", 0o777)
        yield cluster


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
    # the request as Slurm hands it to job_submit.lua: gres:gpu:2 (22.05), gres/gpu:2 (24.11+)
    assert parse_marker(j.admin_comment).tres_per_node in ("gres:gpu:2", "gres/gpu:2")
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


def test_jobs_placed_on_one_gpu_group_run_side_by_side(gated):
    """Two 1-GPU jobs the agent puts on one socket's GPUs both run at once, each on its own
    GPU. (With GRES enforce-binding forced, 24.11+ gave the first job the whole socket's
    cores and the second waited "Resources": the gate forces it on 22.05 only.)"""
    c = gated
    jobs = [c.sbatch("--gres=gpu:1", "-J", f"side{k}", gated=False) for k in range(2)]
    snap = c.source.snapshot()
    res = c.sink.apply([Place(j, nodes=("n2",), allocs=(GroupAlloc("n2", 1, 1),))
                        for j in jobs], snap)
    assert all(r.ok for r in res), res
    ran = [c.wait_state(j, "RUNNING", timeout_s=GRACE_S) for j in jobs]
    assert sorted(r.gpu_alloc for r in ran) == [(("n2", (2,)),), (("n2", (3,)),)]
    assert all(r.cpus == 1 for r in ran)


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


def test_a_user_may_start_their_own_job_now_as_with_slurm_alone(gated):
    """The grace delays new submissions only: a user's `StartTime=now` on their own gated
    job is taken, as Slurm alone takes it (it was refused while the gate guarded the
    grace), and the job runs with its GPU."""
    c = gated
    job = _nobody_sbatch(c, "--gres=gpu:1")
    try:
        now = as_nobody(c, "scontrol", "update", f"jobid={job}", "StartTime=now")
        assert now.returncode == 0, now.stderr
        ran = c.wait_state(job, "RUNNING", timeout_s=15)
        assert ran.start_time_s < ran.submit_time_s + GRACE_S, ran   # before the grace
        assert sum(len(g) for _, g in ran.gpu_alloc) == 1, ran
        assert parse_marker(ran.admin_comment) is not None    # still the gate's job
    finally:
        c.run("scancel", str(job), check=False)


# ---- requests the agent cannot model are left to Slurm at once -------------------------

def _records(c, job_id: int) -> list[dict]:
    """squeue --json records of a job (all of an array's: the pending rest and its tasks)."""
    data = json.loads(c.run("squeue", "--json", "-j", str(job_id)).stdout)
    return [r for r in data.get("jobs") or []
            if num(r.get("job_id")) == job_id or num(r.get("array_job_id")) == job_id]


def _running(r: dict) -> bool:
    """An squeue --json record is running (job_state: a word on 22.05, a list later)."""
    return job_state_text(r.get("job_state")) == "RUNNING"


def _nobody_sbatch(c, *opts: str) -> int:
    proc = as_nobody(c, "sbatch", "--parsable", f"--chdir={c.local.root}/out",
                      "-o", "/dev/null", *opts, "--wrap", "sleep 600")
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])


def _ctld_log(c) -> str:
    return (c.local.root / "log" / "slurmctld.log").read_text(errors="replace")


def _assert_left_to_slurm(c, job_id: int) -> None:
    recs = _records(c, job_id)
    assert recs, f"job {job_id} not listed"
    for r in recs:
        assert num(r["eligible_time"]) <= num(r["submit_time"]) + 1, r   # no begin delay
        assert parse_marker(r.get("admin_comment")) is None, r["admin_comment"]


@pytest.mark.parametrize("opts, why", [
    (("--array=0-9", "--gres=gpu:1"), "job array"),
    (("--gpus-per-task=1", "-n", "1"), "--gpus-per-task"),
    (("--gpus-per-socket=1", "--sockets-per-node=1"), "--gpus-per-socket"),
    (("-p", "gpu,cpu", "--gres=gpu:1"), "several partitions"),
], ids=["array", "gpus-per-task", "gpus-per-socket", "several-partitions"])
def test_requests_the_agent_cannot_model_are_left_to_slurm(gated, opts, why):
    c = gated
    name = "left-" + why.strip("-").replace(" ", "-")
    job = c.sbatch(*opts, "-J", name, gated=False)
    _assert_left_to_slurm(c, job)
    # ... so on the idle cluster it (an array: its first tasks) runs at once, not after the grace
    c.wait_for(lambda: any(_running(r) for r in _records(c, job)),
               GRACE_S - 1, f"job {job} to run before the grace ends")
    assert f"job '{name}' of user root (uid 0) not gated, left to Slurm: {why}" in _ctld_log(c)


def test_a_large_array_is_left_to_slurm(gated):
    c = gated
    job = c.sbatch("--array=0-999", "--gres=gpu:1", "-J", "big-array", gated=False)
    try:
        _assert_left_to_slurm(c, job)
        assert "job 'big-array' of user root (uid 0) not gated, left to Slurm: job array" \
            in _ctld_log(c)
    finally:
        c.run("scancel", str(job))


# ---- updates are Slurm's own: the grace applies to new submissions only -----------------

@pytest.mark.parametrize("opts, update", [
    (("-p", "cpu", "--gres=gpu:1"), ("Partition=gpu",)),   # held in an unmanaged partition
    (("-p", "gpu"), ("Gres=gpu:1",)),                       # GPUs added in a managed one
], ids=["moved-into-managed-partition", "gpu-request-added"])
def test_an_update_that_makes_a_managed_gpu_job_is_not_delayed(gated, opts, update):
    """A held job moved into a managed partition (or given GPUs there) and released runs as
    under Slurm alone, at once: the gate used to delay it by the grace and refuse its
    owner's `StartTime=now`. Unmarked (a user's update may not set AdminComment), it is
    read as its user asks."""
    c = gated
    job = _nobody_sbatch(c, "-H", *opts)
    try:
        moved = as_nobody(c, "scontrol", "update", f"jobid={job}", *update)
        assert moved.returncode == 0, moved.stderr
        released_at = time.time()
        rel = as_nobody(c, "scontrol", "release", str(job))
        assert rel.returncode == 0, rel.stderr
        j = c.job(job)
        assert j.eligible_time_s is None or j.eligible_time_s <= released_at + 1, j
        ran = c.wait_state(job, "RUNNING", timeout_s=15)
        assert ran.partition == "gpu" and parse_marker(ran.admin_comment) is None
    finally:
        c.run("scancel", str(job), check=False)


def test_moving_in_keeps_a_later_start_time_of_the_same_update(gated):
    c = gated
    job = _nobody_sbatch(c, "-p", "cpu", "--gres=gpu:1", "--begin=now+900")
    try:
        moved = as_nobody(c, "scontrol", "update", f"jobid={job}", "Partition=gpu",
                           "StartTime=now+900")
        assert moved.returncode == 0, moved.stderr
        j = c.job(job)
        assert j.partition == "gpu" and j.eligible_time_s > time.time() + 800
    finally:
        c.run("scancel", str(job), check=False)


def test_an_array_moved_into_a_managed_partition_stays_left_to_slurm(gated):
    c = gated
    job = _nobody_sbatch(c, "-H", "-p", "cpu", "--array=0-1", "--gres=gpu:1")
    try:
        moved = as_nobody(c, "scontrol", "update", f"jobid={job}", "Partition=gpu")
        assert moved.returncode == 0, moved.stderr
        assert as_nobody(c, "scontrol", "release", str(job)).returncode == 0
        c.wait_for(lambda: any(_running(r) for r in _records(c, job)),
                   GRACE_S - 1, f"array {job} to run before the grace ends")
        assert parse_marker(c.job(job).admin_comment) is None
    finally:
        c.run("scancel", str(job), check=False)
