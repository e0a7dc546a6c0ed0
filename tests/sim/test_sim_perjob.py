"""Per-job comparison against a baseline run (issue 33): hand-built SimJob lists."""

import pytest

from slurm_marl.sim.jobs import SimJob
from slurm_marl.sim.perjob import GPU_CLASSES, WORST_USERS, job_ratios, per_job_comparison, \
    records


def job(i, jct, gpus=1, user="", submit=100.0, same_gpu=False):
    """A job submitted at ``submit`` that took ``jct`` seconds (None: not finished)."""
    return SimJob(job_id=i, submit_s=submit, duration_s=1.0, num_gpus=gpus, gpus_per_node=0,
                  node_count=1, model_type=None, partition="p", user=user, cpus=1, mem_mib=1,
                  finish_s=None if jct is None else submit + jct, same_gpu=same_gpu)


def test_ratios_floor_shares_p99_and_worst_job():
    base = [job(1, 1000), job(2, 100, gpus=4, user="bob"), job(3, 5000)]
    run = [job(1, 1200, submit=7), job(2, 900, gpus=4, user="bob", submit=50), job(3, 4000)]
    ratios = job_ratios(run, base)
    assert ratios == pytest.approx({1: 1.2, 2: 1.5, 3: 0.8})   # job 2: 900 / max(100, 600)
    out = per_job_comparison(run, base, baseline="fifo-backfill")
    assert out["baseline"] == "fifo-backfill" and out["floor_s"] == 600.0
    assert out["compared_jobs"] == 3 and out["not_compared"] == 0
    assert out["jobs_slower_1_1x"] == 2 and out["share_slower_1_1x"] == 0.6667
    assert out["jobs_slower_2x"] == 0 and out["share_slower_2x"] == 0.0
    assert out["p99_ratio"] == pytest.approx(1.2 + 0.3 * 0.98, abs=1e-4)
    assert out["worst_ratio"] == 1.5
    assert out["worst_job"] == {"job_id": 2, "num_gpus": 4, "user": "bob",
                                "baseline_jct_s": 100.0, "jct_s": 900.0, "ratio": 1.5}
    assert out["avg_jct_s"] == pytest.approx((1200 + 900 + 4000) / 3, abs=0.01)
    assert out["baseline_avg_jct_s"] == pytest.approx((1000 + 100 + 5000) / 3, abs=0.01)
    # a lower floor: job 2 is 9x slower
    low = per_job_comparison(run, base, floor_s=50.0)
    assert low["worst_ratio"] == 9.0 and low["jobs_slower_2x"] == 1
    assert low["share_slower_2x"] == 0.3333
    with pytest.raises(ValueError, match="floor_s"):
        per_job_comparison(run, base, floor_s=0)


def test_thresholds_are_strict_and_ties_go_to_the_lowest_id():
    base = [job(1, 1000), job(2, 1000), job(3, 1000)]
    run = [job(1, 1100), job(2, 2000), job(3, 2000)]
    out = per_job_comparison(run, base)
    assert out["jobs_slower_1_1x"] == 2          # 1.1 exactly is not more than 1.1x
    assert out["jobs_slower_2x"] == 0            # 2.0 exactly is not more than 2x
    assert out["worst_job"]["job_id"] == 2 and out["worst_ratio"] == 2.0
    faster = per_job_comparison(base, run)
    assert faster["jobs_slower_1_1x"] == 0 and faster["worst_ratio"] == 0.9091


