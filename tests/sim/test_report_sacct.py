"""`slurm-marl report --history sacct`: the site's accounting read now, through
``history/fetch.py``, by a stand-in ``sacct`` on PATH (a script, as test_json_stream's
stand-in ``squeue``): its arguments, the same report as from the saved file, the errors."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import pytest
from test_report import FAST, T0, invoke, job, sacct_text, site


def stand_in_sacct(tmp_path: Path, monkeypatch, rows: str = "", fail: str = "") -> Path:
    """A ``sacct`` first on PATH that logs its arguments (one JSON list a line) and prints
    ``rows``, or prints ``fail`` on stderr and exits 1. Returns the log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "sacct.log"
    bin_dir.mkdir()
    (tmp_path / "rows.txt").write_text(rows)
    exe = bin_dir / "sacct"
    exe.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"assert os.environ['SLURM_TIME_FORMAT'] == '%s'\n"
        f"if {fail!r}:\n    sys.stderr.write({fail!r})\n    sys.exit(1)\n"
        f"sys.stdout.write(open({str(tmp_path / 'rows.txt')!r}).read())\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return log


def rows_without_header(jobs) -> str:
    return "".join(sacct_text(jobs).splitlines(keepends=True)[1:])


def test_reading_sacct_now_gives_the_report_of_the_saved_file(tmp_path, monkeypatch):
    conf = site(tmp_path / "site")
    # job 1 ran and ended the day before the period (learned-order's prior), 2-4 in it,
    # 5 submitted after it
    jobs = [job("1", -86400, 0, 600), job("2", 0, 0, 100), job("3", 50, 300, 100),
            job("4", 60, 0, 200, gpus=2), job("5", 86400 + 10, 0, 100)]
    (tmp_path / "sacct.txt").write_text(sacct_text(jobs))
    log = stand_in_sacct(tmp_path, monkeypatch, rows_without_header(jobs))
    period = ("--from", "2024-05-01T08:00", "--to", "2024-05-02T08:00")
    live = invoke("--history", "sacct", "--slurm-conf", str(conf.parent), *period, *FAST,
                  "--json")
    assert live.exit_code == 0, live.output
    saved = invoke("--history", str(tmp_path / "sacct.txt"), "--slurm-conf", str(conf),
                   *period, *FAST, "--json")
    assert saved.exit_code == 0, saved.output
    got, want = json.loads(live.stdout), json.loads(saved.stdout)
    assert got["history"] == "sacct 2024-04-29T08:00:00 to 2024-05-02T08:00:00"
    assert got["jobs"] == want["jobs"] == {"in_history": 5, "in_period": 3, "simulated": 3,
                                           "left_out": {}}
    assert got["prior_history"] == want["prior_history"] == {
        "ended_before": "2024-05-01T08:00", "jobs": 1}
    for key in ("calibration", "what_if", "waits_by", "period"):
        assert got[key] == want[key], key
    # one call: the period and the 2 periods before it (fetch.py's own arguments)
    (argv,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert argv[:4] == ["-a", "-X", "-P", "-n"]
    assert "--starttime=2024-04-29T08:00:00" in argv and "--endtime=2024-05-02T08:00:00" in argv
    assert datetime(2024, 5, 1, 8, 0).timestamp() == T0


def test_sacct_reads_from_tune_from_and_to_now_by_default(tmp_path, monkeypatch):
    conf = site(tmp_path / "site")
    log = stand_in_sacct(tmp_path, monkeypatch, rows_without_header([job("2", 0, 0, 100)]))
    r = invoke("--history", "sacct", "--slurm-conf", str(conf), "--from", "2024-05-01T08:00",
               "--tune", "--tune-from", "2024-04-20", "--profiles-out",
               str(tmp_path / "profiles"), *FAST, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["period"]["to"] == "now" and doc["jobs"]["in_period"] == 1
    argvs = [json.loads(line) for line in log.read_text().splitlines()]
    assert "--starttime=2024-04-20T00:00:00" in argvs[0]   # slices of 7 days up to now
    assert len(argvs) > 1 and all(a[:4] == ["-a", "-X", "-P", "-n"] for a in argvs)


@pytest.mark.parametrize("case", ["no --from", "sacct missing", "sacct fails"])
def test_sacct_errors_are_one_line_and_exit_2(tmp_path, monkeypatch, case):
    conf = site(tmp_path / "site")
    expect = {"no --from": "--history sacct needs --from",
              "sacct missing": "sacct failed (rc 127): Slurm client not found",
              "sacct fails": "sacct failed (rc 1): sacct: error: Problem talking to the "
                             "database: Connection refused"}[case]
    if case == "sacct missing":
        (tmp_path / "empty").mkdir()
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    else:
        stand_in_sacct(tmp_path, monkeypatch, fail="sacct: error: Problem talking to the "
                                                   "database:\nConnection refused\n")
    period = [] if case == "no --from" else ["--from", "2024-05-01", "--to", "2024-05-02"]
    r = invoke("--history", "sacct", "--slurm-conf", str(conf), *period, "--json")
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert expect in r.stderr, r.stderr
