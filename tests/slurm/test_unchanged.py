"""Slurm unchanged for users (issue 30), on real Slurm with the gate installed and the agent
running: request shapes that used to get stuck, refused, started early or requeued by the
agent behave as under Slurm alone. Where a job runs, what it got is checked from inside it
(``CUDA_VISIBLE_DEVICES``, one entry per fake GPU; the CPUs it may use).

Each case failed on the main before this module (the gate forced enforce-binding on 22.05,
narrowing ignored --cpus-per-gpu, the marker kept no begin time, victims were chosen in any
partition, hetjob components were decided one by one, held jobs got start times)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from slurmtest import (SLURM_MARL, SLURM_VERSION, Daemon, as_nobody, fast_las, gated_cluster,
                       write_agent_config)

from slurm_marl.daemon.config import load_config
from slurm_marl.daemon.store import Store

pytestmark = pytest.mark.slurm
GRACE_S = 20

FAST_LAS = fast_las(20)

REPORT = "echo CVD=$CUDA_VISIBLE_DEVICES; echo HOST=$(hostname); " \
         "echo CPUS=$(grep Cpus_allowed_list /proc/self/status | cut -f2); sleep {s}"


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    # 2 nodes x 2 sockets x 4 cores x 2 GPUs; partition "all" (not managed) on the same nodes
    with gated_cluster(tmp_path_factory.mktemp("lua"), GRACE_S, nodes=2,
                       extra_partitions=(("all", (1, 2)),), cred_expire_s=5) as cluster:
        yield cluster


@pytest.fixture
def cfg_path(gated, tmp_path):
    gated.cancel_all()
    path = write_agent_config(gated, tmp_path, FAST_LAS, GRACE_S, "fast-las")
    yield path
    gated.cancel_all()


def submit(c, *opts: str, seconds: int = 2) -> subprocess.CompletedProcess:
    """Plain sbatch through the gate, as a user types it; the job reports what it got."""
    return c.run("sbatch", "--parsable", f"--chdir={c.local.root}/out",
                 f"--output={c.local.root}/out/%j.out", *opts,
                 "--wrap", REPORT.format(s=seconds), check=False)


def report(c, job_id: int) -> dict[str, str]:
    path = Path(c.local.root) / "out" / f"{job_id}.out"
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def gpus_seen(c, job_id: int) -> int:
    cvd = report(c, job_id).get("CVD", "")
    return len([g for g in cvd.split(",") if g.strip()])


def ended(c, job_id: int, timeout_s: float):
    return c.wait_for(lambda: (j := c.job(job_id)) is not None
                      and j.state.value in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
                      and j, timeout_s, f"job {job_id} to end")


def decisions(cfg_path, job_id: int) -> list[dict]:
    return Store(load_config(cfg_path).store_path).log.decisions(job_id=job_id, limit=200)


def explain(c, cfg_path, job_id: int) -> str:
    out = subprocess.run([*SLURM_MARL, "explain", str(job_id), "--config", str(cfg_path)],
                         env=c.local.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


SHAPES = [
    (("-c6", "--gres=gpu:1"), 1),
    (("-n6", "--gres=gpu:1"), 1),
    (("-c5", "--gres=gpu:2"), 2),
    (("--gpus=2", "-c6"), 2),
    (("--gres=gpu:2", "-n8"), 2),
    (("--gres=gpu:s0:1,gpu:s1:1",), 2),
]


def test_the_gate_accepts_what_slurm_alone_accepts(gated):
    """More cores than the GPUs' socket, several GPU types: refused at sbatch on 22.05
    while the gate forced enforce-binding ("Requested node configuration is not
    available"). Now accepted, and (no agent running) each runs after the grace with
    exactly the GPUs it asked for."""
    c = gated
    c.cancel_all()
    jobs = []
    for opts, gpus in SHAPES:
        proc = submit(c, *opts)
        assert proc.returncode == 0, (opts, proc.stderr)
        jobs.append((int(proc.stdout.strip().split(";")[0]), opts, gpus))
    for job, opts, gpus in jobs:
        assert ended(c, job, GRACE_S + 60).state.value == "COMPLETED", opts
        assert gpus_seen(c, job) == gpus, (opts, report(c, job))


def test_cpus_per_gpu_jobs_run_with_the_agent(gated, cfg_path):
    """Narrowed to one GPU group, these jobs were left BadConstraints with priority 0,
    pending forever (while `explain` said "Slurm: ok"). Now the agent pins their nodes only,
    and they run at once with their GPUs and CPUs."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        jobs = [int(submit(c, *opts).stdout.strip()) for opts in (
            ("--cpus-per-gpu=4", "--gres=gpu:2"),
            ("--gpus-per-node=2", "--cpus-per-gpu=1", "-N1", "-n3"))]
        for job in jobs:
            done = ended(c, job, GRACE_S - 5)   # well before the grace: the agent started it
            assert done.state.value == "COMPLETED" and gpus_seen(c, job) == 2, report(c, job)
            place = [d for d in decisions(cfg_path, job) if d["kind"] == "Place"]
            assert place and place[0]["status"] == "ok"
            assert "--cpus-per-gpu" in place[0]["message"], place[0]
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_a_narrowed_job_requeued_runs_again_on_one_node(gated, cfg_path):
    """The agent moves `--gres=gpu:2` to `TresPerJob=gres:gpu:sN:2 NumNodes=1-1`. Requeued
    with one GPU free on each node, it used to be read as a per-job request and spread over
    `n[1-2]` (left BadConstraints on 22.05, run as 1+1 GPUs on 24.11). Now it waits, as
    under Slurm alone, until one node has 2 GPUs free, and runs there with its 2 GPUs; with
    the agent dead too."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        job = int(submit(c, "--gres=gpu:2", seconds=60).stdout.strip())
        c.wait_state(job, "RUNNING", timeout_s=GRACE_S - 5)
        narrowed = c.job(job)
        assert narrowed.gpus_per_job == 2 and narrowed.gpus_per_node == 0, narrowed
        # 3 of 4 GPUs busy on each node (partition `all`, not managed): 1 free on each
        fillers = [int(submit(c, "-p", "all", "-w", n, "--gres=gpu:3",
                              seconds=300).stdout.strip()) for n in ("n1", "n2")]
        c.run("scontrol", "requeue", str(job))
        for f in fillers:
            c.wait_state(f, "RUNNING", timeout_s=20)
        time.sleep(10)   # Slurm's requeue delay (cred_expire 5 s) and several agent cycles
        waiting = c.job(job)
        assert waiting.is_pending and len(waiting.required_nodes) <= 1, waiting
        assert "BadConstraints" not in waiting.pending_reason, waiting
        c.run("scancel", str(fillers[1]))
        ran = c.wait_state(job, "RUNNING", timeout_s=20)
        assert ran.nodes == ("n2",) and sum(len(g) for _, g in ran.gpu_alloc) == 2, ran
    finally:
        assert daemon.stop() == 0, daemon.output()
    # with the agent gone, requeued once more: Slurm alone runs it on one node, 2 GPUs
    c.run("scontrol", "requeue", str(job))
    again = c.wait_state(job, "RUNNING", timeout_s=GRACE_S + 60)
    assert len(again.nodes) == 1 and sum(len(g) for _, g in again.gpu_alloc) == 2, again


def test_a_users_begin_time_is_kept_and_explained(gated, cfg_path):
    """`--begin` within the grace plus two cycles was taken for the agent's lease and
    overwritten with StartTime=now (now+20 started after 4-12 s)."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        for delay in (GRACE_S + 10, GRACE_S + 30):
            t0 = time.time()
            job = int(submit(c, f"--begin=now+{delay}", "--gres=gpu:1").stdout.strip())
            ran = c.wait_state(job, "RUNNING", timeout_s=delay + 20)
            assert ran.start_time_s >= t0 + delay - 1, (delay, ran.start_time_s - t0)
            text = explain(c, cfg_path, job)
            assert "begin time" in text, text
            ended(c, job, 20)
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_a_user_may_move_their_begin_earlier_and_later(gated, cfg_path):
    """A user moving their own --begin: earlier (down to now, as Slurm alone allows; the gate
    used to refuse anything below now + grace) and later again after submission. The agent
    takes each new begin (a begin it did not write is its user's, whatever the horizon) and
    starts the job no earlier than it; explain shows it."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        proc = as_nobody(c, "sbatch", "--parsable", f"--chdir={c.local.root}/out", "-o",
                         "/dev/null", "--begin=now+3600", "--gres=gpu:1", "--wrap", "sleep 2")
        assert proc.returncode == 0, proc.stderr
        job = int(proc.stdout.strip())
        early = as_nobody(c, "scontrol", "update", f"jobid={job}", "StartTime=now+5")
        assert early.returncode == 0, early.stderr
        t0 = time.time()
        later = as_nobody(c, "scontrol", "update", f"jobid={job}",
                          f"StartTime=now+{GRACE_S + 5}")
        assert later.returncode == 0, later.stderr
        begin = c.job(job).eligible_time_s
        assert t0 + GRACE_S < begin < t0 + GRACE_S + 10, begin - t0
        shown = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(begin))
        c.wait_for(lambda: shown in explain(c, cfg_path, job), 10, "explain to show it")
        ran = c.wait_state(job, "RUNNING", timeout_s=GRACE_S + 30)
        assert ran.start_time_s >= begin - 1, (ran.start_time_s, begin)
        assert sum(len(g) for _, g in ran.gpu_alloc) == 1, ran
        ended(c, job, 20)
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_no_requeue_outside_preempt_partitions(gated, cfg_path):
    """A job of the unmanaged partition `all` on the managed nodes was requeued to make
    room for a managed job (2/2 on 22.05, 3/3 on 24.11). It is never touched; a managed job
    of a lower queue on the same nodes is still preempted."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        theirs = int(submit(c, "-p", "all", "-w", "n1", "--gres=gpu:4",
                            seconds=120).stdout.strip())
        c.wait_state(theirs, "RUNNING", timeout_s=10)
        mine = int(submit(c, "-w", "n2", "--gres=gpu:4", seconds=120).stdout.strip())
        c.wait_state(mine, "RUNNING", timeout_s=GRACE_S - 5)
        time.sleep(8)   # both cross the 20 GPU-s threshold: queue 1
        new = int(submit(c, "--gres=gpu:4", "-N2", seconds=5).stdout.strip())
        time.sleep(GRACE_S / 2)
        assert c.job(theirs).is_running and c.job(theirs).restart_count == 0
        assert not [d for d in decisions(cfg_path, theirs) if d["kind"] == "Preempt"]
        # one node of 4 GPUs is all the agent may free: the 2-node job waits for `all`
        assert c.job(new).is_pending
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_a_job_left_to_slurm_does_not_jump_earlier_managed_jobs(gated, tmp_path):
    """GPUs full, two managed 4-GPU jobs waiting; then a one-task array and a job of two
    partitions, both left to Slurm, eligible at once. When two nodes free, Slurm started the
    left jobs first (the managed ones waited ineligible for the agent's next cycle, and
    their priorities were below priority/basic's). Now the managed jobs submitted before
    them are eligible, ranked above them: they start first, as under Slurm alone."""
    c = gated
    c.cancel_all()
    cfg = write_agent_config(c, tmp_path, FAST_LAS.replace("preemption = true",
                                                           "preemption = false"),
                             GRACE_S, "no-preemption")
    # the default cycle of 5 s, not the tests' 0.5 s: a fast cycle often wins the race
    cfg.write_text(cfg.read_text().replace("interval_s = 0.5", "interval_s = 5"))
    daemon = Daemon(cfg, c.local.env)
    try:
        fill = [int(submit(c, "--gres=gpu:4", seconds=300).stdout.strip()) for _ in range(2)]
        for job in fill:
            c.wait_state(job, "RUNNING", timeout_s=GRACE_S - 5)
        mine = [int(submit(c, "--gres=gpu:4", seconds=30).stdout.strip()) for _ in range(2)]
        cycles = daemon.cycles()
        c.wait_for(lambda: daemon.cycles() > cycles, 15, "a cycle: ordered and leased")
        later = [int(submit(c, *opts).stdout.strip().split(";")[0]) for opts in (
            ("--array=0", "--gres=gpu:4"), ("-p", "gpu,all", "--gres=gpu:4"))]
        cycles = daemon.cycles()
        c.wait_for(lambda: daemon.cycles() > cycles, 15, "a cycle that sees them")
        c.run("scancel", *map(str, fill))
        for job in mine:
            c.wait_state(job, "RUNNING", timeout_s=15)
        time.sleep(2)
        assert all(c.job(job).is_pending for job in later), [c.job(j) for j in later]
        releases = [d for job in mine for d in decisions(cfg, job) if d["kind"] == "Release"]
        assert releases and all(d["plugin"] == "queue" for d in releases), releases
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_a_hetjob_is_left_to_slurm_at_once(gated, cfg_path):
    """Each component was decided as its own job: the write to the first refused every
    cycle, the job waiting the whole grace. Now it is released at once, never pinned."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        proc = c.run("sbatch", "--parsable", f"--chdir={c.local.root}/out",
                     f"--output={c.local.root}/out/%j.out", "--gres=gpu:1", ":",
                     "--gres=gpu:1", "--wrap", "sleep 2")
        job = int(proc.stdout.strip().split("+")[0])
        t0 = time.monotonic()
        ended(c, job, GRACE_S - 5)
        assert time.monotonic() - t0 < GRACE_S - 5
        rows = decisions(cfg_path, job) + decisions(cfg_path, job + 1)
        assert {r["kind"] for r in rows} <= {"Release"}, rows
        assert all(r["status"] in ("ok", "skipped") for r in rows), rows
        assert "heterogeneous" in explain(c, cfg_path, job)
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_held_jobs_get_no_write_until_released(gated, cfg_path):
    """A held job (`--hold`, `scontrol hold`, or Slurm's own launch-failure hold) got a
    start time written every cycle, refused or outliving the hold. Now nothing is written
    to it; released, it runs as under Slurm alone, with its GPUs."""
    c = gated
    daemon = Daemon(cfg_path, c.local.env)
    try:
        held = int(submit(c, "--hold", "--gres=gpu:2").stdout.strip())
        array = int(submit(c, "--hold", "--array=0-1", "--gres=gpu:1").stdout.strip())
        time.sleep(4)
        assert c.job(held).is_pending and c.job(held).priority == 0
        rows = decisions(cfg_path, held)
        assert [r["status"] for r in rows] == ["skipped"] and "held" in rows[0]["reason"]
        assert not [r for r in decisions(cfg_path, array) if r["status"] != "skipped"]
        assert "held by Slurm" in explain(c, cfg_path, held)
        c.run("scontrol", "release", str(held))
        done = ended(c, held, GRACE_S + 20)
        assert done.state.value == "COMPLETED" and gpus_seen(c, held) == 2
        refused = [r for r in decisions(cfg_path, held) if r["status"] == "refused"]
        assert not refused, refused
    finally:
        assert daemon.stop() == 0, daemon.output()


def test_a_narrowing_left_never_runnable_is_given_back(gated, cfg_path):
    """A --cpus-per-gpu job narrowed to one GPU group (as the agent did before this issue;
    any narrowing Slurm turns down the same way) stays BadConstraints with priority 0 on
    22.05 and 24.11 (26.05 runs it), pending forever. The agent finds it and gives it a request back in
    one update: its user's own where Slurm takes it (24.11+), else spread over the node's
    GPU groups (22.05): it runs with its 2 GPUs, and explain says why."""
    c = gated
    job = int(submit(c, "--cpus-per-gpu=4", "--gres=gpu:2").stdout.strip())
    c.run("scontrol", "update", f"jobid={job}", "TresPerNode=", "TresPerJob=gres:gpu:s0:2",
          "NumNodes=1-1", "ReqNodeList=n1")
    c.run("scontrol", "update", f"jobid={job}", "StartTime=now")
    deadline = time.time() + 10
    while time.time() < deadline and (j := c.job(job)).pending_reason != "BadConstraints" \
            and j.is_pending:
        time.sleep(0.5)
    was_stuck = c.job(job).pending_reason == "BadConstraints"
    if SLURM_VERSION in (None, "24.11"):   # stuck on both (measured); 26.05 runs it
        assert was_stuck, c.job(job)
    daemon = Daemon(cfg_path, c.local.env)
    try:
        try:
            done = ended(c, job, 30)
        except AssertionError:
            raise AssertionError(c.run("scontrol", "show", "job", str(job)).stdout
                                 + daemon.output()[-3000:]) from None
        assert done.state.value == "COMPLETED" and gpus_seen(c, job) == 2, report(c, job)
        if was_stuck:
            assert "never narrowed again" in explain(c, cfg_path, job)
            # 22.05 refuses the user's untyped request back and takes the spread form;
            # 24.11+ takes the user's own
            given = ("widened back to TresPerJob= TresPerNode=gres:gpu:s0:1,gres:gpu:s1:1"
                     if SLURM_VERSION is None else
                     "its user's request restored: TresPerJob= TresPerNode=gres:gpu:2")
            assert given in daemon.output(), daemon.output()[-3000:]
    finally:
        assert daemon.stop() == 0, daemon.output()
