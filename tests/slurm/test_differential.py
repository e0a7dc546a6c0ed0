"""Same as Slurm alone, proven differentially: one set of user-visible checks runs on a
cluster with Slurm alone and on a cluster with the gate installed and the agent running
(`las-consolidate`, the default profile), and each check must end the same way.

What a check compares is what a user sees and Slurm alone decides whatever the load: the
job's final state, the GPUs it saw from inside (``CUDA_VISIBLE_DEVICES``), how many nodes it
ran on, whether it started before a begin time or a dependency allowed, how many tasks of a
throttled array ran at once, what a held job did while held. Not compared: when exactly a
job started (the agent's whole purpose is to change the order), within those bounds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurmtest import Cluster, checks_alone, checks_with_agent


pytestmark = pytest.mark.slurm
GRACE_S = 20
BEGIN_S = 25
SCRIPT = ("echo START=$(date +%s.%N); echo CVD=$CUDA_VISIBLE_DEVICES; echo HOST=$SLURMD_NODENAME; "
          "sleep {s}; echo END=$(date +%s.%N); exit {rc}")
SPEC = dict(nodes=3, sched_interval_s=2, cred_expire_s=5)


def sbatch(c: Cluster, *opts: str, seconds: float = 2, rc: int = 0, out: str = "%j") -> int:
    proc = c.run("sbatch", "--parsable", f"--chdir={c.local.root}/out",
                 f"--output={c.local.root}/out/{out}.out", *opts,
                 "--wrap", SCRIPT.format(s=seconds, rc=rc))
    return int(proc.stdout.strip().split(";")[0].split("+")[0])


def output(c: Cluster, name: str) -> dict[str, str]:
    path = Path(c.local.root) / "out" / f"{name}.out"
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def gpus(c: Cluster, name: str) -> int:
    return len([g for g in output(c, name).get("CVD", "").split(",") if g.strip()])


def final(c: Cluster, job_id: int, timeout_s: float = 90):
    return c.wait_for(lambda: (j := c.job(job_id)) is not None
                      and j.state.value in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
                      and j, timeout_s, f"job {job_id} to end")


def run_checks(c: Cluster) -> dict[str, object]:
    """Submit every check's jobs at once (3 nodes x 4 GPUs: room for all), then read each
    one's outcome."""
    c.cancel_all()
    t0 = time.time()
    jobs = {
        "cpus-per-gpu": sbatch(c, "--cpus-per-gpu=2", "--gres=gpu:2"),
        "mem-per-gpu": sbatch(c, "--mem-per-gpu=100", "--gres=gpu:1"),
        "gpus-per-job": sbatch(c, "--gpus=2"),
        "two-nodes": sbatch(c, "-N2", "--gres=gpu:1"),
        "named-node": sbatch(c, "-w", "n3", "--gres=gpu:1"),
        "exclusive": sbatch(c, "--exclusive", "--gres=gpu:1"),
        "begin": sbatch(c, f"--begin=now+{BEGIN_S}", "--gres=gpu:1"),
        "held": sbatch(c, "--hold", "--gres=gpu:1"),
        "first": sbatch(c, "--gres=gpu:1", seconds=4),
        "failing": sbatch(c, "--gres=gpu:1", rc=3),
        "hetjob": int(c.run("sbatch", "--parsable", f"--chdir={c.local.root}/out",
                            f"--output={c.local.root}/out/%j.out", "--gres=gpu:1", ":",
                            "--gres=gpu:1", "--wrap", SCRIPT.format(s=2, rc=0)
                            ).stdout.strip().split("+")[0]),
        "requeued": sbatch(c, "--gres=gpu:2", seconds=8),
    }
    jobs["after-ok"] = sbatch(c, f"--dependency=afterok:{jobs['first']}", "--gres=gpu:1")
    jobs["never"] = sbatch(c, f"--dependency=afterok:{jobs['failing']}", "--gres=gpu:1")
    array = sbatch(c, "--array=0-3%2", "--gres=gpu:1", seconds=3, out="%A_%a")
    out: dict[str, object] = {}

    # a held job stays pending while held, then runs with its GPU once released
    time.sleep(4)
    held = c.job(jobs["held"])
    out["held: while held"] = (held.state.value, held.priority == 0)
    c.run("scontrol", "release", str(jobs["held"]))
    # requeued once while running: runs again, with the same GPUs on one node
    c.wait_state(jobs["requeued"], "RUNNING", timeout_s=GRACE_S + 30)
    c.run("scontrol", "requeue", str(jobs["requeued"]))

    for name, job_id in jobs.items():
        if name == "never":
            continue
        j = final(c, job_id)
        out[name] = (j.state.value, gpus(c, str(job_id)), len(j.nodes))
    out["requeued: runs"] = c.job(jobs["requeued"]).restart_count
    first_end = float(output(c, str(jobs["first"]))["END"])
    out["after-ok: after its dependency"] = \
        float(output(c, str(jobs["after-ok"]))["START"]) >= first_end - 0.5
    out["begin: not before"] = float(output(c, str(jobs["begin"]))["START"]) >= t0 + BEGIN_S - 1
    out["named-node: where"] = output(c, str(jobs["named-node"])).get("HOST")
    never = c.job(jobs["never"])
    out["never"] = (never.state.value, "Dependency" in never.pending_reason)
    # a throttled array: every task runs with one GPU, never more than 2 at once
    c.wait_for(lambda: all("END" in output(c, f"{array}_{i}") for i in range(4)), 90,
               "every array task to end")
    tasks = [output(c, f"{array}_{i}") for i in range(4)]
    spans = [(float(t["START"]), float(t["END"])) for t in tasks]
    most = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
    out["array"] = ([gpus(c, f"{array}_{i}") for i in range(4)], most <= 2)
    c.cancel_all()
    return out


@pytest.fixture(scope="module")
def alone():
    return checks_alone(run_checks, **SPEC)


@pytest.fixture(scope="module")
def with_agent(tmp_path_factory):
    with checks_with_agent(run_checks, tmp_path_factory.mktemp("agent"), GRACE_S,
                           **{k: v for k, v in SPEC.items() if k != "sched_interval_s"}
                           ) as (outcome, _):
        yield outcome


def test_every_check_ends_as_under_slurm_alone(alone, with_agent):
    assert alone.keys() == with_agent.keys()
    differ = {k: (alone[k], with_agent[k]) for k in alone if alone[k] != with_agent[k]}
    assert not differ, differ
    # and the checks check something: what Slurm alone gave
    assert alone["cpus-per-gpu"] == ("COMPLETED", 2, 1)
    assert alone["two-nodes"] == ("COMPLETED", 1, 2)
    assert alone["held: while held"] == ("PENDING", True)
    assert alone["never"] == ("PENDING", True) and alone["failing"][0] == "FAILED"
    assert alone["array"] == ([1, 1, 1, 1], True) and alone["requeued: runs"] == 1
    assert alone["begin: not before"] and alone["after-ok: after its dependency"]
    assert alone["named-node: where"] == "n3"
