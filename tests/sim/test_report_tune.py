"""`slurm-marl report --tune` (issue 34): each partition's 2D-LAS knobs learned on the
earlier history with the search of ``train/thresholds.py`` and kept only where its guard
says they win on the recent part (``train/site_tuning.py``), on hand-built histories."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from slurm_marl.history.records import HistoryJob, write_history
from slurm_marl.policy.profile import load_profile
from slurm_marl.sim import report as R
from slurm_marl.sim.run import simulate
from slurm_marl.sim.site_config import read_site_cluster
from slurm_marl.train import site_tuning as T
from slurm_marl.train.thresholds import FIXED_TIRESIAS, CemConfig
from test_report import T0, invoke, job, site

DAY = 86400.0
FAST = CemConfig(population=4, iterations=2, seed=0)


def equal_jobs(prefix: str, day: int, n: int, gap_s: float, partition: str = "gpu"
               ) -> list[HistoryJob]:
    """``n`` one-GPU jobs of 4,000 s every ``gap_s`` from the start of ``day``: on gpu's 4
    GPUs, a gap of 600 s makes a queue, where Tiresias' fixed thresholds demote each job at
    3,250 GPU-s and let the next arrival preempt it (FIFO runs each to its end); a gap of
    2,000 s makes none, and every policy starts each job at once."""
    return [job(f"{prefix}{k}", day * DAY + k * gap_s, 0, 4000, partition=partition)
            for k in range(n)]


def cluster(tmp_path: Path):
    return read_site_cluster(site(tmp_path)).cluster


def test_the_learned_knobs_are_kept_where_they_win_on_the_recent_part(tmp_path):
    c = cluster(tmp_path)
    jobs = equal_jobs("a", 0, 30, 600) + equal_jobs("b", 1, 30, 600) \
        + equal_jobs("p", 2, 30, 600) + [job("x", 2 * DAY + k, 0, 60, partition="big")
                                          for k in range(5)]
    split = T.tune_split(jobs, c, T0 + 2 * DAY, T0 + 3 * DAY, True)
    assert split.how.startswith("the 2 periods before --from")
    got = {t.partition: t for t in T.tune(split, c, FAST)}
    gpu, big = got["gpu"], got["big"]
    assert (gpu.learn_jobs, gpu.evaluate_jobs) == (60, 30)
    assert gpu.kept and gpu.knobs != FIXED_TIRESIAS
    # the guard puts the per-job bound first: las-consolidate's preemptions make jobs more
    # than 1.1x slower than under fifo-backfill, the learned knobs none
    assert gpu.reason == ("the learned knobs cut the start's violation of the per-job bound; "
                          "learned knobs kept")
    assert gpu.evaluate_scores["las-consolidate"]["bound_holds"] is False
    jct = gpu.evaluate_jct_s
    assert jct["learned"] <= 0.98 * jct["las-consolidate"]
    assert jct["fifo-backfill"] == pytest.approx(jct["learned"], rel=0.02)
    assert gpu.evaluate_scores["learned"]["bound_holds"] is True
    # big: 5 jobs in the period, none before: not tuned, and said why
    assert big.knobs is None and not big.kept
    assert big.reason.startswith("not tuned: 0 jobs to learn from and 5 jobs to evaluate on")
    files = T.write_profiles(list(got.values()), tmp_path / "out")
    assert list(files) == ["gpu"] and files["gpu"].name == "gpu.toml"
    prof = load_profile(files["gpu"])
    assert prof.name == "tuned-gpu" and prof.preemption == gpu.knobs.preemption
    assert prof.order_params == gpu.knobs.profile().order_params
    lines = T.config_lines(files)
    assert tomllib.loads("\n".join(lines)) == {
        "agent": {"partition_profiles": {"gpu": str(files["gpu"].resolve())}}}


def test_the_guard_keeps_las_consolidate_where_the_recent_part_shows_no_gain(tmp_path):
    # learned where a queue built up (FIFO-like wins), but in the evaluation part no job
    # waits: every policy gives 4,000 s, less than 2% gain, the fixed knobs stay
    c = cluster(tmp_path)
    jobs = equal_jobs("a", 0, 30, 600) + equal_jobs("p", 2, 30, 2000)
    split = T.tune_split(jobs, c, T0 + 2 * DAY, T0 + 3 * DAY, True)
    gpu = {t.partition: t for t in T.tune(split, c, FAST)}["gpu"]
    assert gpu.knobs is not None and gpu.knobs != FIXED_TIRESIAS     # it did learn
    assert gpu.learn_jct_s["learned"] < gpu.learn_jct_s["las-consolidate"]
    assert not gpu.kept
    assert gpu.reason.startswith("the learned knobs gain less than 2% average JCT")
    assert gpu.evaluate_jct_s == {"learned": 4000.0, "las-consolidate": 4000.0,
                                  "fifo-backfill": 4000.0}
    assert T.write_profiles([gpu], tmp_path / "out") == {}
    assert T.config_lines({}) == []


def test_the_parts_never_overlap_and_the_split_is_said(tmp_path):
    c = cluster(tmp_path)
    jobs = equal_jobs("a", 0, 30, 600) + equal_jobs("p", 2, 30, 600)
    # enough history in the two periods before --from: it learns, the period evaluates
    s = T.tune_split(jobs, c, T0 + 2 * DAY, T0 + 3 * DAY, True)
    assert (s.learn_from_s, s.learn_to_s) == (T0, T0 + 2 * DAY)
    assert (s.evaluate_from_s, s.evaluate_to_s) == (T0 + 2 * DAY, T0 + 3 * DAY)
    assert (len(s.learn.trace), len(s.evaluate.trace)) == (30, 30)
    # without --from: the period's first two thirds learn, the last third evaluates
    s = T.tune_split(jobs, c, T0, T0 + 3 * DAY, False)
    assert s.learn_to_s == s.evaluate_from_s == T0 + 2 * DAY
    assert "(no --from)" in s.how and (len(s.learn.trace), len(s.evaluate.trace)) == (30, 30)
    # with --from but too little before it: the same split, said so
    s = T.tune_split(jobs[:5] + jobs[30:], c, T0 + 2 * DAY, T0 + 3 * DAY, True)
    assert "fewer than 20 jobs" in s.how and s.learn_from_s == T0 + 2 * DAY
    # --tune-from starts the learning part; the period evaluates
    s = T.tune_split(jobs, c, T0 + 2 * DAY, T0 + 3 * DAY, True, tune_from_s=T0 + DAY)
    assert (s.learn_from_s, s.learn_to_s) == (T0 + DAY, T0 + 2 * DAY)
    assert len(s.learn.trace) == 0
    with pytest.raises(ValueError, match="--tune-from must come before --from"):
        T.tune_split(jobs, c, T0 + 2 * DAY, T0 + 3 * DAY, True, tune_from_s=T0 + 2 * DAY)
    # each part's jobs were submitted in it
    for part, lo, hi in ((s.learn, s.learn_from_s, s.learn_to_s),
                         (s.evaluate, s.evaluate_from_s, s.evaluate_to_s)):
        assert all(lo <= part.sources[t.job_id].submit_s < hi for t in part.trace)


def test_report_tune_writes_profiles_config_lines_json_and_html(tmp_path):
    jobs = equal_jobs("a", 0, 30, 600) + equal_jobs("b", 1, 30, 600) \
        + equal_jobs("p", 2, 30, 600)
    write_history(tmp_path / "h.csv", jobs)
    out = tmp_path / "profiles"
    r = invoke("--history", str(tmp_path / "h.csv"), "--slurm-conf", str(site(tmp_path)),
               "--from", "2024-05-03T08:00", "--to", "2024-05-04T08:00",
               "--profiles", "fifo-backfill,las-consolidate", "--strengths", "none",
               "--tune", "--profiles-out", str(out), "--json", "--html",
               str(tmp_path / "r.html"), "--no-guard")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # (the search simulates profiles as written; --no-guard makes the what-if do the same,
    # so its rows and the tuning's evaluation are the same runs)
    assert doc["what_if"]["guard"] is None
    t = doc["tuning"]
    assert set(t) == {"split", "learn", "evaluate", "interference", "start", "min_gain",
                      "min_jobs", "search", "partitions", "profiles_out", "config_lines",
                      "recommended"}
    assert t["learn"] == {"from": "2024-05-01T08:00:00", "to": "2024-05-03T08:00:00",
                          "jobs": 60}
    assert t["evaluate"]["jobs"] == 30 and t["search"]["population"] == 8
    gpu, big = t["partitions"]
    assert gpu["partition"] == "gpu" and gpu["kept"] and gpu["profile"] == "tuned-gpu"
    assert gpu["profile_file"] == str(out / "gpu.toml") and (out / "gpu.toml").is_file()
    assert big["tuned"] is False and big["profile_file"] is None
    assert t["config_lines"] == ["[agent.partition_profiles]",
                                 f"gpu = {json.dumps(str((out / 'gpu.toml').resolve()))}"]
    # the evaluation part is the what-if's period: las-consolidate's JCT is the same
    (las,) = [e for e in doc["what_if"]["results"] if e["profile"] == "las-consolidate"]
    assert gpu["evaluate_avg_jct_s"]["las-consolidate"] == las["all"]["avg_jct_s"]
    # the recommendation (gpu's learned knobs, big's las-consolidate) is a what-if row, and
    # its gpu jobs are those of the learned knobs' evaluation
    (rec,) = [e for e in doc["what_if"]["results"] if e["profile"] == "recommended"]
    assert rec["profiles_by_partition"] == {"gpu": "tuned-gpu", "big": "las-consolidate"}
    assert rec["by_partition"]["gpu"]["avg_jct_s"] == gpu["evaluate_avg_jct_s"]["learned"]
    (fifo,) = [e for e in doc["what_if"]["results"] if e["profile"] == "fifo-backfill"]
    assert t["recommended"] == {
        "profiles_by_partition": rec["profiles_by_partition"], "learned_in_period": False,
        "predicted": {"none": {
            "avg_jct_s": rec["all"]["avg_jct_s"], "p95_jct_s": rec["all"]["p95_jct_s"],
            "avg_wait_s": rec["all"]["avg_wait_s"],
            "fifo-backfill_avg_jct_s": fifo["all"]["avg_jct_s"],
            "avg_jct_ratio": round(rec["all"]["avg_jct_s"] / fifo["all"]["avg_jct_s"], 4),
            "share_slower_1_1x": rec["per_job"]["share_slower_1_1x"],
            "worst_ratio": rec["per_job"]["worst_ratio"]}}}
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Recommended, per partition: <b>gpu</b>: tuned-gpu" in page
    assert "<h2>Tuned profiles</h2>" in page
    assert "violation of the per-job bound; learned knobs kept" in page
    assert "[agent.partition_profiles]" in page and "not tuned: 0 jobs to learn from" in page
    # and as tables
    r = invoke("--history", str(tmp_path / "h.csv"), "--slurm-conf", str(site(tmp_path)),
               "--from", "2024-05-03T08:00", "--to", "2024-05-04T08:00", "--profiles",
               "fifo-backfill", "--strengths", "none", "--tune", "--profiles-out", str(out))
    assert r.exit_code == 0, r.output
    assert "tuned profiles" in r.stdout and "paste into the daemon's config" in r.stdout
    assert "recommended (gpu: tuned-gpu, big: las-consolidate)" in r.stdout
    assert "none interference: avg JCT" in r.stdout


def test_the_recommended_run_takes_each_partition_s_jobs_from_its_own_profile(tmp_path):
    """And those are what the profile gives the partition alone: partitions share no
    nodes and a job waits only for its own partition's GPUs."""
    c = cluster(tmp_path)
    jobs = equal_jobs("p", 0, 30, 600) + [
        job(f"b{k}", k * 500.0, 0, 3000 + 400 * (k % 5), gpus=4, partition="big")
        for k in range(30)]
    trace = R.site_trace(jobs, c)
    fifo, las = load_profile("fifo-backfill"), load_profile("las-consolidate")
    runs = R.run_all(trace, c, [fifo, las], ["none"], recommended={"gpu": fifo, "big": las})
    rec = runs.cells[-1][0]
    assert rec.profile.name == "recommended" and runs.recommended == {
        "gpu": "fifo-backfill", "big": "las-consolidate"}

    def finishes(run, part):
        return {j.job_id: j.finish_s for j in run.outcome.jobs if j.partition == part}

    full = {run.profile.name: run for run, _ in runs.cells[:2]}
    assert finishes(rec, "gpu") == finishes(full["fifo-backfill"], "gpu")
    assert finishes(rec, "big") == finishes(full["las-consolidate"], "big")
    assert len(rec.outcome.jobs) == 60 and rec.outcome.preemptions == sum(
        j.preemptions for j in rec.outcome.jobs)
    assert full["las-consolidate"].outcome.preemptions > 0     # the queues were real
    for part, prof in (("gpu", fifo), ("big", las)):
        alone = simulate([t for t in trace.trace if t.partition == part], c, prof)
        assert finishes(alone, part) == finishes(rec, part)


