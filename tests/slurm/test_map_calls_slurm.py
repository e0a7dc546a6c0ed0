"""map_calls' slurm backend (issue 34) on a real local cluster: three calls of a module-level
function as ONE array job, a large result (20,000 dataclass instances) back through
submitit's result pickle, a raising call as its CallError while the others succeed."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import slurm_marl
from slurm_marl.sweep import CallError, map_calls
from slurmtest import submitit_cluster

pytestmark = pytest.mark.slurm

HERE = Path(__file__).resolve().parent     # the job imports this module (by reference)


@dataclass(frozen=True)
class Item:
    index: int
    user: str
    jct_s: float


@dataclass
class Payload:
    array_job_id: str | None
    array_task_id: str | None
    items: list[Item]


def payload(n: int) -> Payload:
    """n items, and where in Slurm this ran (n < 0 raises)."""
    if n < 0:
        raise ValueError(f"no payload of\n{n} items")
    return Payload(os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID"),
                   [Item(i, f"user{i % 7}", i * 1.5) for i in range(n)])


@pytest.fixture(scope="module")
def local_slurm():
    """One node, 8 one-CPU tasks at a time."""
    paths = (sys.base_prefix, sys.prefix, str(Path(slurm_marl.__file__).parents[1]),
             str(HERE), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p))
    with submitit_cluster(1, paths) as cluster:
        yield cluster


def test_calls_as_one_array_job_with_a_large_result_and_an_error(local_slurm, tmp_path,
                                                                  monkeypatch):
    # sbatch passes this environment on: the job finds this module as pytest did
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(HERE), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]))
    seen = []
    started = time.perf_counter()
    got = map_calls(payload, [20_000, -1, 3], "slurm", workers=3,
                    slurm_folder=tmp_path / "submitit", slurm_conf=local_slurm.slurm_conf,
                    mem="1500M", timeout_s=120, job_name="map-test",
                    on_done=lambda i, out, done, total: seen.append((i, out, done, total)))
    print(f"\n3 calls as one array job: {time.perf_counter() - started:.1f} s")

    assert got[1] == CallError("ValueError: no payload of -1 items")
    big, small = got[0], got[2]
    assert big.items == [Item(i, f"user{i % 7}", i * 1.5) for i in range(20_000)]
    assert small.items == [Item(0, "user0", 0.0), Item(1, "user1", 1.5), Item(2, "user2", 3.0)]
    # one array job: the same array id seen inside both tasks, task ids = argument indices
    assert big.array_job_id is not None and small.array_job_id == big.array_job_id
    assert (big.array_task_id, small.array_task_id) == ("0", "2")
    scripts = list((tmp_path / "submitit").glob("*/*_submission.sh"))
    assert len(scripts) == 1 and scripts[0].parent.name.startswith("map-")
    text = scripts[0].read_text()
    assert "#SBATCH --array=0-2%3" in text and "#SBATCH --mem=1500M" in text
    assert "#SBATCH --job-name=map-test" in text
    assert sorted(i for i, *_ in seen) == [0, 1, 2]
    assert [done for _, _, done, _ in seen] == [1, 2, 3] and {t for *_, t in seen} == {3}


def test_report_as_array_jobs_gives_the_inline_report(local_slurm, tmp_path):
    """``slurm-marl report --backend slurm`` (issue 34): every profile x strength as one
    array job on the cluster of --slurm-conf, each partition's tuning as another; the JSON
    is the inline report's."""
    import json

    from typer.testing import CliRunner

    from slurm_marl.cli import app
    from slurm_marl.history.records import HistoryJob, write_history

    t0 = time.time() - 10 * 86400
    jobs = [HistoryJob(job_id=str(k), name="train", user="alice", account="lab",
                       partition="gpu", qos="normal", gpus=1, nodes=1, time_limit_s=86400.0,
                       submit_s=t0 + k * 600.0, start_s=t0 + k * 600.0,
                       end_s=t0 + k * 600.0 + 4000, state="COMPLETED") for k in range(60)]
    write_history(tmp_path / "h.csv", jobs)
    args = ["report", "--history", str(tmp_path / "h.csv"), "--slurm-conf",
            str(local_slurm.slurm_conf), "--profiles", "fifo-backfill,las-consolidate",
            "--strengths", "none,medium", "--tune", "--profiles-out", str(tmp_path / "p"),
            "--json"]
    runner = CliRunner()
    inline = runner.invoke(app, args)
    assert inline.exit_code == 0, inline.output
    started = time.perf_counter()
    on_slurm = runner.invoke(app, [*args, "--backend", "slurm", "--workers", "4",
                                   "--slurm-folder", str(tmp_path / "submitit"),
                                   "--slurm-mem", "1500M"])
    print(f"\nreport as array jobs: {time.perf_counter() - started:.1f} s")
    assert on_slurm.exit_code == 0, on_slurm.output
    assert json.loads(on_slurm.stdout) == json.loads(inline.stdout)
    scripts = sorted((tmp_path / "submitit").glob("*/*_submission.sh"))
    # the runs: calibration + fifo-backfill at medium + las-consolidate at both + the
    # tuned profile at both (if kept); the tuning: one partition, a plain job
    texts = [s.read_text() for s in scripts]
    assert len(scripts) == 2 and all("--job-name=slurm-marl-report" in t for t in texts)
    assert sum("#SBATCH --array=" in t for t in texts) == 1


