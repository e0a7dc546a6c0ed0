"""``scontrol show job -d -o`` text as the JSON record (Slurm 22.05's changed-job reads):
the values, and the lines a user's free text could have forged. Lines as 22.05.8 prints
them (recorded on the test cluster); the real-Slurm comparison with ``squeue --json`` is
tests/slurm/test_changed_reads_live.py."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from slurm_marl.domain import JobState
from slurm_marl.slurm_integration.parse import job_from_json
from slurm_marl.slurm_integration.parse_job_text import (INFINITE_END_S, JobTextError,
                                                         job_raw_from_scontrol)

HEAD = ("JobId=7 JobName={name} UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A "
        "Priority=4294901759 Nice=0 Account=proj QOS=normal JobState={state} Reason=None "
        "Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:0 "
        "DerivedExitCode=0:0 RunTime=00:00:05 TimeLimit={limit} TimeMin=N/A "
        "SubmitTime=2026-11-27T16:50:11 EligibleTime=2026-11-27T16:50:11 "
        "AccrueTime=2026-11-27T16:50:11 StartTime={start} EndTime={end} Deadline=N/A "
        "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-27T16:50:11 Scheduler=Main "
        "Partition=gpu AllocNode:Sid=localhost:1194 ReqNodeList={req} ExcNodeList=(null) "
        "NodeList={nodes} BatchHost=n1 NumNodes={count} NumCPUs=4 NumTasks=1 CPUs/Task=1 "
        "ReqB:S:C:T=0:0:*:* TRES=cpu=4,mem=2000M,node=2,billing=4 Socks/Node=* "
        "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* {detail}MinCPUsNode=1 MinMemoryCPU=500M "
        "MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 "
        "Licenses=(null) Network=(null) Command=(null) WorkDir={workdir} {comments}"
        "StdErr=/tmp/o StdIn=/dev/null StdOut=/tmp/o Power= CpusPerTres=gres:gpu:2 "
        "TresPerNode=gres:gpu:s1:2 ")
RUNNING = dict(name="train big", state="RUNNING", limit="1-02:03:00",
               start="2026-11-27T16:50:12", end="2026-11-28T18:53:12", req="n[1-2]",
               nodes="n[1-2]", count="2",
               detail=("JOB_GRES=gpu:s1:4   Nodes=n[1-2] CPU_IDs=4-5 Mem=1000 "
                       "GRES=gpu:s1:2(IDX:2-3) "),
               workdir="/home/alice/run 1",
               comments="AdminComment=slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=;beg=  "
                        "Comment=lr=0.1 bs=64  ")


def line(**kw) -> str:
    return HEAD.format(**{**RUNNING, **kw})


def epoch(text: str) -> int:
    return int(time.mktime(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timetuple()))


def test_a_running_two_node_job():
    raw = job_raw_from_scontrol(line())
    job, problems = job_from_json(raw)
    assert problems == []
    assert (job.job_id, job.name, job.user, job.account, job.qos) == \
        (7, "train big", "alice", "proj", "normal")
    assert job.state is JobState.RUNNING and job.restart_count == 2
    assert job.gpus_per_node == 2 and job.gpu_type == "s1" and job.node_count == 2
    assert job.nodes == ("n1", "n2") and job.required_nodes == ("n1", "n2")
    assert job.gpu_alloc == (("n1", (2, 3)), ("n2", (2, 3)))
    assert job.time_limit_s == (26 * 60 + 3) * 60
    assert job.start_time_s == epoch("2026-11-27T16:50:12")
    assert job.end_time_s == epoch("2026-11-28T18:53:12")
    assert job.mem_mib == 4 * 500 and job.cpus == 4 and job.cpus_per_gpu == 2
    assert job.admin_comment == "slurm-marl:v1;tpn=gres:gpu:2;tpj=;req=;beg="
    assert job.comment == "lr=0.1 bs=64"       # free text: spaces and '=' of its own
    assert job.left_to_slurm == ""


def test_a_pending_job_and_one_without_a_time_limit():
    pending = job_raw_from_scontrol(line(state="PENDING", start="Unknown", end="Unknown",
                                         nodes="", count="1-1", detail="", limit="30"))
    assert pending["nodes"] == "" and pending["gres_detail"] == []
    assert pending["node_count"] == 1 and pending["time_limit"] == 30
    job, _ = job_from_json(pending)
    assert job.state is JobState.PENDING and job.start_time_s is None
    # running without a limit: Slurm's JSON end time is a year after the start
    running = job_raw_from_scontrol(line(limit="UNLIMITED", end="Unknown"))
    assert running["time_limit"] is None
    assert running["end_time"] == epoch("2026-11-27T16:50:12") + INFINITE_END_S


@pytest.mark.parametrize("limit,minutes", [("5", 5), ("05:00", 5), ("05:30", 6),
                                           ("02:00:00", 120), ("1-00:00:00", 1440),
                                           ("2-03", 2 * 1440 + 180), ("UNLIMITED", None)])
def test_time_limits(limit, minutes):
    assert job_raw_from_scontrol(line(limit=limit))["time_limit"] == minutes


def test_an_ended_job_keeps_no_gres_detail():
    raw = job_raw_from_scontrol(line(state="CANCELLED",
                                     detail="JOB_GRES=(null)   Nodes=n[1-2] CPU_IDs=4-5 "
                                            "Mem=1000 GRES= "))
    assert raw["gres_detail"] == []


@pytest.mark.parametrize("forged,why", [
    # a name that holds a key Slurm always prints: the key twice
    (dict(name="x UserId=root(0) Priority=1"), "twice"),
    # a name that holds a key Slurm prints later: out of order
    (dict(name="x TresPerNode=gres:gpu:8"), "order"),
    # a working directory that holds a key Slurm prints before it
    (dict(workdir="/tmp/x Partition=big"), "twice"),
    # a comment that holds a key that follows it
    (dict(comments="Comment=x StdErr=/tmp/e  "), "twice"),
    # a comment that holds an allocation group (they may repeat, but only after JOB_GRES)
    (dict(comments="Comment=x Nodes=n1 CPU_IDs=0 Mem=1 GRES=gpu:s0:9(IDX:0-8)  "), "order"),
])
def test_lines_a_free_text_could_have_forged_are_refused(forged, why):
    with pytest.raises(JobTextError, match=why):
        job_raw_from_scontrol(line(**forged))


def test_a_key_this_reader_does_not_know_is_no_silent_value():
    """An unknown key glued to a value that holds no spaces: refused, never read into it."""
    with pytest.raises(JobTextError, match="space"):
        job_raw_from_scontrol(line().replace("Reboot=0", "Reboot=0 NewKey22=1"))


def test_a_forged_admin_comment_in_a_working_directory_is_read_as_such():
    """What the parser cannot tell apart: a working directory holding `` AdminComment=``
    on a job without one. The source trusts a text record's AdminComment only where it
    equals the one it knew or the agent's own write (``CliClusterSource._jobs_as_text``)."""
    raw = job_raw_from_scontrol(line(workdir="/tmp/x AdminComment=slurm-marl:v1;tpn=gres:gpu:8",
                                     comments=""))
    assert raw["admin_comment"] == "slurm-marl:v1;tpn=gres:gpu:8"


