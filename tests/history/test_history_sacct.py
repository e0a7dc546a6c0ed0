"""sacct output -> history, on output recorded from the local 22.05 cluster with slurmdbd.

The recording (tests/data/slurm/sacct_22.05.{json,txt}): jobs 1 (2 GPUs, 3 s), 2 (typed
gpu:s1:1, 1-day limit), 3 (no GPU), 4_0/4_1 (array), 5 (2 nodes x 1 GPU), 6 (failed at
once), 8 (still running), 9 (cancelled while running).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_marl.history import sacct
from slurm_marl.history_cli import read_file
from slurm_marl.history.fetch import slices
from slurm_marl.history.records import HistoryError, read_history, write_history
from slurm_marl.sim.history_trace import to_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.fixture
def utc(monkeypatch):
    """The text recording's ISO times are the recording machine's local time: UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def by_id(imp: sacct.Import) -> dict:
    return {j.job_id: j for j in imp.jobs}


def test_json_reads_every_finished_gpu_job():
    imp = sacct.from_json(json.loads((DATA / "sacct_22.05.json").read_text()))
    jobs = by_id(imp)
    assert sorted(jobs) == ["1", "2", "4_0", "4_1", "5", "6", "9"]
    assert imp.skipped == {"no GPUs": 1, "not ended": 1}
    assert imp.bad == []
    assert imp.rows == 9
    one = jobs["1"]
    assert (one.name, one.user, one.account, one.partition, one.qos) == \
        ("resnet50-lr0.1", "root", "root", "gpu", "normal")
    assert one.gpus == 2 and one.nodes == 1 and one.time_limit_s == 600
    assert one.ran_s == 3 and one.gpu_time_s == 6 and one.state == "COMPLETED"
    assert jobs["2"].time_limit_s == 86400 and jobs["2"].gpus == 1
    assert jobs["5"].gpus == 2 and jobs["5"].nodes == 2
    assert jobs["6"].state == "FAILED"
    assert jobs["9"].state == "CANCELLED" and jobs["9"].ran_s == 4


def test_text_and_json_agree(utc):
    from_json = by_id(sacct.from_json(json.loads((DATA / "sacct_22.05.json").read_text())))
    imp = sacct.from_text((DATA / "sacct_22.05.txt").read_text().splitlines())
    assert by_id(imp) == from_json
    # the recording lists each job's steps (batch): counted, not kept, not bad
    assert imp.skipped["job step"] == 9 and imp.bad == []


def test_bad_rows_are_named_and_the_rest_kept(utc):
    lines = (DATA / "sacct_22.05.txt").read_text().splitlines()
    header, rows = lines[0], lines[1:]
    broken = [header, *rows]
    broken[1] = broken[1].replace("00:10:00", "ten minutes")       # job 1's limit
    broken[3] = broken[3].replace("2026-11-24T02:43:28", "yesterday")  # job 2's start
    broken.append("1234|too|few")
    imp = sacct.from_text(broken)
    assert "1" not in by_id(imp) and "2" not in by_id(imp) and "6" in by_id(imp)
    assert len(imp.bad) == 3
    assert imp.bad[0].startswith("line 2 (job 1)") and "ten minutes" in imp.bad[0]
    assert imp.bad[1].startswith("line 4 (job 2)") and "yesterday" in imp.bad[1]
    assert "3 columns" in imp.bad[2]
    assert imp.rows == len(broken) - 1 - 9 + 9  # every line accounted (steps are skips)


def test_text_header_in_another_order_and_missing_columns():
    text = ("State|JobID|JobName|User|Account|Partition|QOS|AllocTRES|ReqTRES|Timelimit|"
            "Submit|Start|End|NNodes\n"
            "COMPLETED|7|x|u|a|p|normal|gres/gpu=4,node=1||01:00:00|100|110|170|1\n")
    (job,) = sacct.from_text(text.splitlines()).jobs
    assert (job.job_id, job.gpus, job.ran_s, job.time_limit_s) == ("7", 4, 60, 3600)
    with pytest.raises(ValueError, match="lacks columns.*NNodes"):
        sacct.from_text(["JobID|JobName|State", "1|x|COMPLETED"])


