"""Same as Slurm alone, proven differentially, for what users and admins ask of Slurm after
submission or beside the GPU request: a reservation, per-job GPUs with more tasks than one
node holds, a begin time set or moved later (also while held, also by a partition move),
a begin brought forward, ``--nice``, ``scontrol top`` and a move out of a managed
partition. The same checks run once on a cluster with Slurm alone and once with the gate
installed and the agent running (``las-consolidate``), and each must end the same way:
the job's state, the GPUs it saw from inside, where it ran when that is asked, whether it
started before its begin time, the order jobs of one queue started in, and whether Slurm
took a user's update.

Jobs whose user acts on them are submitted as ``nobody`` (the gate treats root apart).
Each outcome is read with a timeout; a job still waiting at its timeout reads as
"PENDING", so a job stuck for good shows up as a difference, not as a hang.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurmtest import Cluster, as_nobody, checks_alone, checks_with_agent

pytestmark = pytest.mark.slurm
GRACE_S = 20
SCRIPT = ("echo START=$(date +%s.%N); echo CVD=$CUDA_VISIBLE_DEVICES; "
          "echo HOST=$SLURMD_NODENAME; sleep {s}")
# 5 nodes x 2 sockets x 4 cores x 2 GPUs (8 CPUs, 4 GPUs a node); `all` (not managed) over
# every node, as a site's catch-all partition
SPEC = dict(nodes=5, cred_expire_s=5, extra_partitions=(("all", (1, 2, 3, 4, 5)),))
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def submit(c: Cluster, *opts: str, seconds: float = 2, user: str = "root") -> int:
    args = ("sbatch", "--parsable", f"--chdir={c.local.root}/out",
            f"--output={c.local.root}/out/%j.out", *opts, "--wrap", SCRIPT.format(s=seconds))
    proc = as_nobody(c, *args) if user == "nobody" else c.run(*args, check=False)
    assert proc.returncode == 0, (opts, proc.stderr)
    return int(proc.stdout.strip().split(";")[0])


def seen(c: Cluster, job_id: int) -> dict[str, str]:
    path = Path(c.local.root) / "out" / f"{job_id}.out"
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def outcome(c: Cluster, job_id: int, timeout_s: float) -> tuple[str, float | None]:
    """(final state, when it started, as the job itself saw it) within ``timeout_s``;
    ("PENDING", None) if it never ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        j = c.job(job_id)
        if j is not None and j.state.value in ENDED:
            start = seen(c, job_id).get("START")
            return j.state.value, float(start) if start else None
        time.sleep(0.3)
    j = c.job(job_id)
    return (j.state.value if j is not None else "GONE"), None


def gpus(c: Cluster, job_id: int) -> int:
    return len([g for g in seen(c, job_id).get("CVD", "").split(",") if g.strip()])


def started_in_order(c: Cluster, jobs: list[int], timeout_s: float) -> list[int]:
    """The jobs in the order they started (those that never ended last, by id)."""
    starts = {j: outcome(c, j, timeout_s)[1] for j in jobs}
    return sorted(jobs, key=lambda j: (starts[j] is None, starts[j] or 0.0, j))