@pytest.mark.parametrize("bad", ["", "JobName=x UserId=a(1)", "JobId=x JobName=a UserId=b",
                                 line(start="yesterday")])
def test_what_is_not_a_job_line(bad):
    with pytest.raises(JobTextError):
        job_raw_from_scontrol(bad)


@pytest.mark.parametrize("wall,certain", [("2026-10-25T02:30:00", False),   # repeated hour
                                          ("2026-03-29T02:30:00", False),   # skipped hour
                                          ("2026-10-25T04:30:00", True)])
def test_a_wall_time_a_clock_change_makes_ambiguous_is_not_read(monkeypatch, wall, certain):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        if certain:
            assert job_raw_from_scontrol(line(start=wall))["start_time"] == epoch(wall)
        else:
            with pytest.raises(JobTextError, match="one instant"):
                job_raw_from_scontrol(line(start=wall))
    finally:
        monkeypatch.undo()
        time.tzset()


def test_memory_sizes():
    assert job_raw_from_scontrol(line().replace("MinMemoryCPU=500M", "MinMemoryCPU=2G")
                                 )["memory_per_cpu"] == 2048
    # a rounded size is not the exact MiB the JSON holds
    with pytest.raises(JobTextError, match="memory"):
        job_raw_from_scontrol(line().replace("MinMemoryCPU=500M", "MinMemoryCPU=15.62G"))


@pytest.mark.parametrize("nice", [0, 1000, -2048])
def test_nice_as_the_json_has_it(nice):
    raw = job_raw_from_scontrol(line().replace("Nice=0", f"Nice={nice}"))
    assert raw["nice"] == nice and job_from_json(raw)[0].nice == nice