def test_newer_json_forms():
    """24.11+: states as lists, numbers as {set, infinite, number}, time limit infinite."""
    raw = {"job_id": 12, "name": "n", "user": "alice", "account": "ml", "partition": "a",
           "qos": "normal", "allocation_nodes": {"set": True, "infinite": False, "number": 1},
           "array": {"job_id": 0, "task_id": {"set": False, "infinite": False, "number": 0}},
           "state": {"current": ["TIMEOUT"], "reason": "None"},
           "time": {"submission": 100, "start": 150, "end": 250,
                    "limit": {"set": True, "infinite": True, "number": 0}},
           "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 8}]}}
    (job,) = sacct.from_json({"jobs": [raw]}).jobs
    assert (job.job_id, job.state, job.gpus, job.time_limit_s, job.ran_s) == \
        ("12", "TIMEOUT", 8, None, 100)
    task = dict(raw, array={"job_id": 11, "task_id": {"set": True, "number": 3}})
    assert sacct.from_json({"jobs": [task]}).jobs[0].job_id == "11_3"
    with pytest.raises(ValueError, match="no 'jobs' list"):
        sacct.from_json({"meta": {}})


def test_out_of_order_times_are_bad_not_kept():
    raw = {"job_id": 3, "state": {"current": "COMPLETED"},
           "time": {"submission": 100, "start": 300, "end": 200},
           "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]}}
    imp = sacct.from_json({"jobs": [raw]})
    assert imp.jobs == [] and "times out of order" in imp.bad[0]


def test_history_csv_round_trip_and_bad_file(tmp_path):
    jobs = sacct.from_json(json.loads((DATA / "sacct_22.05.json").read_text())).jobs
    write_history(tmp_path / "h.csv", jobs)
    assert read_history(tmp_path / "h.csv") == jobs
    text = (tmp_path / "h.csv").read_text().splitlines()
    row = next(k for k, line in enumerate(text) if line.startswith("1,resnet50"))
    text[row] = text[row].replace(",2,1,", ",-2,1,", 1)
    (tmp_path / "bad.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(HistoryError, match=rf"bad.csv:{row + 1}: gpus='-2' is negative"):
        read_history(tmp_path / "bad.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(HistoryError, match="not a history file"):
        read_history(tmp_path / "other.csv")


def test_to_trace_keeps_what_ran():
    jobs = sacct.from_json(json.loads((DATA / "sacct_22.05.json").read_text())).jobs
    trace, skipped = to_trace(jobs)
    # job 6 failed at once (0 s): nothing to simulate
    assert len(trace) == 6 and skipped == {"ran 0 s": 1}
    assert trace[0].submit_time_s == 0 and all(t.duration_s > 0 for t in trace)
    two_node = [t for t in trace if t.gpus_per_node]
    assert [(t.num_gpus, t.gpus_per_node) for t in two_node] == [(2, 1)]


def test_to_trace_orders_same_second_submissions_by_job_id_as_a_number():
    """Slurm's FIFO order of jobs submitted in the same second is their job ids' order:
    job 10 comes after job 9 (as text it would come before job 2)."""
    from dataclasses import replace

    from slurm_marl.sim.history_trace import job_id_order, trace_with_sources

    job = sacct.from_json(json.loads((DATA / "sacct_22.05.json").read_text())).jobs[0]
    ids = ["10", "9", "2", "10_10", "10_2", "1"]
    jobs = [replace(job, job_id=i, submit_s=100.0, start_s=200.0, end_s=300.0) for i in ids]
    kept, _, sources, _ = trace_with_sources(jobs)
    order = ["1", "2", "9", "10", "10_2", "10_10"]
    assert [sources[t.job_id].job_id for t in kept] == order
    assert sorted(ids, key=job_id_order) == order


def test_read_file_detects_the_format(tmp_path, utc):
    j = read_file(DATA / "sacct_22.05.json")
    t = read_file(DATA / "sacct_22.05.txt")
    assert by_id(j) == by_id(t)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="looks like JSON"):
        read_file(tmp_path / "x.json")


def test_slices_cover_the_span():
    assert slices(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(ValueError):
        slices(5, 5, 1)
