"""`slurm-marl history train` / `evaluate` on a small hand-built history."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from history_builders import history
from typer.testing import CliRunner

from slurm_marl.cli import app
from slurm_marl.history.predictor import GpuTimeModel
from slurm_marl.history.records import write_history


def day(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def test_train_then_evaluate(tmp_path):
    jobs = history(5, n=500)
    write_history(tmp_path / "h.csv", jobs)
    mid = sorted(j.submit_s for j in jobs)[400]
    r = CliRunner().invoke(app, ["history", "train", "--history", str(tmp_path / "h.csv"),
                                 "--until", day(mid), "--out", str(tmp_path / "m"), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert summary["jobs_in_history"] == 500
    assert 200 < summary["trained_on"] < 400          # only jobs ended by --until
    GpuTimeModel.load(tmp_path / "m")
    r = CliRunner().invoke(app, ["history", "evaluate", "--history", str(tmp_path / "h.csv"),
                                 "--from", day(mid), "--to", "now", "--refit-days", "0.5",
                                 "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["jobs"] == 100 and rep["scored"] > 90
    assert rep["all"]["model"]["spearman"] > 0.5


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "bad.csv").write_text("a,b\n")
    r = CliRunner().invoke(app, ["history", "train", "--history", str(tmp_path / "bad.csv"),
                                 "--out", str(tmp_path / "m")])
    assert r.exit_code == 2 and "not a history file" in r.output
    r = CliRunner().invoke(app, ["history", "evaluate", "--from", "2017-01-01"])
    assert r.exit_code == 2 and "give one of --history" in r.output
    assert not (tmp_path / "m").exists()


def test_an_empty_history_is_one_line_and_exit_2(tmp_path):
    write_history(tmp_path / "empty.csv", [])
    for cmd in (["evaluate", "--from", "2017-01-01"], ["train", "--out", str(tmp_path / "m")]):
        r = CliRunner().invoke(app, ["history", *cmd, "--history", str(tmp_path / "empty.csv")])
        assert r.exit_code == 2 and "empty.csv: no jobs" in r.output, r.output
