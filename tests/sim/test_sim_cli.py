import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from slurm_marl.shared_data import data_file
from slurm_marl.sim.cli import compare, simulate
from slurm_marl.sim.perjob import per_job_comparison
from slurm_marl.sim.run import simulate as simulate_run

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


# Per job against a baseline (issue 33): the bundled 60-job Tiresias trace, one strength.
SIXTY = ["--trace", str(data_file("traces/tiresias_60_job.csv")), "--cluster", "2x1x4"]


def counted_runs(monkeypatch) -> list[str]:
    """The profiles simulated, in order (the CLI's run function, wrapped)."""
    import slurm_marl.sim.cli as cli
    names, real = [], cli.run_simulation

    def wrapper(trace, cluster, profile, **kwargs):
        names.append(profile.name)
        return real(trace, cluster, profile, **kwargs)
    monkeypatch.setattr(cli, "run_simulation", wrapper)
    return names


def test_compare_per_job_against_the_baseline_among_profiles(tmp_path, monkeypatch):
    runs = counted_runs(monkeypatch)
    result = runner.invoke(app, ["compare", *SIXTY, "--profiles",
                                 "las-consolidate,fifo-backfill", "--out", str(tmp_path),
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert runs == ["las-consolidate", "fifo-backfill"]           # the baseline ran once
    doc = json.loads(result.stdout)
    assert doc == json.loads((tmp_path / "compare.json").read_text())
    assert doc["baseline"] == "fifo-backfill"
    las, fifo = doc["results"]
    assert fifo["per_job"] is None                                # not against itself
    assert [r["avg_jct_s"] for r in doc["baseline_results"]] == [fifo["avg_jct_s"]]
    # the same numbers as the module gives from two runs made here
    mine = simulate_run(str(data_file("traces/tiresias_60_job.csv")), "2x1x4",
                        "las-consolidate")
    base = simulate_run(str(data_file("traces/tiresias_60_job.csv")), "2x1x4",
                        "fifo-backfill")
    assert las["per_job"] == per_job_comparison(mine.outcome.jobs, base.outcome.jobs,
                                                baseline="fifo-backfill")
    assert las["per_job"]["compared_jobs"] == 60 and las["per_job"]["worst_ratio"] > 2
    assert las["per_job"]["by_gpus"]["5-8"]["jobs"] == 10
    assert (tmp_path / "jct_ratio_cdf_none.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "jct_cdf_none.png").exists()


def test_compare_runs_a_baseline_outside_profiles_once_per_strength(tmp_path, monkeypatch):
    runs = counted_runs(monkeypatch)
    result = runner.invoke(app, ["compare", *SIXTY, "--profiles",
                                 "las-consolidate,fifo-consolidate", "--interference",
                                 "none,high", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert runs == ["las-consolidate", "fifo-consolidate", "fifo-backfill"] * 2
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert [r["profile"] for r in doc["results"]] == ["las-consolidate",
                                                      "fifo-consolidate"] * 2
    assert [(r["profile"], r["interference"]) for r in doc["baseline_results"]] == [
        ("fifo-backfill", "none"), ("fifo-backfill", "high")]
    assert all(r["per_job"]["baseline"] == "fifo-backfill" for r in doc["results"])
    high = [r for r in doc["results"] if r["interference"] == "high"]
    assert high[0]["per_job"] != doc["results"][0]["per_job"]
    text = " ".join(result.output.split())
    assert "fifo-backfill (baseline)" in text and "per job against fifo-backfill" in text
    assert "per job by GPUs per job" in text
    assert (tmp_path / "jct_ratio_cdf_high.png").exists()


def test_baseline_none_and_bad_baseline(tmp_path, monkeypatch):
    runs = counted_runs(monkeypatch)
    result = runner.invoke(app, ["compare", *SIXTY, "--profiles", "las-consolidate",
                                 "--baseline", "none", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert runs == ["las-consolidate"] and doc["baseline"] is None
    assert "baseline_results" not in doc and "per_job" not in doc["results"][0]
    assert not (tmp_path / "jct_ratio_cdf_none.png").exists()
    single = runner.invoke(app, ["simulate", *SIXTY, "--baseline", "none", "--json"])
    assert single.exit_code == 0, single.output
    assert json.loads(single.stdout)["per_job"] is None and len(runs) == 2
    for command in ("simulate", "compare"):
        bad = runner.invoke(app, [command, *SIXTY, "--baseline", "no-such"])
        assert bad.exit_code == 2 and "--baseline: unknown profile 'no-such'" in bad.output
    assert len(runs) == 2                                         # failed before running


def test_simulate_per_job(tmp_path, monkeypatch):
    runs = counted_runs(monkeypatch)
    result = runner.invoke(app, ["simulate", *SIXTY, "--profile", "las-consolidate",
                                 "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert runs == ["las-consolidate", "fifo-backfill"]
    doc = json.loads(result.stdout)
    assert doc == json.loads((tmp_path / "summary.json").read_text())
    assert doc["baseline"] == "fifo-backfill" and doc["per_job"]["compared_jobs"] == 60
    assert doc["per_job"]["avg_jct_s"] == doc["avg_jct_s"]
    worst = doc["per_job"]["worst_job"]
    assert worst["ratio"] == doc["per_job"]["worst_ratio"] and worst["num_gpus"] == 8
    # the baseline as the profile: one run, no job slower than itself
    same = runner.invoke(app, ["simulate", *SIXTY, "--profile", "fifo-backfill"])
    assert same.exit_code == 0, same.output
    assert runs[2:] == ["fifo-backfill"]
    text = " ".join(same.output.split())
    assert "per job against fifo-backfill" in text and "0 (0.0%)" in text


def test_simulate_and_compare_take_the_daemons_guard():
    """--guard runs each profile as the daemon does (the default Slurm-alone guard in front
    of one without a [guard] table): the same as simulating that guarded profile; without
    it, the profile as written."""
    from slurm_marl.policy.profile import load_profile, with_default_guard
    from slurm_marl.sim.run import simulate as run_simulation

    args = ["--trace", str(DATA / "philly_head300.csv"), "--window", "vc=6214e9,rows=0:60",
            "--cluster", "1x2x4", "--json", "--baseline", "none"]
    guarded = runner.invoke(app, ["simulate", *args, "--profile", "las-consolidate",
                                  "--guard"])
    assert guarded.exit_code == 0, guarded.output
    direct = run_simulation(str(DATA / "philly_head300.csv"), "1x2x4",
                            with_default_guard(load_profile("las-consolidate")),
                            window="vc=6214e9,rows=0:60")
    assert json.loads(guarded.stdout)["avg_jct_s"] == direct.summary["avg_jct_s"]
    plain = runner.invoke(app, ["simulate", *args, "--profile", "las-consolidate"])
    assert json.loads(plain.stdout)["avg_jct_s"] != direct.summary["avg_jct_s"]
    both = runner.invoke(app, ["compare", *args, "--profiles",
                               "las-consolidate,fifo-backfill", "--guard"])
    assert both.exit_code == 0, both.output
    results = json.loads(both.stdout)["results"]
    las = [r for r in results if r["profile"] == "las-consolidate"][0]
    assert las["avg_jct_s"] == direct.summary["avg_jct_s"]
