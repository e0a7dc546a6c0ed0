"""Observed speeds from progress reports (daemon/progress.py), on hand-built snapshots."""

from slurm_marl.daemon.progress import ProgressSampler, read_report
from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node, Switch

NODES = tuple(Node(name=n, partitions=("gpu",), leaf_switch="leaf1",
                   gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
              for n in ("n1", "n2"))
SWITCHES = (Switch("leaf1", nodes=("n1", "n2")),)


def job(jid, model, alloc, start=100.0, state=JobState.RUNNING, restarts=0):
    return Job(jid, name=f"train-{jid}", state=state, gpu_alloc=alloc, model_type=model,
               nodes=tuple(n for n, _ in alloc), start_time_s=start, gpus_per_node=1,
               restart_count=restarts)


def snap(t, *jobs):
    return ClusterSnapshot(time_s=t, nodes=NODES, jobs=tuple(jobs), switches=SWITCHES)


def report(d, jid, done, when):
    (d / str(jid)).write_text(f"{done} {when}\n")


def test_a_change_of_co_location_closes_a_sample_with_the_observed_speed(tmp_path):
    s = ProgressSampler(tmp_path, min_s=5)
    a = job(1, "resnet50", (("n1", (0,)),))
    report(tmp_path, 1, 0.0, 101.0)
    assert s.observe(snap(101, a)) == []
    report(tmp_path, 1, 9.0, 111.0)                       # 9 s of work in 10 s: 0.9
    b = job(2, "vgg19", (("n1", (1,)),), start=111.0)     # a neighbour arrives in the group
    out = s.observe(snap(111, a, b))
    assert len(out) == 1
    sample = out[0]
    assert sample["job_id"] == 1 and sample["model_type"] == "resnet50"
    assert sample["speed"] == 0.9 and sample["duration_s"] == 10.0
    assert sample["colocated"] == {"gpu": [], "group": [], "node": [], "leaf": []}
    # the next stretch is with vgg19 in the group, until job 1 ends
    report(tmp_path, 1, 15.0, 121.0)
    report(tmp_path, 2, 3.0, 121.0)  # job 2's stretch started without a report: no sample
    out = s.observe(snap(122, job(1, "resnet50", (("n1", (0,)),), state=JobState.COMPLETED)))
    assert [o["job_id"] for o in out] == [1]
    assert out[0]["speed"] == 0.6 and out[0]["colocated"]["group"] == ["vgg19"]
    assert s.skipped == 1


def test_short_stretches_stale_or_bad_reports_make_no_sample(tmp_path):
    s = ProgressSampler(tmp_path, min_s=5)
    a = job(1, "resnet50", (("n1", (0,)),))
    report(tmp_path, 1, 50.0, 90.0)   # written by the previous run (before the start)
    s.observe(snap(101, a))
    report(tmp_path, 1, 52.0, 103.0)  # first good report of this run
    s.observe(snap(103, a))
    report(tmp_path, 1, 53.0, 105.0)  # 2 s later: shorter than min_s
    assert s.observe(snap(106, a, job(2, "vgg19", (("n1", (1,)),)))) == []
    (tmp_path / "2").write_text("garbage\n")
    assert read_report(tmp_path / "2") is None and read_report(tmp_path / "9") is None
    (tmp_path / "3").write_text("-1 5\n")
    assert read_report(tmp_path / "3") is None
    # a job without a model signature is not sampled
    s2 = ProgressSampler(tmp_path, min_s=1)
    s2.observe(snap(100, job(4, None, (("n2", (0,)),))))
    assert s2.open == {}


def test_a_restart_closes_the_run_and_never_mixes_runs(tmp_path):
    s = ProgressSampler(tmp_path, min_s=1)
    report(tmp_path, 1, 0.0, 100.5)
    s.observe(snap(101, job(1, "lm", (("n1", (0,)),))))
    report(tmp_path, 1, 4.0, 105.5)   # the payload's report when Slurm stopped it
    out = s.observe(snap(106, job(1, "lm", (("n1", (0,)),), state=JobState.PENDING)))
    assert out[0]["speed"] == 0.8
    # restarted elsewhere: the old report is older than the new start, so no sample until
    # this run has reported twice
    s.observe(snap(120, job(1, "lm", (("n2", (2,)),), start=119.0, restarts=1)))
    report(tmp_path, 1, 5.0, 121.0)
    s.observe(snap(121, job(1, "lm", (("n2", (2,)),), start=119.0, restarts=1)))
    report(tmp_path, 1, 7.0, 123.0)
    out = s.observe(snap(124))
    assert out[0]["speed"] == 1.0 and out[0]["run"] == 1