def test_tune_from_without_tune_or_after_from_is_one_line_and_exit_2(tmp_path):
    write_history(tmp_path / "h.csv", equal_jobs("p", 2, 30, 600))
    base = ("--history", str(tmp_path / "h.csv"), "--slurm-conf", str(site(tmp_path)),
            "--from", "2024-05-03T08:00", "--profiles", "fifo-backfill", "--strengths",
            "none", "--json")
    for extra, expect in ((("--tune-from", "2024-05-01"), "--tune-from needs --tune"),
                          (("--tune", "--tune-from", "2024-05-03T09:00"),
                           "--tune-from must come before --from")):
        r = invoke(*base, *extra, "--profiles-out", str(tmp_path / "p"))
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
        assert expect in r.stderr


def test_a_recommendation_learned_on_the_period_says_it_is_optimistic(tmp_path):
    # no --from: the period's first two thirds learn, and the recommended rows run on the
    # whole period, those jobs included
    write_history(tmp_path / "h.csv", equal_jobs("p", 0, 60, 600))
    args = ("--history", str(tmp_path / "h.csv"), "--slurm-conf", str(site(tmp_path)),
            "--profiles", "fifo-backfill", "--strengths", "none", "--tune",
            "--profiles-out", str(tmp_path / "p"))
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tuning"]["recommended"]["learned_in_period"] is True
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    assert "optimistic: the knobs were learned on the period's first two thirds" in r.stdout


def test_the_local_backend_gives_the_same_report_as_inline(tmp_path):
    jobs = equal_jobs("a", 0, 30, 600) + equal_jobs("b", 1, 30, 600) \
        + equal_jobs("p", 2, 30, 600)
    write_history(tmp_path / "h.csv", jobs)
    args = ("--history", str(tmp_path / "h.csv"), "--slurm-conf", str(site(tmp_path)),
            "--from", "2024-05-03T08:00", "--to", "2024-05-04T08:00",
            "--profiles", "fifo-backfill,las-consolidate,las-lif", "--strengths",
            "none,medium", "--tune", "--profiles-out", str(tmp_path / "p"), "--json")
    inline = invoke(*args)
    local = invoke(*args, "--backend", "local", "--workers", "2")
    assert inline.exit_code == 0 and local.exit_code == 0, (inline.output, local.output)
    assert json.loads(local.stdout) == json.loads(inline.stdout)
    r = invoke(*args, "--backend", "cloud")
    assert r.exit_code == 2 and r.stderr.startswith("error: --backend must be one of")
