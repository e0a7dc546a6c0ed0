"""`slurm-marl report` (issue 34): calibration and what-if on hand-built histories whose
numbers can be worked out by hand, and the command's bad-input paths."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_marl.cli import app
from slurm_marl.history.records import HistoryJob, write_history
from slurm_marl.history.sacct import TEXT_FIELDS
from slurm_marl.policy.profile import load_profile
from slurm_marl.sim import report as R
from slurm_marl.sim.site_config import read_site_cluster

# Two partitions: gpu (one 4-GPU node) and big (two 4-GPU nodes).
SLURM_CONF = """\
ClusterName=site
NodeName=DEFAULT Sockets=1 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=128000 Gres=gpu:4
NodeName=n1
NodeName=b[1-2]
PartitionName=gpu Nodes=n1 Default=YES State=UP
PartitionName=big Nodes=b[1-2] State=UP
"""
GRES_CONF = """\
NodeName=n1,b[1-2] Name=gpu File=/dev/nvidia[0-3] Cores=0-15
"""
T0 = datetime(2024, 5, 1, 8, 0).timestamp()      # local time, as --from/--to read it


def site(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "slurm.conf").write_text(SLURM_CONF)
    (tmp_path / "gres.conf").write_text(GRES_CONF)
    return tmp_path / "slurm.conf"


def job(jid: str, submit: float, wait: float, ran: float, gpus: int = 1,
        partition: str = "gpu", user: str = "alice") -> HistoryJob:
    """A job submitted ``submit`` s after T0 that sacct recorded waiting ``wait`` s."""
    return HistoryJob(job_id=jid, name="train", user=user, account="lab",
                      partition=partition, qos="normal", gpus=gpus, nodes=1,
                      time_limit_s=86400.0, submit_s=T0 + submit,
                      start_s=T0 + submit + wait, end_s=T0 + submit + wait + ran,
                      state="COMPLETED")


def calibrate(tmp_path: Path, jobs: list[HistoryJob]) -> dict:
    cluster = read_site_cluster(site(tmp_path)).cluster
    trace = R.site_trace(jobs, cluster)
    runs = R.run_all(trace, cluster, [load_profile("fifo-backfill")], ["none"])
    return R.calibration(runs.calibration, trace)


def test_an_empty_cluster_starts_every_job_when_sacct_did(tmp_path):
    cal = calibrate(tmp_path, [job("1", 0, 0, 50), job("2", 100, 0, 50),
                               job("3", 200, 0, 50, gpus=4)])
    assert cal["all"] == {"jobs": 3, "recorded_mean_wait_s": 0.0,
                          "simulated_mean_wait_s": 0.0, "wait_ratio": 1.0,
                          "median_start_error_s": 0.0, "p90_start_error_s": 0.0,
                          "share_within_tolerance": 1.0}
    assert cal["compared_jobs"] == 3 and cal["not_compared"] == 0


def test_recorded_waits_longer_than_simulated(tmp_path):
    # Job 2 waited 300 s in Slurm (something the simulator does not see held the GPUs);
    # on the simulated idle node it starts at once: errors 0 and 300 s.
    cal = calibrate(tmp_path, [job("1", 0, 0, 100), job("2", 50, 300, 100)])
    g = cal["all"]
    assert g["recorded_mean_wait_s"] == 150.0 and g["simulated_mean_wait_s"] == 0.0
    assert g["wait_ratio"] == 0.0
    assert g["median_start_error_s"] == 150.0
    assert g["p90_start_error_s"] == 270.0            # 0 + 0.9 x (300 - 0)
    # job 2: JCT 400 s, tolerance max(40, 60) = 60 s < 300 s
    assert g["share_within_tolerance"] == 0.5
    assert cal["worst_jobs"][0]["job_id"] == "2"
    assert cal["worst_jobs"][0]["start_error_s"] == 300.0


def test_a_full_node_makes_the_next_job_wait_as_in_slurm(tmp_path):
    # Job 1 holds all 4 GPUs for 1,000 s; job 2 (4 GPUs, submitted 10 s later) waits 990 s
    # in the simulator as it did in Slurm. Job 3 went to the other partition: no wait.
    cal = calibrate(tmp_path, [job("1", 0, 0, 1000, gpus=4), job("2", 10, 990, 100, gpus=4),
                               job("3", 20, 0, 100, partition="big")])
    assert cal["by_partition"]["gpu"]["recorded_mean_wait_s"] == 495.0
    assert cal["by_partition"]["gpu"]["simulated_mean_wait_s"] == 495.0
    assert cal["by_partition"]["gpu"]["wait_ratio"] == 1.0
    assert cal["by_partition"]["big"] == {
        "jobs": 1, "recorded_mean_wait_s": 0.0, "simulated_mean_wait_s": 0.0,
        "wait_ratio": 1.0, "median_start_error_s": 0.0, "p90_start_error_s": 0.0,
        "share_within_tolerance": 1.0}
    assert cal["all"]["share_within_tolerance"] == 1.0


def full_node(tmp_path: Path):
    """Job 1 holds gpu's 4 GPUs for 1,000 s, job 2 (4 GPUs) waits for it and runs 100 s,
    job 3 (bob, partition big) runs 100 s from 20 s: as recorded and as simulated."""
    cluster = read_site_cluster(site(tmp_path)).cluster
    jobs = [job("1", 0, 0, 1000, gpus=4), job("2", 10, 990, 100, gpus=4),
            job("3", 20, 0, 100, partition="big", user="bob")]
    trace = R.site_trace(jobs, cluster)
    return trace, R.run_all(trace, cluster, [load_profile("fifo-backfill")], ["none"])


def test_percentiles_and_gpus_busy_over_time(tmp_path):
    trace, runs = full_node(tmp_path)
    cal = R.calibration(runs.calibration, trace)
    assert cal["percentiles"]["recorded_wait_s"][0] == 0.0
    assert cal["percentiles"]["recorded_wait_s"][100] == 990.0
    assert cal["percentiles"]["recorded_wait_s"][50] == 0.0
    assert cal["percentiles"]["start_error_s"] == [0.0] * 101
    assert R.percentiles([]) is None
    busy = R.gpus_busy(runs.calibration, trace, bins=11)     # 1,100 s in bins of 100 s
    assert busy["bin_s"] == 100.0 and busy["gpus"] == 12
    # job 1: 4 GPUs in bins 0-9; job 3: 1 GPU over 20-120 s; job 2: 4 GPUs in bin 10
    assert busy["recorded"] == [4.8, 4.2] + [4.0] * 8 + [4.0]
    assert busy["simulated"] == busy["recorded"]


def test_waits_by_user_and_account(tmp_path):
    trace, runs = full_node(tmp_path)
    users = R.waits_by(runs, trace, "user")
    assert users["groups"] == 2
    assert users["runs"] == [{"profile": "fifo-backfill", "interference": "none"}]
    assert users["top"] == [
        {"name": "alice", "jobs": 2, "recorded_mean_wait_s": 495.0, "mean_wait_s": [495.0]},
        {"name": "bob", "jobs": 1, "recorded_mean_wait_s": 0.0, "mean_wait_s": [0.0]}]
    accounts = R.waits_by(runs, trace, "account")
    assert accounts["top"] == [{"name": "lab", "jobs": 3, "recorded_mean_wait_s": 330.0,
                                "mean_wait_s": [330.0]}]


def test_simulated_waits_longer_than_recorded_have_no_ratio_over_zero():
    assert R.wait_ratio(120.0, 0.0) is None
    assert R.wait_ratio(0.0, 0.0) == 1.0
    assert R.wait_ratio(30.0, 60.0) == 0.5


def test_jobs_outside_the_period_or_the_cluster_are_left_out_and_counted(tmp_path):
    cluster = read_site_cluster(site(tmp_path)).cluster
    jobs = [job("1", 0, 0, 50), job("2", 3600, 0, 50), job("3", 7200, 0, 50, partition="cpu"),
            job("4", 7300, 0, 0)]
    chosen = R.in_period(jobs, T0 + 3600, T0 + 10000)
    assert [j.job_id for j in chosen] == ["2", "3", "4"]
    trace = R.site_trace(chosen, cluster)
    assert len(trace.trace) == 1 and trace.sources[trace.trace[0].job_id].job_id == "2"
    assert trace.left_out == {"partition cpu not in the simulated cluster": 1, "ran 0 s": 1}


def test_what_if_compares_each_profile_with_slurm_alone_per_partition(tmp_path):
    # One long 4-GPU job, then short 1-GPU jobs: FIFO makes the short ones queue behind a
    # blocked 4-GPU job; 2D-LAS lets them preempt it.
    jobs = [job("1", 0, 0, 3000, gpus=3), job("2", 10, 2990, 3000, gpus=4)] + [
        job(str(k), 20 + k, 0, 60, user="bob") for k in range(3, 8)] + [
        job("9", 30, 0, 100, partition="big", gpus=8)]
    cluster = read_site_cluster(site(tmp_path)).cluster
    trace = R.site_trace(jobs, cluster)
    profs = [load_profile("fifo-backfill"), load_profile("las-consolidate")]
    results = R.what_if(R.run_all(trace, cluster, profs, ["none", "medium"]), trace)
    assert [(r["profile"], r["interference"]) for r in results] == [
        ("fifo-backfill", "none"), ("las-consolidate", "none"),
        ("fifo-backfill", "medium"), ("las-consolidate", "medium")]
    base, las = results[0], results[1]
    assert base["per_job"] is None and base["baseline"] is None
    assert las["baseline"] == "fifo-backfill"
    assert las["per_job"]["compared_jobs"] == 8
    assert set(las["by_partition"]) == {"big", "gpu"}
    assert las["by_partition"]["big"]["jobs"] == 1
    assert las["by_partition"]["gpu"]["per_job"]["compared_jobs"] == 7
    assert las["per_job"]["by_user"]["users"] == 2
    assert base["ratio_percentiles"] is None and len(las["ratio_percentiles"]) == 101
    assert las["ratio_percentiles"][100] == las["per_job"]["worst_ratio"]
    assert las["ratio_percentiles"][99] == las["per_job"]["p99_ratio"]
    # the worst job named as sacct does, not by the simulator's number (job 1 is its 0,
    # job 9 its 7): job 1, preempted by the short jobs (3,000 -> 4,860 s at none)
    assert trace.sources[0].job_id == "1" and trace.sources[7].job_id == "9"
    assert las["per_job"]["worst_job"]["job_id"] == "1"
    assert las["per_job"]["worst_job"]["ratio"] == las["per_job"]["worst_ratio"] > 1
    assert las["by_partition"]["big"]["per_job"]["worst_job"]["job_id"] == "9"
    # fifo-backfill: job 2 holds the free GPU, so the 1-GPU jobs wait for job 1 (3,000 s)
    assert base["by_partition"]["gpu"]["avg_wait_s"] > 1000
    assert las["all"]["avg_jct_s"] < base["all"]["avg_jct_s"]


# ---------------------------------------------------------------------------------------
# the command


def sacct_text(jobs: list[HistoryJob]) -> str:
    lines = ["|".join(TEXT_FIELDS)]
    for j in jobs:
        tres = f"billing=1,cpu=1,gres/gpu={j.gpus},node=1"
        lines.append("|".join([j.job_id, j.name, j.user, j.account, j.partition, j.qos, tres,
                               tres, "1-00:00:00", str(int(j.submit_s)),
                               str(int(j.start_s)), str(int(j.end_s)), j.state, "1"]))
    return "\n".join(lines) + "\n"


def invoke(*args: str):
    return CliRunner().invoke(app, ["report", *args])


FAST = ("--profiles", "fifo-backfill,las-consolidate", "--strengths", "none")


def test_report_reads_sacct_text_and_prints_json_with_the_documented_keys(tmp_path):
    conf = site(tmp_path)
    jobs = [job("1", 0, 0, 100), job("2", 50, 300, 100), job("3", 86400 * 3, 0, 100)]
    (tmp_path / "sacct.txt").write_text(sacct_text(jobs))
    r = invoke("--history", str(tmp_path / "sacct.txt"), "--slurm-conf", str(conf),
               "--to", "2024-05-03", *FAST, "--json", "--out", str(tmp_path / "r.json"))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc == json.loads((tmp_path / "r.json").read_text())
    assert set(doc) == {"history", "bad_rows", "period", "jobs", "cluster",
                        "simulator_not_modelled", "seed", "restart_delay_s", "calibration",
                        "what_if", "waits_by", "prior_history", "tuning"}
    assert doc["tuning"] is None                          # without --tune
    assert doc["jobs"] == {"in_history": 3, "in_period": 2, "simulated": 2, "left_out": {}}
    assert set(doc["calibration"]) == {"profile", "interference", "tolerance",
                                       "compared_jobs", "not_compared", "all",
                                       "by_partition", "worst_jobs", "percentiles",
                                       "gpus_busy"}
    assert doc["calibration"]["all"]["recorded_mean_wait_s"] == 150.0
    assert doc["calibration"]["all"]["wait_ratio"] == 0.0
    assert doc["cluster"]["gpus"] == 12
    assert "nodes b[1-2],n1" not in " ".join(doc["cluster"]["not_modelled"])  # gres.conf read
    assert any("time limits" in s for s in doc["simulator_not_modelled"])
    (entry,) = [e for e in doc["what_if"]["results"] if e["profile"] == "las-consolidate"]
    assert set(entry) == {"profile", "interference", "baseline", "profiles_by_partition",
                          "predictions", "prediction_prior_jobs", "interference_estimator_samples", "all",
                          "per_job", "by_partition", "ratio_percentiles"}
    assert set(entry["all"]) == {"jobs", "finished", "avg_jct_s", "p95_jct_s", "avg_wait_s",
                                 "p95_wait_s", "preemptions", "gpu_utilisation"}
    # each profile as the daemon runs it: with its default Slurm-alone guard
    from slurm_marl.policy.guard import DEFAULT_GUARD
    assert doc["what_if"]["guard"] == dict(DEFAULT_GUARD)
    r = invoke("--history", str(tmp_path / "sacct.txt"), "--slurm-conf", str(conf),
               "--to", "2024-05-03", *FAST, "--json", "--no-guard")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["what_if"]["guard"] is None


def test_report_prints_tables_from_a_history_csv_with_the_default_profiles(tmp_path):
    conf = site(tmp_path)
    write_history(tmp_path / "h.csv", [job("1", 0, 0, 100), job("2", 50, 0, 200, gpus=2)])
    r = invoke("--history", str(tmp_path / "h.csv"), "--slurm-conf", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "calibration: fifo-backfill" in r.stdout and "what-if" in r.stdout
    for name in R.DEFAULT_PROFILES:
        assert name in r.stdout
    assert "medium" in r.stdout and "not modelled:" in r.stdout


@pytest.mark.parametrize("case", ["missing history", "garbage history", "empty period",
                                  "bad slurm.conf", "missing slurm.conf", "bad strength",
                                  "bad profile", "no simulable job", "to before from"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    conf = site(tmp_path / "site")
    write_history(tmp_path / "h.csv", [job("1", 0, 0, 100)])
    (tmp_path / "garbage.txt").write_text("this is not\nan accounting file\n")
    (tmp_path / "bad.conf").write_text("NodeName=n1 Gres=gpu:4\nPartitionName=p Nodes=x9\n")
    write_history(tmp_path / "cpu.csv", [job("1", 0, 0, 100, partition="cpu")])
    args = {"history": str(tmp_path / "h.csv"), "slurm": str(conf)}
    extra: list[str] = []
    expect = {"missing history": "cannot read", "garbage history": "no job could be read",
              "empty period": "no job submitted in the period",
              "bad slurm.conf": "bad.conf", "missing slurm.conf": "cannot read",
              "bad strength": "--strengths", "bad profile": "unknown profile",
              "no simulable job": "partition cpu not in the simulated cluster",
              "to before from": "--to must come after --from"}[case]
    if case == "missing history":
        args["history"] = str(tmp_path / "nope.csv")
    elif case == "garbage history":
        args["history"] = str(tmp_path / "garbage.txt")
    elif case == "empty period":
        extra = ["--from", "2024-06-01"]
    elif case == "bad slurm.conf":
        args["slurm"] = str(tmp_path / "bad.conf")
    elif case == "missing slurm.conf":
        args["slurm"] = str(tmp_path / "nowhere" / "slurm.conf")
    elif case == "bad strength":
        extra = ["--strengths", "none,extreme"]
    elif case == "bad profile":
        extra = ["--profiles", "fifo-backfill,no-such-profile"]
    elif case == "no simulable job":
        args["history"] = str(tmp_path / "cpu.csv")
    else:
        extra = ["--from", "2024-05-02", "--to", "2024-05-01"]
    r = invoke("--history", args["history"], "--slurm-conf", args["slurm"], *extra, "--json")
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert expect in r.stderr, r.stderr


def test_report_on_sacct_json_recorded_from_the_test_cluster(tmp_path):
    # tests/data/slurm/sacct_22.05.json (test_history_sacct.py): on the one 4-GPU node of
    # partition gpu, jobs 1 (2 GPUs), 2, 4_0 start at once; 4_1 when 4_0 ends (1 s), 9 when
    # 2 ends (2 s). Slurm started each 2 s after submission (9: 4 s). Job 5 (2 nodes x 1 GPU)
    # is larger than the one-node partition; job 6 ran 0 s.
    data = Path(__file__).resolve().parents[1] / "data" / "slurm" / "sacct_22.05.json"
    r = invoke("--history", str(data), "--slurm-conf", str(site(tmp_path)), *FAST, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["jobs"] == {"in_history": 7, "in_period": 7, "simulated": 5, "left_out": {
        "ran 0 s": 1, "larger than their partition as modelled": 1}}
    cal = doc["calibration"]
    assert cal["compared_jobs"] == 5 and cal["not_compared"] == 1
    assert cal["all"]["recorded_mean_wait_s"] == 2.4           # (2 + 2 + 2 + 2 + 4) / 5
    assert cal["all"]["simulated_mean_wait_s"] == 0.6          # (0 + 0 + 0 + 1 + 2) / 5
    assert cal["all"]["wait_ratio"] == 0.25
    assert cal["all"]["share_within_tolerance"] == 1.0         # all within 60 s
    assert {w["job_id"] for w in cal["worst_jobs"]} == {"1", "2", "4_0", "4_1", "9"}


# ---------------------------------------------------------------------------------------
# learned-order: its predictor starts from the history that ended before the period

DAY = 86400.0


def named(j: HistoryJob, name: str) -> HistoryJob:
    return replace(j, name=name)


def prior_and_period() -> tuple[list[HistoryJob], HistoryJob, list[HistoryJob]]:
    """40 jobs of alice on the day before the period (T0 + 1 day): odd ones "long" (2 h),
    even ones "quick" (2 min); one job "rare" submitted 6,000 s before the period that
    runs into it (8,000 s); 24 jobs in the period, every third "long", job 5 "rare"."""
    before = [named(job(f"p{k}", k * 600, 0, 7200 if k % 2 else 120),
                    "long" if k % 2 else "quick") for k in range(40)]
    spanning = named(job("span", DAY - 6000, 0, 8000), "rare")
    period = [named(job(f"j{k}", DAY + 30 * k, 0, 7200 if k % 3 == 0 else 120),
                    "rare" if k == 5 else "long" if k % 3 == 0 else "quick")
              for k in range(24)]
    return before, spanning, period


def learned_order(tmp_path: Path, jobs: list[HistoryJob], start: float):
    """learned-order's run on the period from ``start``, with the prior of ``jobs``."""
    cluster = read_site_cluster(site(tmp_path)).cluster
    trace = R.site_trace(R.in_period(jobs, start), cluster)
    runs = R.run_all(trace, cluster, [load_profile("learned-order")], ["none"],
                     prior=R.prior_history(jobs, start))
    run = runs.cells[0][0]
    return run, [(j.job_id, j.first_start_s, j.finish_s, j.predicted_gpu_s)
                 for j in run.outcome.jobs]


