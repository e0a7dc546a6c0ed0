"""Evaluation sweeps (issue 17, item 4): the sweep file, the local backend, the report."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from slurm_marl.shared_data import data_file
from slurm_marl.sweep import SweepError, SweepSpecError, comparable, cross_product, \
    load_sweep, run_cell, run_sweep
from slurm_marl.sweep.cli import app
from slurm_marl.sweep.report import attach_per_job, markdown, summary_table, write_report

TIRESIAS = "traces/tiresias_60_job.csv"
SPEC = """
trace = "traces/tiresias_60_job.csv"
cluster = "2x1x4"
windows = ["rows=0:30", "rows=30:60"]
strengths = ["none", "high"]
seeds = [0, 1, 2]
profiles = ["las-consolidate", "fifo-backfill"]
baseline = "fifo-backfill"
"""


def tiny_cells(profiles=("las-consolidate", "fifo-backfill")):
    """8 cells: tiresias_60_job on 2x1x4, 2 profiles x 2 strengths x 2 seeds."""
    return cross_product(str(data_file(TIRESIAS)), "2x1x4", strengths=["none", "high"],
                         profiles=list(profiles), seeds=[0, 1])


def write(tmp_path, text: str, name: str = "sweep.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_spec_is_the_cross_product_with_stable_keys(tmp_path):
    sweep = load_sweep(write(tmp_path, SPEC))
    assert len(sweep.cells) == 2 * 2 * 3 * 2
    assert sweep.baseline == "fifo-backfill"
    keys = [c.key for c in sweep.cells]
    assert len(set(keys)) == len(keys)
    assert keys[0] == "window=rows=0:30/strength=none/profile=las-consolidate/seed=0"
    assert keys[-1] == "window=rows=30:60/strength=high/profile=fifo-backfill/seed=2"
    assert load_sweep(write(tmp_path, SPEC, "again.toml")).cells == sweep.cells
    assert {c.trace for c in sweep.cells} == {str(data_file(TIRESIAS))}   # shared data
    with_errors = load_sweep(write(tmp_path, SPEC + 'prediction_errors = ["helios", '
                                   '"oracle"]\n', "pred.toml"))
    assert len(with_errors.cells) == 48
    assert with_errors.cells[0].key.endswith("/seed=0/prediction_error=helios")


@pytest.mark.parametrize("text, key", [
    ("trace = [", "invalid TOML"),
    (SPEC + "colour = 'red'\n", "colour: unknown key"),
    (SPEC.replace('seeds = [0, 1, 2]', 'seeds = []'), "seeds: is empty"),
    (SPEC.replace('"high"', '"extreme"'), "strengths: 'extreme' is not one of"),
    (SPEC.replace('profiles = [', 'profiles = ["no-such", '), "profiles: unknown profile"),
    (SPEC.replace('cluster = "2x1x4"\n', ''), "cluster: missing"),
    (SPEC.replace('baseline = "fifo-backfill"', 'baseline = "las-lif"'), "baseline: "),
    (SPEC.replace("tiresias_60_job", "nope"), "trace: traces/nope.csv not found"),
])
def test_bad_spec_is_one_line_naming_file_and_key(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(SweepSpecError) as err:
        load_sweep(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and key in message and "\n" not in message
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert key in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_local_backend_runs_every_cell_in_order_like_one_process():
    cells = tiny_cells()
    seen = []
    rows = run_sweep(cells, "local", workers=2,
                     on_done=lambda row, done, total: seen.append((row["key"], done, total)))
    assert [r["key"] for r in rows] == [c.key for c in cells]
    assert all(r["error"] is None and r["finished"] == 60 for r in rows)
    assert sorted(k for k, _, _ in seen) == sorted(c.key for c in cells)
    assert [d for _, d, _ in seen] == list(range(1, 9)) and {t for _, _, t in seen} == {8}
    assert all(r["wall_s"] >= 0 and "sim_wall_time_s" not in r for r in rows)
    # the same numbers as this process computes (other processes, other hash seeds)
    assert comparable(rows) == comparable([run_cell(c) for c in cells])
    assert len({r["avg_jct_s"] for r in rows}) > 1


def test_a_failing_cell_is_an_error_row_not_a_crash():
    cells = tiny_cells(profiles=("las-consolidate", "no-such-profile"))
    rows = run_sweep(cells, "local", workers=2)
    bad = [r for r in rows if r["error"]]
    assert len(rows) == 8 and {r["profile"] for r in bad} == {"no-such-profile"}
    assert len(bad) == 4 and all(r["error"].startswith(
        "ProfileError: unknown profile 'no-such-profile'") for r in bad)
    assert run_cell(cells[-1])["error"] == bad[-1]["error"]   # in the cell, not the pool
    assert all(r["avg_jct_s"] > 0 for r in rows if not r["error"])
    table = summary_table(rows, "las-consolidate")
    assert all(row["cells"]["no-such-profile"] == {
        "avg_jct_s": None, "ratio": None, "errors": 2, "share_slower_1_1x": None,
        "share_slower_2x": None, "worst_ratio": None} for row in table["rows"])


def test_bad_backend_and_slurm_without_folder_are_errors():
    with pytest.raises(SweepError, match="unknown backend"):
        run_sweep(tiny_cells(), "cloud")
    with pytest.raises(SweepError, match="slurm_folder"):
        run_sweep(tiny_cells(), "slurm")


def test_report_table_and_plot(tmp_path):
    cells = tiny_cells()
    rows = [run_cell(c) for c in cells]
    table = write_report(rows, "las-consolidate", tmp_path)
    assert table["columns"] == ["las-consolidate", "fifo-backfill"]
    assert [(r["window"], r["interference"]) for r in table["rows"]] == [(None, "none"),
                                                                          (None, "high")]
    none = table["rows"][0]["cells"]
    assert none["las-consolidate"]["ratio"] == 1.0
    fifo = [r["avg_jct_s"] for r in rows if r["profile"] == "fifo-backfill"
            and r["interference"] == "none"]
    assert none["fifo-backfill"]["avg_jct_s"] == round(sum(fifo) / len(fifo), 2)
    assert none["fifo-backfill"]["ratio"] == pytest.approx(
        none["fifo-backfill"]["avg_jct_s"] / none["las-consolidate"]["avg_jct_s"], rel=1e-3)
    text = (tmp_path / "table.md").read_text()
    las = none["las-consolidate"]["avg_jct_s"]
    assert f"| all | none | {las:,.0f} (1.000) | " in text and "fifo-backfill" in text
    assert (tmp_path / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "results.json").read_text()) == rows
    # per job against the baseline (issue 33): the rows' job times became per_job
    assert all("job_times" not in r for r in rows)
    assert all(r["per_job"] is None for r in rows if r["profile"] == "las-consolidate")
    fifo_rows = [r for r in rows if r["profile"] == "fifo-backfill"]
    assert all(r["per_job"]["compared_jobs"] == 60 for r in fifo_rows)
    cell = none["fifo-backfill"]
    assert cell["worst_ratio"] == max(r["per_job"]["worst_ratio"] for r in fifo_rows
                                      if r["interference"] == "none") > 1
    assert none["las-consolidate"]["worst_ratio"] is None
    assert f"{cell['share_slower_1_1x']:.1%} / {cell['share_slower_2x']:.1%}, worst " \
           f"{cell['worst_ratio']:.2f}" in text and "Per job against las-consolidate" in text


def test_per_job_pairs_rows_with_the_baseline_of_the_same_cell():
    def row(profile, seed, jcts, error=None):
        r = {"window": None, "interference": "none", "seed": seed, "profile": profile,
             "prediction_error": None, "avg_jct_s": sum(jcts) / len(jcts), "error": error}
        if not error:
            r["job_times"] = [[i, 1, "", jct] for i, jct in enumerate(jcts)]
        return r
    rows = [row("base", 0, [1000, 1000]), row("base", 1, [1000, 2000]),
            row("new", 0, [3000, 1000]), row("new", 1, [1000, 1000]),
            row("bad", 0, [1], error="boom")]
    attach_per_job(rows, "base")
    assert [r["per_job"] and r["per_job"]["worst_ratio"] for r in rows] == [
        None, None, 3.0, 1.0, None]
    assert rows[3]["per_job"]["share_slower_1_1x"] == 0.0 and \
        rows[2]["per_job"]["share_slower_2x"] == 0.5
    assert all("job_times" not in r for r in rows)
    attach_per_job(rows, "base")                       # again: nothing left to attach
    assert rows[2]["per_job"]["worst_ratio"] == 3.0
    cell = summary_table(rows, "base")["rows"][0]["cells"]["new"]
    assert cell["share_slower_2x"] == 0.25 and cell["worst_ratio"] == 3.0
    assert cell["share_slower_1_1x"] == 0.25
    assert "| all | none | - | 25.0% / 25.0%, worst 3.00 | - |" in markdown(
        summary_table(rows, "base"))


def test_cli_run_writes_results_table_and_plot(tmp_path):
    spec = write(tmp_path, SPEC.replace("seeds = [0, 1, 2]", "seeds = [0]"))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec), "--workers", "2", "--out", str(out),
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["failed"] == 0 and len(report["rows"]) == 8
    assert report["table"]["baseline"] == "fifo-backfill"
    assert json.loads((out / "results.json").read_text()) == report["rows"]
    assert (out / "table.md").is_file() and (out / "ratios.png").is_file()
