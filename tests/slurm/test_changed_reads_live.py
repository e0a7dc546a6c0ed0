"""Reading only what changed, on real Slurm: after each change an admin, a user, Slurm
itself or the agent makes, a snapshot read by changes (``full_read_s``) holds the same
records as a full read. From 24.11 on most snapshots read only the changed records; 22.05,
whose ``squeue --json`` ignores filters, reads everything every time.

The two reads are a moment apart and Slurm may change in between (a job starts): a pair
that differs is read again, a few times; a record the changed read keeps stale differs
every time."""

from __future__ import annotations

import time

from slurm_marl.slurm_integration.source import CliClusterSource


def _by_id(snap):
    return {j.job_id: j for j in snap.jobs}, {n.name: n for n in snap.nodes}


def _same(changed: CliClusterSource, full: CliClusterSource, what: str) -> str:
    for _ in range(6):
        a_jobs, a_nodes = _by_id(changed.snapshot())
        mode = changed.last_read["mode"]
        b_jobs, b_nodes = _by_id(full.snapshot())
        if (a_jobs, a_nodes) == (b_jobs, b_nodes):
            return mode
        time.sleep(0.5)
    diff = [f"job {k}: {a_jobs.get(k)} != {b_jobs.get(k)}" for k in set(a_jobs) | set(b_jobs)
            if a_jobs.get(k) != b_jobs.get(k)]
    diff += [f"node {k}: {a_nodes.get(k)} != {b_nodes.get(k)}"
             for k in set(a_nodes) | set(b_nodes) if a_nodes.get(k) != b_nodes.get(k)]
    raise AssertionError(f"after {what}: " + "\n".join(diff[:4]))


def test_a_snapshot_read_by_changes_equals_a_full_read_after_each_change(clean):
    c = clean
    changed = CliClusterSource(c.runner, full_read_s=3600)
    full = CliClusterSource(c.runner)
    run1 = c.sbatch("--gres=gpu:1", "-J", "a|b c", "--comment", "x|y", gated=False)
    run2 = c.sbatch("--gres=gpu:2", "-w", "n2", gated=False)
    wait = c.sbatch("--gres=gpu:1")                 # waits (begin time, as gated)
    held = c.sbatch("--gres=gpu:4", "-N", "2")
    # an array whose tasks wait (one record for the rest) and one whose tasks run: the
    # text listing and the JSON must name them by the same ids
    c.sbatch("--gres=gpu:1", "--array=1-4")
    c.sbatch("--gres=gpu:1", "--array=1-2", gated=False)
    c.wait_state(run1, "RUNNING")
    c.wait_state(run2, "RUNNING")
    modes = [_same(changed, full, "start"), _same(changed, full, "start (kept)")]
    steps = [
        ("a priority set", lambda: c.run("scontrol", "update", f"jobid={wait}",
                                         "priority=777")),
        ("a time limit changed", lambda: c.run("scontrol", "update", f"jobid={run1}",
                                               "timelimit=50")),
        ("a hold", lambda: c.run("scontrol", "hold", str(held))),
        ("a node drained", lambda: c.run("scontrol", "update", "nodename=n4",
                                         "state=drain", "reason=test")),
        ("a node resumed", lambda: c.run("scontrol", "update", "nodename=n4",
                                         "state=resume")),
        ("a job cancelled", lambda: c.run("scancel", str(run2))),
        ("a requeue", lambda: c.run("scontrol", "requeue", str(run1))),
        ("a start", lambda: c.run("scontrol", "update", f"jobid={wait}", "StartTime=now")),
    ]
    for what, step in steps:
        step()
        time.sleep(1.0)
        modes.append(_same(changed, full, what))
    # the agent's own write of a field squeue's text does not show, named by the sink
    c.run("scontrol", "update", f"jobid={held}", "admincomment=slurm-marl-test")
    changed.invalidate([held])
    modes.append(_same(changed, full, "an AdminComment written"))
    assert {j.job_id: j for j in changed.snapshot().jobs}[held].admin_comment \
        == "slurm-marl-test"
    if changed.layout.reads_by_id:
        # one full read at start: the layout came from scontrol --version before it
        assert modes[:2] == ["full", "changes"], modes
        assert modes.count("changes") >= len(steps), modes
        # changed jobs are read one per call when few against those listed; one Slurm no
        # longer knows (purged since the listing) is left out: a call for it alone fails
        # with "Invalid job id specified"
        jobs, _ = changed._jobs_by_id([held, 999_999], listed=10**6)
        assert [j.job_id for j in jobs] == [held]
        assert jobs[0] == _by_id(full.snapshot())[0][held]
    else:
        assert set(modes) == {"full"}, modes
