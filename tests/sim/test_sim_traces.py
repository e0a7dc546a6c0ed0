from pathlib import Path

import pytest

from slurm_marl.sim.traces import (TraceError, Window, detect_format, load_trace,
                                   write_generic)

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def test_philly_window_by_virtual_cluster_and_rows():
    jobs = load_trace(DATA / "philly_head300.csv", "vc=6214e9,rows=10:20")
    assert len(jobs) == 10
    assert jobs[0].submit_time_s == 0.0
    assert all(b.submit_time_s >= a.submit_time_s for a, b in zip(jobs, jobs[1:]))
    assert all(j.user == "6214e9" and j.num_gpus >= 1 and j.duration_s >= 1 for j in jobs)
    everything = load_trace(DATA / "philly_head300.csv", "vc=6214e9")
    assert len(everything) == 284
    # row 10 of the sorted cluster is the window's first job
    assert jobs[1].submit_time_s == everything[11].submit_time_s - everything[10].submit_time_s


def test_philly_time_window_and_missing_cluster():
    jobs = load_trace(DATA / "philly_head300.csv",
                      "vc=6214e9,from=2017-10-09T06:00:00,to=2017-10-09T07:00:00")
    assert 0 < len(jobs) < 284
    with pytest.raises(TraceError, match="no jobs for virtual cluster 'nope'"):
        load_trace(DATA / "philly_head300.csv", "vc=nope")


def test_tiresias_and_generic_formats():
    assert detect_format(DATA / "tiresias_head20.csv") == "tiresias"
    jobs = load_trace(DATA / "tiresias_head20.csv")
    assert [j.job_id for j in jobs[:3]] == [0, 1, 2]
    assert jobs[0].model_type == "vgg19" and jobs[1].num_gpus == 8
    generic = load_trace(DATA / "generic_small.csv")
    assert [j.job_id for j in generic] == [1, 2, 3, 4]
    assert generic[2].gpus_per_node == 4 and generic[3].model_type is None
    assert generic[0].submit_time_s == 0.0 and generic[3].submit_time_s == 100.0


def test_generic_round_trip(tmp_path):
    jobs = load_trace(DATA / "generic_small.csv")
    write_generic(tmp_path / "out.csv", jobs)
    assert load_trace(tmp_path / "out.csv") == jobs


@pytest.mark.parametrize("rows, fragment", [
    ("submit_time_s,duration_s,num_gpus\n0,10,x\n", ":2: num_gpus='x' is not a number"),
    ("submit_time_s,duration_s,num_gpus\n0,10,1\n5,-3,1\n", ":3: duration_s='-3' must be >= 0"),
    ("submit_time_s,duration_s,num_gpus\n0,10,0\n", ":2: num_gpus='0' must be >= 1"),
    ("submit_time_s,duration_s,num_gpus,gpus_per_node\n0,10,6,4\n", "not a multiple"),
    ("job_id,submit_time_s,duration_s,num_gpus\n1,0,10,1\n1,0,10,1\n", "appears twice"),
    ("a,b\n1,2\n", ":1: unknown trace format"),
])
def test_bad_rows_name_file_and_line(tmp_path, rows, fragment):
    path = tmp_path / "t.csv"
    path.write_text(rows)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert str(path) in str(err.value) and fragment in str(err.value)


def test_philly_bad_timestamp(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\nyesterday,1,1,1,c\n")
    with pytest.raises(TraceError, match=r"p.csv:2: timestamp='yesterday'"):
        load_trace(path)


@pytest.mark.parametrize("text", ["vc", "rows=a:b", "from=notadate", "colour=red",
                                  "rows=5:2"])
def test_bad_windows(text):
    with pytest.raises(TraceError, match="window"):
        Window.parse(text)


def test_window_parse():
    w = Window.parse("vc=abc,rows=5:15")
    assert (w.cluster, w.first_row, w.rows) == ("abc", 5, 10)
    assert Window.parse("rows=100").rows == 100
