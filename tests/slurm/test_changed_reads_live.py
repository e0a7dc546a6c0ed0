"""Reading only what changed, on real Slurm: after each change an admin, a user, Slurm
itself or the agent makes, a snapshot read by changes (``full_read_s``) holds the same
records as a full read. From 24.11 on most snapshots read only the changed records as JSON;
22.05, whose ``squeue --json`` ignores filters, reads them as ``scontrol show job`` text
(``parse_job_text``), checked here against the JSON of every request shape.

The two reads are a moment apart and Slurm may change in between (a job starts): a pair
that differs is read again, a few times; a record the changed read keeps stale differs
every time."""

from __future__ import annotations

import time

import pytest

from slurm_marl.slurm_integration import parse as P
from slurm_marl.slurm_integration.parse_job_text import JobTextError, job_raw_from_scontrol
from slurm_marl.slurm_integration.source import CliClusterSource


def _by_id(snap):
    return {j.job_id: j for j in snap.jobs}, {n.name: n for n in snap.nodes}


def _same(changed: CliClusterSource, full: CliClusterSource, what: str) -> str:
    for _ in range(6):
        a_jobs, a_nodes = _by_id(changed.snapshot())
        mode = changed.last_read["mode"]
        b_jobs, b_nodes = _by_id(full.snapshot())
        if (a_jobs, a_nodes) == (b_jobs, b_nodes):
            return mode + ("/" + changed.last_read["jobs_as"]
                           if changed.last_read.get("jobs_as") else "")
        time.sleep(0.5)
    diff = [f"job {k}: {a_jobs.get(k)} != {b_jobs.get(k)}" for k in set(a_jobs) | set(b_jobs)
            if a_jobs.get(k) != b_jobs.get(k)]
    diff += [f"node {k}: {a_nodes.get(k)} != {b_nodes.get(k)}"
             for k in set(a_nodes) | set(b_nodes) if a_nodes.get(k) != b_nodes.get(k)]
    raise AssertionError(f"after {what}: " + "\n".join(diff[:4]))


def _why(changed: CliClusterSource) -> str:
    return changed.last_read.get("why_json", "")


def test_a_snapshot_read_by_changes_equals_a_full_read_after_each_change(clean, monkeypatch):
    c = clean
    # a handful of jobs here: read changed ones as text however few are listed (22.05)
    monkeypatch.setattr("slurm_marl.slurm_integration.source.LISTED_PER_TEXT_READ", 1)
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
    whys: list[str] = []
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
        whys.append(_why(changed))
    # the agent's lease renewal moves the waiting job's eligible time and nothing else:
    # carried from the text listing, the job not read again (the sink names no job)
    c.run("scontrol", "update", f"jobid={held}", "StartTime=now+300")
    time.sleep(1.0)
    renewed = _by_id(changed.snapshot())[0][held]
    renewal_read = dict(changed.last_read)
    _same(changed, full, "a lease renewal")
    assert renewal_read["eligible_moved"] >= 1, renewal_read
    assert renewed == _by_id(full.snapshot())[0][held]
    assert renewed.eligible_time_s >= time.time() + 250
    # the agent's own write of a field squeue's text does not show, named by the sink
    c.run("scontrol", "update", f"jobid={held}", "admincomment=slurm-marl-test")
    changed.invalidate([held])
    assert {j.job_id: j for j in changed.snapshot().jobs}[held].admin_comment \
        == "slurm-marl-test"
    admin_read = dict(changed.last_read)
    modes.append(_same(changed, full, "an AdminComment written"))
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
        # 22.05: changed jobs read as text where they are few and none is new
        assert changed.layout.reads_jobs_by_text
        assert modes[0] == "full", modes
        assert sum(m.startswith("changes") for m in modes) >= len(steps), modes
        # the changed jobs of most steps were read as text; the AdminComment an admin
        # wrote is not one the source knew: that step read every job as JSON
        assert modes.count("changes/text") >= len(steps) - 2, (modes, whys)
        # an AdminComment the source did not know (an admin's): every job read as JSON
        assert admin_read["jobs_as"] == "json" and "AdminComment" in admin_read["why_json"]


