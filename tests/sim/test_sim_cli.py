import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from slurm_marl.sim.cli import compare, simulate

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
app = typer.Typer()
app.command("simulate")(simulate)
app.command("compare")(compare)
runner = CliRunner()


def test_simulate_json_and_outputs(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["simulate", "--trace", str(DATA / "generic_small.csv"),
                                 "--cluster", "2x2x4", "--profile", "fifo-consolidate",
                                 "--out", str(out), "--samples", "--json",
                                 "--interference", "high"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["profile"] == "fifo-consolidate" and doc["finished"] == 4
    assert (out / "summary.json").exists() and (out / "jct_cdf.png").stat().st_size > 1000
    assert (out / "jobs.csv").read_text().startswith("job_id,model_type,num_gpus")
    assert (out / "samples.jsonl").exists()


def test_simulate_table():
    result = runner.invoke(app, ["simulate", "--trace", str(DATA / "tiresias_head20.csv"),
                                 "--cluster", "2x1x4", "--profile", "las-consolidate"])
    assert result.exit_code == 0, result.output
    assert "avg_jct_s" in result.output


def test_compare_profiles_and_strengths(tmp_path, monkeypatch):
    result = runner.invoke(app, ["compare", "--trace", str(DATA / "philly_head300.csv"),
                                 "--window", "vc=6214e9,rows=0:60", "--cluster", "1x2x4",
                                 "--profiles", "fifo-consolidate,las-consolidate",
                                 "--interference", "none,high", "--out", str(tmp_path),
                                 "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {(r["profile"], r["interference"]) for r in doc["results"]} == {
        (p, s) for p in ("fifo-consolidate", "las-consolidate") for s in ("none", "high")}
    assert (tmp_path / "jct_cdf_none.png").exists() and (tmp_path / "compare.json").exists()
    monkeypatch.chdir(tmp_path / "..")
    table = runner.invoke(app, ["compare", "--trace", str(DATA / "tiresias_head20.csv"),
                                "--cluster", "2x1x4"])
    assert table.exit_code == 0 and "las-consolidate" in table.output
    assert (tmp_path / ".." / "jct_cdf_none.png").exists()


def test_bad_input_is_a_clear_error():
    for args, fragment in (
            (["--cluster", "banana"], "NODESxSOCKETSxGPUS"),
            (["--profile", "nope"], "unknown profile"),
            (["--interference", "extreme"], "--interference must be"),
            (["--window", "vc"], "needs key=value")):
        result = runner.invoke(app, ["simulate", "--trace", str(DATA / "generic_small.csv"),
                                     *args])
        assert result.exit_code == 2
        assert fragment in result.output


def test_drop_oversized_flag(tmp_path):
    args = ["--trace", str(DATA / "tiresias_head20.csv"), "--cluster", "1x1x4"]
    refused = runner.invoke(app, ["simulate", *args])
    assert refused.exit_code == 2 and "--drop-oversized" in refused.output
    result = runner.invoke(app, ["simulate", *args, "--drop-oversized", "--json"])
    assert result.exit_code == 0, result.output
    assert "dropped 3 job(s) larger than their partition" in result.output
    doc = json.loads(result.stdout)
    assert doc["dropped_oversized"] == 3 and doc["jobs"] == 17
    both = runner.invoke(app, ["compare", *args, "--drop-oversized", "--json",
                               "--out", str(tmp_path)])
    assert both.exit_code == 0, both.output
    assert {r["dropped_oversized"] for r in json.loads(both.stdout)["results"]} == {3}


def test_skip_bad_rows_flag(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("submit_time_s,duration_s,num_gpus\n0,10,1\n1,0,1\n2,10,x\n3,10,1\n")
    failed = runner.invoke(app, ["simulate", "--trace", str(path), "--cluster", "1x1x4"])
    assert failed.exit_code == 2
    assert "2 bad rows" in failed.output and f"{path}:3: duration_s='0' must be > 0" \
        in failed.output
    for command in ("simulate", "compare"):
        result = runner.invoke(app, [command, "--trace", str(path), "--cluster", "1x1x4",
                                     "--skip-bad-rows", "--json", "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert f"skipped 2 bad rows: {path}:3:" in result.output


def test_cluster_and_window_traps_are_clear_errors():
    for args, fragment in (
            (["--cluster", "1x1x64:cores=8"], "CPUs, not GPUs, would bind"),
            (["--window", "vc=6214e9"], "window key vc= applies to Philly traces only")):
        result = runner.invoke(app, ["simulate", "--trace", str(DATA / "tiresias_head20.csv"),
                                     *args])
        assert result.exit_code == 2 and fragment in result.output, result.output