def run_checks(c: Cluster) -> dict[str, object]:
    """Every check's jobs, side by side: n1, n2 and n3 each busy for a while with a job
    holding all their GPUs, so that the jobs asked to wait there do wait; n4 free; n5 in a
    user's reservation."""
    c.cancel_all()
    (Path(c.local.root) / "out").chmod(0o777)
    out: dict[str, object] = {}
    blockers = [submit(c, "-w", n, "--gres=gpu:4", seconds=16) for n in ("n1", "n2", "n3")]
    for b in blockers:
        c.wait_state(b, "RUNNING", timeout_s=GRACE_S + 15)

    # a reservation on n5 (for root: Slurm 26.05's chroot knows no user nobody there):
    # Slurm runs its job there at once
    c.run("scontrol", "create", "reservation", "ReservationName=r1", "StartTime=now",
          "Duration=10", "Users=root", "Nodes=n5", "Flags=IGNORE_JOBS")
    resv = submit(c, "-t2", "--reservation=r1", "--gres=gpu:1")
    # per-job GPUs with more tasks than one node has CPUs: Slurm spreads them over nodes
    spread = submit(c, "-t2", "--gpus=2", "-n10")
    # begin times a user sets after submission, on n3 while it is busy: later, and later
    # while held; a later begin kept across a move into the managed partition; a begin
    # brought forward; a gated job moved out of the managed partition while held
    t0 = time.time()
    later = submit(c, "-t2", "-w", "n3", "--gres=gpu:1", user="nobody")
    held = submit(c, "-t2", "-w", "n3", "--hold", "--gres=gpu:1", user="nobody")
    moved_in = submit(c, "-t2", "-p", "all", f"--begin=now+{GRACE_S + 25}", "--gres=gpu:1",
                      user="nobody")
    forward = submit(c, "-t2", "--begin=now+300", "--gres=gpu:1", user="nobody")
    moved_out = submit(c, "-t2", "--hold", "--gres=gpu:1", user="nobody")
    # the order asked for, behind the blockers: --nice on n1 (the niced job submitted
    # first), scontrol top on n2 (on the third of three)
    niced = [submit(c, "-w", "n1", "--gres=gpu:4", "--nice=1000")]
    niced += [submit(c, "-w", "n1", "--gres=gpu:4") for _ in range(2)]
    topped = [submit(c, "-w", "n2", "--gres=gpu:4") for _ in range(3)]
    time.sleep(2)
    out["top (rc)"] = c.run("scontrol", "top", str(topped[2]), check=False).returncode
    begin_later = time.time() + GRACE_S + 15
    asked = {
        "later": as_nobody(c, "scontrol", "update", f"JobId={later}",
                           f"StartTime=now+{GRACE_S + 15}").returncode,
        "held": as_nobody(c, "scontrol", "update", f"JobId={held}",
                          f"StartTime=now+{GRACE_S + 15}").returncode,
        "moved in": as_nobody(c, "scontrol", "update", f"JobId={moved_in}",
                              "Partition=gpu").returncode,
        "forward": as_nobody(c, "scontrol", "update", f"JobId={forward}",
                             "StartTime=now").returncode,
        "moved out": as_nobody(c, "scontrol", "update", f"JobId={moved_out}",
                               "Partition=all").returncode,
    }
    out["updates taken (rc)"] = asked
    as_nobody(c, "scontrol", "release", str(held))
    t_moved_out = time.time()
    as_nobody(c, "scontrol", "release", str(moved_out))

    state, start = outcome(c, resv, 40)
    out["reservation"] = (state, gpus(c, resv), seen(c, resv).get("HOST"))
    state, start = outcome(c, spread, 40)
    out["--gpus=2 -n10"] = (state, gpus(c, spread) > 0)
    for name, job in (("later", later), ("held", held)):
        state, start = outcome(c, job, GRACE_S + 60)
        out[f"begin {name}"] = (state, start is not None and start >= begin_later - 2)
    state, start = outcome(c, moved_in, GRACE_S + 60)
    out["begin kept by a move in"] = (state, start is not None and start >= t0 + GRACE_S + 23)
    state, start = outcome(c, forward, 40)
    out["begin forward"] = state
    state, start = outcome(c, moved_out, 40)
    out["moved out: starts at once"] = (state, start is not None
                                        and start < t_moved_out + GRACE_S / 2)
    out["--nice: order"] = [niced.index(j) for j in started_in_order(c, niced, 60)]
    out["top: order"] = [topped.index(j) for j in started_in_order(c, topped, 60)]
    c.run("scancel", "--quiet", "--user", "nobody", check=False)
    c.cancel_all()
    return out


@pytest.fixture(scope="module")
def alone():
    return checks_alone(run_checks, sched_interval_s=2, **SPEC)


@pytest.fixture(scope="module")
def with_agent(tmp_path_factory):
    with checks_with_agent(run_checks, tmp_path_factory.mktemp("agent"), GRACE_S,
                           **SPEC) as outcome:
        yield outcome


def test_what_users_ask_ends_as_under_slurm_alone(alone, with_agent):
    agent, daemon = with_agent
    assert alone.keys() == agent.keys()
    differ = {k: (alone[k], agent[k]) for k in alone if alone[k] != agent[k]}
    assert not differ, "\n".join([f"{k}: alone {a!r}, with the agent {b!r}"
                                   for k, (a, b) in differ.items()] + [daemon.decisions()])
    # and the checks check something: what Slurm alone gave
    assert alone["reservation"] == ("COMPLETED", 1, "n5")
    assert alone["--gpus=2 -n10"] == ("COMPLETED", True)
    assert alone["begin later"] == alone["begin held"] == ("COMPLETED", True)
    assert alone["begin kept by a move in"] == ("COMPLETED", True)
    assert alone["begin forward"] == "COMPLETED"
    assert alone["moved out: starts at once"] == ("COMPLETED", True)
    assert set(alone["updates taken (rc)"].values()) == {0}
    assert alone["--nice: order"] == [1, 2, 0]
    assert alone["top: order"] == [2, 0, 1] and alone["top (rc)"] == 0