def test_the_prior_holds_only_jobs_that_ended_before_the_period():
    before, spanning, period = prior_and_period()
    never = replace(job("never", 100, 0, 10), start_s=None)
    prior = R.prior_history(before + [spanning, never] + period, T0 + DAY)
    assert [j.job_id for j in prior] == [j.job_id for j in before]
    # one second earlier, the spanning job's end is before the period: it is known
    early = replace(spanning, end_s=T0 + DAY - 1)
    assert "span" in {j.job_id for j in R.prior_history([early], T0 + DAY)}
    assert R.prior_history(before, None) == []           # no --from: nothing before


def test_learned_order_predicts_from_the_prior_by_each_job_s_own_request(tmp_path):
    before, spanning, period = prior_and_period()
    run, jobs = learned_order(tmp_path, before + [spanning] + period, T0 + DAY)
    assert run.summary["prediction_prior_jobs"] == 40
    assert "40 of them ended by its start" in run.summary["predictions"]
    # at their arrival no job of the period has finished: the predictions are the prior's
    # medians of alice's jobs of the same name stem (a median over alice alone, the
    # trace's only field, would be 120 s for every job)
    assert [round(p) for _, _, _, p in jobs[:4]] == [7200, 120, 120, 7200]
    _, blind = learned_order(tmp_path, period, T0 + DAY)
    assert blind[0][3] is None                           # nothing known: no prediction


