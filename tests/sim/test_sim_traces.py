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


@pytest.mark.parametrize("name, window, fmt", [
    ("tiresias_head20.csv", "vc=6214e9", "tiresias"),
    ("generic_small.csv", "from=2017-10-01", "generic"),
    ("generic_small.csv", "rows=0:2,to=2017-10-01", "generic"),
])
def test_philly_only_window_keys_are_an_error_elsewhere(name, window, fmt):
    key = window.split(",")[-1].split("=")[0]
    with pytest.raises(TraceError, match=f"window key {key}= applies to Philly traces only; "
                       f".*is a {fmt} trace"):
        load_trace(DATA / name, window)


def test_rows_window_works_for_every_format():
    assert len(load_trace(DATA / "tiresias_head20.csv", "rows=2:7")) == 5
    generic = load_trace(DATA / "generic_small.csv", "rows=1:3")
    assert [j.job_id for j in generic] == [2, 3] and generic[0].submit_time_s == 0.0


def test_generic_zero_duration_is_a_bad_row_philly_zero_becomes_one(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("submit_time_s,duration_s,num_gpus\n0,10,1\n5,0,1\n")
    with pytest.raises(TraceError, match=r"g.csv:3: duration_s='0' must be > 0"):
        load_trace(path)
    philly = tmp_path / "p.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                      "2017-10-01 00:00:00,0,1,0,c\n")
    assert load_trace(philly)[0].duration_s == 1.0


def _bad_generic(tmp_path, bad: int, good: int) -> Path:
    path = tmp_path / "bad.csv"
    rows = ["job_id,submit_time_s,duration_s,num_gpus"]
    rows += [f"{i},{i},10,{'x' if i < bad else 1}" for i in range(bad + good)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_every_bad_row_is_counted_in_one_error(tmp_path):
    path = _bad_generic(tmp_path, bad=8, good=2)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    message = str(err.value)
    assert "8 bad rows, first 5:" in message and "--skip-bad-rows" in message
    assert all(f"{path}:{line}: num_gpus='x'" in message for line in range(2, 7))
    assert f"{path}:7:" not in message and "\n" not in message
    assert len(err.value.errors) == 8


def test_skip_bad_rows_reports_and_goes_on(tmp_path, caplog):
    path = _bad_generic(tmp_path, bad=7, good=3)
    told = []
    jobs = load_trace(path, skip_bad_rows=True, on_skip=told.append)
    assert [j.job_id for j in jobs] == [7, 8, 9]
    assert len(told) == 1 and "skipped 7 bad rows, first 5:" in told[0]
    assert f"{path}:2: num_gpus='x'" in told[0]
    with caplog.at_level("WARNING", logger="slurm_marl.sim.traces"):
        assert len(load_trace(path, skip_bad_rows=True)) == 3
    assert "skipped 7 bad rows" in caplog.text
    # A repeated id is a bad row of its own (the later one), Philly rows are collected too.
    dup = tmp_path / "dup.csv"
    dup.write_text("job_id,submit_time_s,duration_s,num_gpus\n1,0,10,1\n1,5,10,1\n2,6,0,1\n")
    with pytest.raises(TraceError, match="2 bad rows: .*:3: job_id 1 appears twice "
                       r"\(first at line 2\); .*:4: duration_s='0'"):
        load_trace(dup)
    assert [j.submit_time_s for j in load_trace(dup, skip_bad_rows=True)] == [0.0]
    philly = tmp_path / "p.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                      "yesterday,1,1,1,c\n2017-10-01 00:00:00,x,1,1,c\n"
                      "2017-10-01 00:00:00,5,1,1,c\n")
    with pytest.raises(TraceError, match="2 bad rows"):
        load_trace(philly)
    assert len(load_trace(philly, skip_bad_rows=True, on_skip=told.append)) == 1


def test_gpu_fraction_column(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("job_id,submit_time_s,duration_s,num_gpus,gpu_fraction\n"
                    "1,0,10,1,0.5\n2,1,10,1,\n3,2,10,4,1\n")
    jobs = load_trace(path)
    assert [j.gpu_fraction for j in jobs] == [0.5, None, 1.0]
    write_generic(tmp_path / "out.csv", jobs)
    assert load_trace(tmp_path / "out.csv") == jobs


@pytest.mark.parametrize("value, gpus, fragment", [
    ("0", 1, "gpu_fraction='0' must be in (0, 1]"),
    ("1.5", 1, "gpu_fraction='1.5' must be in (0, 1]"),
    ("-0.2", 1, "must be in (0, 1]"),
    ("half", 1, "gpu_fraction='half' is not a number"),
    ("0.5", 2, "num_gpus=2: fractions are for 1-GPU jobs only"),
])
def test_bad_gpu_fractions_are_row_errors(tmp_path, value, gpus, fragment):
    path = tmp_path / "f.csv"
    path.write_text(f"submit_time_s,duration_s,num_gpus,gpu_fraction\n0,10,{gpus},{value}\n")
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert f"{path}:2: " in str(err.value) and fragment in str(err.value)