def test_train_order_as_array_jobs_gives_the_inline_search(local_slurm, tmp_path):
    """``slurm-marl train order --backend slurm`` (issue 36: training runs through the sweep
    backend on Slurm when asked): each batch of simulations (the baselines, then an
    iteration's candidates) is one array job on the cluster of --slurm-conf; the search's
    history and the written head are the inline run's."""
    import json

    from typer.testing import CliRunner

    from slurm_marl.agent.checkpoint import LearnedCheckpoint, shipped_checkpoint
    from slurm_marl.train.cli import app

    trace = Path(slurm_marl.__file__).parent / "data/public/traces/philly.csv"
    args = ["order", "--checkpoint", str(shipped_checkpoint()), "--trace", str(trace),
            "--window", "vc=6c71a0,rows=0:60", "--cluster", "4x2x2:name=gpu",
            "--predictions", "helios", "--population", "2", "--iterations", "1",
            "--elite", "1", "--json"]
    runner = CliRunner()
    inline = runner.invoke(app, [*args, "--out", str(tmp_path / "inline"), "--backend",
                                 "inline"])
    assert inline.exit_code == 0, inline.output
    started = time.perf_counter()
    on_slurm = runner.invoke(app, [*args, "--out", str(tmp_path / "slurm"), "--backend",
                                   "slurm", "--workers", "4", "--slurm-conf",
                                   str(local_slurm.slurm_conf), "--slurm-mem", "1500M"])
    print(f"\ntrain order as array jobs: {time.perf_counter() - started:.1f} s")
    assert on_slurm.exit_code == 0, on_slurm.output

    def history(out: str) -> dict:
        return json.loads(out[out.index("{"):])
    assert history(on_slurm.output) == history(inline.output)
    heads = [LearnedCheckpoint.load(tmp_path / f"{name}.pt").order for name in
             ("inline", "slurm")]
    assert heads[0].weights["gpu"].tolist() == heads[1].weights["gpu"].tolist()
    scripts = sorted((tmp_path / "slurm.slurm").glob("*/*_submission.sh"))
    texts = [s.read_text() for s in scripts]
    # two arrays: fifo-backfill and the warm start (2 runs), then the iteration's 2 candidates
    assert len(scripts) == 2 and all("#SBATCH --array=0-1%" in t for t in texts)
    assert all("--job-name=slurm-marl-train-order" in t for t in texts)
    assert not list(tmp_path.glob("*.cem-*"))       # the candidates' folder is removed


def test_train_marl_as_a_slurm_job_trains_as_inline(local_slurm, tmp_path):
    """``slurm-marl train marl --backend slurm`` (issue 36): the whole training is one plain
    Slurm job on the cluster of --slurm-conf, writing the run folder as the inline run does;
    the same update's numbers come back."""
    import csv
    import json

    from typer.testing import CliRunner

    from slurm_marl.agent.checkpoint import LearnedCheckpoint, shipped_checkpoint
    from slurm_marl.train.cli import app

    LearnedCheckpoint.load(shipped_checkpoint()).interference.save(tmp_path / "im")
    trace = Path(slurm_marl.__file__).parent / "data/public/traces/philly.csv"
    args = ["marl", "--reward-model", str(tmp_path / "im"), "--trace", str(trace),
            "--window", "vc=6c71a0,rows=0:60", "--cluster", "4x2x2:name=gpu",
            "--jobs-per-episode", "30", "--episodes-per-update", "1", "--updates", "1",
            "--json"]
    runner = CliRunner()
    inline = runner.invoke(app, [*args, "--out", str(tmp_path / "inline")])
    assert inline.exit_code == 0, inline.output
    started = time.perf_counter()
    on_slurm = runner.invoke(app, [*args, "--out", str(tmp_path / "slurm"), "--backend",
                                   "slurm", "--slurm-conf", str(local_slurm.slurm_conf),
                                   "--slurm-mem", "1500M", "--slurm-time", "10"])
    print(f"\ntrain marl as a Slurm job: {time.perf_counter() - started:.1f} s")
    assert on_slurm.exit_code == 0, on_slurm.output

    def row(run: str) -> dict:
        with open(tmp_path / run / "train_log.csv", encoding="utf-8") as fh:
            (only,) = list(csv.DictReader(fh))
        return {k: v for k, v in only.items() if k != "wall_s"}
    assert row("slurm") == row("inline") and float(row("slurm")["env_steps"]) > 0
    doc = json.loads(on_slurm.output[on_slurm.output.index("{"):])
    assert doc["updates"] == 1 and doc["out"] == str((tmp_path / "slurm").resolve())
    assert (tmp_path / "slurm" / "policy.pt").is_file()
    scripts = list((tmp_path / "slurm" / "slurm").glob("*/*_submission.sh"))
    assert len(scripts) == 1
    text = scripts[0].read_text()
    assert "--array" not in text and "#SBATCH --job-name=slurm-marl-train-marl" in text
    assert "#SBATCH --time=10" in text