def test_a_job_ending_after_the_period_starts_changes_nothing(tmp_path):
    before, spanning, period = prior_and_period()
    _, without = learned_order(tmp_path, before + period, T0 + DAY)
    # the job named "rare" started 6,000 s before the period: whatever it ran past that,
    # it ended in the period, and the period's "rare" job is predicted as without it
    for ran in (6001, 8000, 10 * DAY):
        late = replace(spanning, end_s=spanning.start_s + ran)
        _, got = learned_order(tmp_path, before + [late] + period, T0 + DAY)
        assert got == without, ran
    # had it ended before the period, it would be known: the check can see a difference
    early = replace(spanning, end_s=spanning.start_s + 5000)
    _, got = learned_order(tmp_path, before + [early] + period, T0 + DAY)
    assert round(got[5][3]) == 5000 and round(without[5][3]) != 5000


def test_the_report_states_what_learned_order_knew_before_the_period(tmp_path):
    before, spanning, period = prior_and_period()
    write_history(tmp_path / "h.csv", before + [spanning] + period)
    r = invoke("--history", str(tmp_path / "h.csv"), "--slurm-conf", str(site(tmp_path)),
               "--from", "2024-05-02T08:00", "--profiles", "fifo-backfill,learned-order",
               "--strengths", "none", "--json", "--html", str(tmp_path / "r.html"))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["prior_history"] == {"ended_before": "2024-05-02T08:00", "jobs": 40}
    assert doc["jobs"]["in_period"] == 24
    learned, = [e for e in doc["what_if"]["results"] if e["profile"] == "learned-order"]
    assert learned["prediction_prior_jobs"] == 40
    base, = [e for e in doc["what_if"]["results"] if e["profile"] == "fifo-backfill"]
    assert base["prediction_prior_jobs"] is None
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert page.count("start from the 40 job(s) of the history that ran and ended before "
                      "2024-05-02T08:00 (--from)") == 1