def test_gpu_classes():
    base = [job(i, 1000, gpus=g) for i, g in enumerate([1, 2, 4, 5, 8, 9, 64])]
    base.append(job(7, 1000, gpus=3, same_gpu=True))    # 3 slots of one shared GPU
    run = [job(i, 1000 * (i + 1), gpus=g) for i, g in enumerate([1, 2, 4, 5, 8, 9, 64])]
    run.append(job(7, 3000, gpus=3, same_gpu=True))
    out = per_job_comparison(run, base)
    assert list(out["by_gpus"]) == [label for label, _, _ in GPU_CLASSES]
    assert {k: v["jobs"] for k, v in out["by_gpus"].items()} == {
        "1": 2, "2-4": 2, "5-8": 2, ">8": 2}
    assert out["by_gpus"]["1"]["worst_ratio"] == 3.0        # the shared-GPU job
    assert out["by_gpus"]["2-4"]["worst_ratio"] == 3.0
    assert out["by_gpus"][">8"]["worst_ratio"] == 7.0
    assert out["by_gpus"][">8"]["jobs_slower_2x"] == 2
    assert out["by_gpus"]["5-8"]["share_slower_2x"] == 1.0
    assert out["by_gpus"]["1"]["share_slower_1_1x"] == 0.5
    assert out["worst_job"]["num_gpus"] == 64
    assert out["by_user"] is None                           # no job names a user


def test_missing_and_unfinished_jobs_are_not_compared():
    base = [job(1, 1000), job(2, 1000), job(3, None), job(4, 1000)]
    run = [job(1, 3000), job(2, None), job(3, 1000), job(5, 1000)]
    out = per_job_comparison(run, base)
    assert out["compared_jobs"] == 1 and out["not_compared"] == 4   # jobs 2, 3, 4, 5
    assert out["worst_job"]["job_id"] == 1 and out["share_slower_2x"] == 1.0
    assert job_ratios(run, base) == {1: 3.0}


def test_empty_input():
    for run, base in (([], []), ([job(1, 100)], []), ([], [job(1, 100)]),
                      ([job(1, None)], [job(1, 100)])):
        out = per_job_comparison(run, base)
        assert out["compared_jobs"] == 0
        assert out["not_compared"] == len({j.job_id for j in run + base})
        for key in ("share_slower_1_1x", "share_slower_2x", "p99_ratio", "worst_ratio",
                    "worst_job", "avg_jct_s", "baseline_avg_jct_s", "by_user"):
            assert out[key] is None, key
        assert all(g["jobs"] == 0 and g["worst_ratio"] is None
                   for g in out["by_gpus"].values())


def test_worst_users_first_and_only_a_few():
    base, run = [], []
    # user uK has K jobs 3x slower (u0: none, one job 1.5x slower; "" names no user)
    for k in range(WORST_USERS + 2):
        for n in range(max(k, 1)):
            i = 100 * k + n
            base.append(job(i, 1000, user=f"u{k}"))
            run.append(job(i, 3000 if k else 1500, user=f"u{k}"))
    base.append(job(999, 1000))
    run.append(job(999, 9000))
    out = per_job_comparison(run, base)
    users = out["by_user"]
    assert users["users"] == WORST_USERS + 3
    worst = users["worst"]
    assert len(worst) == WORST_USERS
    assert [g["user"] for g in worst] == [f"u{k}" for k in range(WORST_USERS + 1, 1, -1)]
    assert worst[0]["jobs"] == WORST_USERS + 1 and worst[0]["share_slower_2x"] == 1.0
    assert worst[0]["worst_ratio"] == 3.0
    # one user: ranked by the worst ratio when nobody has a job > 2x
    two = per_job_comparison([job(1, 1500, user="a"), job(2, 1800, user="b")],
                             [job(1, 1000, user="a"), job(2, 1000, user="b")])
    assert [g["user"] for g in two["by_user"]["worst"]] == ["b", "a"]


def test_records_round_trip():
    base = [job(1, 1000, user="a"), job(2, 100, gpus=8), job(3, None)]
    run = [job(1, 1500.25, user="a"), job(2, 5000, gpus=8), job(3, 1000)]
    rows = records(run)
    assert rows[0] == [1, 1, "a", 1500.25] and rows[2] == [3, 1, "", 1000.0]
    assert records(base)[2] == [3, 1, "", None]
    assert per_job_comparison(rows, records(base)) == per_job_comparison(run, base)