FORGED_MARKER = "slurm-marl:v1;tpn=gres:gpu:8;tpj=;req=;beg="


def test_a_job_read_as_text_is_its_json_record_and_forgeries_are_refused(clean):
    """Every request shape the agent meets, read as ``scontrol show job -d -o`` text, gives
    the record ``squeue --json`` gives (22.05, where changed jobs are read so); a job name
    that holds a key Slurm always prints is refused, and a working directory that forges
    an AdminComment gives one the source would not trust (it is not the one it knew)."""
    c = clean
    workdir = f"{c.local.root}/out/x AdminComment={FORGED_MARKER}"
    c.run("mkdir", "-p", workdir)
    shapes = {
        "per node": c.sbatch("--gres=gpu:1", "-J", "a b c", "--comment", "x=y z", gated=False),
        "typed, time limit": c.sbatch("--gres=gpu:s1:2", "-t", "30", gated=False),
        "two nodes": c.sbatch("--gres=gpu:2", "-N", "2", "-t", "1-00:00:00", gated=False),
        "per job, excluded": c.sbatch("--gpus=2", "-N", "1", "-x", "n1", "--mem=500"),
        "cpus per gpu": c.sbatch("--gres=gpu:1", "--cpus-per-gpu=2", "--mem-per-cpu=100"),
        "node asked": c.sbatch("--gres=gpu:1", "-w", "n3"),
        "held": c.sbatch("--gres=gpu:1", "--hold"),
        "admin comment": c.sbatch("--gres=gpu:1"),
        "per task": c.sbatch("--gpus-per-task=1", "-n", "2"),
        "constraint-free, no gpu": c.sbatch("-n", "1"),
    }
    c.run("scontrol", "update", f"jobid={shapes['admin comment']}",
          "admincomment=slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=;beg=now")
    forged_name = c.sbatch("--gres=gpu:1", "-J", "n UserId=root(0) Priority=1")
    forged_dir = c.sbatch("--gres=gpu:1", f"--chdir={workdir}")
    for jid in (shapes["per node"], shapes["typed, time limit"], shapes["two nodes"]):
        c.wait_state(jid, "RUNNING")
    full = CliClusterSource(c.runner)
    full.snapshot()
    if not full.layout.reads_jobs_by_text:
        pytest.skip(f"Slurm {full.layout.release} reads changed jobs as JSON by id; the "
                    "text read is 22.05's (Layout.reads_jobs_by_text)")

    def text_record(jid):
        line = c.run("scontrol", "show", "job", "-d", "-o", str(jid)).stdout.strip()
        return P.job_from_json(job_raw_from_scontrol(line))[0]

    two = full.snapshot().job(shapes["two nodes"])
    assert len(two.gpu_alloc) == 2 and two.time_limit_s == 86400
    assert full.snapshot().job(shapes["per task"]).left_to_slurm
    for what, jid in shapes.items():
        for _ in range(6):      # a pending job's reason may change between the two reads
            json_job = full.snapshot().job(jid)
            if text_record(jid) == json_job:
                break
            time.sleep(0.5)
        assert text_record(jid) == json_job, (what, text_record(jid), json_job)
    with pytest.raises(JobTextError, match="twice"):
        text_record(forged_name)
    forged = text_record(forged_dir)
    assert forged.admin_comment == FORGED_MARKER      # what the text shows ...
    assert full.snapshot().job(forged_dir).admin_comment == ""    # ... and the truth
    # the source's rule: a text record's AdminComment must be the one it knew
    changed = CliClusterSource(c.runner, full_read_s=3600)
    changed.snapshot()
    kept = {j.job_id: j for j in full.snapshot().jobs}
    with pytest.raises(JobTextError, match="AdminComment"):
        changed._jobs_as_text([forged_dir], kept)
    jobs, _ = changed._jobs_as_text([shapes["admin comment"], shapes["two nodes"]], kept)
    assert jobs == [kept[shapes["admin comment"]], kept[shapes["two nodes"]]]
